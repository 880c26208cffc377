//! Unit tests of the donor's machine: every phase, every failure, every crash point, on events
//! alone; and an exhaustive walk that checks the run's promises on every path.

use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkBound, ChunkVersion, Epoch};

use super::*;
use crate::migration::record::{Record, Side};
use crate::migration::recovery_machine::{self as recovery, Settle, Settled};

const ME: &str = "s0";
const TO: &str = "s1";

fn small() -> Event {
    Event::CatchUpPass { mods: CATCH_UP_SMALL_MODS - 1, bytes: CATCH_UP_SMALL_BYTES - 1 }
}

fn big() -> Event {
    Event::CatchUpPass { mods: CATCH_UP_SMALL_MODS, bytes: 0 }
}

fn err(what: &str) -> MigrationError {
    MigrationError::Peer { peer: TO.into(), message: what.into() }
}

/// Feeds `events` in order; answers the actions they lead to.
fn feed(donor: &mut Donor, events: impl IntoIterator<Item = Event>) -> Vec<Action> {
    events.into_iter().map(|e| donor.step(e)).collect()
}

/// A machine whose pending action is `Commit`, after one clone batch and one small pass.
fn at_commit() -> Donor {
    let (mut d, _) = Donor::new(ME);
    feed(&mut d, [Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }, small()]);
    feed(&mut d, [Event::Done, small(), Event::Done, Event::Done, Event::Done, Event::Done]);
    assert_eq!(d.pending, Action::Commit);
    d
}

fn aborted_inside(e: MigrationError) -> Vec<Action> {
    vec![
        Action::LeaveCriticalSection,
        Action::Notify { committed: false },
        Action::RemoveRecord,
        Action::Finish(Outcome::Aborted(e)),
    ]
}

#[test]
fn a_run_persists_clones_catches_up_and_commits_in_order() {
    let (mut d, first) = Donor::new(ME);
    assert_eq!(first, Action::Persist(Phase::Cloning));
    let actions = feed(
        &mut d,
        [
            Event::Done,
            Event::Done,
            Event::Done,
            Event::CloneBatch { more: true },
            Event::CloneBatch { more: false },
            big(),
            small(),
            Event::Done,
            big(),
            Event::Done,
            Event::Done,
            Event::Done,
            Event::Done,
            Event::CommitAnswer(CommitAnswer::Applied),
            Event::Done,
            Event::Done,
            Event::Done,
            Event::Done,
            Event::Done,
        ],
    );
    use Action as A;
    assert_eq!(
        actions,
        vec![
            A::StartRecipient,
            A::MarkClonePosition,
            A::CloneBatch,
            A::CloneBatch,
            A::CatchUpPass,
            A::CatchUpPass,
            A::EnterCriticalSection,
            A::FinalCatchUp,
            A::SendSessions,
            A::CheckStillYours,
            A::ClaimCommitPoint,
            A::Persist(Phase::Committing),
            A::Commit,
            A::RefreshAfterCommit,
            A::Notify { committed: true },
            A::Persist(Phase::Committed),
            A::LeaveCriticalSection,
            A::FinishCommitted,
            A::Finish(Outcome::Committed),
        ]
    );
    assert_eq!(d.passes(), 2, "the final pass inside the section is not counted");
}

#[test]
fn a_pass_is_small_only_below_both_limits() {
    for (mods, bytes, small) in [
        (0, 0, true),
        (CATCH_UP_SMALL_MODS - 1, CATCH_UP_SMALL_BYTES - 1, true),
        (CATCH_UP_SMALL_MODS, 0, false),
        (0, CATCH_UP_SMALL_BYTES, false),
    ] {
        let (mut d, _) = Donor::new(ME);
        feed(&mut d, [Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }]);
        let next = d.step(Event::CatchUpPass { mods, bytes });
        let want = if small { Action::EnterCriticalSection } else { Action::CatchUpPass };
        assert_eq!(next, want, "{mods} mods, {bytes} bytes");
    }
}

#[test]
fn catch_up_that_never_gets_small_aborts_after_the_last_pass_without_a_section() {
    let (mut d, _) = Donor::new(ME);
    feed(&mut d, [Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }]);
    let actions = feed(&mut d, std::iter::repeat_n(big(), CATCH_UP_PASSES_MAX));
    assert!(actions[..CATCH_UP_PASSES_MAX - 1].iter().all(|a| *a == Action::CatchUpPass));
    assert_eq!(actions[CATCH_UP_PASSES_MAX - 1], Action::Notify { committed: false });
    let e = MigrationError::NotConverged { passes: CATCH_UP_PASSES_MAX };
    assert_eq!(
        feed(&mut d, [Event::Done, Event::Done]),
        vec![Action::RemoveRecord, Action::Finish(Outcome::Aborted(e))]
    );

    // The last allowed pass may still be the small one.
    let (mut d, _) = Donor::new(ME);
    feed(&mut d, [Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }]);
    feed(&mut d, std::iter::repeat_n(big(), CATCH_UP_PASSES_MAX - 1));
    assert_eq!(d.step(small()), Action::EnterCriticalSection);
}

