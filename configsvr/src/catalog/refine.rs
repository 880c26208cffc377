//! `RefineShardKey` (MongoDB's `refineCollectionShardKey`): a collection's shard key gains suffix
//! fields, so a range stuck on one value of the old key (a jumbo chunk) can be split again.
//!
//! Nothing moves: each chunk and zone range keeps its owner and its range of the old key's
//! values. A bound `b` of the old key becomes `b ++ MinKey...` (the caller's `bound_suffix`), the
//! least key of the new pattern that starts with `b`, so every document stays in the chunk it was
//! in. Because key encodings are prefix-free and concatenated field by field, appending the same
//! suffix to every bound keeps their order; `Min` and `Max` (all MinKey / all MaxKey) stay as they
//! are. A document lacking a new field has it as null, which sorts above MinKey.
//!
//! ```text
//!  before   key {k: 1}          chunks [Min, {k: 7}) [{k: 7}, {k: 8}) [{k: 8}, Max)   jumbo at 7
//!  after    key {k: 1, s: 1}    chunks [Min, {k: 7, s: MinKey}) [{k: 7, s: MinKey}, {k: 8, s: MinKey})
//!                               [{k: 8, s: MinKey}, Max)                             no jumbo
//!           new epoch and timestamp: routers reload their tables, shards their ownership filters
//! ```
//!
//! Chunk versions are kept: they are unique within the new generation as they were in the old,
//! and the generation change (not a version bump) is what tells everyone to reload. The old
//! epoch in the command is a compare-and-set: a split, merge or migration based on the old epoch
//! that has not committed yet is refused with StaleEpoch afterwards, and vice versa.

use super::CatalogError;
use super::Detail;
use super::Reply;
use super::changelog::LogDraft;
use super::{Chunk, ChunkBound, Epoch, KeyPattern, ZoneRange};
use super::{ClusterCatalog, Outcome};

/// Longest `bound_suffix`: MinKey encodes in one byte, and a key has at most 32 fields, so a real
/// suffix is far shorter; the bound keeps one bad command from growing every chunk bound.
pub const BOUND_SUFFIX_BYTES_MAX: usize = 256;

fn extended(bound: &ChunkBound, suffix: &[u8]) -> ChunkBound {
    match bound {
        ChunkBound::Key(bytes) => ChunkBound::Key([bytes.as_slice(), suffix].concat()),
        end => end.clone(),
    }
}

impl ClusterCatalog {
    pub(super) fn refine_shard_key(
        &mut self,
        ns: &str,
        epoch: Epoch,
        new_epoch: Epoch,
        key: &KeyPattern,
        bound_suffix: &[u8],
        now: u64,
    ) -> Result<Outcome, CatalogError> {
        let coll = self.sharded(ns, epoch)?;
        let refuse = |reason: String| CatalogError::BadRefinedKey { ns: ns.to_owned(), reason };
        if let Some(reason) = key.problem() {
            return Err(CatalogError::bad_value("shard key", reason));
        }
        let old = &coll.key.fields;
        if key.fields.len() < old.len() || key.fields[..old.len()] != old[..] {
            return Err(refuse(
                "the new key must start with the current key's fields, in order and of the same kind".into(),
            ));
        }
        if key.fields.len() == old.len() {
            // MongoDB answers ok to a refine to the key already in place.
            let version = coll.placement(coll.version);
            return Ok(Outcome::unchanged(Reply::ShardKeyRefined { version }));
        }
        if bound_suffix.is_empty() || bound_suffix.len() > BOUND_SUFFIX_BYTES_MAX {
            return Err(CatalogError::bad_value(
                "bound suffix",
                format!("must be 1..={BOUND_SUFFIX_BYTES_MAX} bytes (the encoding of MinKey per new field)"),
            ));
        }
        if new_epoch == Epoch::ZERO || new_epoch == epoch {
            return Err(CatalogError::bad_value("epoch", "a refined collection needs a new, non-zero epoch"));
        }

        // Key bytes are opaque here, so check what prefix-freeness promises: the rewritten bounds
        // keep their order (else the chunks would no longer tile the key space).
        let chunks: Vec<_> = coll
            .chunks
            .values()
            .map(|c| Chunk {
                min: extended(&c.min, bound_suffix),
                max: extended(&c.max, bound_suffix),
                jumbo: false,
                ..c.clone()
            })
            .collect();
        let ranges: Vec<ZoneRange> = self
            .zone_ranges(ns)
            .iter()
            .map(|r| ZoneRange {
                min: extended(&r.min, bound_suffix),
                max: extended(&r.max, bound_suffix),
                zone: r.zone.clone(),
            })
            .collect();
        // Chunks are contiguous, so each staying non-empty keeps the whole tiling ordered.
        let chunks_ordered = chunks.iter().all(|c| c.min < c.max);
        let ranges_ordered = ranges.iter().all(|r| r.min < r.max) && ranges.windows(2).all(|w| w[0].max <= w[1].min);
        if !chunks_ordered || !ranges_ordered {
            return Err(CatalogError::bad_value("bound suffix", "appending it reorders the bounds of the collection"));
        }

        // Validated; install the rewritten bounds under the new generation.
        let names = key.fields.iter().map(|f| Detail::from(f.name.as_str())).collect();
        let log = LogDraft::new("refineCollectionShardKey.end", ns)
            .with("key", Detail::List(names))
            .with("oldKeyFields", old.len() as u64)
            .with("newKeyFields", key.fields.len() as u64)
            .with("oldEpoch", epoch.to_string())
            .with("newEpoch", new_epoch.to_string())
            .with("jumboCleared", coll.chunks.values().filter(|c| c.jumbo).count() as u64);
        let Self { collections, clock, zone_ranges, .. } = self;
        let timestamp = clock.next_timestamp(now);
        let Some(coll) = collections.get_mut(ns) else {
            return Err(CatalogError::NotSharded { ns: ns.to_owned() });
        };
        coll.chunks = chunks.into_iter().map(|c| (c.min.clone(), c)).collect();
        coll.key = key.clone();
        coll.epoch = new_epoch;
        coll.timestamp = timestamp;
        let version = coll.placement(coll.version);
        if !ranges.is_empty() {
            zone_ranges.insert(ns.to_owned(), ranges);
        }
        Ok(Outcome::logged(Reply::ShardKeyRefined { version }, log))
    }
}
