//! The config server's Prometheus metrics (the `shoal_` prefix is the registry's): which exist,
//! what each measures and where its value comes from.
//!
//! - Raft (`raft_*` gauges): read when scraped from openraft's metrics watch ([`Raft::metrics`]):
//!   term, leader, log positions, membership and, on the leader, each follower's lag and
//!   heartbeat age.
//! - Leader changes (`raft_leader_changes_total`): counted by a task following that watch
//!   ([`count_leader_changes`]).
//! - Catalog sizes (`catalog_*`): read when scraped from the applied catalog ([`CatalogState`]).
//! - The client API (`command_duration_seconds`, `command_errors_total`, `watch_streams_open`)
//!   and the peers' Raft RPCs (`raft_rpc_*`): counted by their handlers through the handles of
//!   [`ApiMetrics`] and [`PeerRpcMetrics`], resolved here when the server starts.
//!
//! Must not: block the runtime in a scrape (a scrape only borrows the watch, or *tries* the
//! catalog's lock and repeats its previous value while an apply holds it), keep the catalog alive
//! (scrapes hold a weak reference), register or look up a handle by name per request (the error
//! counter by code name is the one lookup, on the error path only), or change any state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use openraft::async_runtime::WatchReceiver;
use openraft::{Instant, ServerState};
use shoal_telemetry::{Error, GaugeVec, Histogram, IntCounter, IntCounterVec, IntGauge, Metrics};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::raft::state_machine::{Applied, CatalogState};
use crate::raft::types::{LogId, NodeId, Raft, TypeConfig};

type RaftMetrics = openraft::RaftMetrics<TypeConfig>;

/// The `Config` service's unary methods, named in the `command` label as `config.proto` names
/// them. `Watch` is a stream that lasts as long as its client: it is counted open
/// (`watch_streams_open`), not timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiMethod {
    Write,
    Query,
    AddLearner,
    ChangeMembership,
    Metrics,
    Heartbeat,
    GroupStatus,
}

impl ApiMethod {
    pub const ALL: [ApiMethod; 7] = [
        ApiMethod::Write,
        ApiMethod::Query,
        ApiMethod::AddLearner,
        ApiMethod::ChangeMembership,
        ApiMethod::Metrics,
        ApiMethod::Heartbeat,
        ApiMethod::GroupStatus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ApiMethod::Write => "Write",
            ApiMethod::Query => "Query",
            ApiMethod::AddLearner => "AddLearner",
            ApiMethod::ChangeMembership => "ChangeMembership",
            ApiMethod::Metrics => "Metrics",
            ApiMethod::Heartbeat => "Heartbeat",
            ApiMethod::GroupStatus => "GroupStatus",
        }
    }
}

/// The client API's latency per method, its errors by code and its open watch streams.
pub struct ApiMetrics {
    latency: [Histogram; ApiMethod::ALL.len()],
    errors: IntCounterVec,
    watch_streams: IntGauge,
}

impl ApiMetrics {
    pub fn new(metrics: &Metrics) -> Result<Self, Error> {
        let latency = metrics.latency_vec(
            "command_duration_seconds",
            "Config service (gRPC Config) requests by method: time from received to answered, including a \
             forward to the leader and the wait for a quorum",
            &["command"],
        )?;
        Ok(Self {
            latency: ApiMethod::ALL.map(|m| latency.with_label_values(&[m.name()])),
            errors: metrics.counter_vec(
                "command_errors_total",
                "Config service requests answered with an error, by its code name (NotWritablePrimary: a follower \
                 that could not forward; ExceededTimeLimit: no quorum in time)",
                &["code_name"],
            )?,
            watch_streams: metrics
                .gauge("watch_streams_open", "Catalog version watch streams (gRPC Config.Watch) open now")?,
        })
    }

    /// The latency histogram of `method`; `start_timer()` on it observes when the timer drops.
    pub fn latency(&self, method: ApiMethod) -> &Histogram {
        &self.latency[method as usize]
    }

    /// One request answered with the error whose code is named `code_name`.
    pub fn failed(&self, code_name: &str) {
        self.errors.with_label_values(&[code_name]).inc();
    }

    /// Counts a watch stream open until the guard drops (with the stream).
    pub fn watch_opened(&self) -> shoal_telemetry::commands::Open {
        shoal_telemetry::commands::Open::new(&self.watch_streams)
    }
}

/// The `ConfigRaft` service's methods (what peers send this server), named as `config.proto`
/// names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRpc {
    AppendEntries,
    Vote,
    PreVote,
    InstallSnapshot,
    TransferLeader,
}

impl PeerRpc {
    pub const ALL: [PeerRpc; 5] =
        [PeerRpc::AppendEntries, PeerRpc::Vote, PeerRpc::PreVote, PeerRpc::InstallSnapshot, PeerRpc::TransferLeader];

    pub fn name(self) -> &'static str {
        match self {
            PeerRpc::AppendEntries => "AppendEntries",
            PeerRpc::Vote => "Vote",
            PeerRpc::PreVote => "PreVote",
            PeerRpc::InstallSnapshot => "InstallSnapshot",
            PeerRpc::TransferLeader => "TransferLeader",
        }
    }
}

