//! Reads for routers and shards: a collection's full routing table, the chunks changed since a
//! version (incremental refresh), shard and collection versions.
//!
//! Incremental refresh works because every commit gives each chunk it creates or changes a version
//! above the collection version it replaced. So the chunks with version > V are exactly the
//! pieces of key space that changed since V, and they cover those pieces entirely:
//! ```text
//!  cached table at V  --chunks_since(V)-->  drop cached chunks overlapping each returned chunk,
//!                                           insert the returned chunks  ==  table now
//! ```
//! An epoch change (drop and re-shard) invalidates that reasoning: the caller must reload.

use serde::{Deserialize, Serialize};

use super::Catalog;
use super::types::{Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, PlacementVersion, Timestamp};
use uuid::Uuid;

/// A collection's routing information: everything a router needs to target it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RoutingTable {
    pub ns: String,
    pub uuid: Uuid,
    pub epoch: Epoch,
    pub timestamp: Timestamp,
    pub key: KeyPattern,
    pub unique: bool,
    /// The collection version: the highest chunk version.
    pub version: ChunkVersion,
    /// In key order, covering `Min..Max`.
    pub chunks: Vec<Chunk>,
}

impl RoutingTable {
    pub fn collection_version(&self) -> PlacementVersion {
        PlacementVersion { epoch: self.epoch, timestamp: self.timestamp, version: self.version }
    }

    /// The highest version among the chunks `shard` owns, `0|0` if it owns none.
    pub fn shard_version(&self, shard: &str) -> ChunkVersion {
        self.chunks.iter().filter(|c| c.shard == shard).map(|c| c.version).max().unwrap_or(ChunkVersion::ZERO)
    }

    /// The chunk containing `key`, which is not `Max`.
    pub fn chunk_for(&self, key: &ChunkBound) -> Option<&Chunk> {
        let i = self.chunks.partition_point(|c| c.min <= *key);
        i.checked_sub(1).and_then(|i| self.chunks.get(i)).filter(|c| *key < c.max)
    }

    /// Folds an incremental refresh (`ChangedChunks::Changed`) into this table: each changed chunk
    /// replaces the cached chunks it overlaps.
    pub fn merge_changes(&mut self, collection_version: ChunkVersion, changed: &[Chunk]) {
        for chunk in changed {
            self.chunks.retain(|c| !(c.min < chunk.max && chunk.min < c.max));
            let at = self.chunks.partition_point(|c| c.min < chunk.min);
            self.chunks.insert(at, chunk.clone());
        }
        self.version = collection_version;
    }
}

/// The answer to [`Catalog::chunks_since`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum ChangedChunks {
    /// The collection is not sharded (any more): drop the cached table.
    NotSharded,
    /// The collection was dropped and re-sharded: reload the whole table.
    EpochChanged { current: PlacementVersion },
    /// The chunks with a version above the one asked about, in key order (empty if none).
    Changed { collection_version: PlacementVersion, chunks: Vec<Chunk> },
}

impl Catalog {
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
