//! Which documents of a sharded collection this shard owns: the sorted key ranges of its chunks at
//! one metadata version. Versioned reads and writes skip documents outside them (orphans: left by
//! a donor after a migration commit, or by a recipient whose migration aborted), and versioned
//! updates must not change a document's shard key.
//!
//! Must not: load metadata (see `metadata.rs`) or touch storage. An [`Ownership`] is immutable; a
//! request keeps the one it was checked against for its whole life (cursors included).

use bson::{Bson, Document};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkBound, PlacementVersion};
use shoal_query::shard_key::{self, KeyField, Missing};

use crate::error::ExecError;

/// A half-open key range `[min, max)`.
pub type KeyRange = (ChunkBound, ChunkBound);

#[derive(Debug, Clone, PartialEq)]
pub struct Ownership {
    pub ns: String,
    /// The shard-key pattern's fields, in pattern order.
    pub key: Vec<KeyField>,
    /// This shard's version when the ranges were computed.
    pub version: PlacementVersion,
    /// Sorted, non-overlapping, adjacent chunks merged.
    ranges: Vec<KeyRange>,
}

impl Ownership {
    /// `ranges` in any order; overlapping or touching ranges are merged.
    pub fn new(ns: impl Into<String>, key: Vec<KeyField>, version: PlacementVersion, ranges: Vec<KeyRange>) -> Self {
        Self { ns: ns.into(), key, version, ranges: normalize(ranges) }
    }

    pub fn ranges(&self) -> &[KeyRange] {
        &self.ranges
    }

    pub fn owns_key(&self, key: &ChunkBound) -> bool {
        let i = self.ranges.partition_point(|(min, _)| min <= key);
        i.checked_sub(1).is_some_and(|i| *key < self.ranges[i].1)
    }

    /// Whether `doc` belongs to this shard. A document whose key cannot be computed (an array in
    /// a shard-key field, which a sharded collection cannot hold) is kept visible: hiding data is
    /// worse than showing a document the shard cannot place. An owned document's key is noted
    /// for load sampling ([`super::load::note_key`]; free unless the request is sampled).
    pub fn owns_document(&self, doc: &Document) -> bool {
        match shard_key::of_document(&self.key, doc, Missing::AsNull) {
            Ok(k) => {
                let key = ChunkBound::Key(k);
                let owned = self.owns_key(&key);
                if let (true, ChunkBound::Key(k)) = (owned, key) {
                    super::load::note_key(k);
                }
                owned
            }
            Err(_) => true,
        }
    }

    /// Notes `doc`'s shard key for load sampling (an inserted document; the caller checks
    /// [`super::load::recording`] first, so only sampled requests compute it).
    pub fn note_key_of(&self, doc: &Document) {
        if let Ok(k) = shard_key::of_document(&self.key, doc, Missing::AsNull) {
            super::load::note_key(k);
        }
    }

    /// The parts of `[min, max)` this shard does not own, in key order.
    pub fn unowned_parts(&self, min: &ChunkBound, max: &ChunkBound) -> Vec<KeyRange> {
        subtract(&(min.clone(), max.clone()), &self.ranges)
    }

    /// The values of the shard-key fields of `doc` (what [`Self::check_key_unchanged`] compares).
    pub fn key_values(&self, doc: &Document) -> Vec<Option<Bson>> {
        self.key.iter().map(|f| shoal_query::path::get_path(doc, &f.name).cloned()).collect()
    }