/// Latency and failures of the Raft RPCs this server receives.
pub struct PeerRpcMetrics {
    latency: [Histogram; PeerRpc::ALL.len()],
    failures: [IntCounter; PeerRpc::ALL.len()],
}

impl PeerRpcMetrics {
    pub fn new(metrics: &Metrics) -> Result<Self, Error> {
        let latency = metrics.latency_vec(
            "raft_rpc_duration_seconds",
            "Raft RPCs received from peer config servers (gRPC ConfigRaft), by method: time from received to \
             answered (InstallSnapshot: from the stream's start to the snapshot installed)",
            &["rpc"],
        )?;
        let failures = metrics.counter_vec(
            "raft_rpc_failures_total",
            "Raft RPCs received from peers answered with a gRPC error (undecodable, Raft stopped, snapshot too \
             large or too slow), by method",
            &["rpc"],
        )?;
        Ok(Self {
            latency: PeerRpc::ALL.map(|r| latency.with_label_values(&[r.name()])),
            failures: PeerRpc::ALL.map(|r| failures.with_label_values(&[r.name()])),
        })
    }

    /// Times `call` as `rpc` and counts it failed if it returns an error.
    pub async fn observe<T, E>(&self, rpc: PeerRpc, call: impl Future<Output = Result<T, E>>) -> Result<T, E> {
        let _timer = self.latency[rpc as usize].start_timer();
        let result = call.await;
        if result.is_err() {
            self.failures[rpc as usize].inc();
        }
        result
    }
}

/// Registers the gauges read from `raft`'s metrics watch when scraped.
pub fn register_raft(metrics: &Metrics, raft: &Raft) -> Result<(), Error> {
    // Each scrape borrows the watch (a read lock openraft's core takes only to publish) for one
    // field; nothing awaits.
    let read = |f: fn(&RaftMetrics) -> f64| {
        let rx = raft.metrics();
        move || f(&rx.borrow_watched())
    };
    let fill = |f: fn(&RaftMetrics, &GaugeVec)| {
        let rx = raft.metrics();
        move |gauges: &GaugeVec| f(&rx.borrow_watched(), gauges)
    };
    metrics.pulled("raft_term", "This config server's current Raft term", read(|m| m.current_term as f64))?;
    metrics.pulled(
        "raft_leader",
        "1 if this config server is the Raft leader of the config group, else 0",
        read(|m| f64::from(u8::from(is_leader(m)))),
    )?;
    metrics.pulled(
        "raft_leader_id",
        "The Raft node id of the leader this config server knows (0: none known)",
        read(|m| m.current_leader.unwrap_or(0) as f64),
    )?;
    metrics.pulled_vec(
        "raft_server_state",
        "1 for this config server's Raft role now (Learner, Follower, Candidate, Leader, Shutdown), 0 for the others",
        &["state"],
        fill(|m, g| {
            for state in [
                ServerState::Learner,
                ServerState::Follower,
                ServerState::Candidate,
                ServerState::Leader,
                ServerState::Shutdown,
            ] {
                g.with_label_values(&[&format!("{state:?}")]).set(f64::from(u8::from(m.state == state)));
            }
        }),
    )?;
    metrics.pulled(
        "raft_last_log_index",
        "Index of the last entry in this config server's Raft log (0: empty log)",
        read(|m| m.last_log_index.unwrap_or(0) as f64),
    )?;
    metrics.pulled(
        "raft_committed_index",
        "Index of the last Raft log entry this config server knows a quorum has committed",
        read(|m| index(m.local_committed.as_ref())),
    )?;
    metrics.pulled(
        "raft_applied_index",
        "Index of the last Raft log entry applied to this config server's catalog",
        read(|m| index(m.last_applied.as_ref())),
    )?;
    metrics.pulled(
        "raft_snapshot_index",
        "Index of the last Raft log entry in this config server's latest catalog snapshot (0: none)",
        read(|m| index(m.snapshot.as_ref())),
    )?;
    metrics.pulled(
        "raft_purged_index",
        "Index of the last Raft log entry purged from this config server's log (behind the snapshot)",
        read(|m| index(m.purged.as_ref())),
    )?;
    metrics.pulled(
        "raft_membership_voters",
        "Voters in the config group's membership as this config server knows it",
        read(|m| m.membership_config.membership().voter_ids().count() as f64),
    )?;
    metrics.pulled(
        "raft_membership_learners",
        "Learners (non-voting members) in the config group's membership as this config server knows it",
        read(|m| m.membership_config.membership().learner_ids().count() as f64),
    )?;
    metrics.pulled(
        "raft_membership_change_pending",
        "1 while the config group's latest membership entry is not yet committed (a change in progress), else 0",
        read(|m| f64::from(u8::from(m.membership_config.log_id() != m.committed_membership_config.log_id()))),
    )?;
    metrics.pulled_vec(
        "raft_quorum_ack_age_seconds",
        "On the leader: seconds since a quorum last acknowledged its leadership, 0 when it is the only voter \
         (absent on other members)",
        &[],
        fill(|m, g| {
            if !is_leader(m) {
                return;
            }
            let mut voters = m.membership_config.membership().voter_ids();
            // openraft records acks from followers only: a lone voter's stamp is its election.
            let alone = voters.next() == Some(m.id) && voters.next().is_none();
            let age = match &m.last_quorum_acked {
                _ if alone => Some(0.0),
                Some(acked) => Some(acked.elapsed().as_secs_f64()),
                None => None,
            };
            if let Some(age) = age {
                g.with_label_values(&[] as &[&str]).set(age);
            }
        }),
    )?;
    metrics.pulled_vec(
        "raft_replication_lag_entries",
        "On the leader, per follower or learner node id: the leader's last log index minus the index the node \
         is known to hold (absent on other members)",
        &["node"],
        fill(|m, g| {
            for (node, lag) in replication_lag(m) {
                g.with_label_values(&[&node.to_string()]).set(lag as f64);
            }
        }),
    )?;
    metrics.pulled_vec(
        "raft_heartbeat_age_seconds",
        "On the leader, per follower or learner node id: seconds since the node last acknowledged a heartbeat \
         or an append (absent on other members and for a node that never answered)",
        &["node"],
        fill(|m, g| {
            if !is_leader(m) {
                return;
            }
            for (node, acked) in m.heartbeat.iter().flatten() {
                if let Some(acked) = acked
                    && *node != m.id
                {
                    g.with_label_values(&[&node.to_string()]).set(acked.elapsed().as_secs_f64());
                }
            }
        }),
    )?;
    Ok(())
}

