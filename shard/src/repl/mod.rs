//! Replication inside a shard's replica group (docs/architecture.md, "Shard replica groups"): who
//! is primary, the oplog stream from the primary to its secondaries, the majority commit point,
//! and waiting for write concerns.
//!
//! Owns: this member's view of its group ([`Repl`]: term, role, the primary the config service
//! named, peers' progress), the heartbeat to the config service that learns terms and renews the
//! primary's lease ([`heartbeat`]), the primary's side of the oplog stream ([`source`]), the
//! secondary's fetch-and-apply loop ([`fetcher`]) with initial sync ([`initial_sync`]), the
//! commit-point rule ([`progress`]), write-concern waits ([`wait`]) and what read concerns wait
//! for ([`read_concern`]).
//!
//! Must not: decide who is primary (the config service arbitrates; a member only follows the
//! term it learns), accept writes outside its lease (the store's [`Writability`] enforces it),
//! or apply entries from a primary of another term.
//!
//! ```text
//!  config leader <--Heartbeat (term, state, optimes)-- heartbeat loop --> Repl (term, role, lease)
//!                                                                          |
//!  secondary: fetcher --Sync(last optime)--> primary: source --> entries --+--> Store::apply
//!             fetcher --progress (applied, durable)--> source --> progress::commit_point --> waiters
//! ```
//!
//! [`Writability`]: crate::store::Writability

pub mod fetcher;
pub mod heartbeat;
pub mod initial_sync;
pub mod majority_waiters;
pub mod oplog_cap;
pub mod progress;
pub mod read_concern;
pub mod rollback;
pub mod source;
pub mod state;
pub mod step_down;
#[cfg(test)]
mod tests;
pub mod wait;
pub mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::store::Store;
use crate::store::oplog::{INITIAL_TERM, OpTime};
pub use state::{MemberState, PeerProgress};

/// Timings of replication, named so tests and benchmarks can see what they depend on.
#[derive(Debug, Clone)]
pub struct ReplSettings {
    /// How often a member heartbeats to the config leader.
    pub heartbeat_interval: Duration,
    /// One heartbeat call, including finding the leader.
    pub heartbeat_timeout: Duration,
    /// A stream with nothing to send sends an empty batch this often (it carries the commit point
    /// and shows the primary is alive).
    pub keepalive_interval: Duration,
    /// A secondary that heard nothing on its stream for this long reconnects.
    pub stream_idle_timeout: Duration,
    /// Entries per batch sent to a secondary, at most.
    pub batch_entries_max: usize,
    /// Bytes per batch sent to a secondary, at most (one entry may exceed it alone).
    pub batch_bytes_max: usize,
    /// Connecting to a sync source.
    pub connect_timeout: Duration,
    /// Pause between failed attempts to reach a sync source, doubling up to `retry_pause_max`.
    pub retry_pause_min: Duration,
    pub retry_pause_max: Duration,
    /// The oplog is truncated from its oldest end past this size ([`oplog_cap`]).
    pub oplog_size_max_bytes: u64,
}

impl Default for ReplSettings {
    fn default() -> Self {
        Self {
            heartbeat_interval: shoal_proto::heartbeat::INTERVAL_DEFAULT,
            heartbeat_timeout: Duration::from_millis(1000),
            keepalive_interval: Duration::from_millis(500),
            stream_idle_timeout: Duration::from_secs(5),
            batch_entries_max: 2000,
            batch_bytes_max: 4 << 20,
            connect_timeout: Duration::from_secs(2),
            retry_pause_min: Duration::from_millis(50),
            retry_pause_max: Duration::from_secs(1),
            oplog_size_max_bytes: oplog_cap::OPLOG_SIZE_MAX_BYTES_DEFAULT,
        }
    }
}

/// What the fetcher and the stream source follow: the term, this member's role in it, and the
/// primary to sync from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleView {
    pub term: u64,
    pub state: MemberState,
    pub primary: Option<String>,
}

