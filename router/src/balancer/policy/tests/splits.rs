//! Splits: by zone boundary, by size, by load after the hot window; jumbo handling; stale stats.

use super::*;

#[test]
fn balanced_collection_gets_nothing() {
    let mut fx = Fx::new(2);
    let p = points(3);
    fx.shard(NS, &refs(&p), &["shard0", "shard1"]);
    fx.stat_all(NS, 300 * 1024);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert_eq!(plan.notes, Vec::<String>::new());
    assert_eq!(plan.balanced, BTreeSet::from([NS.to_owned()]));
}

#[test]
fn empty_catalog_plans_nothing() {
    let fx = Fx::new(1);
    assert_eq!(fx.plan(), Plan::default());
}

#[test]
fn chunk_over_the_size_is_split_and_not_moved_in_the_same_round() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[b"m"], &["shard0"]);
    fx.stat(NS, &ChunkBound::Min, 5 * MIB, 0.0);
    fx.stat(NS, &k(b"m"), MIB / 2, 0.0);
    let plan = fx.plan();
    let actions: Vec<Action> = plan.decisions.iter().map(|d| d.action.clone()).collect();
    assert_eq!(
        actions,
        vec![
            fx.split_action(NS, &ChunkBound::Min, SplitAt::BySize, SplitReason::Size),
            // shard0 holds 5.5 MiB, shard1 nothing: the gap calls for a move, of the chunk not being split.
            fx.move_action(NS, &k(b"m"), "shard1", MoveReason::DataImbalance),
        ]
    );
    assert_eq!(
        plan.decisions[0].why,
        "chunk [MinKey, 0x6d) of test.c on shard0 holds 5.0 MiB, more than the 1.0 MiB chunk size; it is split \
         every half chunk size of data."
    );
    assert!(!plan.balanced.contains(NS));
}

#[test]
fn collection_chunk_size_overrides_the_cluster_setting() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    fx.stat(NS, &ChunkBound::Min, 3 * MIB / 2, 0.0);
    assert_eq!(fx.actions(), vec![fx.split_action(NS, &ChunkBound::Min, SplitAt::BySize, SplitReason::Size)]);
    fx.ok(Command::ConfigureCollection {
        ns: NS.into(),
        no_balance: None,
        chunk_size_mib: Some(2),
        enable_auto_merge: None,
    });
    assert_eq!(fx.actions(), vec![]);
}

#[test]
fn chunk_across_zone_ranges_is_split_at_the_boundaries_first() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[], &["shard0"]);
    fx.zone(NS, "eu", &["shard1"], k(b"c"), k(b"f"));
    // Even oversized, the boundary split comes first: it needs no key from the shard.
    fx.stat(NS, &ChunkBound::Min, 5 * MIB, 0.0);
    let plan = fx.plan();
    let actions: Vec<Action> = plan.decisions.iter().map(|d| d.action.clone()).collect();
    assert_eq!(
        actions,
        vec![fx.split_action(
            NS,
            &ChunkBound::Min,
            SplitAt::Points(vec![b"c".to_vec(), b"f".to_vec()]),
            SplitReason::ZoneBoundary
        )]
    );
    assert!(plan.decisions[0].why.contains("crosses zone range boundaries 0x63, 0x66"), "{}", plan.decisions[0].why);

    // After the split, the middle chunk moves into its zone.
    fx.split(NS, &ChunkBound::Min, &[b"c", b"f"]);
    fx.stats = Stats::default();
    assert_eq!(fx.actions(), vec![fx.move_action(NS, &k(b"c"), "shard1", MoveReason::ZoneViolation)]);
}

#[test]
fn zone_split_that_keeps_failing_is_given_up_with_a_note() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[], &["shard0"]);
    fx.zone(NS, "eu", &["shard1"], k(b"c"), k(b"f"));
    let version = fx.chunk(NS, &ChunkBound::Min).version;
    fx.memory.failed_splits.insert((NS.into(), ChunkBound::Min, version), 3);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert!(plan.notes.iter().any(|n| n.contains("failed to split there 3 times")), "{:?}", plan.notes);
}

