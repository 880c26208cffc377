//! Merges: only after the cooldown, never across a recent load-split boundary or a zone bound,
//! throttled, not on shards that move, not when automerge is off.

use super::*;

/// Two shards and `test.c` in `n` chunks cut at `a`, `b`, ... dealt over `shards`, each 10 KiB and
/// cold, with the lease held just long enough to merge.
fn small_chunks(n: u8, shards: &[&str]) -> Fx {
    let mut fx = Fx::new(2);
    let p = points(n - 1);
    fx.shard(NS, &refs(&p), shards);
    fx.stat_all(NS, 10 * 1024);
    fx.now = T0 + fx.params.merge_cooldown_ms;
    fx
}

fn merges(plan: &Plan) -> Vec<(ChunkBound, ChunkBound, usize, String)> {
    plan.decisions
        .iter()
        .filter_map(|d| match &d.action {
            Action::Merge { min, max, versions, shard, .. } => {
                Some((min.clone(), max.clone(), versions.len(), shard.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn small_cold_neighbours_merge_only_after_the_lease_cooldown() {
    let mut fx = small_chunks(4, &["shard0"]);
    fx.now -= 1;
    assert_eq!(fx.plan().decisions, vec![], "a new lease holder waits first");
    fx.now += 1;
    let plan = fx.plan();
    assert_eq!(merges(&plan), vec![(ChunkBound::Min, ChunkBound::Max, 4, "shard0".to_owned())]);
    assert_eq!(
        plan.decisions[0].why,
        "4 adjacent chunks of test.c on shard0 from MinKey to MaxKey hold 40.0 KiB and serve 0.0 ops/s together, \
         within a quarter of the chunk size (256.0 KiB) and under a quarter of the load threshold (625 ops/s); \
         they are merged."
    );
    let Action::Merge { versions, .. } = &plan.decisions[0].action else { unreachable!() };
    let want: Vec<ChunkVersion> = fx.coll(NS).chunks.values().map(|c| c.version).collect();
    assert_eq!(*versions, want);
    assert!(plan.balanced.contains(NS), "merges are housekeeping, not balancing work");
}

#[test]
fn merges_stop_at_the_size_and_load_limits() {
    let mut fx = small_chunks(4, &["shard0"]);
    fx.stat(NS, &k(b"b"), 200 * 1024, 0.0);
    // [Min, a) + [a, b) = 20 KiB; adding [b, c) would make 220 KiB, fine, then [c, Max) 230 KiB.
    assert_eq!(merges(&fx.plan()), vec![(ChunkBound::Min, ChunkBound::Max, 4, "shard0".to_owned())]);
    fx.stat(NS, &k(b"b"), 250 * 1024, 0.0);
    assert_eq!(merges(&fx.plan()), vec![(ChunkBound::Min, k(b"b"), 2, "shard0".to_owned())]);
    fx.params.merges_per_round = 2;
    fx.stat(NS, &k(b"b"), 10 * 1024, 0.0);
    fx.stat(NS, &k(b"a"), 10 * 1024, 700.0);
    // A chunk at 700 ops/s is over a quarter of the load threshold alone; the others pair up.
    assert_eq!(merges(&fx.plan()), vec![(k(b"b"), ChunkBound::Max, 2, "shard0".to_owned())]);
}

#[test]
fn chunks_without_statistics_or_on_different_shards_do_not_merge() {
    let fx = small_chunks(4, &["shard0", "shard1"]);
    assert_eq!(fx.plan().decisions, vec![], "neighbours alternate shards");
    let mut fx = small_chunks(2, &["shard0"]);
    fx.stats = Stats::default();
    fx.stat(NS, &ChunkBound::Min, 10 * 1024, 0.0);
    assert_eq!(fx.plan().decisions, vec![]);
}

#[test]
fn a_recent_load_split_boundary_is_not_merged_away() {
    let mut fx = small_chunks(4, &["shard0"]);
    fx.memory.load_split_boundaries.insert((NS.into(), b"b".to_vec()), fx.now - 1000);
    fx.params.merges_per_round = 2;
    assert_eq!(
        merges(&fx.plan()),
        vec![(ChunkBound::Min, k(b"b"), 2, "shard0".to_owned()), (k(b"b"), ChunkBound::Max, 2, "shard0".to_owned()),]
    );
    fx.now += fx.params.merge_cooldown_ms;
    assert_eq!(merges(&fx.plan()), vec![(ChunkBound::Min, ChunkBound::Max, 4, "shard0".to_owned())]);
}

#[test]
fn merges_are_throttled_per_round() {
    let mut fx = small_chunks(4, &["shard0"]);
    fx.zone(NS, "eu", &["shard0"], k(b"b"), ChunkBound::Max);
    assert_eq!(merges(&fx.plan()), vec![(ChunkBound::Min, k(b"b"), 2, "shard0".to_owned())]);
    fx.params.merges_per_round = 5;
    // Never across the zone bound at b.
    assert_eq!(
        merges(&fx.plan()),
        vec![(ChunkBound::Min, k(b"b"), 2, "shard0".to_owned()), (k(b"b"), ChunkBound::Max, 2, "shard0".to_owned()),]
    );
}

#[test]
fn no_merge_on_a_shard_with_a_move_nor_with_automerge_off() {
    let mut fx = small_chunks(2, &["shard0"]);
    let p = points(7);
    fx.shard("test.a", &refs(&p), &["shard0"]);
    fx.stat_all("test.a", MIB);
    let plan = fx.plan();
    assert_eq!(plan.decisions.len(), 1);
    assert!(matches!(plan.decisions[0].action, Action::Move { .. }), "{plan:#?}");

    let mut fx = small_chunks(2, &["shard0"]);
    assert_eq!(merges(&fx.plan()).len(), 1);
    fx.ok(Command::SetSettings(SettingsUpdate { automerge: Some(false), ..SettingsUpdate::default() }));
    assert_eq!(fx.plan().decisions, vec![]);

    // Per collection: `enableAutoMerge: false` (mongosh's sh.disableAutoMerger).
    let mut fx = small_chunks(2, &["shard0"]);
    let off = Command::ConfigureCollection {
        ns: NS.into(),
        no_balance: None,
        chunk_size_mib: None,
        enable_auto_merge: Some(false),
    };
    fx.ok(off);
    assert_eq!(fx.plan().decisions, vec![]);
}
