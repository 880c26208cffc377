//! The openraft type configuration of the config service, and what one log entry carries.
//!
//! A log entry's payload is a [`RaftRequest`]: a catalog [`Command`] stamped with the proposing
//! leader's wall clock, so every replica applies it with the same `now_ms` (lease expiry must not
//! depend on when a follower happens to apply). Applying it yields a [`RaftReply`].

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::catalog::{CatalogError, ClusterCatalog, Command, Reply};

openraft::declare_raft_types!(
    /// Types of the config service's Raft group: `u64` node ids, nodes addressed by `host:port`.
    pub TypeConfig:
        D = RaftRequest,
        R = RaftReply,
        NodeId = u64,
        Node = openraft::BasicNode,
);

pub type NodeId = crate::NodeId;
pub type Node = openraft::BasicNode;
pub type Raft = openraft::Raft<TypeConfig, super::state_machine::StateMachineStore>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, bytes::Bytes>;
pub type Membership = openraft::Membership<NodeId, Node>;

/// One catalog command as it sits in the Raft log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RaftRequest {
    /// Wall clock of the config server that proposed it, in ms since the Unix epoch.
    pub issued_at_ms: u64,
    pub command: Command,
}

impl fmt::Display for RaftRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @{}ms", self.command, self.issued_at_ms)
    }
}

/// What applying a log entry produced: the catalog's answer to a command (a refusal is an answer,
/// not a replication failure; `None` for blank and membership entries) and the catalog version
/// after it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RaftReply {
    pub catalog_version: u64,
    pub outcome: Option<Result<Reply, CatalogError>>,
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
