//! Why the catalog refused a command. Each variant carries the facts a caller needs to react
//! (the version it should have read, who holds a lease) and maps to one MongoDB error code, which
//! the API edge puts on the wire.
//!
//! A refused command changed nothing; errors are values in the replies of the client API (and of
//! the config service's Raft log), so they serialize like the rest of the catalog.

use serde::{Deserialize, Serialize};

use crate::ErrorCode;

use super::types::{ChunkBound, ChunkVersion, Epoch};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("invalid {what}: {reason}")]
    BadValue { what: String, reason: String },
    #[error("invalid namespace '{ns}'")]
    InvalidNamespace { ns: String },
    #[error("shard '{shard}' not found")]
    ShardNotFound { shard: String },
    #[error("a shard named '{shard}' already exists with a different replica set or members")]
    ShardExists { shard: String },
    #[error("host '{host}' already belongs to shard '{shard}'")]
    HostInUse { host: String, shard: String },
    #[error("shard '{shard}' is draining and takes no new data")]
    ShardDraining { shard: String },
    #[error("cannot remove shard '{shard}': no other active shard would be left")]
    LastShard { shard: String },
    #[error("database '{db}' not found")]
    DatabaseNotFound { db: String },
    #[error("database '{db}' already exists with primary shard '{primary}'")]
    DatabaseExists { db: String, primary: String },
    #[error("database '{db}' is reserved")]
    ReservedDatabase { db: String },
    #[error("collection '{ns}' is not sharded")]
    NotSharded { ns: String },
    #[error("collection '{ns}' is already sharded with a different key or uniqueness")]
    AlreadySharded { ns: String },
    #[error("cannot refine the shard key of '{ns}': {reason}")]
    BadRefinedKey { ns: String, reason: String },
    #[error("collection '{ns}' has epoch {current}, the request was for epoch {expected}")]
    StaleEpoch { ns: String, expected: Epoch, current: Epoch },
    #[error("collection '{ns}' has no chunk [{min}, {max})")]
    ChunkNotFound { ns: String, min: ChunkBound, max: ChunkBound },
    #[error("chunk of '{ns}' at {min} has version {current}, the request expected {expected}")]
    StaleChunkVersion { ns: String, min: ChunkBound, expected: ChunkVersion, current: ChunkVersion },
    #[error("chunks of '{ns}' in the merge range have versions {current:?}, the request expected {expected:?}")]
    StaleMergeVersions { ns: String, expected: Vec<ChunkVersion>, current: Vec<ChunkVersion> },
    #[error("chunk of '{ns}' at {min} is on shard '{current}', the request said '{expected}'")]
    ChunkNotOnShard { ns: String, min: ChunkBound, expected: String, current: String },
    #[error("cannot split chunk of '{ns}': {reason}")]
    CannotSplit { ns: String, reason: String },
    #[error("cannot merge chunks of '{ns}': {reason}")]
    CannotMerge { ns: String, reason: String },
    #[error("cannot move chunk of '{ns}': {reason}")]
    CannotMigrate { ns: String, reason: String },
    #[error("zone '{zone}' not found")]
    ZoneNotFound { zone: String },
    #[error("zone '{zone}' still has key ranges in '{ns}'")]
    ZoneStillInUse { zone: String, ns: String },
    #[error("zone range for '{ns}' overlaps an existing range of zone '{existing_zone}'")]
    RangeOverlap { ns: String, existing_zone: String },
    #[error("lease '{lease}' is held by '{holder}' until {expires_at_ms} ms")]
    LeaseBusy { lease: String, holder: String, expires_at_ms: u64 },
    #[error("lease '{lease}' is not held by '{holder}' with that token")]
    LeaseNotHeld { lease: String, holder: String },
    #[error("fencing token {presented} for lease '{lease}' is not current ({current:?})")]
    StaleFencingToken { lease: String, presented: u64, current: Option<u64> },
    #[error("replica group of shard '{shard}' is at term {current}, the request expected {expected}")]
    StaleTerm { shard: String, expected: u64, current: u64 },
    /// A replica-group reconfiguration MongoDB would refuse as incompatible with the current one
    /// (more than one voting change, the primary removed, a stale version).
    #[error("shard '{shard}': {reason}")]
    IncompatibleReplicaConfig { shard: String, reason: String },
    #[error("{what} is limited to {limit}")]
    LimitExceeded { what: String, limit: u64 },
    #[error("chunk versions of '{ns}' would overflow")]
    VersionOverflow { ns: String },
    #[error("Could not find user \"{user}\" for db \"{db}\"")]
    UserNotFound { user: String, db: String },
    #[error("User \"{user}@{db}\" already exists")]
    UserExists { user: String, db: String },
    #[error("Could not find role: {role}@{db}")]
    RoleNotFound { role: String, db: String },
    #[error("Role \"{role}@{db}\" already exists")]
    RoleExists { role: String, db: String },
    /// Built-in roles cannot be created, changed or dropped; a change would make a role inherit
    /// itself.
    #[error("{reason}")]
    InvalidRoleModification { reason: String },
}

