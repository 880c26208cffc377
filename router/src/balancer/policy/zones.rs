//! Where a chunk stands with respect to its collection's zone ranges, and which shards may hold it.
//!
//! A chunk is [`Placement::Free`] (touches no zone range: any shard), [`Placement::Zone`] (lies
//! wholly inside one range: only that zone's shards) or [`Placement::Crossing`] (straddles a range
//! boundary: it must be split at the boundaries before it can be placed, so nothing moves it).

use std::collections::BTreeSet;

use shoal_proto::catalog::{ChunkBound, ClusterCatalogView, ShardId, ZoneRange};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placement<'a> {
    Free,
    Zone(&'a str),
    Crossing,
}

impl Placement<'_> {
    /// The balancing group a placed chunk belongs to (`None`: the no-zone remainder).
    pub(super) fn group(self) -> Option<Option<String>> {
        match self {
            Placement::Free => Some(None),
            Placement::Zone(z) => Some(Some(z.to_owned())),
            Placement::Crossing => None,
        }
    }
}

/// `ranges` are one namespace's zone ranges: sorted by `min`, non-overlapping.
pub(super) fn placement<'a>(ranges: &'a [ZoneRange], min: &ChunkBound, max: &ChunkBound) -> Placement<'a> {
    let mut overlapping = ranges.iter().filter(|r| r.min < *max && *min < r.max);
    match (overlapping.next(), overlapping.next()) {
        (None, _) => Placement::Free,
        (Some(r), None) if r.min <= *min && *max <= r.max => Placement::Zone(&r.zone),
        _ => Placement::Crossing,
    }
}

/// Zone range bounds strictly inside `[min, max)`, sorted and distinct: where a crossing chunk
/// must be split.
pub(super) fn interior_boundaries(ranges: &[ZoneRange], min: &ChunkBound, max: &ChunkBound) -> Vec<Vec<u8>> {
    let mut points = BTreeSet::new();
    for r in ranges {
        for b in [&r.min, &r.max] {
            if let ChunkBound::Key(k) = b
                && min < b
                && b < max
            {
                points.insert(k.clone());
            }
        }
    }
    points.into_iter().collect()
}

/// Whether `b` is the bound of some zone range (merging across it would make a crossing chunk).
pub(super) fn is_range_bound(ranges: &[ZoneRange], b: &ChunkBound) -> bool {
    ranges.iter().any(|r| r.min == *b || r.max == *b)
}

/// Non-draining shards allowed to hold a chunk of `group` (`None`: any shard), by id.
pub(super) fn eligible_shards(catalog: &ClusterCatalogView, group: Option<&str>) -> Vec<ShardId> {
    catalog
        .shards()
        .values()
        .filter(|s| !s.is_draining() && group.is_none_or(|z| s.zones.contains(z)))
        .map(|s| s.id.clone())
        .collect()
}

/// The distinct zones of a namespace's ranges, in name order.
pub(super) fn zones_in(ranges: &[ZoneRange]) -> BTreeSet<&str> {
    ranges.iter().map(|r| r.zone.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(b: &[u8]) -> ChunkBound {
        ChunkBound::Key(b.to_vec())
    }

    #[test]
    fn placement_and_boundaries() {
        let ranges = vec![
            ZoneRange { min: k(b"c"), max: k(b"f"), zone: "a".into() },
            ZoneRange { min: k(b"f"), max: k(b"h"), zone: "a".into() },
        ];
        assert_eq!(placement(&ranges, &ChunkBound::Min, &k(b"c")), Placement::Free);
        assert_eq!(placement(&ranges, &k(b"d"), &k(b"e")), Placement::Zone("a"));
        assert_eq!(placement(&ranges, &k(b"d"), &k(b"g")), Placement::Crossing);
        assert_eq!(placement(&ranges, &ChunkBound::Min, &ChunkBound::Max), Placement::Crossing);
        assert_eq!(
            interior_boundaries(&ranges, &ChunkBound::Min, &ChunkBound::Max),
            vec![b"c".to_vec(), b"f".to_vec(), b"h".to_vec()]
        );
        assert!(interior_boundaries(&ranges, &k(b"c"), &k(b"f")).is_empty());
        assert!(is_range_bound(&ranges, &k(b"f")) && !is_range_bound(&ranges, &k(b"e")));
    }
}
