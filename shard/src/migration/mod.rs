//! Chunk migration, donor → recipient, donor-driven, with crash safety.
//!
//! Owns: the `Migration` gRPC service ([`service`]), the donor's run ([`donor`]) with what it
//! sends ([`transfer`]) and how a commit settles ([`outcome`]), the recipient's handlers
//! ([`recipient`]), the catch-up filter and batching ([`mods`]), the
//! persisted records ([`record`]), startup recovery ([`recovery`]), admission control
//! ([`throttle`]), test failpoints ([`failpoint`]), typed errors ([`error`]), and movePrimary
//! ([`primary`]: a database's unsharded collections). Must not: decide placement (the catalog's
//! compare-and-set does), or delete ranges itself (the range deleter does, after
//! `ShardingState::schedule_range_deletion`).
//!
//! Migration is a step function. Every decision lives in a pure state machine — the donor's
//! run in [`donor_machine::Donor`], recovery's settling of a record in
//! [`recovery_machine::Settle`], the recipient's start/commit/abort in
//! [`recipient_machine::Receive`] — that takes an event (`CloneBatch{more}`,
//! `CatchUpPass{mods, bytes}`, `CommitAnswer(..)`, `Owner(Option<ShardId>)`, `Failed(..)`, …)
//! and answers the next action, with no I/O, clock or tokio, so every phase and every crash
//! point is unit-tested on events alone. The runtimes ([`donor`], [`recovery`], [`recipient`])
//! are loops: perform the action (record writes, RPCs, catalog calls, the critical-section gate),
//! feed back what came of it. Failpoints stay in the runtimes, at action boundaries.
//!
//! ```text
//!  router          donor                                   recipient                 catalog
//!    |--MoveRange-->| claim slot (else 117), refresh, check chunk+version
//!    |              | persist record (Cloning)
//!    |              |------------- ReceiveStart ------------->| claim, persist "receiving",
//!    |              |                                         | wait overlapping range deletions,
//!    |              |                                         | create collection, delete leftovers
//!    |              | pos = oplog_last; scan [min,max)        |
//!    |              |------------- ReceiveBatch* ------------>| upsert by _id, durable, then ack
//!    |              | catch-up: oplog after pos → mods        |
//!    |              |------------- ReceiveBatch* ------------>|   (until a pass is small)
//!    |              | gates.enter(ns): writes wait            |
//!    |              | final catch-up ---- ReceiveBatch* ----->|
//!    |              | still yours? ------ ReceiveBatch [] --->| fails if restarted since
//!    |              | persist Committing --------------- CommitMigration (CAS) ---------->|
//!    |              | refresh(ns) ------ ReceiveCommit ------>| refresh, drop record
//!    |              | persist Committed, leave section, schedule range deletion, drop record
//!    |<-- ok -------|
//!  on failure before the commit: leave section ── ReceiveAbort ──> schedule deletion of the
//!  range, drop record; donor drops its record and answers the error (OperationFailed 96 + cause).
//! ```
//!
//! Crash safety: both records are durable before the step they announce. On restart
//! ([`recovery`]) each side asks the catalog who owns the range: a donor whose range moved
//! finishes (schedules its deletion), otherwise aborts; a recipient that owns it keeps the data,
//! otherwise schedules its deletion. Until its records are settled a shard answers 117 to new
//! migrations, and a recipient forgets in-memory migrations when it restarts, so a donor's next
//! batch fails and the donor aborts. The donor commits only after the final catch-up was acked
//! (durable). Every phase is logged and recorded in the catalog changelog (`moveChunk.start`,
//! `moveChunk.to`, `moveChunk.from`, `moveChunk.error`; the catalog logs `moveChunk.commit`).
//!
//! A recipient that restarts with a receiving record the catalog does not give it asks the donor
//! first (`MigrationFate`): a donor short of its commit point vetoes the migration (it aborts
//! instead of committing), so the recipient deletes only ranges that can never become its own;
//! a donor that is committing, or still settling the migration after its own restart, answers
//! "ask again later" and the recipient keeps the (orphaned, hidden) documents meanwhile.
//!
//! Known gap: a donor restarted while its `CommitMigration` was still in flight in the config
//! service settles by a linearizable read of the owner; a proposal the leader applies after that
//! read (it would have to outlive the donor's restart) is not fenced off.

pub mod donor;
pub mod donor_machine;
pub mod error;
pub mod failpoint;
pub mod mods;
pub mod outcome;
pub mod primary;
pub mod recipient;
pub mod recipient_machine;
pub mod record;
pub mod recovery;
pub mod recovery_machine;
pub mod service;
pub mod throttle;
pub mod transfer;

pub use error::MigrationError;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkBound, Shard};
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use shoal_proto::shard::KeyBound;
use shoal_proto::shard::migration_client::MigrationClient;
use tonic::transport::Channel;

use crate::exec::Node;
use record::{Record, Side};