#[test]
fn a_failure_before_the_section_aborts_without_leaving_it() {
    // Events up to each step before the section, then that step fails.
    let before: Vec<Event> = vec![Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }, small()];
    for n in 0..=before.len() {
        let (mut d, _) = Donor::new(ME);
        let pending = feed(&mut d, before[..n].iter().cloned()).last().cloned();
        let e = err(&format!("step {n}"));
        let actions = feed(&mut d, [Event::Failed(e.clone()), Event::Done, Event::Done]);
        assert_eq!(
            actions,
            vec![Action::Notify { committed: false }, Action::RemoveRecord, Action::Finish(Outcome::Aborted(e))],
            "failure of {pending:?}"
        );
    }
}

#[test]
fn a_section_that_cannot_be_entered_aborts_without_leaving_it() {
    let (mut d, _) = Donor::new(ME);
    feed(&mut d, [Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }, small()]);
    let e = MigrationError::SectionTimeout { ns: "db.c".into(), ms: 30_000 };
    assert_eq!(d.step(Event::Failed(e)), Action::Notify { committed: false });
}

#[test]
fn a_failure_inside_the_section_before_the_commit_leaves_it_then_aborts() {
    // FinalCatchUp, SendSessions, CheckStillYours, ClaimCommitPoint, Persist(Committing).
    let inside = [small(), Event::Done, Event::Done, Event::Done, Event::Done];
    for n in 0..inside.len() {
        let (mut d, _) = Donor::new(ME);
        feed(&mut d, [Event::Done, Event::Done, Event::Done, Event::CloneBatch { more: false }, small(), Event::Done]);
        feed(&mut d, inside[..n].iter().cloned());
        let pending = d.pending.clone();
        let e = if pending == Action::ClaimCommitPoint {
            MigrationError::Vetoed { recipient: TO.into() }
        } else {
            err(&format!("{pending:?}"))
        };
        let actions = feed(&mut d, [Event::Failed(e.clone()), Event::Done, Event::Done, Event::Done]);
        assert_eq!(actions, aborted_inside(e), "failure of {pending:?}");
    }
}

#[test]
fn a_refused_commit_leaves_the_section_and_aborts() {
    let mut d = at_commit();
    let e = MigrationError::refused(ErrorCode::LockBusy, "stale balancer");
    let mut events = vec![Event::CommitAnswer(CommitAnswer::Refused(e.clone()))];
    events.extend([Event::Done, Event::Done, Event::Done]);
    assert_eq!(feed(&mut d, events), aborted_inside(e));
}

#[test]
fn a_lost_commit_answer_is_settled_by_the_owner() {
    let lost = || Event::CommitAnswer(CommitAnswer::Lost("deadline".into()));
    // The recipient owns the range: the commit applied.
    let mut d = at_commit();
    assert_eq!(d.step(lost()), Action::VerifyOwner);
    assert_eq!(d.step(Event::Owner(Some(TO.into()))), Action::RefreshAfterCommit);
    // The donor (or nobody) does: it did not, abort.
    for owner in [Some(ME.to_owned()), None] {
        let mut d = at_commit();
        d.step(lost());
        let actions = feed(&mut d, [Event::Owner(owner.clone()), Event::Done, Event::Done, Event::Done]);
        let e = MigrationError::CommitFailed { what: "migration", cause: "deadline".into() };
        assert_eq!(actions, aborted_inside(e), "owner {owner:?}");
    }
    // Nobody can tell: drop the metadata before leaving the section, and leave it to recovery.
    let mut d = at_commit();
    d.step(lost());
    let unreachable = MigrationError::CatalogUnreachable("timeout".into());
    let actions = feed(&mut d, [Event::Failed(unreachable.clone()), Event::Done, Event::Done]);
    let e =
        MigrationError::CommitUnknown { what: "migration", cause: "deadline".into(), verify: unreachable.to_string() };
    assert_eq!(
        actions,
        vec![Action::ForgetMetadata, Action::LeaveCriticalSection, Action::Finish(Outcome::Unresolved(e))]
    );
}

#[test]
fn a_commit_that_failed_in_the_runtime_is_verified_not_aborted() {
    let mut d = at_commit();
    assert_eq!(d.step(Event::Failed(MigrationError::Task("panicked".into()))), Action::VerifyOwner);
}

