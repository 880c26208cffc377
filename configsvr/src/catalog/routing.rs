//! The catalog's routing reads: a collection's full routing table, the chunks changed since a
//! version (incremental refresh), shard and collection versions. The types are `shoal_proto`'s.

use super::ClusterCatalog;
use super::{ChangedChunks, ChunkVersion, Epoch, PlacementVersion, RoutingTable};

impl ClusterCatalog {
    pub fn routing_table(&self, ns: &str) -> Option<RoutingTable> {
        let c = self.collections.get(ns)?;
        Some(RoutingTable {
            ns: c.ns.clone(),
            uuid: c.uuid,
            epoch: c.epoch,
            timestamp: c.timestamp,
            key: c.key.clone(),
            unique: c.unique,
            version: c.version,
            chunks: c.chunks.values().cloned().collect(),
        })
    }

    pub fn chunks_since(&self, ns: &str, epoch: Epoch, since: ChunkVersion) -> ChangedChunks {
        let Some(c) = self.collections.get(ns) else {
            return ChangedChunks::NotSharded;
        };
        if c.epoch != epoch {
            return ChangedChunks::EpochChanged { current: c.placement(c.version) };
        }
        ChangedChunks::Changed {
            collection_version: c.placement(c.version),
            chunks: c.chunks.values().filter(|ch| ch.version > since).cloned().collect(),
        }
    }

    /// `shard`'s version for `ns` (`0|0` if it owns no chunk); `None` if `ns` is not sharded.
    pub fn shard_version(&self, ns: &str, shard: &str) -> Option<PlacementVersion> {
        let c = self.collections.get(ns)?;
        Some(c.placement(c.shard_version(shard)))
    }

    pub fn collection_version(&self, ns: &str) -> Option<PlacementVersion> {
        let c = self.collections.get(ns)?;
        Some(c.placement(c.version))
    }
}
