//! Moves: draining first, then zones, data imbalance (to an empty new shard too), load imbalance;
//! one move per shard; noBalance.

use super::*;

/// `n` chunks of `test.c` cut at `a`, `b`, ..., dealt over `shards`, each reported at `bytes`.
fn spread(fx: &mut Fx, n: u8, shards: &[&str], bytes: u64) {
    let p = points(n - 1);
    fx.shard(NS, &refs(&p), shards);
    fx.stat_all(NS, bytes);
}

#[test]
fn imbalance_moves_from_the_largest_to_an_empty_new_shard() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 24, &["shard0", "shard1"], MIB);
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![], "12 MiB each: balanced");
    assert!(plan.balanced.contains(NS));

    fx.add_shard("shard2");
    let plan = fx.plan();
    let actions: Vec<Action> = plan.decisions.iter().map(|d| d.action.clone()).collect();
    // Ties between shard0 and shard1 go to the lower id; every chunk is 1 MiB, so the lowest key.
    assert_eq!(actions, vec![fx.move_action(NS, &ChunkBound::Min, "shard2", MoveReason::DataImbalance)]);
    assert_eq!(
        plan.decisions[0].why,
        "shard0 holds 12.0 MiB of test.c and shard2 0 B; the gap exceeds 3 × 1.0 MiB, so chunk [MinKey, 0x61) \
         (1.0 MiB) moves from shard0 to shard2."
    );
    assert!(!plan.balanced.contains(NS));
}

#[test]
fn gap_at_the_threshold_is_balanced() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 4, &["shard0"], MIB);
    fx.stat(NS, &k(b"c"), 0, 0.0);
    assert_eq!(fx.actions(), vec![], "3 MiB against 0 is not more than 3 × 1 MiB");
    fx.stat(NS, &k(b"c"), 1, 0.0);
    assert_eq!(fx.moves(), vec![(ChunkBound::Min, "shard0".into(), "shard1".into(), MoveReason::DataImbalance)]);
}

#[test]
fn imbalance_prefers_the_chunk_that_best_closes_the_gap() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 8, &["shard0"], 0);
    let kib = [100, 1024, 300, 900, 500, 600, 200, 400];
    let mins: Vec<ChunkBound> = fx.coll(NS).chunks.keys().cloned().collect();
    for (min, kib) in mins.iter().zip(kib) {
        fx.stat(NS, min, kib * 1024, 0.0);
    }
    // 3.9 MiB against 0: the ideal chunk is half the gap; the closest is the 1 MiB one.
    assert_eq!(fx.moves(), vec![(k(b"a"), "shard0".into(), "shard1".into(), MoveReason::DataImbalance)]);
}

#[test]
fn chunks_without_statistics_count_half_the_chunk_size() {
    let mut fx = Fx::new(2);
    let p = points(7);
    fx.shard(NS, &refs(&p), &["shard0"]);
    let plan = fx.plan();
    assert_eq!(plan.decisions.len(), 1, "8 × 0.5 MiB estimated against 0");
    assert!(plan.decisions[0].why.ends_with("(chunks without statistics counted at half the chunk size)."));
}

#[test]
fn at_most_one_move_per_shard() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 24, &["shard0", "shard1"], MIB);
    fx.add_shard("shard2");
    fx.add_shard("shard3");
    let plan = fx.plan();
    assert_eq!(
        fx.moves(),
        vec![
            (ChunkBound::Min, "shard0".into(), "shard2".into(), MoveReason::DataImbalance),
            (k(b"a"), "shard1".into(), "shard3".into(), MoveReason::DataImbalance),
        ]
    );
    assert_eq!(assert_one_move_per_shard(&plan).len(), 4);
}