fn hot(fx: &mut Fx, min: &ChunkBound, ops_per_sec: f64, key: Option<&[u8]>, reason: Option<&str>) {
    let stats = ChunkStats {
        bytes: MIB / 4,
        docs: 100,
        ops_per_sec,
        load_split_key: key.map(<[u8]>::to_vec),
        no_load_split_reason: reason.map(str::to_owned),
        load_unsplittable: false,
    };
    fx.report(NS, min, stats);
}

#[test]
fn hot_chunk_is_split_at_its_load_key_only_after_the_hot_window() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    hot(&mut fx, &ChunkBound::Min, 3000.0, Some(b"m"), None);
    observe_hot(&mut fx.memory, &fx.stats, &fx.params, fx.now);
    assert_eq!(fx.memory.hot_since_ms.get(&(NS.to_owned(), ChunkBound::Min)), Some(&T0));
    assert_eq!(fx.actions(), vec![]);

    fx.now = T0 + fx.params.load_split_after_ms - 1;
    observe_hot(&mut fx.memory, &fx.stats, &fx.params, fx.now);
    assert_eq!(fx.memory.hot_since_ms.get(&(NS.to_owned(), ChunkBound::Min)), Some(&T0), "hot since stays");
    assert_eq!(fx.actions(), vec![]);

    fx.now = T0 + fx.params.load_split_after_ms;
    let plan = fx.plan();
    let actions: Vec<Action> = plan.decisions.iter().map(|d| d.action.clone()).collect();
    assert_eq!(
        actions,
        vec![fx.split_action(NS, &ChunkBound::Min, SplitAt::Points(vec![b"m".to_vec()]), SplitReason::Load)]
    );
    assert_eq!(
        plan.decisions[0].why,
        "chunk [MinKey, MaxKey) of test.c on shard0 has served 3000 ops/s (threshold 2500 ops/s) for 10.0 s; it \
         is split at its load split key 0x6d."
    );
}

#[test]
fn a_chunk_that_cools_down_restarts_its_hot_window() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    hot(&mut fx, &ChunkBound::Min, 3000.0, Some(b"m"), None);
    observe_hot(&mut fx.memory, &fx.stats, &fx.params, fx.now);
    fx.now += 5_000;
    hot(&mut fx, &ChunkBound::Min, 100.0, Some(b"m"), None);
    observe_hot(&mut fx.memory, &fx.stats, &fx.params, fx.now);
    assert!(fx.memory.hot_since_ms.is_empty());
    hot(&mut fx, &ChunkBound::Min, 3000.0, Some(b"m"), None);
    observe_hot(&mut fx.memory, &fx.stats, &fx.params, fx.now);
    fx.now += 9_000;
    assert_eq!(fx.actions(), vec![], "hot for 9 s only since it heated up again");
    fx.now += 1_000;
    assert_eq!(fx.actions().len(), 1);
}

#[test]
fn hot_chunk_without_a_key_gets_a_note_with_the_reason() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    hot(&mut fx, &ChunkBound::Min, 3000.0, None, Some("one key holds 90% of the load"));
    fx.memory.hot_since_ms.insert((NS.into(), ChunkBound::Min), T0 - 60_000);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert_eq!(
        plan.notes,
        vec![
            "chunk [MinKey, MaxKey) of test.c on shard0 has served 3000 ops/s (threshold 2500 ops/s) for 60.0 s but \
         cannot be split by load: the shard found no load split key: one key holds 90% of the load."
                .to_owned()
        ]
    );
}

#[test]
fn load_key_on_the_chunk_bound_is_not_used() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[b"m"], &["shard0"]);
    hot(&mut fx, &k(b"m"), 3000.0, Some(b"m"), None);
    fx.memory.hot_since_ms.insert((NS.into(), k(b"m")), T0 - 60_000);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert!(plan.notes[0].contains("its load split key 0x6d is not inside the chunk"), "{:?}", plan.notes);
}

#[test]
fn repeated_split_failures_mark_the_chunk_jumbo() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    fx.stat(NS, &ChunkBound::Min, 5 * MIB, 0.0);
    let version = fx.chunk(NS, &ChunkBound::Min).version;
    fx.memory.failed_splits.insert((NS.into(), ChunkBound::Min, version), 2);
    assert_eq!(fx.actions(), vec![fx.split_action(NS, &ChunkBound::Min, SplitAt::BySize, SplitReason::Size)]);

    fx.memory.failed_splits.insert((NS.into(), ChunkBound::Min, version), 3);
    let plan = fx.plan();
    let actions: Vec<Action> = plan.decisions.iter().map(|d| d.action.clone()).collect();
    let epoch = fx.coll(NS).epoch;
    assert_eq!(
        actions,
        vec![Action::MarkJumbo { ns: NS.into(), epoch, min: ChunkBound::Min, max: ChunkBound::Max, version }]
    );
    assert!(plan.decisions[0].why.contains("failed to split 3 times (limit 3)"), "{}", plan.decisions[0].why);
}

