//! gRPC channel pools by shard id: one [`ShardPool`] per shard, created lazily from the catalog's
//! address for it (the replica group's primary, else its first member) and replaced when that
//! address changes. A router without config servers has one legacy pool (`--shard`), used for
//! every request under the empty shard id.
//!
//! Must not: decide which shard a request goes to (see `exec::target`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use shoal_proto::catalog::Shard;
use shoal_proto::{ErrorCode, endpoint};

use crate::error::CommandError;
use crate::exec::call::channels::ShardPool;

/// The id under which the legacy `--shard` pool is found.
pub const LEGACY_SHARD: &str = "";

pub struct ShardPools {
    legacy: Option<Arc<ShardPool>>,
    /// Shard id → (address, pool).
    by_id: RwLock<HashMap<String, (String, Arc<ShardPool>)>>,
    /// Shard id → the `host:port` the catalog names primary (for choosing read members).
    primaries: RwLock<HashMap<String, String>>,
    rpc_timeout: Duration,
}

/// The gRPC address the router talks to for `shard`.
pub fn shard_address(shard: &Shard) -> Option<String> {
    shard.endpoint().map(endpoint::uri)
}

impl ShardPools {
    /// `legacy`: the `--shard` endpoint, used only when the router has no catalog.
    pub fn new(legacy: Option<&str>, rpc_timeout: Duration) -> Result<Self, CommandError> {
        let legacy = legacy.map(|e| ShardPool::new(e, rpc_timeout)).transpose()?.map(Arc::new);
        Ok(Self { legacy, by_id: RwLock::new(HashMap::new()), primaries: RwLock::new(HashMap::new()), rpc_timeout })
    }

    /// The pool of `shard`, if known.
    pub fn get(&self, shard: &str) -> Option<Arc<ShardPool>> {
        if shard == LEGACY_SHARD {
            return self.legacy.clone();
        }
        self.by_id.read().unwrap_or_else(|p| p.into_inner()).get(shard).map(|(_, p)| p.clone())
    }

    /// The member the catalog last named primary of `shard`, as `host:port`.
    pub fn primary(&self, shard: &str) -> Option<String> {
        self.primaries.read().unwrap_or_else(|p| p.into_inner()).get(shard).cloned()
    }

    /// Creates or replaces the pools of every shard in `shards` (all the catalog has) whose
    /// address changed, and drops the pools of shards not among them (removed by `removeShard`).
    pub fn update<'a>(&self, shards: impl IntoIterator<Item = &'a Shard>) {
        let shards: HashMap<&str, &Shard> = shards.into_iter().map(|s| (s.id.as_str(), s)).collect();
        *self.primaries.write().unwrap_or_else(|p| p.into_inner()) = shards
            .values()
            .filter_map(|s| Some((s.id.clone(), endpoint::host_port(s.group.primary.as_deref()?).to_owned())))
            .collect();
        let mut by_id = self.by_id.write().unwrap_or_else(|p| p.into_inner());
        by_id.retain(|id, _| {
            let keep = shards.contains_key(id.as_str());
            if !keep {
                tracing::info!(shard = %id, "shard removed from the cluster: its channels are dropped");
            }
            keep
        });
        for shard in shards.values() {
            let Some(addr) = shard_address(shard) else { continue };
            if by_id.get(&shard.id).is_some_and(|(a, _)| *a == addr) {
                continue;
            }
            match ShardPool::new(&addr, self.rpc_timeout) {
                Ok(pool) => {
                    tracing::info!(shard = %shard.id, %addr, "shard channels (re)created");
                    by_id.insert(shard.id.clone(), (addr, Arc::new(pool)));
                }
                Err(e) => tracing::warn!(shard = %shard.id, %addr, error = %e, "bad shard address"),
            }
        }
    }

    /// Every known pool with its shard id (the legacy one under [`LEGACY_SHARD`]).
    pub fn all(&self) -> Vec<(String, Arc<ShardPool>)> {
        let mut out: Vec<(String, Arc<ShardPool>)> =
            self.legacy.iter().map(|p| (LEGACY_SHARD.into(), p.clone())).collect();
        let by_id = self.by_id.read().unwrap_or_else(|p| p.into_inner());
        out.extend(by_id.iter().map(|(id, (_, p))| (id.clone(), p.clone())));
        out
    }
}

/// The error for a shard id with no pool.
pub fn unknown_shard(shard: &str) -> CommandError {
    CommandError::new(ErrorCode::ShardNotFound, format!("shard {shard} not found"))
}
