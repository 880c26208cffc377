//! The cluster catalog's values, as every process sees them: shards and their replica groups,
//! databases, sharded collections with their chunks, chunk bounds and versions, zones, settings,
//! leases, the changelog, users and roles, and the replies to catalog commands.
//!
//! The config service holds them (its state machine is built of these values); routers and shards
//! read them through its API. Pure data with the small rules that belong to the values themselves
//! (bound order, version order, folding an incremental routing refresh); no I/O.
//!
//! Must not: decide anything about the catalog's changes (the config service's state machine
//! does), or take a disk encoding: between processes these values travel in [`wire`]'s versioned
//! encoding inside `config.proto`'s messages, and each crate owns the encoding of what it writes to
//! disk.

mod command;
mod error;
mod log;
mod reply;
mod routing;
mod security;
mod settings;
mod types;
mod view;
pub mod wire;

pub use command::{Command, InitialChunks, MemberChange, SettingsUpdate, WindowChange};
pub use error::CatalogError;
pub use log::{BALANCER_LEASE, BalancerRounds, ChangelogEntry, Detail, Fencing, Lease};
pub use reply::{RemoveShardProgress, RemoveShardState, Reply};
pub use routing::{ChangedChunks, RoutingAnswer, RoutingSince, RoutingTable};
pub use security::{
    Credentials, Privilege, Resource, Role, RoleName, SCRAM_SHA_1, SCRAM_SHA_256, ScramCredential, SecurityCatalog,
    SecurityCommand, User, UserName,
};
pub use settings::{
    ActiveWindow, BalancerMode, CHUNK_SIZE_MIB_DEFAULT, CHUNK_SIZE_MIB_MAX, CHUNK_SIZE_MIB_MIN, Settings, parse_hh_mm,
};
pub use types::{
    CHUNK_HISTORY_ENTRIES_MAX, Chunk, ChunkBound, ChunkHistoryEntry, ChunkVersion, Collection, Database,
    DatabaseVersion, Epoch, KEY_PATTERN_FIELDS_MAX, KeyField, KeyFieldKind, KeyPattern, PlacementVersion, ReplicaGroup,
    Shard, ShardId, ShardState, Timestamp, ZoneRange, chunk_map,
};
pub use view::{ClusterCatalogView, Parts};