#[test]
fn after_the_commit_nothing_is_undone() {
    // Refresh, notify and the Committed phase failing change nothing.
    let mut d = at_commit();
    let f = || Event::Failed(err("x"));
    let actions = feed(&mut d, [Event::CommitAnswer(CommitAnswer::Applied), f(), f(), f(), Event::Done, Event::Done]);
    assert_eq!(
        actions,
        vec![
            Action::RefreshAfterCommit,
            Action::Notify { committed: true },
            Action::Persist(Phase::Committed),
            Action::LeaveCriticalSection,
            Action::FinishCommitted,
            Action::Finish(Outcome::Committed),
        ]
    );
    // A range deletion that could not be scheduled is recovery's to finish.
    let mut d = at_commit();
    feed(&mut d, [Event::CommitAnswer(CommitAnswer::Applied), Event::Done, Event::Done, Event::Done, Event::Done]);
    assert_eq!(d.step(Event::Failed(err("disk"))), Action::Finish(Outcome::Unresolved(err("disk"))));
}

#[test]
fn an_unexpected_event_is_a_failure_of_the_pending_step() {
    let (mut d, _) = Donor::new(ME);
    assert_eq!(d.step(Event::CloneBatch { more: true }), Action::Notify { committed: false });
    let mut d = at_commit();
    assert_eq!(d.step(Event::Done), Action::VerifyOwner, "a commit without an answer is verified");
}

#[test]
fn verify_is_the_write_then_verify_rule() {
    let cause = || "lost".to_owned();
    assert_eq!(verify("movePrimary", cause(), Ok(true)), Commit::Committed);
    assert_eq!(
        verify("movePrimary", cause(), Ok(false)),
        Commit::Refused(MigrationError::CommitFailed { what: "movePrimary", cause: cause() })
    );
    let unknown = verify("movePrimary", cause(), Err(MigrationError::CatalogUnreachable("x".into())));
    assert!(matches!(unknown, Commit::Unknown(MigrationError::CommitUnknown { .. })));
}

fn record(phase: Phase) -> Record {
    Record {
        id: "m1".into(),
        ns: "db.c".into(),
        uuid: uuid::Uuid::nil(),
        key: vec![("k".into(), false)],
        min: ChunkBound::Min,
        max: ChunkBound::Max,
        from: ME.into(),
        to: TO.into(),
        epoch: Epoch([1; 12]),
        expected_version: ChunkVersion { major: 1, minor: 0 },
        phase,
    }
}

/// What donor recovery does with the record a crash left, the catalog naming `owner`.
fn recover(phase: Phase, owner: &str) -> Vec<recovery::Action> {
    let (mut s, first) = Settle::new(Side::Donor, &record(phase));
    let mut actions = vec![first, s.step(recovery::Event::Owner(Some(owner.into())))];
    while !matches!(actions.last(), Some(recovery::Action::Finish(_))) {
        actions.push(s.step(recovery::Event::Done));
    }
    actions
}

#[test]
fn a_crash_at_every_step_is_settled_by_the_catalog_commit_alone() {
    use recovery::Action as R;
    let committed = vec![
        R::ReadOwner,
        R::RefreshMetadata,
        R::Notify { committed: true },
        R::FinishCommitted,
        R::Finish(Settled::Committed),
    ];
    let aborted = vec![R::ReadOwner, R::Notify { committed: false }, R::RemoveRecord, R::Finish(Settled::Aborted)];
    // Walk a run; after every answered step, crash: the durable phase and the catalog's owner at
    // that moment are all recovery gets.
    let (mut d, mut action) = Donor::new(ME);
    let (mut durable, mut applied, mut crashes) = (None, false, 0);
    let mut answers = [Event::Done, Event::Done, Event::CloneBatch { more: false }, small()].into_iter();
    loop {
        let event = match &action {
            Action::Finish(end) => {
                assert_eq!(*end, Outcome::Committed);
                break;
            }
            Action::Persist(p) => {
                durable = Some(*p);
                Event::Done
            }
            Action::Commit => {
                applied = true;
                Event::CommitAnswer(CommitAnswer::Applied)
            }
            Action::FinishCommitted => {
                durable = None;
                Event::Done
            }
            Action::FinalCatchUp => small(),
            _ => answers.next().unwrap_or(Event::Done),
        };
        action = d.step(event);
        if let Some(phase) = durable {
            let owner = if applied { TO } else { ME };
            let want = if applied { &committed } else { &aborted };
            assert_eq!(&recover(phase, owner), want, "crash before {action:?} ({phase:?}, owner {owner})");
            crashes += 1;
        }
    }
    assert!(crashes >= 15, "{crashes} crash points");
    // A record still saying Cloning or Committing while the commit was in flight: the owner alone
    // decides, whatever the phase.
    for phase in [Phase::Cloning, Phase::Committing, Phase::Committed] {
        assert_eq!(recover(phase, TO), committed, "{phase:?}, committed");
        assert_eq!(recover(phase, ME), aborted, "{phase:?}, not committed");
    }
}

