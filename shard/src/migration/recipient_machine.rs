//! The recipient's decisions as a pure state machine, one run per donor call that decides
//! something (`ReceiveStart`, `ReceiveCommit`, `ReceiveAbort`; a batch only applies what it is
//! sent). The runtime ([`super::recipient`]) performs each [`Action`] and feeds back an
//! [`Event`].
//!
//! ```text
//!  start:  running already (a retried start) → Finish(ok)
//!          Claim → [AbortStale: an abandoned attempt held the slot] → Refresh → ownership:
//!            other incarnation → StaleEpoch; owns part of the range → IllegalOperation;
//!            otherwise → WaitRangeDeletions → PersistRecord → CreateCollection → DeleteLeftovers
//!          a failure once the slot is ours → Release → Finish(error)
//!  commit: Refresh (a failure is no matter) → RemoveRecord → Release
//!  abort:  DeleteReceived → Release
//!  (a commit or abort that failed keeps the slot: its record is still there)
//! ```
//!
//! Must not: do I/O; decide ownership (the donor's catalog commit does); delete anything but
//! leftovers of a range it owns no part of (after its record is durable), or a range whose
//! migration aborted.

use shoal_proto::ErrorCode;

use super::MigrationError;
use super::record::Record;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Take the migration slot (it may replace an abandoned attempt of the same donor).
    Claim,
    /// Schedule deletion of what the replaced attempt received, drop its record.
    AbortStale,
    /// Refresh this shard's metadata of the collection.
    Refresh,
    /// Wait (bounded) for earlier deletions of an overlapping range.
    WaitRangeDeletions,
    /// Persist the receiving record, durable before anything is written for it.
    PersistRecord,
    /// Create the collection with the donor's options and indexes.
    CreateCollection,
    /// Delete documents of the range left by an earlier attempt.
    DeleteLeftovers,
    /// Drop the receiving record (the range is ours now).
    RemoveRecord,
    /// Schedule deletion of the received range, drop the record.
    DeleteReceived,
    /// Free the slot.
    Release,
    Finish(Result<(), MigrationError>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Done,
    /// The slot is ours; `replaced`: an abandoned attempt held it.
    Claimed {
        replaced: bool,
    },
    /// What this shard's metadata says of the range.
    Ownership(Ownership),
    Failed(MigrationError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The collection is not sharded here (or unknown): nothing of the range is ours.
    Unsharded,
    /// The catalog's collection is another incarnation than the donor's.
    OtherIncarnation,
    /// This shard owns part of the range already.
    OwnsPart,
    /// Sharded, and none of the range is ours.
    OwnsNone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Start,
    Commit,
    Abort,
}

/// One decided call of one migration, as seen by the recipient.
#[derive(Debug)]
pub struct Receive {
    call: Call,
    /// `ns [min, max)` of a start, for its refusals.
    ns: String,
    range: String,
    pending: Action,
    /// A start that claimed the slot frees it when it fails. A commit or abort that failed keeps
    /// it: its record is still there, for a repeated call (or recovery) to settle.
    release_on_failure: bool,
    failure: Option<MigrationError>,
}

impl Receive {
    /// `ReceiveStart` of `record`; `running`: this process already runs it (a retried start).
    pub fn start(record: &Record, running: bool) -> (Self, Action) {
        let first = if running { Action::Finish(Ok(())) } else { Action::Claim };
        let mut start = Self::new(Call::Start, first);
        start.0.ns = record.ns.clone();
        start.0.range = format!("[{}, {})", record.min, record.max);
        start
    }

    /// `ReceiveCommit` of a migration this process runs (a call for one it does not run is
    /// settled already: the runtime answers it without a machine).
    pub fn commit() -> (Self, Action) {
        Self::new(Call::Commit, Action::Refresh)
    }

    /// `ReceiveAbort` of a migration this process runs.
    pub fn abort() -> (Self, Action) {
        Self::new(Call::Abort, Action::DeleteReceived)
    }

    fn new(call: Call, first: Action) -> (Self, Action) {
        let receive = Self {
            call,
            ns: String::new(),
            range: String::new(),
            pending: first.clone(),
            release_on_failure: false,
            failure: None,
        };
        (receive, first)
    }

    pub fn step(&mut self, event: Event) -> Action {
        let next = self.next(event);
        self.pending = next.clone();
        next
    }

    fn next(&mut self, event: Event) -> Action {
        use Action as A;
        match (self.call, self.pending.clone(), event) {
            (_, A::Finish(r), _) => A::Finish(r),
            (_, A::Release, _) => A::Finish(self.failure.take().map_or(Ok(()), Err)),
            (Call::Start, A::Claim, Event::Claimed { replaced }) => {
                self.release_on_failure = true;
                if replaced { A::AbortStale } else { A::Refresh }
            }
            // The slot stays claimed: the donor's ReceiveAbort (or the idle timeout) frees it.
            (Call::Start, A::AbortStale, Event::Failed(e)) => A::Finish(Err(e)),
            (Call::Start, A::AbortStale, Event::Done) => A::Refresh,
            (Call::Start, A::Refresh, Event::Ownership(o)) => self.check(o),
            (Call::Start, A::WaitRangeDeletions, Event::Done) => A::PersistRecord,
            (Call::Start, A::PersistRecord, Event::Done) => A::CreateCollection,
            (Call::Start, A::CreateCollection, Event::Done) => A::DeleteLeftovers,
            (Call::Start, A::DeleteLeftovers, Event::Done) => A::Finish(Ok(())),
            // The data is ours either way; the next versioned request refreshes again.
            (Call::Commit, A::Refresh, _) => A::RemoveRecord,
            (Call::Commit, A::RemoveRecord, Event::Done) | (Call::Abort, A::DeleteReceived, Event::Done) => A::Release,
            (_, _, Event::Failed(e)) => self.fail(e),
            (_, pending, other) => self.fail(MigrationError::Task(format!("unexpected {other:?} after {pending:?}"))),
        }
    }

    /// The range must be wholly someone else's, in the donor's incarnation of the collection.
    fn check(&mut self, ownership: Ownership) -> Action {
        match ownership {
            Ownership::Unsharded | Ownership::OwnsNone => Action::WaitRangeDeletions,
            Ownership::OtherIncarnation => {
                let why = format!("{} changed incarnation", self.ns);
                self.fail(MigrationError::refused(ErrorCode::StaleEpoch, why))
            }
            Ownership::OwnsPart => {
                let why = format!("this shard already owns part of {} {}", self.ns, self.range);
                self.fail(MigrationError::refused(ErrorCode::IllegalOperation, why))
            }
        }
    }

    fn fail(&mut self, e: MigrationError) -> Action {
        if self.release_on_failure {
            self.failure = Some(e);
            Action::Release
        } else {
            Action::Finish(Err(e))
        }
    }
}

#[cfg(test)]
#[path = "recipient_machine_tests.rs"]
mod tests;