    /// Refuses an update that changed a shard-key field (ImmutableField, 66), as MongoDB does.
    /// `before`: [`Self::key_values`] of the document before the update.
    pub fn check_key_unchanged(&self, before: &[Option<Bson>], new: &Document) -> Result<(), ExecError> {
        for (f, before) in self.key.iter().zip(before) {
            let after = shoal_query::path::get_path(new, &f.name);
            // Compared as MongoDB compares values: 5 and NumberLong(5) are the same key.
            let same = match (before.as_ref(), after) {
                (Some(b), Some(a)) => shoal_query::order::values_equal(b, a),
                (b, a) => b == a,
            };
            if !same {
                return Err(ExecError::new(
                    ErrorCode::ImmutableField,
                    format!(
                        "After applying the update, the (immutable) field '{}' was found to have been altered to {}",
                        f.name,
                        after.map_or_else(|| "<missing>".to_owned(), Bson::to_string)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses an upserted document that lacks a shard-key field (ShardKeyNotFound, 61).
    pub fn check_full_key(&self, doc: &Document) -> Result<(), ExecError> {
        shard_key::of_document(&self.key, doc, Missing::Refuse).map(|_| ()).map_err(ExecError::from)
    }
}

fn normalize(mut ranges: Vec<KeyRange>) -> Vec<KeyRange> {
    ranges.retain(|(min, max)| min < max);
    ranges.sort();
    let mut out: Vec<KeyRange> = Vec::with_capacity(ranges.len());
    for (min, max) in ranges {
        match out.last_mut() {
            Some(last) if min <= last.1 => {
                if max > last.1 {
                    last.1 = max;
                }
            }
            _ => out.push((min, max)),
        }
    }
    out
}

/// `range` minus the sorted, disjoint `owned` ranges.
fn subtract(range: &KeyRange, owned: &[KeyRange]) -> Vec<KeyRange> {
    let mut out = Vec::new();
    let mut start = range.0.clone();
    for (min, max) in owned {
        if *max <= start {
            continue;
        }
        if *min >= range.1 {
            break;
        }
        if *min > start {
            out.push((start.clone(), min.clone()));
        }
        if *max > start {
            start = max.clone();
        }
        if start >= range.1 {
            return out;
        }
    }
    if start < range.1 {
        out.push((start, range.1.clone()));
    }
    out
}

/// Whether `key` lies in one of the sorted, disjoint `ranges`.
pub fn in_ranges(ranges: &[KeyRange], key: &ChunkBound) -> bool {
    let i = ranges.partition_point(|(min, _)| min <= key);
    i.checked_sub(1).is_some_and(|i| *key < ranges[i].1)
}

#[cfg(test)]
mod tests {
    use bson::doc;
    use shoal_proto::catalog::{ChunkVersion, Epoch, Timestamp};

    use super::*;

    fn version() -> PlacementVersion {
        PlacementVersion {
            epoch: Epoch([1; 12]),
            timestamp: Timestamp { secs: 1, inc: 1 },
            version: ChunkVersion::new(1, 0),
        }
    }

    fn k(values: &[Bson]) -> ChunkBound {
        ChunkBound::Key(shard_key::of_values(&values.iter().collect::<Vec<_>>()))
    }

    fn fields(spec: &[(&str, bool)]) -> Vec<KeyField> {
        spec.iter().map(|(n, h)| KeyField { name: (*n).to_owned(), hashed: *h }).collect()
    }

    #[test]
    fn ranges_are_merged_and_looked_up() {
        let o = Ownership::new(
            "d.c",
            fields(&[("a", false)]),
            version(),
            vec![(k(&[Bson::Int32(10)]), k(&[Bson::Int32(20)])), (ChunkBound::Min, k(&[Bson::Int32(10)]))],
        );
        assert_eq!(o.ranges().len(), 1);
        assert!(o.owns_document(&doc! {"a": 5}));
        assert!(o.owns_document(&doc! {"a": 10}));
        assert!(!o.owns_document(&doc! {"a": 20}));
        // A missing field counts as null, which sorts below numbers.
        assert!(o.owns_document(&doc! {"b": 1}));
    }

    #[test]
    fn compound_keys() {
        let f = fields(&[("a", false), ("b", false)]);
        let lo = k(&[Bson::Int32(1), Bson::String("m".into())]);
        let hi = k(&[Bson::Int32(2), Bson::MinKey]);
        let o = Ownership::new("d.c", f, version(), vec![(lo, hi)]);
        assert!(!o.owns_document(&doc! {"a": 1, "b": "a"}));
        assert!(o.owns_document(&doc! {"a": 1, "b": "z"}));
        assert!(!o.owns_document(&doc! {"a": 2, "b": "a"}));
        assert!(!o.owns_document(&doc! {"a": 0, "b": "z"}));
    }

    #[test]
    fn hashed_keys() {
        let f = fields(&[("h", true)]);
        let zero = k(&[Bson::Int64(0)]);
        let low = Ownership::new("d.c", f.clone(), version(), vec![(ChunkBound::Min, zero.clone())]);
        let high = Ownership::new("d.c", f, version(), vec![(zero, ChunkBound::Max)]);
        for i in 0..50 {
            let d = doc! {"h": i};
            assert_ne!(low.owns_document(&d), high.owns_document(&d), "exactly one side owns {d}");
            let h = shoal_query::hash::hash64(&Bson::Int32(i));
            assert_eq!(low.owns_document(&d), h < 0);
        }
    }

    #[test]
    fn unowned_parts_subtract_owned_ranges() {
        let b = |i: i32| k(&[Bson::Int32(i)]);
        let o = Ownership::new("d.c", fields(&[("a", false)]), version(), vec![(b(10), b(20)), (b(30), b(40))]);
        assert_eq!(o.unowned_parts(&b(0), &b(50)), vec![(b(0), b(10)), (b(20), b(30)), (b(40), b(50))]);
        assert_eq!(o.unowned_parts(&b(12), &b(18)), vec![]);
        assert_eq!(o.unowned_parts(&b(15), &b(35)), vec![(b(20), b(30))]);
        assert_eq!(o.unowned_parts(&ChunkBound::Min, &ChunkBound::Max).len(), 3);
        assert!(in_ranges(&o.unowned_parts(&b(0), &b(50)), &b(25)));
        assert!(!in_ranges(&o.unowned_parts(&b(0), &b(50)), &b(35)));
    }

    #[test]
    fn shard_key_changes_are_refused() {
        let o = Ownership::new("d.c", fields(&[("a", false)]), version(), vec![(ChunkBound::Min, ChunkBound::Max)]);
        let before = o.key_values(&doc! {"a": 1, "x": 1});
        assert!(o.check_key_unchanged(&before, &doc! {"a": 1, "x": 2}).is_ok());
        let e = o.check_key_unchanged(&before, &doc! {"a": 2}).unwrap_err();
        assert_eq!(e.code, ErrorCode::ImmutableField);
        assert!(e.message.contains("(immutable) field 'a'"), "{}", e.message);
        assert_eq!(o.check_full_key(&doc! {"x": 1}).unwrap_err().code, ErrorCode::ShardKeyNotFound);
    }

    #[test]
    fn a_refined_key_keeps_every_document_in_its_range() {
        // {a: 1} refined to {a: 1, b: 1}: bounds gain b: MinKey (refineCollectionShardKey).
        let old = Ownership::new(
            "d.c",
            fields(&[("a", false)]),
            version(),
            vec![(k(&[Bson::Int32(7)]), k(&[Bson::Int32(8)]))],
        );
        let refined_range = (k(&[Bson::Int32(7), Bson::MinKey]), k(&[Bson::Int32(8), Bson::MinKey]));
        let f = fields(&[("a", false), ("b", false)]);
        let new = Ownership::new("d.c", f.clone(), version(), vec![refined_range]);
        // Old, unextended bounds read with the longer key still hold the same documents (a range
        // deletion scheduled before the refine): the old key's bytes are a prefix.
        let unextended = Ownership::new("d.c", f, version(), vec![(k(&[Bson::Int32(7)]), k(&[Bson::Int32(8)]))]);
        let bs = [None, Some(Bson::Null), Some(Bson::MinKey), Some(Bson::Int32(-5)), Some(Bson::String("z".into()))];
        for a in 5..10 {
            for b in &bs {
                let mut d = doc! {"a": a};
                if let Some(b) = b {
                    d.insert("b", b.clone());
                }
                assert_eq!(new.owns_document(&d), old.owns_document(&d), "{d}");
                assert_eq!(unextended.owns_document(&d), old.owns_document(&d), "{d}");
            }
        }
    }
}
