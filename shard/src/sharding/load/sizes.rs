//! Sizes of shard-key ranges for `_shoalChunkStats`: bytes and documents per queried range from
//! one pass over the collection's keys, and a per-namespace cache of the last answer. The cache
//! answers exactly while the store has committed nothing since (a balancer round over an idle
//! shard costs no scan), and approximately for up to [`SIZE_CACHE_REUSE_MAX`] when the ranges
//! asked are a strict subset of those it measured: a donor that just gave chunks away. Without
//! that, a donor would rescan all its data every round while it drains (a round's cost growing
//! with the shard's size). The same ranges after writes, or a range it has not measured (a chunk
//! received, split or merged), mean a scan, so growth is seen at the next round.
//!
//! Must not: read storage itself (the caller scans and hands keys in).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A `[min, max)` of shard-key keystrings.
pub type KeyRange = (Vec<u8>, Vec<u8>);

/// How long sizes measured before later writes may still answer: writes inside a range the
/// balancer already knows show up in its sizes at most this late.
pub const SIZE_CACHE_REUSE_MAX: Duration = Duration::from_secs(30);

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
    measured_at: Instant,
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
    /// The sizes of `ranges`: exact if nothing was written since they were measured, else the
    /// measured ones if `ranges` is a strict subset of the measured ranges (the shard only lost
    /// ranges since) measured less than [`SIZE_CACHE_REUSE_MAX`] before `now`.
    pub fn get(
        &self,
        ns: &str,
        generation: u64,
        pattern: &[u8],
        ranges: &[(Vec<u8>, Vec<u8>)],
        now: Instant,
    ) -> Option<Vec<RangeSize>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.get(ns).filter(|e| e.pattern == pattern)?;
        if e.generation == generation && e.ranges == ranges {
            return Some(e.sizes.clone());
        }
        if ranges.len() >= e.ranges.len() || now.saturating_duration_since(e.measured_at) >= SIZE_CACHE_REUSE_MAX {
            return None;
        }
        ranges.iter().map(|r| e.ranges.iter().position(|m| m == r).map(|i| e.sizes[i])).collect()
    }

    /// `generation`: the store's write generation read before the scan began, so a write during
    /// the scan makes the entry stale.
    pub fn put(
        &self,
        ns: &str,
        generation: u64,
        measured_at: Instant,
        pattern: &[u8],
        ranges: &[(Vec<u8>, Vec<u8>)],
        sizes: &[RangeSize],
    ) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= SIZE_CACHE_NAMESPACES_MAX && !entries.contains_key(ns) {
            entries.clear();
        }
        let entry = Entry {
            generation,
            measured_at,
            pattern: pattern.to_vec(),
            ranges: ranges.to_vec(),
            sizes: sizes.to_vec(),
        };
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
    fn the_cache_answers_measured_ranges_exactly_then_for_a_while() {
        let c = SizeCache::default();
        let t0 = Instant::now();
        let ranges = vec![(k(0), k(10)), (k(10), k(20))];
        let sizes = vec![RangeSize { bytes: 5, docs: 1 }, RangeSize { bytes: 7, docs: 2 }];
        c.put("d.c", 7, t0, b"p", &ranges, &sizes);
        let late = t0 + SIZE_CACHE_REUSE_MAX;
        assert_eq!(c.get("d.c", 7, b"p", &ranges, late), Some(sizes.clone()), "nothing written: exact, any age");
        assert_eq!(c.get("d.c", 8, b"p", &ranges, t0), None, "the same ranges written since: rescan");
        // A donor that gave [10, 20) away is asked for the rest, while the measure is young.
        assert_eq!(c.get("d.c", 8, b"p", &ranges[..1], t0), Some(sizes[..1].to_vec()));
        assert_eq!(c.get("d.c", 8, b"p", &ranges[1..], t0), Some(sizes[1..].to_vec()));
        assert_eq!(c.get("d.c", 8, b"p", &ranges[..1], late), None, "too old: rescan");
        // A range never measured (received, split, merged) needs a scan.
        assert_eq!(c.get("d.c", 8, b"p", &[(k(0), k(5))], t0), None);
        assert_eq!(c.get("d.c", 7, b"p", &[(k(0), k(10)), (k(20), k(30))], t0), None);
        assert_eq!(c.get("d.c", 7, b"q", &ranges, t0), None, "another key pattern");
        assert_eq!(c.get("d.e", 7, b"p", &ranges, t0), None);
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
