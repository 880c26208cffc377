//! Unit tests of the recipient's machine: every step of a start, commit and abort, and every
//! failure, on events alone.

use shoal_proto::catalog::{ChunkBound, ChunkVersion, Epoch};

use super::*;
use crate::migration::record::Phase;

fn record() -> Record {
    Record {
        id: "m1".into(),
        ns: "db.c".into(),
        uuid: uuid::Uuid::nil(),
        key: vec![("k".into(), false)],
        min: ChunkBound::Min,
        max: ChunkBound::Max,
        from: "s0".into(),
        to: "s1".into(),
        epoch: Epoch([1; 12]),
        expected_version: ChunkVersion { major: 1, minor: 0 },
        phase: Phase::Cloning,
    }
}

/// `first` followed by the actions `events` lead to.
fn run((mut r, first): (Receive, Action), events: impl IntoIterator<Item = Event>) -> Vec<Action> {
    std::iter::once(first).chain(events.into_iter().map(|e| r.step(e))).collect()
}

fn start() -> (Receive, Action) {
    Receive::start(&record(), false)
}

fn claimed() -> Event {
    Event::Claimed { replaced: false }
}

fn err() -> MigrationError {
    MigrationError::Task("disk".into())
}

#[test]
fn a_start_persists_its_record_before_it_writes_anything() {
    let events = [claimed(), Event::Ownership(Ownership::OwnsNone), Event::Done, Event::Done, Event::Done, Event::Done];
    assert_eq!(
        run(start(), events),
        vec![
            Action::Claim,
            Action::Refresh,
            Action::WaitRangeDeletions,
            Action::PersistRecord,
            Action::CreateCollection,
            Action::DeleteLeftovers,
            Action::Finish(Ok(())),
        ]
    );
    // A collection not sharded here yet is no obstacle.
    let actions = run(start(), [claimed(), Event::Ownership(Ownership::Unsharded)]);
    assert_eq!(actions.last(), Some(&Action::WaitRangeDeletions));
}

#[test]
fn a_retried_start_changes_nothing() {
    assert_eq!(Receive::start(&record(), true).1, Action::Finish(Ok(())));
}

#[test]
fn a_start_that_replaces_an_abandoned_attempt_deletes_what_it_received_first() {
    let actions = run(start(), [Event::Claimed { replaced: true }, Event::Done]);
    assert_eq!(actions, vec![Action::Claim, Action::AbortStale, Action::Refresh]);
    // If that fails the slot stays claimed: the donor's ReceiveAbort (or the idle timeout) frees it.
    let actions = run(start(), [Event::Claimed { replaced: true }, Event::Failed(err())]);
    assert_eq!(actions.last(), Some(&Action::Finish(Err(err()))));
}

#[test]
fn a_busy_slot_refuses_without_releasing_what_is_not_ours() {
    let busy = MigrationError::Busy("Donor of db.c".into());
    assert_eq!(run(start(), [Event::Failed(busy.clone())]), vec![Action::Claim, Action::Finish(Err(busy))]);
}

#[test]
fn a_range_this_shard_owns_part_of_or_another_incarnation_is_refused() {
    for (ownership, code) in
        [(Ownership::OtherIncarnation, ErrorCode::StaleEpoch), (Ownership::OwnsPart, ErrorCode::IllegalOperation)]
    {
        let actions = run(start(), [claimed(), Event::Ownership(ownership), Event::Done]);
        assert_eq!(actions[2], Action::Release, "{ownership:?}");
        match &actions[3] {
            Action::Finish(Err(e)) => assert_eq!(e.to_exec().code, code, "{e}"),
            other => panic!("{ownership:?}: {other:?}"),
        }
    }
}

#[test]
fn any_failure_once_the_slot_is_ours_frees_it() {
    let steps = [claimed(), Event::Ownership(Ownership::OwnsNone), Event::Done, Event::Done, Event::Done];
    // Refresh, WaitRangeDeletions, PersistRecord, CreateCollection, DeleteLeftovers.
    for n in 1..=steps.len() {
        let mut events: Vec<Event> = steps[..n].to_vec();
        events.extend([Event::Failed(err()), Event::Done]);
        let actions = run(start(), events);
        let failed = &actions[n];
        assert_eq!(actions[n + 1..], [Action::Release, Action::Finish(Err(err()))], "failure of {failed:?}");
    }
}

#[test]
fn a_commit_drops_the_record_then_frees_the_slot_even_if_the_refresh_failed() {
    for refreshed in [Event::Done, Event::Failed(err())] {
        assert_eq!(
            run(Receive::commit(), [refreshed, Event::Done, Event::Done]),
            vec![Action::Refresh, Action::RemoveRecord, Action::Release, Action::Finish(Ok(()))]
        );
    }
    // The record is still there: the slot stays, so the call (or recovery) settles it later.
    let actions = run(Receive::commit(), [Event::Done, Event::Failed(err())]);
    assert_eq!(actions.last(), Some(&Action::Finish(Err(err()))));
}

#[test]
fn an_abort_deletes_the_range_then_frees_the_slot() {
    assert_eq!(
        run(Receive::abort(), [Event::Done, Event::Done]),
        vec![Action::DeleteReceived, Action::Release, Action::Finish(Ok(()))]
    );
    assert_eq!(run(Receive::abort(), [Event::Failed(err())]).last(), Some(&Action::Finish(Err(err()))));
}
