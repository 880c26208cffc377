//! The donor's decisions as a pure state machine (openraft's Engine idea): the runtime
//! ([`super::donor`]) performs each [`Action`] and feeds back what happened as an [`Event`];
//! [`Donor::step`] answers the next action. Every rule of the run lives here, unit-tested
//! without sockets or disks:
//!
//! ```text
//!  Persist(Cloning) → StartRecipient → MarkClonePosition → CloneBatch* → CatchUpPass*
//!    (until a pass is small, at most CATCH_UP_PASSES_MAX) → EnterCriticalSection → FinalCatchUp
//!    → SendSessions → CheckStillYours → ClaimCommitPoint → Persist(Committing) → Commit
//!  Commit answered:  applied → RefreshAfterCommit → Notify{committed} → Persist(Committed)
//!                              → LeaveCriticalSection → FinishCommitted → Finish(Committed)
//!                    refused → abort
//!                    lost    → VerifyOwner: another shard → as applied; us or none → abort;
//!                              unknown → ForgetMetadata → LeaveCriticalSection → Finish(Unresolved)
//!  abort (any failure before the commit's outcome is known to be "not committed"):
//!    [LeaveCriticalSection] → Notify{aborted} → RemoveRecord → Finish(Aborted)
//! ```
//!
//! Must not: do I/O, read a clock, or hold anything but the protocol's state. Its promises (the
//! unit tests check each): a record is persisted before the step it announces; the commit is
//! proposed only after the final catch-up, the session records and the still-yours check were
//! acked; the critical section is left only once the commit's outcome is known (or the cached
//! metadata is dropped); once committed, nothing is undone.

use shoal_proto::catalog::ShardId;

use super::record::Phase;
use super::{CATCH_UP_PASSES_MAX, CATCH_UP_SMALL_BYTES, CATCH_UP_SMALL_MODS, MigrationError};

/// What the runtime does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Persist the donor record at this phase, durable on a majority of the group.
    Persist(Phase),
    /// `ReceiveStart`: the recipient claims its slot, persists its record, deletes leftovers.
    StartRecipient,
    /// Note the oplog position: what is at or before it is in the clone scan, the rest in the
    /// catch-up passes.
    MarkClonePosition,
    /// Read one batch of the range and send it (acked once durable).
    CloneBatch,
    /// One catch-up pass: the oplog since the last one, sent.
    CatchUpPass,
    /// Make writes to the collection wait (bounded).
    EnterCriticalSection,
    /// The last catch-up pass, inside the section: after it the range cannot change.
    FinalCatchUp,
    /// The collection's retryable-write session records (complete now that writes wait).
    SendSessions,
    /// An empty batch: fails if the recipient restarted since its last ack.
    CheckStillYours,
    /// The in-memory commit point: from here a restarted recipient's fate question answers
    /// "later"; fails if such a question already vetoed the commit.
    ClaimCommitPoint,
    /// The catalog's compare-and-set.
    Commit,
    /// The commit's answer was lost: who owns the range now (linearizable read).
    VerifyOwner,
    /// Refresh this shard's metadata after the commit (else drop it).
    RefreshAfterCommit,
    /// Best-effort `ReceiveCommit` / `ReceiveAbort`.
    Notify {
        committed: bool,
    },
    /// Drop this shard's cached metadata of the collection: versioned requests must refresh.
    ForgetMetadata,
    LeaveCriticalSection,
    /// Schedule the donor's range deletion, then drop the record.
    FinishCommitted,
    /// Drop the record (the migration aborted).
    RemoveRecord,
    /// The run is over.
    Finish(Outcome),
}

/// What came of the last action.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// It completed (actions without an answer of their own).
    Done,
    /// A clone batch was acked; `more`: the scan is not finished.
    CloneBatch {
        more: bool,
    },
    /// A catch-up pass was acked, with how much it carried.
    CatchUpPass {
        mods: usize,
        bytes: usize,
    },
    CommitAnswer(CommitAnswer),
    /// The catalog's owner of the range (`None`: the collection is gone or re-sharded).
    Owner(Option<ShardId>),
    Failed(MigrationError),
}

