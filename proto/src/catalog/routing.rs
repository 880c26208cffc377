//! What routers and shards know of a sharded collection: its routing table, and the chunks changed
//! since a version (incremental refresh).
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
use uuid::Uuid;

use super::types::{Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, PlacementVersion, Timestamp};

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

/// The config service's answer to "what changed in this collection since version V".
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum ChangedChunks {
    /// The collection is not sharded (any more): drop the cached table.
    NotSharded,
    /// The collection was dropped and re-sharded: reload the whole table.
    EpochChanged { current: PlacementVersion },
    /// The chunks with a version above the one asked about, in key order (empty if none).
    Changed { collection_version: PlacementVersion, chunks: Vec<Chunk> },
}

/// The routing-table version a caller has cached (its incremental refresh point).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingSince {
    pub epoch: Epoch,
    pub version: ChunkVersion,
}

/// The answer to a routing-table read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RoutingAnswer {
    /// The whole table; `None` if the collection is not sharded.
    Full(Option<RoutingTable>),
    /// The chunks changed after the cached version (or why the cache must be dropped).
    Changes(ChangedChunks),
}