/// This member's replication state. Cheap to clone behind an `Arc`; every method is quick.
pub struct Repl {
    /// The shard (replica group) this member belongs to.
    pub shard: String,
    /// This member's address as the catalog lists it.
    pub me: String,
    pub settings: ReplSettings,
    pub(crate) store: Arc<Store>,
    /// Where rollback saves the versions it replaces.
    pub rollback_dir: PathBuf,
    inner: Mutex<Inner>,
    role: watch::Sender<RoleView>,
    commit_point: watch::Sender<OpTime>,
    /// `w: "majority"` writes, woken by the advance that covers them.
    pub(crate) majority_waiters: Arc<majority_waiters::MajorityWaiters>,
    /// Bumped whenever any member's progress changes (`w: N` waiters recount).
    progress_seq: watch::Sender<u64>,
    /// Held while applying a batch from the primary and while becoming primary: promotion never
    /// interleaves with an old term's batch.
    pub(crate) apply_gate: tokio::sync::Mutex<()>,
    /// Wakes the heartbeat loop before its interval (a step-down to report).
    pub(crate) heartbeat_now: tokio::sync::Notify,
    /// Elections won and step-downs, counted where the role changes.
    pub(crate) counters: crate::metrics::ReplCounters,
}

pub(crate) struct Inner {
    pub term: u64,
    pub state: MemberState,
    pub primary: Option<String>,
    pub members: Vec<String>,
    /// The group configuration version `members` is of (0 until the first heartbeat reply).
    pub config_version: u64,
    /// Secondaries' reports (primary only; cleared on every role change).
    pub peers: HashMap<String, PeerProgress>,
    /// This member's newest durable entry.
    pub durable: OpTime,
    /// The primary's lease; `None` right after a promotion that came without one (it takes no
    /// writes until a heartbeat grants one).
    pub lease_until: Option<Instant>,
    /// replSetStepDown: give the lease up and stay unelectable until then.
    pub resigning: bool,
    pub unelectable_until: Option<Instant>,
    /// Initial sync or rollback progress, for status.
    pub progress: String,
    /// After an initial sync or a rollback: the data is a consistent copy once the member has
    /// applied this far.
    pub min_valid: Option<OpTime>,
    /// The last term this member became primary in (its no-op is written once per promotion).
    pub promoted_term: u64,
    /// When it last became primary: secondaries get one isolation window to connect.
    pub promoted_at: Option<Instant>,
}

