//! One collection as the policy sees it in a round: its chunks, zone ranges, effective chunk size
//! and the statistics that are still current, plus the number formatting every `why` shares.
//!
//! Invariant: statistics are used only when reported for the catalog's current version of the
//! chunk; a report for an older version (the chunk was split, merged or moved since) is ignored.

use std::collections::BTreeMap;

use shoal_proto::catalog::{Chunk, ChunkBound, ChunkVersion, ClusterCatalogView, Collection, ZoneRange};

use super::ChunkStats;
use super::Stats;
use super::zones::{Placement, placement};

pub(super) struct CollView<'a> {
    pub ns: &'a str,
    pub coll: &'a Collection,
    pub ranges: &'a [ZoneRange],
    /// The collection's `maxChunkSizeBytes`, else the cluster chunk size.
    pub max_chunk_bytes: u64,
    stats: Option<&'a BTreeMap<ChunkBound, (ChunkVersion, ChunkStats)>>,
}

impl<'a> CollView<'a> {
    pub(super) fn new(catalog: &'a ClusterCatalogView, coll: &'a Collection, stats: &'a Stats) -> Self {
        Self {
            ns: &coll.ns,
            coll,
            ranges: catalog.zone_ranges(&coll.ns),
            max_chunk_bytes: coll.max_chunk_size_bytes.unwrap_or_else(|| catalog.settings().chunk_size_bytes()),
            stats: stats.chunks.get(&coll.ns),
        }
    }

    /// The chunk's statistics, if reported for its current version.
    pub(super) fn stats(&self, chunk: &Chunk) -> Option<&'a ChunkStats> {
        self.stats?.get(&chunk.min).filter(|(v, _)| *v == chunk.version).map(|(_, s)| s)
    }

    /// The chunk's size and whether it is estimated: without statistics a chunk counts as half the
    /// maximum chunk size, the expected size of a chunk that grew and was split in half.
    pub(super) fn bytes(&self, chunk: &Chunk) -> (u64, bool) {
        match self.stats(chunk) {
            Some(s) => (s.bytes, false),
            None => (self.max_chunk_bytes / 2, true),
        }
    }

    pub(super) fn ops(&self, chunk: &Chunk) -> f64 {
        self.stats(chunk).map_or(0.0, |s| s.ops_per_sec)
    }

    pub(super) fn placement(&self, chunk: &Chunk) -> Placement<'a> {
        placement(self.ranges, &chunk.min, &chunk.max)
    }

    pub(super) fn chunks(&self) -> impl Iterator<Item = &'a Chunk> + use<'a> {
        self.coll.chunks.values()
    }
}

impl CollView<'_> {
    /// `[min, max)` as messages show a chunk, bounds in shard-key values.
    pub(super) fn range(&self, chunk: &Chunk) -> String {
        format!("[{}, {})", self.bound(&chunk.min), self.bound(&chunk.max))
    }

    /// A bound as its shard-key values, `{ k: 50 }` (MinKey and MaxKey by name); an encoded key
    /// that does not decode is shown in hex rather than hidden.
    pub(super) fn bound(&self, bound: &ChunkBound) -> String {
        let ChunkBound::Key(bytes) = bound else { return bound.to_string() };
        let fields = &self.coll.key.fields;
        match shoal_query::keystring::decode_compound(bytes, fields.len(), &[]) {
            Ok(values) => {
                let shown: Vec<String> = fields.iter().zip(values).map(|(f, v)| format!("{}: {v}", f.name)).collect();
                format!("{{ {} }}", shown.join(", "))
            }
            Err(_) => bound.to_string(),
        }
    }

    /// An encoded key (split point, zone boundary) as [`CollView::bound`] shows it.
    pub(super) fn key(&self, key: &[u8]) -> String {
        self.bound(&ChunkBound::Key(key.to_vec()))
    }
}

/// Bytes in the largest binary unit that keeps the number at least 1: `0 B`, `512 B`,
/// `1.5 KiB`, `12.0 MiB`, `2.0 GiB`.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Operations per second, whole above 10, one decimal below.
pub(super) fn ops(x: f64) -> String {
    if x >= 10.0 { format!("{x:.0} ops/s") } else { format!("{x:.1} ops/s") }
}

#[cfg(test)]
mod tests {
    #[test]
    fn formatting() {
        assert_eq!(super::bytes(0), "0 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(12 << 20), "12.0 MiB");
        assert_eq!(super::ops(2500.0), "2500 ops/s");
        assert_eq!(super::ops(0.25), "0.2 ops/s");
    }
}
