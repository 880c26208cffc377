//! Property test: on random catalogs (chunk layouts, draining shards, a zone, jumbo flags,
//! statistics, some stale), every plan keeps the invariants of `policy/mod.rs`.

use proptest::prelude::*;

use super::super::zones::{Placement, placement};
use super::*;

#[derive(Debug, Clone)]
struct Case {
    shards: usize,
    /// Owner (index into the shards) of each chunk; its length is the chunk count.
    owners: Vec<usize>,
    jumbo: Vec<bool>,
    /// (bytes, ops/s, stale) per chunk; `None`: not reported.
    stats: Vec<Option<(u64, f64, bool)>>,
    /// Zone range as two key indices, and the shards in the zone (bit mask).
    zone: Option<(u8, u8, u8)>,
    draining: u8,
    hot_for_ms: u64,
    /// Failed split attempts recorded for every chunk.
    failed_splits: u32,
    merges_per_round: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..=5, 1usize..=24).prop_flat_map(|(shards, chunks)| {
        (
            Just(shards),
            // Skewed towards shard0, so that data imbalance is common.
            proptest::collection::vec(prop_oneof![2 => Just(0), 1 => 0..shards], chunks),
            proptest::collection::vec(proptest::bool::weighted(0.2), chunks),
            proptest::collection::vec(proptest::option::of(chunk_stats()), chunks),
            proptest::option::of((0u8..48, 0u8..48, 1u8..32)),
            prop_oneof![3 => Just(0u8), 1 => 0u8..32],
            0u64..20_000,
            0usize..3,
            0u32..4,
        )
            .prop_map(
                |(shards, owners, jumbo, stats, zone, draining, hot_for_ms, merges_per_round, failed_splits)| Case {
                    shards,
                    owners,
                    jumbo,
                    stats,
                    zone,
                    draining,
                    hot_for_ms,
                    merges_per_round,
                    failed_splits,
                },
            )
    })
}

/// (bytes, ops/s, stale): mostly small and cold so that merges and moves happen, not only splits.
fn chunk_stats() -> impl Strategy<Value = (u64, f64, bool)> {
    let bytes = prop_oneof![3 => 0u64..MIB / 8, 3 => 0u64..MIB, 1 => 0u64..4 * MIB];
    let ops = prop_oneof![3 => Just(0.0), 1 => 0.0f64..4000.0];
    (bytes, ops, proptest::bool::weighted(0.1))
}

/// Key `i` of a finer grid than the chunk bounds (`a`, `a5`, `b`, ...), so zone ranges may cut
/// through chunks.
fn zone_key(i: u8) -> ChunkBound {
    if i.is_multiple_of(2) { k(&[b'a' + i / 2]) } else { k(&[b'a' + i / 2, b'5']) }
}