impl Repl {
    /// A member of `shard` listed as `me`. Outside any replica group (`standalone`), it is its
    /// own primary forever in [`INITIAL_TERM`]. Its role changes count in `counters`.
    pub fn new(
        shard: String,
        me: String,
        store: Arc<Store>,
        settings: ReplSettings,
        rollback_dir: PathBuf,
        standalone: bool,
        counters: crate::metrics::ReplCounters,
    ) -> Arc<Self> {
        let (term, state) = if standalone {
            (INITIAL_TERM as u64, MemberState::Standalone)
        } else {
            store.set_not_writable();
            (0, MemberState::Startup)
        };
        let primary = standalone.then(|| me.clone());
        let (role, _) = watch::channel(RoleView { term, state, primary: primary.clone() });
        let (commit_point, _) = watch::channel(OpTime::ZERO);
        let (progress_seq, _) = watch::channel(0);
        Arc::new(Self {
            shard,
            me: me.clone(),
            settings,
            store,
            rollback_dir,
            inner: Mutex::new(Inner {
                term,
                state,
                primary,
                members: vec![me],
                config_version: 0,
                peers: HashMap::new(),
                durable: OpTime::ZERO,
                lease_until: None,
                resigning: false,
                unelectable_until: None,
                progress: String::new(),
                min_valid: None,
                promoted_term: 0,
                promoted_at: None,
            }),
            role,
            commit_point,
            majority_waiters: Arc::default(),
            progress_seq,
            apply_gate: tokio::sync::Mutex::new(()),
            heartbeat_now: tokio::sync::Notify::new(),
            counters,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn role(&self) -> RoleView {
        self.role.borrow().clone()
    }

    pub fn subscribe_role(&self) -> watch::Receiver<RoleView> {
        self.role.subscribe()
    }

    pub fn commit_point(&self) -> OpTime {
        *self.commit_point.borrow()
    }

    pub fn subscribe_commit_point(&self) -> watch::Receiver<OpTime> {
        self.commit_point.subscribe()
    }

    pub fn subscribe_progress(&self) -> watch::Receiver<u64> {
        self.progress_seq.subscribe()
    }

    pub fn is_standalone(&self) -> bool {
        self.lock().state == MemberState::Standalone
    }

    /// Publishes the role after `inner` changed it (call with the lock released).
    pub(crate) fn publish_role(&self) {
        let view = {
            let inner = self.lock();
            RoleView { term: inner.term, state: inner.state, primary: inner.primary.clone() }
        };
        self.role.send_if_modified(|current| {
            let changed = *current != view;
            *current = view;
            changed
        });
    }

    /// Sets this member's state (initial sync, rollback, back to secondary) with a progress note.
    pub(crate) fn set_state(&self, state: MemberState, progress: String) {
        {
            let mut inner = self.lock();
            inner.state = state;
            inner.progress = progress;
        }
        self.publish_role();
    }

    /// Sets `state` unless this member is primary or in the middle of a sync or rollback.
    pub(crate) fn set_state_if(&self, state: MemberState, progress: &str) {
        let changed = {
            let mut inner = self.lock();
            let settled = matches!(inner.state, MemberState::Startup | MemberState::Secondary);
            if settled && inner.state != state {
                inner.state = state;
                inner.progress = progress.to_owned();
                true
            } else {
                false
            }
        };
        if changed {
            self.publish_role();
        }
    }

    /// The catalog no longer lists this member: a settled secondary (or a member still starting)
    /// becomes REMOVED, as MongoDB's removed members do.
    pub(crate) fn set_removed(&self) {
        let changed = {
            let mut inner = self.lock();
            let settled = matches!(inner.state, MemberState::Startup | MemberState::Secondary);
            if settled {
                tracing::warn!("this member is not in its shard's configuration any more (removed): REMOVED");
                inner.state = MemberState::Removed;
                inner.progress = "removed from the replica group's configuration".to_owned();
            }
            settled
        };
        if changed {
            self.publish_role();
        }
    }

    /// A primary whose lease lapsed takes no writes and no longer counts as primary: waiters
    /// for replication are told, and it becomes primary again only if the config service still
    /// names it (after writing a fresh no-op).
    /// A primary that has not heard from a majority of its group for an isolation window (twice
    /// the stream idle timeout) steps down and resigns, as a MongoDB primary that cannot see a
    /// majority does: cut off from its secondaries it may still reach the config service and
    /// renew its lease, but no w:majority write can succeed through it. It stays unelectable for
    /// a window, so the arbiter's next term goes to a member the majority can reach.
    pub(crate) fn step_down_if_isolated(&self) {
        let window = self.settings.stream_idle_timeout * 2;
        let now = Instant::now();
        let isolated = {
            let mut inner = self.lock();
            let settled = inner.promoted_at.is_some_and(|t| now.saturating_duration_since(t) >= window);
            let isolated = inner.state == MemberState::Primary
                && settled
                && !progress::sees_majority(&inner.members, &self.me, &inner.peers, now, window);
            if isolated {
                inner.state = MemberState::Secondary;
                inner.peers.clear();
                inner.lease_until = None;
                inner.resigning = true;
                inner.unelectable_until = Some(now + window);
                self.counters.step_downs.inc();
            }
            isolated
        };
        if isolated {
            self.store.set_not_writable();
            tracing::warn!(
                term = self.role().term,
                window_ms = window.as_millis() as u64,
                "stepping down: no report from a majority of the group within the window"
            );
            self.publish_role();
            self.heartbeat_now.notify_one();
        }
    }

    /// A primary whose lease lapsed stops taking writes at once (the store's lease bounds them)
    /// but steps down only if no renewal came within [`Repl::lease_grace`]: a heartbeat answered
    /// late (a busy machine, a config leader change) renews the lease in the same term and writes
    /// resume, without a step-down, a new no-op or failed waiters (grey-failures issue, item 3).
    pub(crate) fn step_down_if_lease_lapsed(&self) {
        let grace = self.lease_grace();
        let lapsed = {
            let mut inner = self.lock();
            let lapsed = inner.state == MemberState::Primary
                && inner.lease_until.is_some_and(|t| lease_over(t, Instant::now(), grace));
            if lapsed {
                inner.state = MemberState::Secondary;
                inner.peers.clear();
                inner.lease_until = None;
                inner.resigning = false;
                self.counters.step_downs.inc();
            }
            lapsed
        };
        if lapsed {
            self.store.set_not_writable();
            tracing::warn!(
                term = self.role().term,
                grace_ms = grace.as_millis() as u64,
                "stepping down: the primary lease lapsed and was not renewed within the grace period"
            );
            self.publish_role();
        }
    }

    /// How long a primary with a lapsed lease waits for its renewal before stepping down: one
    /// heartbeat's timeout. Its writes are refused meanwhile; reads may be as stale as a MongoDB
    /// primary's before it learns of an election (the config service can name another primary
    /// once its own record of the lease expires, which is no earlier than this member's).
    fn lease_grace(&self) -> Duration {
        self.settings.heartbeat_timeout
    }

    pub(crate) fn set_progress(&self, progress: String) {
        self.lock().progress = progress;
    }

    /// A batch from the primary was applied up to `optime`: ends an initial sync or rollback
    /// once past its `min_valid`, and wakes the progress reporter.
    pub(crate) fn applied(&self, optime: OpTime) {
        let finished = {
            let mut inner = self.lock();
            match inner.min_valid {
                Some(m) if optime >= m => {
                    inner.min_valid = None;
                    inner.progress.clear();
                    if matches!(inner.state, MemberState::Startup2 | MemberState::Rollback) {
                        inner.state = MemberState::Secondary;
                    }
                    true
                }
                _ => false,
            }
        };
        if finished {
            tracing::info!(%optime, "caught up: the data is a consistent copy again");
            let store = Arc::clone(&self.store);
            tokio::task::spawn_blocking(move || {
                if let Err(e) = initial_sync::finish(&store) {
                    tracing::error!(error = %e, "clearing the initial-sync mark failed");
                }
            });
            self.publish_role();
        }
        self.progress_seq.send_modify(|n| *n += 1);
    }

    /// Moves the commit point forward (never back).
    pub(crate) fn advance_commit_point(&self, to: OpTime) {
        let advanced = self.commit_point.send_if_modified(|current| {
            if to > *current {
                *current = to;
                true
            } else {
                false
            }
        });
        if advanced {
            self.majority_waiters.release_upto(to);
        }
    }

    /// This member's newest durable entry changed.
    pub(crate) fn set_durable(&self, optime: OpTime) {
        {
            let mut inner = self.lock();
            if optime <= inner.durable {
                return;
            }
            inner.durable = optime;
        }
        self.recompute();
    }

    /// A secondary's report (primary only).
    pub(crate) fn record_progress(&self, member: &str, applied: OpTime, durable: OpTime) {
        {
            let mut inner = self.lock();
            if !inner.members.iter().any(|m| m == member) {
                return;
            }
            let entry = inner.peers.entry(member.to_owned()).or_default();
            entry.applied = entry.applied.max(applied);
            entry.durable = entry.durable.max(durable);
            entry.seen = Some(Instant::now());
        }
        self.recompute();
    }

    /// Recomputes the commit point (primary or standalone) and wakes `w: N` waiters.
    pub(crate) fn recompute(&self) {
        let point = {
            let inner = self.lock();
            match inner.state {
                MemberState::Primary | MemberState::Standalone => {
                    progress::commit_point(&inner.members, &self.me, inner.durable, &inner.peers, inner.term as i64)
                }
                _ => None,
            }
        };
        if let Some(p) = point {
            self.advance_commit_point(p);
        }
        self.progress_seq.send_modify(|n| *n += 1);
    }

    /// How many members (this one included) have written (`durable`: have on disk) `optime`.
    pub fn members_at(&self, optime: OpTime, durable: bool) -> usize {
        let inner = self.lock();
        let own = if durable { inner.durable } else { self.store.position().optime.max(inner.durable) };
        let peers = inner
            .members
            .iter()
            .filter(|m| **m != self.me)
            .filter_map(|m| inner.peers.get(m))
            .filter(|p| if durable { p.durable >= optime } else { p.applied >= optime })
            .count();
        peers + usize::from(own >= optime)
    }

    /// Whether some secondary has applied `optime` (a step-down's successor exists).
    pub fn secondary_caught_up(&self, optime: OpTime) -> bool {
        let inner = self.lock();
        inner.members.iter().filter(|m| **m != self.me).filter_map(|m| inner.peers.get(m)).any(|p| p.applied >= optime)
    }

    pub fn member_count(&self) -> usize {
        self.lock().members.len()
    }

    /// On a primary: each other member's newest applied entry as it last reported (members that
    /// have reported nothing, or nothing applied, are left out). Empty on any other member.
    pub fn members_applied(&self) -> Vec<(String, OpTime)> {
        let inner = self.lock();
        if inner.state != MemberState::Primary {
            return Vec::new();
        }
        inner
            .members
            .iter()
            .filter(|m| **m != self.me)
            .filter_map(|m| inner.peers.get(m).filter(|p| !p.applied.is_zero()).map(|p| (m.clone(), p.applied)))
            .collect()
    }

    /// `{term, state, primary, members}` for `replSetGetStatus`-style output on this member.
    pub fn status(&self) -> bson::Document {
        let inner = self.lock();
        let position = self.store.position().optime;
        bson::doc! {
            "set": &self.shard,
            "me": &self.me,
            "term": inner.term as i64,
            "state": inner.state.code(),
            "stateStr": inner.state.name(),
            "primary": inner.primary.clone().unwrap_or_default(),
            "optime": optime_doc(position),
            "durableOpTime": optime_doc(inner.durable),
            "commitPoint": optime_doc(self.commit_point()),
            "progress": &inner.progress,
            "oplog": self.oplog_status(),
        }
    }

    /// The oplog's extent and size (MongoDB's `rs.printReplicationInfo()` figures).
    fn oplog_status(&self) -> bson::Document {
        let first = self.store.oplog_first().ok().flatten().unwrap_or(bson::Timestamp { time: 0, increment: 0 });
        let last = self.store.oplog_last().unwrap_or(bson::Timestamp { time: 0, increment: 0 });
        bson::doc! {
            "firstTs": first,
            "lastTs": last,
            "sizeBytes": self.store.oplog_size_bytes() as i64,
            "maxSizeBytes": self.settings.oplog_size_max_bytes as i64,
        }
    }
}

pub fn optime_doc(o: OpTime) -> bson::Document {
    bson::doc! { "ts": o.timestamp(), "t": o.term }
}

/// Tracks this member's newest durable entry: after each commit, waits for the journal sync that
/// covers it (group commit shares syncs with writers that wait anyway).
pub async fn track_durability(repl: Arc<Repl>) {
    let mut rx = repl.store.subscribe();
    loop {
        let position = *rx.borrow_and_update();
        match repl.store.wait_durable(position.seq).await {
            Ok(()) => repl.set_durable(position.optime),
            Err(e) => {
                tracing::error!(error = %e, "journal sync failed; durable optime frozen");
                return;
            }
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Whether a lease that ran `until` is over for good at `now`: lapsed and not renewed within
/// `grace`.
fn lease_over(until: Instant, now: Instant, grace: Duration) -> bool {
    until + grace <= now
}
