//! The catalog's write commands: the client API's requests (`config.proto`'s `WriteRequest`
//! carries one in [`super::wire`]'s encoding) and the only way the catalog changes. The config
//! service applies them; its Raft log stores them in its own encoding.
//!
//! A command carries everything its effect depends on except the log entry's time: UUIDs, epochs
//! and primary shards are chosen by the caller before proposing, so replaying the Raft log
//! reproduces the same catalog on every replica. Commands that change chunks name the versions
//! the caller read (compare-and-set); those a balancer issues may also carry a lease fencing token.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use std::collections::BTreeMap;

use super::log::{Detail, Fencing};
use super::security::SecurityCommand;
use super::settings::{ActiveWindow, BalancerMode};
use super::types::{ChunkBound, ChunkVersion, Epoch, KeyPattern, ShardId};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Command {
    /// Registers a replica group as a shard. Repeating it with the same members is a no-op.
    AddShard {
        shard: ShardId,
        replica_set: String,
        members: Vec<String>,
    },
    /// MongoDB's `removeShard` state machine: the first call starts draining; later calls report
    /// what is left, and complete the removal once the shard owns no chunk and no database.
    RemoveShard {
        shard: ShardId,
    },
    AddShardToZone {
        shard: ShardId,
        zone: String,
    },
    RemoveShardFromZone {
        shard: ShardId,
        zone: String,
    },
    /// Assigns `[min, max)` of `ns` to `zone`, or (`zone: None`) removes exactly that range.
    UpdateZoneKeyRange {
        ns: String,
        min: ChunkBound,
        max: ChunkBound,
        zone: Option<String>,
    },
    /// Compare-and-set on a replica group's term (failover arbitration, docs/architecture.md
    /// "Replica-group arbitration"). A new term may name a primary or leave it open; the same term
    /// may only fill in a missing primary.
    SetReplicaGroupTerm {
        shard: ShardId,
        expected_term: u64,
        new_term: u64,
        primary: Option<String>,
    },
    /// `replSetReconfig {shard}`: one member added (as pending, until the arbiter finds it caught
    /// up) or one voting member removed, never the primary. `expected_version` is the
    /// configuration version the change was computed from (compare-and-set).
    ReconfigReplicaGroup {
        shard: ShardId,
        expected_version: u64,
        change: MemberChange,
    },
    /// The arbiter's move of a caught-up pending member into the voting members.
    PromoteMember {
        shard: ShardId,
        member: String,
    },
    /// Creates a database on the primary shard the caller chose. Repeating it is a no-op.
    CreateDatabase {
        name: String,
        primary: ShardId,
        uuid: Uuid,
    },
    DropDatabase {
        name: String,
    },
    /// Changes a database's primary shard (catalog side of `movePrimary`; moving the data is the
    /// caller's job). Bumps the database version's `last_mod`.
    MovePrimary {
        name: String,
        to: ShardId,
    },
    /// Shards a collection of an existing database. Repeating it with the same key and uniqueness
    /// is a no-op answering the existing UUID and version (whatever `uuid`, `epoch` and
    /// `initial` the repeat carries); another key is refused.
    ShardCollection {
        ns: String,
        uuid: Uuid,
        epoch: Epoch,
        key: KeyPattern,
        unique: bool,
        initial: InitialChunks,
    },
    DropCollection {
        ns: String,
    },
    /// `refineCollectionShardKey`: extends the key of `ns` (sharded at `epoch`) with suffix fields.
    /// Every interior chunk and zone bound gets `bound_suffix` appended: the key encoding of MinKey
    /// for each new field, computed by the caller as all key bytes are (the catalog never encodes
    /// keys). The collection takes `new_epoch` and a new timestamp, so every router and shard
    /// reloads it, and no chunk stays jumbo. Repeating it with the key already in place is a no-op.
    RefineShardKey {
        ns: String,
        epoch: Epoch,
        new_epoch: Epoch,
        key: KeyPattern,
        bound_suffix: Vec<u8>,
    },
    /// `configureCollectionBalancing` / `sh.disableBalancing` / `sh.disableAutoMerger`:
    /// `chunk_size_mib: Some(0)` unsets; `None` leaves a setting as it is.
    ConfigureCollection {
        ns: String,
        no_balance: Option<bool>,
        chunk_size_mib: Option<u32>,
        #[serde(default)]
        enable_auto_merge: Option<bool>,
    },
    /// Splits the chunk starting at `min` at the given interior points (sorted, distinct).
    SplitChunk {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        expected_version: ChunkVersion,
        split_points: Vec<Vec<u8>>,
        fencing: Option<Fencing>,
    },
    /// Merges the contiguous chunks exactly covering `[min, max)`, all on one shard;
    /// `expected_versions` lists their versions in key order.
    MergeChunks {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        max: ChunkBound,
        expected_versions: Vec<ChunkVersion>,
        fencing: Option<Fencing>,
    },
    /// Commits a finished migration of chunk `[min, max)` from `from` to `to`.
    CommitMigration {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        max: ChunkBound,
        from: ShardId,
        to: ShardId,
        expected_version: ChunkVersion,
        fencing: Option<Fencing>,
    },
    SetChunkJumbo {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        expected_version: ChunkVersion,
        jumbo: bool,
        fencing: Option<Fencing>,
    },
    SetSettings(SettingsUpdate),
    /// Gives the cluster its identity (`config.version.clusterId`); later calls change nothing.
    InitCluster {
        cluster_id: Epoch,
    },
    /// Grants the lease if it is free, expired, or already held by `holder` (then it is renewed).
    AcquireLease {
        name: String,
        holder: String,
        ttl_ms: u64,
    },
    RenewLease {
        name: String,
        holder: String,
        token: u64,
        ttl_ms: u64,
    },
    ReleaseLease {
        name: String,
        holder: String,
        token: u64,
    },
    /// Records an event a shard observed (a migration's phases: `moveChunk.start`, `.from`, `.to`,
    /// `.error`) in the changelog, which stays bounded as every entry does.
    LogChange {
        what: String,
        ns: String,
        details: BTreeMap<String, Detail>,
    },
    /// Records a balancer round or decision in `config.actionlog` (MongoDB's `what`:
    /// `balancer.round`, `balancer.move`, ...), bounded and validated as `LogChange` is.
    LogAction {
        what: String,
        ns: String,
        details: BTreeMap<String, Detail>,
    },
    /// The balancer lease holder's report: `completed` rounds since its last report are added to
    /// the cluster's round count; `in_round` says whether one is running now. Not logged.
    ReportBalancerRounds {
        completed: u64,
        in_round: bool,
    },
    /// A change to users or roles (never logged in the changelog: it carries credentials).
    Security(SecurityCommand),
}

