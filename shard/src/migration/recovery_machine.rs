//! Recovery's decisions as a pure state machine: how one persisted record (donor or recipient)
//! is settled, given who the catalog says owns the range and, for a recipient, whether the donor
//! can still commit. The runtime ([`super::recovery`]) performs each [`Action`] and feeds back an
//! [`Event`].
//!
//! ```text
//!  donor:     ReadOwner → another shard → RefreshMetadata → Notify{committed} → FinishCommitted
//!                       → us or none    → Notify{aborted} → RemoveRecord
//!  recipient: ReadOwner → us            → RefreshMetadata → RemoveRecord            (kept)
//!                       → otherwise     → AskDonor → decided (or donor gone) → ReadOwner →
//!                                           us → kept as above; otherwise → DeleteReceived
//!                                       → AskDonor → pending → Retry (ask again later)
//!  any failure (catalog unreachable, a local write) → Retry{round}, at most SETTLE_ROUNDS_MAX
//!  rounds, then Finish(Unsettled): the next restart tries again.
//! ```
//!
//! The record's phase is not consulted: the catalog's owner is the truth (a donor record says
//! Cloning while its commit may be in flight, Committing whether or not it took effect).
//!
//! Must not: do I/O or read a clock; settle anything without the catalog's answer; delete what a
//! recipient received while the donor may still commit it.

use shoal_proto::catalog::ShardId;

use super::record::{Record, Side};
use super::{Fate, MigrationError};

/// Rounds of asking the catalog (each itself a bounded retry) before a record is left for the
/// next restart.
pub const SETTLE_ROUNDS_MAX: u32 = 60;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Who owns the range per the catalog (linearizable read, bounded retries).
    ReadOwner,
    /// Refresh this shard's metadata of the collection (else drop it).
    RefreshMetadata,
    /// Donor: best-effort `ReceiveCommit` / `ReceiveAbort`.
    Notify {
        committed: bool,
    },
    /// Donor: schedule its range deletion, then drop the record.
    FinishCommitted,
    /// Drop the record (it is settled).
    RemoveRecord,
    /// Recipient: ask the donor (`MigrationFate`) whether the migration can still commit.
    AskDonor,
    /// Recipient: schedule deletion of what it received, then drop the record.
    DeleteReceived,
    /// The round failed (`why`): wait `backoff(round)`, then answer `Done` to start over.
    Retry {
        round: u32,
        why: MigrationError,
    },
    Finish(Settled),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Done,
    Owner(Option<ShardId>),
    /// The donor's answer to `AskDonor`.
    DonorFate(Fate),
    /// The donor shard is gone from the catalog: it can commit nothing.
    DonorGone,
    Failed(MigrationError),
}

/// How a record was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Donor: the range had moved; its deletion is scheduled.
    Committed,
    /// Donor: the range had not moved; the recipient was told.
    Aborted,
    /// Recipient: the range is ours.
    Kept,
    /// Recipient: the range can never become ours; its deletion is scheduled.
    Deleted,
    /// Out of rounds: left for the next restart.
    Unsettled,
}

/// Settling one record.
#[derive(Debug)]
pub struct Settle {
    side: Side,
    from: ShardId,
    to: ShardId,
    pending: Action,
    round: u32,
    /// Recipient: the donor answered, this round, that it can no longer commit.
    donor_decided: bool,
    /// The outcome the remaining actions lead to.
    settled: Option<Settled>,
}

impl Settle {
    /// The machine for `record` of `side`, and its first action.
    pub fn new(side: Side, record: &Record) -> (Self, Action) {
        let settle = Self {
            side,
            from: record.from.clone(),
            to: record.to.clone(),
            pending: Action::ReadOwner,
            round: 0,
            donor_decided: false,
            settled: None,
        };
        (settle, Action::ReadOwner)
    }

    pub fn step(&mut self, event: Event) -> Action {
        let next = self.next(event);
        self.pending = next.clone();
        next
    }

    fn next(&mut self, event: Event) -> Action {
        use Action as A;
        match (self.pending.clone(), event) {
            (A::ReadOwner, Event::Owner(owner)) => match self.side {
                Side::Donor => self.settle_donor(owner),
                Side::Recipient => self.settle_recipient(owner),
            },
            (A::RefreshMetadata, _) => match self.side {
                Side::Donor => A::Notify { committed: true },
                Side::Recipient => A::RemoveRecord,
            },
            (A::Notify { committed: true }, _) => A::FinishCommitted,
            (A::Notify { committed: false }, _) => A::RemoveRecord,
            (A::FinishCommitted | A::RemoveRecord | A::DeleteReceived, Event::Done) => {
                A::Finish(self.settled.unwrap_or(Settled::Unsettled))
            }
            (A::AskDonor, Event::DonorFate(Fate::Decided) | Event::DonorGone) => {
                self.donor_decided = true;
                A::ReadOwner
            }
            (A::AskDonor, Event::DonorFate(Fate::Pending)) => {
                self.retry(MigrationError::FatePending { donor: self.from.clone() })
            }
            (A::Retry { .. }, _) => {
                self.donor_decided = false;
                self.settled = None;
                A::ReadOwner
            }
            (A::Finish(s), _) => A::Finish(s),
            (_, Event::Failed(e)) => self.retry(e),
            (pending, other) => self.retry(MigrationError::Task(format!("unexpected {other:?} after {pending:?}"))),
        }
    }

    /// A donor whose range another shard owns committed; otherwise (us, or the collection gone)
    /// nothing can commit any more.
    fn settle_donor(&mut self, owner: Option<ShardId>) -> Action {
        if owner.is_some_and(|o| o != self.from) {
            self.settled = Some(Settled::Committed);
            Action::RefreshMetadata
        } else {
            self.settled = Some(Settled::Aborted);
            Action::Notify { committed: false }
        }
    }

    /// Ours: keep. Not ours: only a donor that can no longer commit makes that final, and the
    /// owner is read again after its answer (it may have committed just before answering).
    fn settle_recipient(&mut self, owner: Option<ShardId>) -> Action {
        if owner.as_deref() == Some(self.to.as_str()) {
            self.settled = Some(Settled::Kept);
            Action::RefreshMetadata
        } else if self.donor_decided {
            self.settled = Some(Settled::Deleted);
            Action::DeleteReceived
        } else {
            Action::AskDonor
        }
    }

    /// The round failed: retry later, or leave the record for the next restart.
    fn retry(&mut self, why: MigrationError) -> Action {
        let round = self.round;
        self.round += 1;
        if self.round >= SETTLE_ROUNDS_MAX { Action::Finish(Settled::Unsettled) } else { Action::Retry { round, why } }
    }
}

#[cfg(test)]
#[path = "recovery_machine_tests.rs"]
mod tests;
