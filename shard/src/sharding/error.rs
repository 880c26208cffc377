//! Sharding failures with typed fields, mapped once to MongoDB codes (via [`ExecError`]).

use shoal_proto::ErrorCode;

use crate::error::ExecError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShardingError {
    /// The router's version and this shard's disagree (after the shard refreshed if it could have
    /// been the one behind). The router refreshes its routing table and retries the request.
    #[error("version mismatch detected for {ns}: received {received}, wanted {wanted}")]
    StaleConfig { ns: String, received: String, wanted: String },
    /// The router routed a request for an unsharded collection of `db` with a database version
    /// that is not this shard's (or this shard is not the primary): it refreshes and retries.
    #[error("database version mismatch for {db}: received {received}, wanted {wanted}")]
    StaleDbVersion { db: String, received: String, wanted: String },
    #[error("this shard has no config servers (start it with --config) and cannot serve versioned requests")]
    NoConfigServers,
    #[error("bad shardVersion: {0}")]
    BadShardVersion(String),
    /// Reading the catalog failed (no quorum, unreachable); the request may be retried.
    #[error("could not refresh the sharding metadata of {ns} from the config servers: {detail}")]
    Catalog { ns: String, detail: String, code: Option<ErrorCode> },
}

impl From<ShardingError> for ExecError {
    fn from(e: ShardingError) -> Self {
        let code = match &e {
            ShardingError::StaleConfig { .. } => ErrorCode::StaleConfig,
            ShardingError::StaleDbVersion { .. } => ErrorCode::StaleDbVersion,
            ShardingError::NoConfigServers => ErrorCode::NotYetInitialized,
            ShardingError::BadShardVersion(_) => ErrorCode::BadValue,
            ShardingError::Catalog { code, .. } => code.unwrap_or(ErrorCode::HostUnreachable),
        };
        ExecError::new(code, e.to_string())
    }
}
