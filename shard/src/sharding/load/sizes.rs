//! Sizes of shard-key ranges for `_shoalChunkStats`: bytes and documents per queried range from
//! one pass over the collection's keys, and a per-namespace cache of the last answer that stays
//! valid while the store has committed nothing since (so a balancer round over an idle shard
//! costs no scan).
//!
//! Must not: read storage itself (the caller scans and hands keys in).

use std::collections::HashMap;
use std::sync::Mutex;

/// A `[min, max)` of shard-key keystrings.
pub type KeyRange = (Vec<u8>, Vec<u8>);

/// Namespaces whose last answer is kept.
pub const SIZE_CACHE_NAMESPACES_MAX: usize = 1024;

/// Bytes and documents of one range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeSize {
    pub bytes: u64,
    pub docs: u64,
}

/// Accumulates documents into sorted, disjoint `[min, max)` ranges (given in any order).
pub struct Tally<'a> {
    ranges: &'a [(Vec<u8>, Vec<u8>)],
    /// Indices into `ranges`, by `min`.
    order: Vec<usize>,
    pub sizes: Vec<RangeSize>,
}

impl<'a> Tally<'a> {
    /// `Err(i)`: range `i` is empty or overlaps another.
    pub fn new(ranges: &'a [(Vec<u8>, Vec<u8>)]) -> Result<Self, usize> {
        if let Some(i) = ranges.iter().position(|(min, max)| min >= max) {
            return Err(i);
        }
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by(|a, b| ranges[*a].0.cmp(&ranges[*b].0));
        if let Some(w) = order.windows(2).find(|w| ranges[w[0]].1 > ranges[w[1]].0) {
            return Err(w[1]);
        }
        Ok(Self { ranges, order, sizes: vec![RangeSize::default(); ranges.len()] })
    }

    /// Counts a document with shard key `key` of `bytes` bytes in the range holding it, if any.
    pub fn add(&mut self, key: &[u8], bytes: usize) {
        let i = self.order.partition_point(|r| self.ranges[*r].0.as_slice() <= key);
        if let Some(r) = i.checked_sub(1).map(|i| self.order[i])
            && key < self.ranges[r].1.as_slice()
        {
            self.sizes[r].bytes += bytes as u64;
            self.sizes[r].docs += 1;
        }
    }
}

struct Entry {
    generation: u64,
    /// What the answer was for: the key pattern (canonical bytes) and the ranges.
    pattern: Vec<u8>,
    ranges: Vec<KeyRange>,
    sizes: Vec<RangeSize>,
}

/// The last answer per namespace, valid for one store write generation.
#[derive(Default)]
pub struct SizeCache {
    entries: Mutex<HashMap<String, Entry>>,
}

impl SizeCache {
    pub fn get(
        &self,
        ns: &str,
        generation: u64,
        pattern: &[u8],
        ranges: &[(Vec<u8>, Vec<u8>)],
    ) -> Option<Vec<RangeSize>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.get(ns)?;
        (e.generation == generation && e.pattern == pattern && e.ranges == ranges).then(|| e.sizes.clone())
    }

    /// `generation`: the store's write generation read before the scan began, so a write during
    /// the scan makes the entry stale.
    pub fn put(&self, ns: &str, generation: u64, pattern: &[u8], ranges: &[(Vec<u8>, Vec<u8>)], sizes: &[RangeSize]) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= SIZE_CACHE_NAMESPACES_MAX && !entries.contains_key(ns) {
            entries.clear();
        }
        let entry = Entry { generation, pattern: pattern.to_vec(), ranges: ranges.to_vec(), sizes: sizes.to_vec() };
        entries.insert(ns.to_owned(), entry);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn k(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn documents_land_in_their_range() {
        let ranges = vec![(k(10), k(20)), (k(0), k(10)), (k(30), k(40))];
        let mut t = Tally::new(&ranges).expect("disjoint");
        for i in 0..50 {
            t.add(&k(i), 100);
        }
        assert_eq!(t.sizes[0], RangeSize { bytes: 1000, docs: 10 });
        assert_eq!(t.sizes[1], RangeSize { bytes: 1000, docs: 10 });
        assert_eq!(t.sizes[2], RangeSize { bytes: 1000, docs: 10 });
        assert_eq!(Tally::new(&[(k(0), k(10)), (k(5), k(20))]).err(), Some(1));
        assert_eq!(Tally::new(&[(k(5), k(5))]).err(), Some(0));
    }

    #[test]
    fn the_cache_answers_only_the_same_question_at_the_same_generation() {
        let c = SizeCache::default();
        let ranges = vec![(k(0), k(10))];
        let sizes = vec![RangeSize { bytes: 5, docs: 1 }];
        c.put("d.c", 7, b"p", &ranges, &sizes);
        assert_eq!(c.get("d.c", 7, b"p", &ranges), Some(sizes));
        assert_eq!(c.get("d.c", 8, b"p", &ranges), None);
        assert_eq!(c.get("d.c", 7, b"q", &ranges), None);
        assert_eq!(c.get("d.c", 7, b"p", &[(k(0), k(11))]), None);
        assert_eq!(c.get("d.e", 7, b"p", &ranges), None);
    }

    proptest! {
        #[test]
        fn tally_matches_a_linear_count(
            bounds in proptest::collection::btree_set(0u32..1000, 2..12),
            keys in proptest::collection::vec((0u32..1000, 1usize..500), 0..300),
        ) {
            let b: Vec<u32> = bounds.into_iter().collect();
            // Every other gap is a range, so some keys fall outside all ranges.
            let ranges: Vec<(Vec<u8>, Vec<u8>)> = b.windows(2).step_by(2).map(|w| (k(w[0]), k(w[1]))).collect();
            let mut t = Tally::new(&ranges).expect("disjoint");
            for (key, n) in &keys {
                t.add(&k(*key), *n);
            }
            for (i, (min, max)) in ranges.iter().enumerate() {
                let inside = keys.iter().filter(|(key, _)| k(*key) >= *min && k(*key) < *max);
                let bytes: u64 = inside.clone().map(|(_, n)| *n as u64).sum();
                prop_assert_eq!(t.sizes[i], RangeSize { bytes, docs: inside.count() as u64 });
            }
        }
    }
}