fn build(case: &Case) -> Fx {
    let mut fx = Fx::new(case.shards);
    let names: Vec<String> = (0..case.shards).map(|i| format!("shard{i}")).collect();
    let p = points(u8::try_from(case.owners.len() - 1).expect("few chunks"));
    fx.shard(NS, &refs(&p), &["shard0"]);
    let mins: Vec<ChunkBound> = fx.coll(NS).chunks.keys().cloned().collect();
    for (min, owner) in mins.iter().zip(&case.owners) {
        if *owner != 0 {
            fx.migrate(NS, min, &names[*owner]);
        }
    }
    for (min, jumbo) in mins.iter().zip(&case.jumbo) {
        if *jumbo {
            fx.jumbo(NS, min);
        }
    }
    if let Some((a, b, mask)) = case.zone
        && a != b
    {
        let (lo, hi) = (a.min(b), a.max(b));
        let members: Vec<&str> =
            names.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, n)| n.as_str()).collect();
        if !members.is_empty() {
            fx.zone(NS, "z", &members, zone_key(lo), zone_key(hi));
        }
    }
    for (i, name) in names.iter().enumerate() {
        // Refused for the last non-draining shard: fine, it just stays.
        if case.draining & (1 << i) != 0 {
            let _ = fx.cat.apply(&Command::RemoveShard { shard: name.clone() }, fx.now);
        }
    }
    for (min, stat) in mins.iter().zip(&case.stats) {
        if let Some((bytes, ops, stale)) = *stat {
            let mut version = fx.chunk(NS, min).version;
            if stale {
                version.minor += 1000;
            }
            let s =
                ChunkStats { bytes, ops_per_sec: ops, load_split_key: Some(vec![b'a', b'5']), ..ChunkStats::default() };
            fx.stats.chunks.entry(NS.into()).or_default().insert(min.clone(), (version, s));
            fx.memory.hot_since_ms.insert((NS.into(), min.clone()), T0 - case.hot_for_ms);
        }
    }
    let versions: Vec<(ChunkBound, ChunkVersion)> =
        fx.coll(NS).chunks.values().map(|c| (c.min.clone(), c.version)).collect();
    for (min, version) in versions {
        fx.memory.failed_splits.insert((NS.into(), min, version), case.failed_splits);
    }
    fx.memory.since_ms = 0;
    fx.params.merges_per_round = case.merges_per_round;
    fx
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn plans_keep_their_invariants(case in case()) {
        let fx = build(&case);
        let plan = fx.plan();
        prop_assert_eq!(&plan, &fx.plan(), "deterministic");
        let moving = assert_one_move_per_shard(&plan);
        let coll = fx.coll(NS);
        let zones = fx.cat.zones();
        let mut touched = BTreeSet::new();
        for d in &plan.decisions {
            match &d.action {
                Action::Move { min, max, version, from, to, epoch, .. } => {
                    let chunk = &coll.chunks[min];
                    prop_assert!(!chunk.jumbo, "moved a jumbo chunk: {}", d.why);
                    prop_assert_eq!((&chunk.max, chunk.version, &chunk.shard, coll.epoch), (max, *version, from, *epoch));
                    prop_assert!(!fx.cat.shard(to).expect("recipient exists").is_draining(), "{}", d.why);
                    match placement(fx.cat.zone_ranges(NS), min, max) {
                        Placement::Zone(z) => prop_assert!(zones[z].contains(to), "{} left zone {}", d.why, z),
                        Placement::Crossing => prop_assert!(false, "moved a chunk across zones: {}", d.why),
                        Placement::Free => {}
                    }
                    prop_assert!(touched.insert(min.clone()), "chunk acted on twice");
                }
                Action::Split { min, version, at, reason, .. } => {
                    prop_assert_eq!(coll.chunks[min].version, *version);
                    prop_assert!(!coll.chunks[min].jumbo || *reason == SplitReason::ZoneBoundary, "{}", d.why);
                    if *reason != SplitReason::ZoneBoundary {
                        let fresh = fx.stats.chunks.get(NS).and_then(|m| m.get(min)).is_some_and(|(v, _)| v == version);
                        prop_assert!(fresh, "split on stale or missing statistics: {}", d.why);
                    }
                    if let SplitAt::Points(points) = at {
                        let c = &coll.chunks[min];
                        for p in points {
                            let b = ChunkBound::Key(p.clone());
                            prop_assert!(c.min < b && b < c.max, "split point outside the chunk: {}", d.why);
                        }
                    }
                    prop_assert!(touched.insert(min.clone()), "chunk acted on twice");
                }
                Action::MarkJumbo { min, .. } => prop_assert!(touched.insert(min.clone())),
                Action::Merge { shard, min, max, versions, .. } => {
                    prop_assert!(!moving.contains(shard), "merge on a moving shard: {}", d.why);
                    let run: Vec<&Chunk> = coll.chunks.range(min.clone()..max.clone()).map(|(_, c)| c).collect();
                    prop_assert!(run.len() >= 2 && run.last().map(|c| &c.max) == Some(max));
                    prop_assert_eq!(run.iter().map(|c| c.version).collect::<Vec<_>>(), versions.clone());
                    prop_assert!(run.iter().all(|c| &c.shard == shard && !c.jumbo && !touched.contains(&c.min)));
                }
            }
        }
        let merges = plan.decisions.iter().filter(|d| matches!(d.action, Action::Merge { .. })).count();
        prop_assert!(merges <= case.merges_per_round);
    }
}