/// The catalog's answer to the commit.
#[derive(Debug, Clone, PartialEq)]
pub enum CommitAnswer {
    Applied,
    Refused(MigrationError),
    /// The call failed: the write may or may not have been applied.
    Lost(String),
}

/// A catalog commit's outcome as a donor (of a chunk or a database) acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Commit {
    Committed,
    Refused(MigrationError),
    /// Neither the write's answer nor the catalog's state could be learnt.
    Unknown(MigrationError),
}

/// Write-then-verify, the one rule of chunk migrations and movePrimary for a catalog commit
/// whose answer was lost (`cause`): `applied` is whether the catalog shows it took effect, or
/// why the catalog could not tell.
pub fn verify(what: &'static str, cause: String, applied: Result<bool, MigrationError>) -> Commit {
    match applied {
        Ok(true) => Commit::Committed,
        Ok(false) => Commit::Refused(MigrationError::CommitFailed { what, cause }),
        Err(e) => Commit::Unknown(MigrationError::CommitUnknown { what, cause, verify: e.to_string() }),
    }
}

/// How a run ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Committed,
    /// Nothing was committed; the recipient was told and the record dropped.
    Aborted(MigrationError),
    /// The commit's outcome is unknown, or its aftermath failed: recovery settles it.
    Unresolved(MigrationError),
}

/// One run of one migration, as seen by the donor.
#[derive(Debug, Clone)]
pub struct Donor {
    /// This shard: an owner other than it means the commit took effect.
    me: ShardId,
    /// The action the runtime is performing.
    pending: Action,
    passes: usize,
    in_section: bool,
    /// Why the commit's answer was lost (for the error if the catalog does not tell either).
    lost: Option<String>,
    path: Path,
}

/// Where the run is heading; the actions left on the way depend on it.
#[derive(Debug, Clone)]
enum Path {
    /// Toward the commit, or past it.
    Ahead,
    Aborting(MigrationError),
    Unresolved(MigrationError),
}

impl Donor {
    /// The machine and its first action.
    pub fn new(me: impl Into<ShardId>) -> (Self, Action) {
        let first = Action::Persist(Phase::Cloning);
        let donor =
            Self { me: me.into(), pending: first.clone(), passes: 0, in_section: false, lost: None, path: Path::Ahead };
        (donor, first)
    }

    /// Catch-up passes run so far (the last one small or not).
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// The next action, given what came of the pending one.
    pub fn step(&mut self, event: Event) -> Action {
        let next = self.next(event);
        self.pending = next.clone();
        next
    }