fn is_leader(m: &RaftMetrics) -> bool {
    m.state.is_leader() && m.current_leader == Some(m.id)
}

fn index(id: Option<&LogId>) -> f64 {
    id.map_or(0, |id| id.index()) as f64
}

/// On the leader, each other member's distance behind its last log index: a member whose match
/// is unknown yet counts as holding nothing.
fn replication_lag(m: &RaftMetrics) -> Vec<(NodeId, u64)> {
    if !is_leader(m) {
        return Vec::new();
    }
    let last = m.last_log_index.unwrap_or(0);
    m.replication
        .iter()
        .flatten()
        .filter(|(node, _)| **node != m.id)
        .map(|(node, matched)| (*node, last.saturating_sub(matched.as_ref().map_or(0, |id| id.index()))))
        .collect()
}

/// Registers the catalog's sizes, read from the applied catalog when scraped.
pub fn register_catalog(metrics: &Metrics, state: &Arc<CatalogState>) -> Result<(), Error> {
    let read = |f: fn(&Applied) -> usize| {
        let weak: Weak<CatalogState> = Arc::downgrade(state);
        // The last value read, repeated while an apply holds the lock (a scrape never waits).
        let last = AtomicU64::new(0);
        move || {
            if let Some(state) = weak.upgrade()
                && let Some(applied) = state.try_read()
            {
                last.store(f(&applied) as u64, Ordering::Relaxed);
            }
            last.load(Ordering::Relaxed) as f64
        }
    };
    let weak = Arc::downgrade(state);
    metrics.pulled(
        "catalog_version",
        "The applied catalog's version (grows by one per effective change)",
        move || weak.upgrade().map_or(0.0, |s| s.mark().catalog_version as f64),
    )?;
    metrics.pulled("catalog_shards", "Shards in the applied catalog", read(|a| a.catalog.shards().len()))?;
    metrics.pulled("catalog_databases", "Databases in the applied catalog", read(|a| a.catalog.databases().len()))?;
    metrics.pulled(
        "catalog_collections",
        "Sharded collections in the applied catalog",
        read(|a| a.catalog.collections().len()),
    )?;
    // One length per collection, not a walk of the chunks.
    metrics.pulled(
        "catalog_chunks",
        "Chunks of all sharded collections in the applied catalog",
        read(|a| a.catalog.collections().values().map(|c| c.chunks.len()).sum()),
    )?;
    Ok(())
}

/// The counter of leader changes; [`count_leader_changes`] increments it.
pub fn leader_changes(metrics: &Metrics) -> Result<IntCounter, Error> {
    metrics.counter(
        "raft_leader_changes_total",
        "Leaderships this config server has seen begin (a leader known in a term it was not known in before; \
         the first one it learns after starting counts)",
    )
}

/// Follows `raft`'s metrics and increments `counter` whenever a (term, leader) pair not seen
/// last appears. Changes the watch coalesces (a leadership shorter than one publication) are not
/// seen. Ends when `stop` flips to `true` or Raft's metrics channel closes.
pub fn count_leader_changes(raft: &Raft, counter: IntCounter, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let mut rx = raft.metrics();
    tokio::spawn(async move {
        let mut seen: Option<(u64, NodeId)> = None;
        loop {
            let now = {
                let m = rx.borrow_watched();
                m.current_leader.map(|leader| (m.current_term, leader))
            };
            if now.is_some() && now != seen {
                counter.inc();
                seen = now;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { break },
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
    })
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