/// One change of a replica group's membership.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    Add(String),
    Remove(String),
}

/// A partial change of the settings: `None` fields keep their value, so two admins changing
/// different settings do not overwrite each other.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SettingsUpdate {
    pub balancer_mode: Option<BalancerMode>,
    pub active_window: Option<WindowChange>,
    pub chunk_size_mib: Option<u32>,
    pub autosplit: Option<bool>,
    pub automerge: Option<bool>,
}

/// An explicit enum instead of `Option<Option<_>>`, which JSON cannot tell apart from `None`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum WindowChange {
    Clear,
    Set(ActiveWindow),
}

/// How a newly sharded collection's key space is first divided.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum InitialChunks {
    /// One chunk `[Min, Max)` on the database's primary shard.
    Single,
    /// Chunks cut at `split_points` (sorted, distinct), dealt round-robin over `shards` in key
    /// order: hashed pre-splitting.
    Distributed { split_points: Vec<Vec<u8>>, shards: Vec<ShardId> },
}

impl Command {
    /// The collection whose chunks this command changes, if any.
    pub fn chunk_namespace(&self) -> Option<&str> {
        match self {
            Command::SplitChunk { ns, .. }
            | Command::MergeChunks { ns, .. }
            | Command::CommitMigration { ns, .. }
            | Command::SetChunkJumbo { ns, .. }
            | Command::RefineShardKey { ns, .. } => Some(ns),
            _ => None,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::AddShard { shard, replica_set, members } => {
                write!(f, "addShard {shard} ({replica_set}, {} members)", members.len())
            }
            Command::RemoveShard { shard } => write!(f, "removeShard {shard}"),
            Command::AddShardToZone { shard, zone } => write!(f, "addShardToZone {shard} {zone}"),
            Command::RemoveShardFromZone { shard, zone } => write!(f, "removeShardFromZone {shard} {zone}"),
            Command::UpdateZoneKeyRange { ns, min, max, zone } => match zone {
                Some(zone) => write!(f, "updateZoneKeyRange {ns} [{min}, {max}) -> {zone}"),
                None => write!(f, "updateZoneKeyRange {ns} [{min}, {max}) -> none"),
            },
            Command::SetReplicaGroupTerm { shard, expected_term, new_term, primary } => {
                write!(f, "setReplicaGroupTerm {shard} {expected_term} -> {new_term} primary {primary:?}")
            }
            Command::ReconfigReplicaGroup { shard, expected_version, change } => {
                write!(f, "reconfigReplicaGroup {shard} v{expected_version} {change:?}")
            }
            Command::PromoteMember { shard, member } => write!(f, "promoteMember {shard} {member}"),
            Command::CreateDatabase { name, primary, .. } => write!(f, "createDatabase {name} on {primary}"),
            Command::DropDatabase { name } => write!(f, "dropDatabase {name}"),
            Command::MovePrimary { name, to } => write!(f, "movePrimary {name} to {to}"),
            Command::ShardCollection { ns, initial, .. } => match initial {
                InitialChunks::Single => write!(f, "shardCollection {ns}"),
                InitialChunks::Distributed { split_points, shards } => {
                    write!(f, "shardCollection {ns} ({} chunks on {} shards)", split_points.len() + 1, shards.len())
                }
            },
            Command::DropCollection { ns } => write!(f, "dropCollection {ns}"),
            Command::RefineShardKey { ns, key, .. } => {
                write!(f, "refineShardKey {ns} to {} fields", key.fields.len())
            }
            Command::ConfigureCollection { ns, .. } => write!(f, "configureCollection {ns}"),
            Command::SplitChunk { ns, min, expected_version, split_points, .. } => {
                write!(f, "splitChunk {ns} at {min} v{expected_version} into {}", split_points.len() + 1)
            }
            Command::MergeChunks { ns, min, max, expected_versions, .. } => {
                write!(f, "mergeChunks {ns} [{min}, {max}) ({} chunks)", expected_versions.len())
            }
            Command::CommitMigration { ns, min, from, to, expected_version, .. } => {
                write!(f, "commitMigration {ns} at {min} v{expected_version} {from} -> {to}")
            }
            Command::SetChunkJumbo { ns, min, jumbo, .. } => write!(f, "setChunkJumbo {ns} at {min} {jumbo}"),
            Command::SetSettings(_) => write!(f, "setSettings"),
            Command::InitCluster { .. } => write!(f, "initCluster"),
            Command::AcquireLease { name, holder, ttl_ms } => {
                write!(f, "acquireLease {name} by {holder} for {ttl_ms} ms")
            }
            Command::RenewLease { name, holder, ttl_ms, .. } => {
                write!(f, "renewLease {name} by {holder} for {ttl_ms} ms")
            }
            Command::ReleaseLease { name, holder, .. } => write!(f, "releaseLease {name} by {holder}"),
            Command::LogChange { what, ns, .. } => write!(f, "logChange {what} {ns}"),
            Command::LogAction { what, ns, .. } => write!(f, "logAction {what} {ns}"),
            Command::ReportBalancerRounds { completed, in_round } => {
                write!(f, "reportBalancerRounds +{completed} in round {in_round}")
            }
            Command::Security(cmd) => cmd.fmt(f),
        }
    }
}