/// Limit of one donor → recipient call (a batch is at most a few MiB; the recipient syncs it).
pub const PEER_RPC_TIMEOUT_MS: u64 = 60_000;
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How long a recipient waits for earlier deletions of the range before refusing to start.
pub const RANGE_DELETION_WAIT_MS: u64 = 20_000;
/// How long the donor waits for in-flight writes when entering the critical section.
pub const CRITICAL_SECTION_ENTER_WAIT_MS: u64 = 30_000;
/// Catch-up passes before the critical section; a pass with fewer mods and bytes than these is
/// small enough to finish inside it.
pub const CATCH_UP_PASSES_MAX: usize = 50;
pub const CATCH_UP_SMALL_MODS: usize = 100;
pub const CATCH_UP_SMALL_BYTES: usize = 1 << 20;
/// A receiving migration whose donor has not called for this long may be displaced by another
/// donor's (far above the gap between a donor's calls, which each have a timeout).
pub const RECEIVE_IDLE_MS_MAX: u64 = 600_000;
/// Bounded retries (doubling backoff) for catalog calls whose answer the migration needs.
pub const CATALOG_ATTEMPTS_MAX: u32 = 12;
pub const RETRY_BACKOFF_MIN_MS: u64 = 100;
pub const RETRY_BACKOFF_MAX_MS: u64 = 5_000;

/// What this shard is doing: at most one migration, as donor or recipient.
#[derive(Debug, Clone)]
pub struct Active {
    pub side: Side,
    pub record: Record,
    /// When the donor last called about it (recipient side).
    pub last_call: std::time::Instant,
    /// Donor side: a restarted recipient asked for this migration's fate before the commit point;
    /// the donor must abort instead of committing.
    pub vetoed: bool,
    /// Donor side: past the commit point (the catalog commit may be in flight).
    pub committing: bool,
}

/// A donor's answer to [`Migrations::fate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It will never commit from now on: the catalog's owner is final.
    Decided,
    /// Committing, or a record still being settled after a restart: ask again later.
    Pending,
}

/// The shard's migration registry, shared by the service and recovery.
pub struct Migrations {
    pub node: Arc<Node>,
    active: Mutex<Option<Active>>,
    /// Records found at startup and not settled yet: no new migration starts meanwhile.
    recovering: Mutex<usize>,
}

/// Waits until everything this member wrote is majority-committed in its group (bounded by
/// [`crate::repl::wait::MIGRATION_MAJORITY_WAIT`]): migration records and received data count
/// only then, so a failover cannot lose them.
pub async fn majority_committed(node: &Node) -> Result<(), MigrationError> {
    crate::repl::wait::newest_majority_committed(&node.repl, &node.store, crate::repl::wait::MIGRATION_MAJORITY_WAIT)
        .await?;
    Ok(())
}

