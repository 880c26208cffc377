//! The catalog's records of what happened and who holds what: changelog and action-log entries
//! (`config.changelog`, `config.actionlog`), the balancer's round count, leases with their
//! fencing tokens (`config.locks`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::types::{ChunkBound, ChunkVersion};

/// The lease the balancer holds.
pub const BALANCER_LEASE: &str = "balancer";
/// A value in an entry's details; a closed set so entries round-trip through any serde format.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    Str(String),
    Int(i64),
    Bool(bool),
    Bound(ChunkBound),
    Version(ChunkVersion),
    List(Vec<Detail>),
}

impl From<&str> for Detail {
    fn from(s: &str) -> Self {
        Detail::Str(s.to_owned())
    }
}

impl From<String> for Detail {
    fn from(s: String) -> Self {
        Detail::Str(s)
    }
}

impl From<ChunkBound> for Detail {
    fn from(b: ChunkBound) -> Self {
        Detail::Bound(b)
    }
}

impl From<ChunkVersion> for Detail {
    fn from(v: ChunkVersion) -> Self {
        Detail::Version(v)
    }
}

impl From<bool> for Detail {
    fn from(b: bool) -> Self {
        Detail::Bool(b)
    }
}

impl From<u64> for Detail {
    fn from(n: u64) -> Self {
        Detail::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ChangelogEntry {
    pub seq: u64,
    /// The catalog version this change produced.
    pub catalog_version: u64,
    pub time_ms: u64,
    /// MongoDB's names where one exists: "split", "multi-split", "merge", "moveChunk.commit",
    /// "addShard", "shardCollection", "dropCollection", ...
    pub what: String,
    /// The namespace, database or shard the change concerns ("" for cluster-wide changes).
    pub ns: String,
    pub details: BTreeMap<String, Detail>,
}

/// What the balancer last reported about its rounds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct BalancerRounds {
    /// Rounds completed since the cluster began (`numBalancerRounds`).
    pub completed: u64,
    /// Whether the reporter was inside a round at its last report; only meaningful while the
    /// balancer lease is live (a holder that died mid-round never clears it).
    pub in_round: bool,
    /// Catalog time of the last report (ms).
    pub reported_at_ms: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub holder: String,
    pub expires_at_ms: u64,
    pub token: u64,
    /// When this token was granted (catalog clock); renewals keep it. Absent in catalogs written
    /// before it existed, hence the default.
    #[serde(default)]
    pub acquired_at_ms: u64,
}

impl Lease {
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }
}

/// Proof that the command's issuer holds a lease: its name and the token it was granted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Fencing {
    pub lease: String,
    pub token: u64,
}