#[test]
fn draining_shard_is_emptied_first_to_the_least_loaded_shard() {
    let mut fx = Fx::new(3);
    // shard0: 6 chunks, shard1: 4, shard2: 2, each 1 MiB; shard2 is being removed.
    let p = points(11);
    let owners = ["shard0", "shard0", "shard0", "shard1", "shard1", "shard2"];
    fx.shard(NS, &refs(&p), &["shard0", "shard1", "shard2"]);
    let mins: Vec<ChunkBound> = fx.coll(NS).chunks.keys().cloned().collect();
    for (i, min) in mins.iter().enumerate() {
        let want = owners[i % owners.len()];
        if fx.chunk(NS, min).shard != want {
            fx.migrate(NS, min, want);
        }
    }
    fx.stat_all(NS, MIB);
    fx.drain("shard2");
    let plan = fx.plan();
    let first_on_2 = fx.coll(NS).chunks.values().find(|c| c.shard == "shard2").map(|c| c.min.clone()).expect("chunk");
    // shard1 holds less of test.c than shard0; the 6 − 4 gap alone would not move anything, and
    // shard0 has no partner left once shard1 and shard2 are busy.
    assert_eq!(fx.moves(), vec![(first_on_2, "shard2".into(), "shard1".into(), MoveReason::Draining)]);
    assert!(plan.decisions[0].why.starts_with("shard2 is draining; chunk"), "{}", plan.decisions[0].why);
    assert!(
        plan.decisions[0].why.ends_with("which holds the least of test.c (4.0 MiB) among the non-draining shards.")
    );
}

#[test]
fn draining_beats_imbalance_for_the_same_shards() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 8, &["shard0"], MIB);
    fx.add_shard("shard2");
    fx.migrate(NS, &ChunkBound::Min, "shard1");
    fx.stat_all(NS, MIB);
    fx.drain("shard1");
    // Data would move shard0 → shard1 or shard2; draining takes shard1 → shard2 first.
    assert_eq!(fx.moves(), vec![(ChunkBound::Min, "shard1".into(), "shard2".into(), MoveReason::Draining)]);
}

#[test]
fn draining_chunk_in_a_zone_goes_to_that_zone() {
    let mut fx = Fx::new(3);
    fx.shard(NS, &[b"m"], &["shard0", "shard1"]);
    fx.zone(NS, "eu", &["shard0", "shard1"], k(b"m"), ChunkBound::Max);
    fx.stat_all(NS, MIB);
    fx.drain("shard1");
    // shard2 is empty but outside eu: the chunk [m, Max) may only go to shard0.
    assert_eq!(fx.moves(), vec![(k(b"m"), "shard1".into(), "shard0".into(), MoveReason::Draining)]);
}

#[test]
fn jumbo_chunk_on_a_draining_shard_stays_with_a_note() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[b"m"], &["shard0", "shard1"]);
    fx.jumbo(NS, &k(b"m"));
    fx.drain("shard1");
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert!(plan.notes.iter().any(|n| n.contains("on draining shard shard1 is jumbo")), "{:?}", plan.notes);
    assert!(!plan.balanced.contains(NS));
}

#[test]
fn chunk_in_a_zone_moves_to_the_least_loaded_shard_of_the_zone() {
    let mut fx = Fx::new(4);
    fx.shard(NS, &[b"f", b"m"], &["shard0", "shard1", "shard2"]);
    fx.migrate(NS, &ChunkBound::Min, "shard3");
    fx.migrate(NS, &k(b"f"), "shard3");
    fx.zone(NS, "eu", &["shard1", "shard2"], ChunkBound::Min, k(b"f"));
    fx.stat(NS, &ChunkBound::Min, MIB, 0.0);
    fx.stat(NS, &k(b"f"), MIB, 0.0);
    fx.stat(NS, &k(b"m"), MIB, 0.0);
    let plan = fx.plan();
    // shard1 holds nothing, shard2 holds [m, Max): shard1 is the zone's least loaded.
    assert_eq!(fx.moves(), vec![(ChunkBound::Min, "shard3".into(), "shard1".into(), MoveReason::ZoneViolation)]);
    assert_eq!(
        plan.decisions[0].why,
        "chunk [MinKey, 0x66) of test.c lies in zone eu but sits on shard3, which is not in eu; it moves to \
         shard1, the zone's least loaded shard (0 B of test.c)."
    );
}