/// Every answer an action can get, for the exhaustive walk (loops cut short).
fn answers(action: &Action, clones: usize, passes: usize) -> Vec<Event> {
    let failed = Event::Failed(err("x"));
    match action {
        Action::CloneBatch if clones < 2 => {
            vec![Event::CloneBatch { more: true }, Event::CloneBatch { more: false }, failed]
        }
        Action::CloneBatch => vec![Event::CloneBatch { more: false }, failed],
        Action::CatchUpPass if passes < 2 => vec![small(), big(), failed],
        Action::CatchUpPass => vec![small(), failed],
        Action::FinalCatchUp => vec![big(), failed],
        Action::Commit => vec![
            Event::CommitAnswer(CommitAnswer::Applied),
            Event::CommitAnswer(CommitAnswer::Refused(err("refused"))),
            Event::CommitAnswer(CommitAnswer::Lost("lost".into())),
            failed,
        ],
        Action::VerifyOwner => {
            vec![Event::Owner(Some(TO.into())), Event::Owner(Some(ME.into())), Event::Owner(None), failed]
        }
        _ => vec![Event::Done, failed],
    }
}

#[derive(Clone, Default)]
struct Seen {
    done: Vec<Action>,
    in_section: bool,
    committed: bool,
    /// The commit was proposed and its outcome is not known yet.
    in_doubt: bool,
    forgot: bool,
    steps: usize,
}

/// Walks every path from `action`, checking the run's promises at each step.
fn walk(d: Donor, action: Action, seen: Seen, paths: &mut usize) {
    if let Action::Finish(end) = &action {
        *paths += 1;
        assert!(!seen.in_section, "finished inside the section: {:?}", seen.done);
        match end {
            Outcome::Committed => assert!(seen.committed),
            Outcome::Aborted(_) => assert!(!seen.committed && !seen.in_doubt, "{:?}", seen.done),
            Outcome::Unresolved(_) => assert!(seen.committed || seen.forgot),
        }
        return;
    }
    assert!(seen.steps < 200, "a run that does not end: {:?}", seen.done);
    let was = |a: &Action| seen.done.contains(a);
    match &action {
        Action::StartRecipient => assert!(was(&Action::Persist(Phase::Cloning)), "record durable before the start"),
        Action::Commit => {
            for a in [Action::FinalCatchUp, Action::SendSessions, Action::CheckStillYours, Action::ClaimCommitPoint] {
                assert!(was(&a), "commit before {a:?} was acked");
            }
            assert_eq!(seen.done.last(), Some(&Action::Persist(Phase::Committing)), "Committing durable first");
        }
        Action::LeaveCriticalSection => assert!(!seen.in_doubt || seen.forgot, "left in doubt: {:?}", seen.done),
        Action::Notify { committed: false } | Action::RemoveRecord => assert!(!seen.committed && !seen.in_doubt),
        _ => {}
    }
    let clones = seen.done.iter().filter(|a| **a == Action::CloneBatch).count();
    for event in answers(&action, clones, d.passes()) {
        let mut next = seen.clone();
        next.steps += 1;
        let ok = !matches!(event, Event::Failed(_));
        match (&action, &event) {
            (Action::EnterCriticalSection, Event::Done) => next.in_section = true,
            (Action::LeaveCriticalSection, _) => next.in_section = false,
            (Action::Commit, Event::CommitAnswer(CommitAnswer::Applied)) => next.committed = true,
            (Action::Commit, Event::CommitAnswer(CommitAnswer::Lost(_)) | Event::Failed(_)) => next.in_doubt = true,
            (Action::VerifyOwner, Event::Owner(Some(o))) if o == TO => (next.committed, next.in_doubt) = (true, false),
            (Action::VerifyOwner, Event::Owner(_)) => next.in_doubt = false,
            (Action::ForgetMetadata, _) => next.forgot = true,
            _ => {}
        }
        if ok {
            next.done.push(action.clone());
        }
        let mut d = d.clone();
        let following = d.step(event);
        walk(d, following, next, paths);
    }
}

#[test]
fn every_path_keeps_the_runs_promises() {
    let (d, first) = Donor::new(ME);
    let mut paths = 0;
    walk(d, first, Seen::default(), &mut paths);
    assert!(paths > 100, "{paths} paths");
}