impl CatalogError {
    pub fn bad_value(what: &str, reason: impl Into<String>) -> Self {
        CatalogError::BadValue { what: what.to_owned(), reason: reason.into() }
    }

    pub fn limit(what: &str, limit: usize) -> Self {
        CatalogError::LimitExceeded { what: what.to_owned(), limit: limit as u64 }
    }

    /// The MongoDB code a client sees.
    pub fn code(&self) -> ErrorCode {
        use CatalogError as E;
        match self {
            E::BadValue { .. } | E::LimitExceeded { .. } => ErrorCode::BadValue,
            E::InvalidNamespace { .. } => ErrorCode::InvalidNamespace,
            E::ShardNotFound { .. } => ErrorCode::ShardNotFound,
            E::ShardExists { .. }
            | E::HostInUse { .. }
            | E::ShardDraining { .. }
            | E::LastShard { .. }
            | E::ReservedDatabase { .. }
            | E::CannotMerge { .. }
            | E::CannotMigrate { .. } => ErrorCode::IllegalOperation,
            E::DatabaseNotFound { .. } => ErrorCode::NamespaceNotFound,
            E::DatabaseExists { .. } => ErrorCode::NamespaceExists,
            E::NotSharded { .. } => ErrorCode::NamespaceNotSharded,
            E::AlreadySharded { .. } => ErrorCode::AlreadyInitialized,
            E::BadRefinedKey { .. } => ErrorCode::InvalidOptions,
            E::StaleEpoch { .. } => ErrorCode::StaleEpoch,
            // A compare-and-set lost against a concurrent change: re-read and retry.
            E::ChunkNotFound { .. }
            | E::StaleChunkVersion { .. }
            | E::StaleMergeVersions { .. }
            | E::ChunkNotOnShard { .. } => ErrorCode::ConflictingOperationInProgress,
            E::CannotSplit { .. } => ErrorCode::CannotSplit,
            E::ZoneNotFound { .. } => ErrorCode::ZoneNotFound,
            E::ZoneStillInUse { .. } => ErrorCode::ZoneStillInUse,
            E::RangeOverlap { .. } => ErrorCode::RangeOverlapConflict,
            E::LeaseBusy { .. } | E::LeaseNotHeld { .. } | E::StaleFencingToken { .. } => ErrorCode::LockBusy,
            E::StaleTerm { .. } => ErrorCode::StaleTerm,
            E::IncompatibleReplicaConfig { .. } => ErrorCode::NewReplicaSetConfigurationIncompatible,
            E::VersionOverflow { .. } => ErrorCode::Overflow,
            E::UserNotFound { .. } => ErrorCode::UserNotFound,
            E::UserExists { .. } => ErrorCode::Location51003,
            E::RoleNotFound { .. } => ErrorCode::RoleNotFound,
            E::RoleExists { .. } => ErrorCode::Location51002,
            E::InvalidRoleModification { .. } => ErrorCode::InvalidRoleModification,
        }
    }
}