#[test]
fn zones_are_balanced_among_their_own_shards() {
    let mut fx = Fx::new(3);
    let p = points(9);
    fx.shard(NS, &refs(&p), &["shard0"]);
    fx.zone(NS, "eu", &["shard0", "shard2"], ChunkBound::Min, k(b"i"));
    fx.stat_all(NS, MIB);
    // eu: shard0 9 MiB, shard2 0: the move stays inside eu though shard1 is empty too.
    let plan = fx.plan();
    assert_eq!(fx.moves(), vec![(ChunkBound::Min, "shard0".into(), "shard2".into(), MoveReason::DataImbalance)]);
    assert!(plan.decisions[0].why.starts_with("shard0 holds 9.0 MiB of test.c in zone eu and shard2 0 B;"));
}

#[test]
fn load_imbalance_moves_the_hottest_chunk_that_narrows_the_gap() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[b"f", b"m", b"t"], &["shard0"]);
    fx.migrate(NS, &k(b"t"), "shard1");
    fx.stat(NS, &ChunkBound::Min, MIB, 2000.0);
    fx.stat(NS, &k(b"f"), MIB, 1500.0);
    fx.stat(NS, &k(b"m"), MIB, 500.0);
    fx.stat(NS, &k(b"t"), MIB, 100.0);
    let plan = fx.plan();
    assert_eq!(fx.moves(), vec![(ChunkBound::Min, "shard0".into(), "shard1".into(), MoveReason::LoadImbalance)]);
    assert_eq!(
        plan.decisions[0].why,
        "shard0 serves 4000 ops/s on test.c, over the 2500 ops/s threshold and more than twice shard1's 100 ops/s; \
         its hottest chunk that narrows the gap, [MinKey, 0x66) at 2000 ops/s, moves from shard0 to shard1."
    );
}

#[test]
fn load_move_that_would_not_even_things_out_is_not_made() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[], &["shard0"]);
    fx.stat(NS, &ChunkBound::Min, MIB, 3000.0);
    let plan = fx.plan();
    // Moving the only hot chunk would just swap which shard is hot.
    assert_eq!(plan.decisions, vec![]);
    assert!(
        plan.notes.iter().any(|n| n.contains("no movable chunk of it would even the load out")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn load_under_the_threshold_or_twice_the_least_is_left_alone() {
    let mut fx = Fx::new(2);
    fx.shard(NS, &[b"m"], &["shard0", "shard1"]);
    fx.split(NS, &ChunkBound::Min, &[b"f"]);
    fx.stat(NS, &ChunkBound::Min, MIB, 1500.0);
    fx.stat(NS, &k(b"f"), MIB, 1500.0);
    fx.stat(NS, &k(b"m"), MIB, 1600.0);
    assert_eq!(fx.moves(), vec![], "3000 against 1600 is not twice");
    fx.stat(NS, &k(b"m"), MIB, 1400.0);
    assert_eq!(fx.moves().len(), 1, "3000 against 1400 is");
}

#[test]
fn no_balance_collection_is_skipped_with_a_note() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 8, &["shard0"], 2 * MIB);
    fx.ok(Command::ConfigureCollection {
        ns: NS.into(),
        no_balance: Some(true),
        chunk_size_mib: None,
        enable_auto_merge: None,
    });
    let plan = fx.plan();
    assert_eq!(plan.decisions, vec![]);
    assert_eq!(plan.notes, vec!["test.c is skipped: balancing is disabled for it (noBalance).".to_owned()]);
    assert!(plan.balanced.is_empty());
}

#[test]
fn one_move_per_shard_across_collections() {
    let mut fx = Fx::new(2);
    spread(&mut fx, 8, &["shard0"], MIB);
    let p = points(7);
    fx.shard("test.d", &refs(&p), &["shard0"]);
    fx.stat_all("test.d", MIB);
    let plan = fx.plan();
    assert_eq!(fx.moves(), vec![(ChunkBound::Min, "shard0".into(), "shard1".into(), MoveReason::DataImbalance)]);
    assert_eq!(plan.decisions.len(), 1);
    assert!(!plan.balanced.contains("test.d"), "test.d needs a move too, next round");
}