#[test]
fn hot_chunk_with_its_load_on_one_key_fails_rounds_then_becomes_jumbo() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[], &["shard0"]);
    let unsplittable = ChunkStats {
        bytes: MIB / 4,
        docs: 100,
        ops_per_sec: 3000.0,
        load_split_key: None,
        no_load_split_reason: Some("the load is on one key".into()),
        load_unsplittable: true,
    };
    fx.report(NS, &ChunkBound::Min, unsplittable);
    fx.memory.hot_since_ms.insert((NS.into(), ChunkBound::Min), T0 - 60_000);
    let version = fx.chunk(NS, &ChunkBound::Min).version;
    let key = (NS.to_owned(), ChunkBound::Min, version);

    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert_eq!(plan.unsplittable, vec![key.clone()], "an attempt that failed");
    assert!(plan.notes[0].ends_with("the load is on one key (attempt 1 of 3)."), "{:?}", plan.notes);

    fx.memory.failed_splits.insert(key.clone(), 3);
    let plan = fx.plan();
    let epoch = fx.coll(NS).epoch;
    let jumbo = Action::MarkJumbo { ns: NS.into(), epoch, min: ChunkBound::Min, max: ChunkBound::Max, version };
    assert_eq!(plan.decisions.iter().map(|d| d.action.clone()).collect::<Vec<_>>(), vec![jumbo]);
    assert!(plan.unsplittable.is_empty());
    assert!(plan.decisions[0].why.contains("the load is on one key, but failed to split 3 times"));
}

#[test]
fn too_few_samples_is_not_a_failed_split_attempt() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    hot(&mut fx, &ChunkBound::Min, 3000.0, None, Some("too few samples (12 < 100)"));
    fx.memory.hot_since_ms.insert((NS.into(), ChunkBound::Min), T0 - 60_000);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert!(plan.unsplittable.is_empty());
}

#[test]
fn jumbo_chunk_is_neither_split_nor_moved() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[b"m"], &["shard0"]);
    fx.jumbo(NS, &ChunkBound::Min);
    fx.jumbo(NS, &k(b"m"));
    fx.stat(NS, &ChunkBound::Min, 5 * MIB, 0.0);
    fx.stat(NS, &k(b"m"), 5 * MIB, 3000.0);
    fx.memory.hot_since_ms.insert((NS.into(), k(b"m")), T0 - 60_000);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert_eq!(plan.notes.iter().filter(|n| n.contains("is jumbo (5.0 MiB")).count(), 2, "{:?}", plan.notes);
    assert!(plan.notes.iter().any(|n| n.contains("none of its chunks there can move")), "{:?}", plan.notes);
    assert!(!plan.balanced.contains(NS), "a 10 MiB gap remains");
}

#[test]
fn statistics_for_an_older_chunk_version_are_ignored() {
    let mut fx = Fx::new(1);
    fx.shard(NS, &[], &["shard0"]);
    fx.stat(NS, &ChunkBound::Min, 5 * MIB, 0.0);
    assert_eq!(fx.actions().len(), 1);
    // The chunk was split since the report: [Min, m) has a new version, the report is stale.
    fx.split(NS, &ChunkBound::Min, &[b"m"]);
    assert_eq!(fx.actions(), vec![]);
}

#[test]
fn reasons_show_bounds_as_shard_key_values() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[], &["shard0"]);
    let fifty = shoal_query::keystring::encode_compound(&[&bson::Bson::Int32(50)], &[]);
    fx.zone(NS, "eu", &["shard1"], ChunkBound::Key(fifty), ChunkBound::Max);
    let plan = fx.plan();
    assert_eq!(
        plan.decisions[0].why,
        "chunk [MinKey, MaxKey) of test.c on shard0 crosses zone range boundaries { x: 50 }; it is split there so \
         that each part lies in one zone."
    );
}
