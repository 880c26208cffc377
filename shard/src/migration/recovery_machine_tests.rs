//! Unit tests of recovery's machine: each record side against each owner and donor answer,
//! including the records a recipient's crash points leave.

use shoal_proto::catalog::{ChunkBound, ChunkVersion, Epoch};

use super::*;
use crate::migration::record::Phase;

const FROM: &str = "s0";
const TO: &str = "s1";

fn record() -> Record {
    Record {
        id: "m1".into(),
        ns: "db.c".into(),
        uuid: uuid::Uuid::nil(),
        key: vec![("k".into(), false)],
        min: ChunkBound::Min,
        max: ChunkBound::Max,
        from: FROM.into(),
        to: TO.into(),
        epoch: Epoch([1; 12]),
        expected_version: ChunkVersion { major: 1, minor: 0 },
        phase: Phase::Cloning,
    }
}

fn owner(o: &str) -> Event {
    Event::Owner(Some(o.into()))
}

/// Runs the machine of `side` on `events`; answers its actions, the first one included.
fn run(side: Side, events: impl IntoIterator<Item = Event>) -> Vec<Action> {
    let (mut s, first) = Settle::new(side, &record());
    std::iter::once(first).chain(events.into_iter().map(|e| s.step(e))).collect()
}

fn unreachable() -> MigrationError {
    MigrationError::CatalogUnreachable("timeout".into())
}

#[test]
fn a_donor_record_whose_range_moved_is_finished() {
    let actions = run(Side::Donor, [owner(TO), Event::Done, Event::Done, Event::Done]);
    assert_eq!(
        actions,
        vec![
            Action::ReadOwner,
            Action::RefreshMetadata,
            Action::Notify { committed: true },
            Action::FinishCommitted,
            Action::Finish(Settled::Committed),
        ]
    );
}

#[test]
fn a_donor_record_whose_range_did_not_move_is_aborted() {
    // Still ours, or the collection gone or re-sharded: nothing can commit any more.
    for o in [Some(FROM.to_owned()), None] {
        let actions = run(Side::Donor, [Event::Owner(o.clone()), Event::Done, Event::Done]);
        assert_eq!(
            actions,
            vec![
                Action::ReadOwner,
                Action::Notify { committed: false },
                Action::RemoveRecord,
                Action::Finish(Settled::Aborted)
            ],
            "owner {o:?}"
        );
    }
}

#[test]
fn an_unreachable_catalog_or_a_failed_write_starts_the_round_over() {
    let actions = run(Side::Donor, [Event::Failed(unreachable()), Event::Done, owner(TO), Event::Done, Event::Done]);
    assert_eq!(
        actions[..4],
        [Action::ReadOwner, Action::Retry { round: 0, why: unreachable() }, Action::ReadOwner, Action::RefreshMetadata]
    );
    let disk = MigrationError::Task("disk".into());
    let actions = run(Side::Donor, [owner(TO), Event::Done, Event::Done, Event::Failed(disk.clone()), Event::Done]);
    assert_eq!(actions[4..], [Action::Retry { round: 0, why: disk }, Action::ReadOwner]);
    // Recipient: a failed deletion is retried from the owner read too.
    let actions = run(
        Side::Recipient,
        [owner(FROM), Event::DonorFate(Fate::Decided), owner(FROM), Event::Failed(unreachable()), Event::Done],
    );
    assert_eq!(actions[4..], [Action::Retry { round: 0, why: unreachable() }, Action::ReadOwner]);
}

#[test]
fn a_record_is_left_for_the_next_restart_after_the_last_round() {
    let (mut s, _) = Settle::new(Side::Donor, &record());
    for round in 0..SETTLE_ROUNDS_MAX - 1 {
        assert_eq!(s.step(Event::Failed(unreachable())), Action::Retry { round, why: unreachable() });
        assert_eq!(s.step(Event::Done), Action::ReadOwner);
    }
    assert_eq!(s.step(Event::Failed(unreachable())), Action::Finish(Settled::Unsettled));
}

#[test]
fn a_recipient_that_owns_the_range_keeps_it_without_asking_the_donor() {
    // The crash point `recipient_before_commit`: the catalog committed, the record is still here.
    let actions = run(Side::Recipient, [owner(TO), Event::Done, Event::Done]);
    assert_eq!(
        actions,
        vec![Action::ReadOwner, Action::RefreshMetadata, Action::RemoveRecord, Action::Finish(Settled::Kept)]
    );
}

#[test]
fn a_recipient_deletes_only_once_the_donor_can_no_longer_commit() {
    // The crash points `recipient_after_start` and `recipient_after_batch`: the donor's next call
    // fails, it aborts (or has aborted), the catalog keeps naming it.
    for answer in [Event::DonorFate(Fate::Decided), Event::DonorGone] {
        let actions = run(Side::Recipient, [owner(FROM), answer.clone(), owner(FROM), Event::Done]);
        assert_eq!(
            actions,
            vec![
                Action::ReadOwner,
                Action::AskDonor,
                Action::ReadOwner,
                Action::DeleteReceived,
                Action::Finish(Settled::Deleted)
            ],
            "{answer:?}"
        );
    }
    // The collection is gone: the same.
    let actions = run(Side::Recipient, [Event::Owner(None), Event::DonorGone, Event::Owner(None)]);
    assert_eq!(actions.last(), Some(&Action::DeleteReceived));
}

#[test]
fn a_donor_that_committed_just_before_answering_leaves_the_range_to_the_recipient() {
    let actions = run(Side::Recipient, [owner(FROM), Event::DonorFate(Fate::Decided), owner(TO), Event::Done]);
    assert_eq!(actions[3..], [Action::RefreshMetadata, Action::RemoveRecord]);
}

#[test]
fn a_donor_still_committing_makes_the_recipient_ask_again_later() {
    let actions = run(
        Side::Recipient,
        [owner(FROM), Event::DonorFate(Fate::Pending), Event::Done, owner(FROM), Event::DonorFate(Fate::Decided)],
    );
    assert_eq!(
        actions,
        vec![
            Action::ReadOwner,
            Action::AskDonor,
            Action::Retry { round: 0, why: MigrationError::FatePending { donor: FROM.into() } },
            Action::ReadOwner,
            // A new round asks again: the earlier answer is no longer current.
            Action::AskDonor,
            Action::ReadOwner,
        ]
    );
    // An unreachable donor is no answer either.
    let actions = run(Side::Recipient, [owner(FROM), Event::Failed(unreachable())]);
    assert!(matches!(actions.last(), Some(Action::Retry { round: 0, .. })));
}

#[test]
fn the_records_phase_does_not_change_the_decision() {
    for phase in [Phase::Cloning, Phase::Committing, Phase::Committed] {
        let rec = Record { phase, ..record() };
        let (mut s, _) = Settle::new(Side::Donor, &rec);
        assert_eq!(s.step(owner(TO)), Action::RefreshMetadata, "{phase:?}");
        let (mut s, _) = Settle::new(Side::Donor, &rec);
        assert_eq!(s.step(owner(FROM)), Action::Notify { committed: false }, "{phase:?}");
    }
}