    fn next(&mut self, event: Event) -> Action {
        use Action as A;
        match (self.pending.clone(), event) {
            (A::Persist(Phase::Cloning), Event::Done) => A::StartRecipient,
            (A::StartRecipient, Event::Done) => A::MarkClonePosition,
            (A::MarkClonePosition, Event::Done) => A::CloneBatch,
            (A::CloneBatch, Event::CloneBatch { more: true }) => A::CloneBatch,
            (A::CloneBatch, Event::CloneBatch { more: false }) => A::CatchUpPass,
            (A::CatchUpPass, Event::CatchUpPass { mods, bytes }) => {
                self.passes += 1;
                if mods < CATCH_UP_SMALL_MODS && bytes < CATCH_UP_SMALL_BYTES {
                    A::EnterCriticalSection
                } else if self.passes >= CATCH_UP_PASSES_MAX {
                    self.abort(MigrationError::NotConverged { passes: CATCH_UP_PASSES_MAX })
                } else {
                    A::CatchUpPass
                }
            }
            (A::EnterCriticalSection, Event::Done) => {
                self.in_section = true;
                A::FinalCatchUp
            }
            // Whatever its size: writes wait, so it is the last.
            (A::FinalCatchUp, Event::CatchUpPass { .. } | Event::Done) => A::SendSessions,
            (A::SendSessions, Event::Done) => A::CheckStillYours,
            (A::CheckStillYours, Event::Done) => A::ClaimCommitPoint,
            (A::ClaimCommitPoint, Event::Done) => A::Persist(Phase::Committing),
            (A::Persist(Phase::Committing), Event::Done) => A::Commit,
            (A::Commit, Event::CommitAnswer(CommitAnswer::Applied)) => A::RefreshAfterCommit,
            (A::Commit, Event::CommitAnswer(CommitAnswer::Refused(e))) => self.abort(e),
            (A::Commit, Event::CommitAnswer(CommitAnswer::Lost(cause))) => {
                self.lost = Some(cause);
                A::VerifyOwner
            }
            // Only another shard owning the range proves the commit took effect.
            (A::VerifyOwner, Event::Owner(owner)) => {
                let applied = owner.is_some_and(|o| o != self.me);
                self.verified(Ok(applied))
            }
            (A::RefreshAfterCommit, _) => A::Notify { committed: true },
            (A::Notify { committed: true }, _) => A::Persist(Phase::Committed),
            // Not fatal: recovery finds the commit in the catalog whatever the phase says.
            (A::Persist(Phase::Committed), _) => A::LeaveCriticalSection,
            (A::LeaveCriticalSection, _) => {
                self.in_section = false;
                match &self.path {
                    Path::Ahead => A::FinishCommitted,
                    Path::Aborting(_) => A::Notify { committed: false },
                    Path::Unresolved(e) => A::Finish(Outcome::Unresolved(e.clone())),
                }
            }
            (A::FinishCommitted, Event::Done) => A::Finish(Outcome::Committed),
            (A::FinishCommitted, Event::Failed(e)) => A::Finish(Outcome::Unresolved(e)),
            (A::ForgetMetadata, _) => A::LeaveCriticalSection,
            (A::Notify { committed: false }, _) => A::RemoveRecord,
            // A record left behind is aborted by recovery (the catalog still names this shard).
            (A::RemoveRecord, _) => A::Finish(self.outcome()),
            (A::Finish(end), _) => A::Finish(end),
            (_, Event::Failed(e)) => self.fail(e),
            (pending, other) => self.fail(MigrationError::Task(format!("unexpected {other:?} after {pending:?}"))),
        }
    }

    /// A failure of the pending action that the transitions above do not absorb.
    fn fail(&mut self, e: MigrationError) -> Action {
        match &self.pending {
            // The commit may have been applied all the same: ask the catalog.
            Action::Commit => {
                self.lost = Some(e.to_string());
                Action::VerifyOwner
            }
            Action::VerifyOwner => self.verified(Err(e)),
            Action::FinishCommitted => Action::Finish(Outcome::Unresolved(e)),
            _ => self.abort(e),
        }
    }

    /// Settles a lost commit answer by what the catalog shows.
    fn verified(&mut self, applied: Result<bool, MigrationError>) -> Action {
        match verify("migration", self.lost.take().unwrap_or_default(), applied) {
            Commit::Committed => Action::RefreshAfterCommit,
            Commit::Refused(e) => self.abort(e),
            // The cached metadata goes before the section is left: no request is admitted with
            // a version the catalog may have moved past.
            Commit::Unknown(e) => {
                self.path = Path::Unresolved(e);
                Action::ForgetMetadata
            }
        }
    }

    /// Starts the abort: nothing was committed, so the section (if held) can be left first.
    fn abort(&mut self, e: MigrationError) -> Action {
        self.path = Path::Aborting(e);
        if self.in_section { Action::LeaveCriticalSection } else { Action::Notify { committed: false } }
    }

    fn outcome(&self) -> Outcome {
        match &self.path {
            Path::Ahead => Outcome::Committed,
            Path::Aborting(e) => Outcome::Aborted(e.clone()),
            Path::Unresolved(e) => Outcome::Unresolved(e.clone()),
        }
    }
}

#[cfg(test)]
#[path = "donor_machine_tests.rs"]
mod tests;