impl Migrations {
    pub fn new(node: Arc<Node>) -> Self {
        Self { node, active: Mutex::new(None), recovering: Mutex::new(0) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Active>> {
        // A std mutex: held for a few instructions, never across an await.
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn active(&self) -> Option<Active> {
        self.lock().clone()
    }

    /// Claims the slot for `record`. A recipient may take over a slot held by an earlier
    /// attempt from the same donor (the donor restarted and forgot it): that attempt is returned
    /// to be aborted.
    pub fn claim(&self, side: Side, record: &Record) -> Result<Option<Active>, MigrationError> {
        if *self.recovering.lock().unwrap_or_else(|p| p.into_inner()) > 0 {
            return Err(MigrationError::Busy("migrations interrupted by a restart are still being recovered".into()));
        }
        let mut active = self.lock();
        let replaced = match active.as_ref() {
            None => None,
            // The same donor restarted and forgot it, or a donor went silent (its commit or abort
            // notice lost): the earlier attempt is settled by the caller (its range deletion keeps
            // whatever the catalog says this shard owns by then).
            Some(a)
                if side == Side::Recipient
                    && a.side == Side::Recipient
                    && (a.record.from == record.from
                        || a.last_call.elapsed() >= Duration::from_millis(RECEIVE_IDLE_MS_MAX)) =>
            {
                active.take()
            }
            Some(a) => {
                return Err(MigrationError::Busy(format!(
                    "{:?} of {} [{}, {}) ({})",
                    a.side, a.record.ns, a.record.min, a.record.max, a.record.id
                )));
            }
        };
        *active = Some(Active {
            side,
            record: record.clone(),
            last_call: std::time::Instant::now(),
            vetoed: false,
            committing: false,
        });
        Ok(replaced)
    }

    /// The donor's commit point: from here a fate question answers Pending. Fails if a restarted
    /// recipient already vetoed the migration (it may be deleting what it received).
    pub fn begin_commit(&self, id: &str) -> Result<(), MigrationError> {
        let mut active = self.lock();
        match active.as_mut().filter(|a| a.side == Side::Donor && a.record.id == id) {
            Some(a) if a.vetoed => Err(MigrationError::Vetoed { recipient: a.record.to.clone() }),
            Some(a) => {
                a.committing = true;
                Ok(())
            }
            None => Err(MigrationError::NotRunning(id.to_owned())),
        }
    }

    /// Whether donor migration `id` can still commit. A running migration short of its commit
    /// point is vetoed (it will abort), so the answer stays true; one still persisted but not
    /// running (being settled after a restart) is Pending, as is one committing.
    pub fn fate(&self, id: &str, persisted: bool) -> Fate {
        let mut active = self.lock();
        match active.as_mut().filter(|a| a.side == Side::Donor && a.record.id == id) {
            Some(a) if a.committing => Fate::Pending,
            Some(a) => {
                a.vetoed = true;
                Fate::Decided
            }
            None if persisted => Fate::Pending,
            None => Fate::Decided,
        }
    }

    /// Frees the slot if `id` holds it.
    pub fn release(&self, id: &str) {
        let mut active = self.lock();
        if active.as_ref().is_some_and(|a| a.record.id == id) {
            *active = None;
        }
    }

    /// The recipient migration `id`, if this process is running it (and notes the call).
    pub fn receiving(&self, id: &str) -> Option<Record> {
        let mut active = self.lock();
        let a = active.as_mut().filter(|a| a.side == Side::Recipient && a.record.id == id)?;
        a.last_call = std::time::Instant::now();
        Some(a.record.clone())
    }

    fn set_recovering(&self, n: usize) {
        *self.recovering.lock().unwrap_or_else(|p| p.into_inner()) = n;
    }
}

pub fn bound_to_wire(b: &ChunkBound) -> KeyBound {
    match b {
        ChunkBound::Min => KeyBound { kind: 0, key: Default::default() },
        ChunkBound::Key(k) => KeyBound { kind: 1, key: k.clone().into() },
        ChunkBound::Max => KeyBound { kind: 2, key: Default::default() },
    }
}

pub fn bound_from_wire(b: Option<&KeyBound>, what: &str) -> Result<ChunkBound, MigrationError> {
    match b.map(|b| (b.kind, b)) {
        Some((0, _)) => Ok(ChunkBound::Min),
        Some((1, b)) => Ok(ChunkBound::Key(b.key.to_vec())),
        Some((2, _)) => Ok(ChunkBound::Max),
        _ => Err(MigrationError::refused(ErrorCode::BadValue, format!("{what}: missing or unknown chunk bound"))),
    }
}

/// The gRPC address of shard `id` as the catalog has it (`shard`: its primary, else its first
/// member); ShardNotFound if the catalog has no such shard.
pub fn shard_endpoint(shard: Option<&Shard>, id: &str) -> Result<String, MigrationError> {
    let shard =
        shard.ok_or_else(|| MigrationError::refused(ErrorCode::ShardNotFound, format!("Shard {id} not found")))?;
    let addr = shard.endpoint().ok_or_else(|| {
        MigrationError::refused(ErrorCode::ShardNotFound, format!("shard {id} has no member address"))
    })?;
    Ok(shoal_proto::endpoint::uri(addr))
}

/// A client of another shard's migration service (connects lazily; every call has a timeout).
pub fn peer_client(endpoint: &str) -> Result<MigrationClient<Channel>, MigrationError> {
    let endpoint = Channel::from_shared(endpoint.to_owned())
        .map_err(|e| MigrationError::refused(ErrorCode::BadValue, format!("shard address {endpoint}: {e}")))?
        .connect_timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS))
        .timeout(Duration::from_millis(PEER_RPC_TIMEOUT_MS));
    let channel = shoal_cluster::net::channel(&endpoint);
    Ok(MigrationClient::new(channel)
        .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES))
}

/// Doubling backoff for attempt `n` (0-based), capped.
pub fn backoff(n: u32) -> Duration {
    let ms = RETRY_BACKOFF_MIN_MS.saturating_mul(1u64 << n.min(16));
    Duration::from_millis(ms.min(RETRY_BACKOFF_MAX_MS))
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::{ChunkVersion, Epoch};
    use uuid::Uuid;

    use super::record::Phase;
    use super::*;

    fn record(id: &str) -> Record {
        Record {
            id: id.into(),
            ns: "db.c".into(),
            uuid: Uuid::new_v4(),
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

    fn migrations(dir: &std::path::Path) -> Migrations {
        let config = crate::ShardSettings::new("s0", "127.0.0.1:0".parse().unwrap(), dir.to_path_buf());
        Migrations::new(crate::open_node(&config).unwrap())
    }

    #[test]
    fn a_fate_question_before_the_commit_point_vetoes_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let mig = migrations(dir.path());
        mig.claim(Side::Donor, &record("m1")).unwrap();
        assert_eq!(mig.fate("m1", true), Fate::Decided);
        assert!(mig.begin_commit("m1").is_err(), "a vetoed migration must not commit");
    }

    #[test]
    fn a_committing_or_persisted_migration_is_pending_and_an_unknown_one_decided() {
        let dir = tempfile::tempdir().unwrap();
        let mig = migrations(dir.path());
        mig.claim(Side::Donor, &record("m1")).unwrap();
        mig.begin_commit("m1").unwrap();
        assert_eq!(mig.fate("m1", true), Fate::Pending);
        mig.release("m1");
        assert_eq!(mig.fate("m1", true), Fate::Pending, "still persisted: being settled");
        assert_eq!(mig.fate("m1", false), Fate::Decided);
        assert_eq!(mig.fate("other", false), Fate::Decided);
    }
}
