//! The replication layer of the config service: openraft 0.10 with a fjall-backed log store and
//! a catalog state machine, talking to peers over gRPC.
//!
//! ```text
//!   service.rs --client_write / ensure_linearizable--> openraft::Raft (TypeConfig, types.rs)
//!                                                          |            |             |
//!                               log_store.rs (fjall "log"/"meta")  state_machine.rs   network.rs --gRPC-->
//!                                         \                        (ClusterCatalog in memory, peer's rpc.rs
//!                                          +-- store.rs: RaftDb     snapshots in fjall)
//!                                              (one journal, group fsync thread)
//! ```
//!
//! Invariants: an acknowledged write is in a majority's logs (openraft); a node's log, vote and
//! snapshot live in one fjall journal, so a sync orders them; the state machine is rebuilt on
//! restart from the last snapshot plus the log up to the saved `committed` id.

pub use crate::catalog::api as catalog_api;
pub mod log_store;
pub mod network;
pub mod rpc;
pub mod state_machine;
pub mod store;
pub mod types;

use openraft::SnapshotPolicy;

/// Raft timing and log-compaction settings, with units in the names.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many entries since the last one.
    pub snapshot_logs_since_last: u64,
    /// Entries already in a snapshot kept in the log (so a slightly lagging follower catches up
    /// from the log, not by snapshot).
    pub snapshot_logs_to_keep: u64,
    /// Entries per AppendEntries message.
    pub append_entries_max: u64,
}

impl Default for RaftSettings {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1000,
            snapshot_logs_since_last: 5000,
            snapshot_logs_to_keep: 1000,
            append_entries_max: 512,
        }
    }
}

impl RaftSettings {
    /// The validated openraft configuration.
    pub fn openraft_config(&self) -> Result<openraft::Config, String> {
        let config = openraft::Config {
            cluster_name: "shoal-config".to_owned(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_logs_since_last),
            max_in_snapshot_log_to_keep: self.snapshot_logs_to_keep,
            max_payload_entries: self.append_entries_max,
            // Purge in batches rather than after every applied entry.
            purge_batch_size: 64,
            // A node that was partitioned or restarted must not bump its term and depose a
            // healthy leader when it comes back; we implement the pre-vote RPC.
            enable_pre_vote: Some(true),
            ..Default::default()
        };
        config.validate().map_err(|e| e.to_string())
    }
}
