//! Sharding failures with typed fields, mapped once to MongoDB codes (via [`ExecError`]).

use shoal_proto::{ErrorCode, StaleConfig};

use crate::error::ExecError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShardingError {
    /// The router's version and this shard's disagree (after the shard refreshed if it could have
    /// been the one behind). The router refreshes its routing table and retries the request.
    #[error(transparent)]
    StaleConfig(Box<StaleConfig>),
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
        let code = match e {
            // Typed all the way to the router, which refreshes from its versions.
            ShardingError::StaleConfig(stale) => return ExecError::stale_config(*stale),
            ShardingError::StaleDbVersion { .. } => ErrorCode::StaleDbVersion,
            ShardingError::NoConfigServers => ErrorCode::NotYetInitialized,
            ShardingError::BadShardVersion(_) => ErrorCode::BadValue,
            ShardingError::Catalog { code, .. } => code.unwrap_or(ErrorCode::HostUnreachable),
        };
        ExecError::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::{ChunkVersion, Epoch, PlacementVersion, Timestamp};
    use shoal_proto::stale_config::CollectionVersion;

    use super::*;

    #[test]
    fn stale_config_reaches_the_wire_typed() {
        let stale = StaleConfig {
            ns: "db.c".into(),
            received: CollectionVersion::Unsharded,
            wanted: Some(CollectionVersion::Sharded(PlacementVersion {
                epoch: Epoch([3; 12]),
                timestamp: Timestamp { secs: 9, inc: 2 },
                version: ChunkVersion::new(4, 1),
            })),
            shard: "shard0".into(),
        };
        let exec = ExecError::from(ShardingError::StaleConfig(Box::new(stale.clone())));
        assert_eq!((exec.code, exec.message.as_str()), (ErrorCode::StaleConfig, stale.to_string().as_str()));
        let wire = exec.to_wire();
        assert!(wire.is(ErrorCode::StaleConfig));
        assert_eq!(StaleConfig::from_wire(&wire.stale_config.unwrap()).unwrap(), stale);
        // Other sharding errors carry no versions.
        assert!(ExecError::from(ShardingError::NoConfigServers).to_wire().stale_config.is_none());
    }
}
