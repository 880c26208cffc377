//! Property tests of the catalog state machine: random sequences of splits, merges, migrations,
//! jumbo flags, shard-key refines, lease changes and clock jumps, with valid and invalid parameters (stale versions,
//! wrong donors, unsorted or out-of-range split points, stale fencing tokens), must
//! - never break coverage of `Min..Max` or any other catalog invariant;
//! - never lower a range's version, and give every new chunk version a value above the
//!   collection version before the command;
//! - leave the catalog exactly unchanged when a command is refused, and bump the catalog version
//!   by exactly one when it changes anything;
//! - keep an incrementally refreshed routing table equal to the full one;
//! - replay to the same catalog, which survives a JSON round trip (the Raft codec).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use proptest::prelude::*;
use shoal_configsvr::catalog::invariants::{check_collection, check_versions_grew};
use shoal_configsvr::catalog::{
    BALANCER_LEASE, ChangedChunks, ChunkBound, ChunkVersion, ClusterCatalog, Command, Epoch, Fencing, InitialChunks,
    KeyField, KeyFieldKind, KeyPattern, RoutingTable,
};

const NS: &str = "db.c";
const SHARDS: [&str; 3] = ["s0", "s1", "s2"];
const HOLDERS: [&str; 2] = ["router-a", "router-b"];
const T0: u64 = 1_700_000_000_000;

/// Which fencing token a chunk command carries.
#[derive(Debug, Clone, Copy)]
enum Fence {
    None,
    /// The current balancer lease token (if there is one).
    Current,
    /// A token one below the counter: stale once the lease changed hands.
    Old,
}

#[derive(Debug, Clone)]
enum Op {
    Split {
        chunk: usize,
        points: Vec<Vec<u8>>,
        tidy: bool,
        stale: bool,
        fence: Fence,
    },
    /// `same_shard`: start at the first run of neighbours on one shard, so the merge can succeed.
    Merge {
        start: usize,
        len: usize,
        same_shard: bool,
        stale: bool,
        fence: Fence,
    },
    Move {
        chunk: usize,
        to: usize,
        wrong_from: bool,
        stale: bool,
        fence: Fence,
    },
    Jumbo {
        chunk: usize,
        on: bool,
        stale: bool,
    },
    Acquire {
        holder: usize,
        ttl_ms: u64,
    },
    Release {
        holder: usize,
    },
    Advance {
        ms: u64,
    },
    /// `refineCollectionShardKey` with one more field; `suffix` stands for the MinKey encoding.
    /// Keys here are not prefix-free, so some refines must be refused as reordering bounds.
    Refine {
        suffix: u8,
        stale: bool,
    },
}

/// Keys from a small alphabet, so split points often hit bounds and each other.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0u8..8, 0..4)
}

fn fence() -> impl Strategy<Value = Fence> {
    prop_oneof![6 => Just(Fence::None), 2 => Just(Fence::Current), 1 => Just(Fence::Old)]
}

fn op() -> impl Strategy<Value = Op> {
    let idx = 0usize..64;
    let (sometimes, rarely) = (prop::bool::weighted(0.15), prop::bool::weighted(0.1));
    let split = (idx.clone(), prop::collection::vec(key(), 0..5), prop::bool::weighted(0.7), sometimes, fence())
        .prop_map(|(chunk, points, tidy, stale, fence)| Op::Split { chunk, points, tidy, stale, fence });
    let merge = (idx.clone(), 1usize..5, any::<bool>(), sometimes, fence())
        .prop_map(|(start, len, same_shard, stale, fence)| Op::Merge { start, len, same_shard, stale, fence });
    let migrate = (idx.clone(), 0usize..3, rarely, sometimes, fence())
        .prop_map(|(chunk, to, wrong_from, stale, fence)| Op::Move { chunk, to, wrong_from, stale, fence });
    let jumbo =
        (idx, any::<bool>(), prop::bool::weighted(0.2)).prop_map(|(chunk, on, stale)| Op::Jumbo { chunk, on, stale });
    prop_oneof![
        5 => split,
        3 => merge,
        4 => migrate,
        1 => jumbo,
        1 => (0usize..2, 1u64..5_000).prop_map(|(holder, ttl_ms)| Op::Acquire { holder, ttl_ms }),
        1 => (0usize..2).prop_map(|holder| Op::Release { holder }),
        1 => (0u64..3_000).prop_map(|ms| Op::Advance { ms }),
        1 => (0u8..8, prop::bool::weighted(0.2)).prop_map(|(suffix, stale)| Op::Refine { suffix, stale }),
    ]
}

fn setup() -> ClusterCatalog {
    let mut cat = ClusterCatalog::new();
    let mut apply = |cmd: Command| cat.apply(&cmd, T0).map(|_| ()).unwrap_or_else(|e| panic!("setup `{cmd}`: {e}"));
    for (i, s) in SHARDS.iter().enumerate() {
        apply(Command::AddShard {
            shard: (*s).into(),
            replica_set: format!("rs{i}"),
            members: vec![format!("{s}:27018")],
        });
    }
    apply(Command::CreateDatabase { name: "db".into(), primary: "s0".into(), uuid: uuid::Uuid::from_bytes([1; 16]) });
    apply(Command::ShardCollection {
        ns: NS.into(),
        uuid: uuid::Uuid::from_bytes([2; 16]),
        epoch: Epoch([7; 12]),
        key: KeyPattern::range(&["x"]),
        unique: false,
        initial: InitialChunks::Distributed {
            split_points: vec![vec![1], vec![2, 2]],
            shards: vec!["s0".into(), "s1".into()],
        },
    });
    cat
}

/// A version that differs from `v`, as a caller with an outdated read would send.
fn stale(v: ChunkVersion) -> ChunkVersion {
    if v.minor > 0 { ChunkVersion::new(v.major, v.minor - 1) } else { ChunkVersion::new(v.major + 1, 0) }
}

/// Turns an abstract op into a command against the current catalog (`None` for a time jump).
fn command(cat: &ClusterCatalog, op: &Op) -> Option<Command> {
    let coll = cat.collection(NS).expect("the collection stays sharded");
    let chunks: Vec<_> = coll.chunks.values().collect();
    let pick = |i: usize| chunks[i % chunks.len()];
    let fencing = |f: Fence| {
        let lease = cat.leases().get(BALANCER_LEASE);
        match f {
            Fence::None => None,
            Fence::Current => Some(Fencing { lease: BALANCER_LEASE.into(), token: lease.map_or(0, |l| l.token) }),
            Fence::Old => {
                Some(Fencing { lease: BALANCER_LEASE.into(), token: cat.leases().last_token().saturating_sub(1) })
            }
        }
    };
    let ns = NS.to_owned();
    Some(match op {
        Op::Split { chunk, points, tidy, stale: s, fence } => {
            let c = pick(*chunk);
            let mut points = points.clone();
            if *tidy {
                // Extensions of the chunk's min, sorted, distinct and below its max: the split
                // should succeed (unless no point fits).
                if let ChunkBound::Key(min) = &c.min {
                    points = points.into_iter().map(|p| [min.as_slice(), &p].concat()).collect();
                }
                points.sort();
                points.dedup();
                points.retain(|p| c.min < ChunkBound::Key(p.clone()) && ChunkBound::Key(p.clone()) < c.max);
            }
            let version = if *s { stale(c.version) } else { c.version };
            Command::SplitChunk {
                ns,
                epoch: coll.epoch,
                min: c.min.clone(),
                expected_version: version,
                split_points: points,
                fencing: fencing(*fence),
            }
        }
        Op::Merge { start, len, same_shard, stale: s, fence } => {
            let mut first = start % chunks.len();
            let mut last = (first + len - 1).min(chunks.len() - 1);
            if *same_shard {
                let n = chunks.len();
                let pair =
                    (0..n).map(|i| (first + i) % n).find(|&i| i + 1 < n && chunks[i].shard == chunks[i + 1].shard);
                if let Some(i) = pair {
                    first = i;
                    last = i + 1;
                    while last + 1 < n && last - first + 1 < (*len).max(2) && chunks[last + 1].shard == chunks[i].shard
                    {
                        last += 1;
                    }
                }
            }
            let mut expected_versions: Vec<_> = chunks[first..=last].iter().map(|c| c.version).collect();
            if *s {
                expected_versions[0] = stale(expected_versions[0]);
            }
            Command::MergeChunks {
                ns,
                epoch: coll.epoch,
                min: chunks[first].min.clone(),
                max: chunks[last].max.clone(),
                expected_versions,
                fencing: fencing(*fence),
            }
        }
        Op::Move { chunk, to, wrong_from, stale: s, fence } => {
            let c = pick(*chunk);
            let from = if *wrong_from { SHARDS.iter().find(|s| **s != c.shard).map_or("s0", |s| *s) } else { &c.shard };
            Command::CommitMigration {
                ns,
                epoch: coll.epoch,
                min: c.min.clone(),
                max: c.max.clone(),
                from: from.into(),
                to: SHARDS[*to].into(),
                expected_version: if *s { stale(c.version) } else { c.version },
                fencing: fencing(*fence),
            }
        }
        Op::Jumbo { chunk, on, stale: s } => {
            let c = pick(*chunk);
            Command::SetChunkJumbo {
                ns,
                epoch: coll.epoch,
                min: c.min.clone(),
                expected_version: if *s { stale(c.version) } else { c.version },
                jumbo: *on,
                fencing: None,
            }
        }
        Op::Acquire { holder, ttl_ms } => {
            Command::AcquireLease { name: BALANCER_LEASE.into(), holder: HOLDERS[*holder].into(), ttl_ms: *ttl_ms }
        }
        Op::Release { holder } => Command::ReleaseLease {
            name: BALANCER_LEASE.into(),
            holder: HOLDERS[*holder].into(),
            token: cat.leases().get(BALANCER_LEASE).map_or(0, |l| l.token),
        },
        Op::Refine { suffix, stale } => {
            let mut key = coll.key.clone();
            key.fields.push(KeyField { name: format!("f{}", key.fields.len()), kind: KeyFieldKind::Range });
            // Derived from the catalog version, so a replay proposes the same epochs.
            let mut new_epoch = [0xEE; 12];
            new_epoch[..8].copy_from_slice(&cat.version().to_be_bytes());
            Command::RefineShardKey {
                ns,
                epoch: if *stale { Epoch([0xAB; 12]) } else { coll.epoch },
                new_epoch: Epoch(new_epoch),
                key,
                bound_suffix: vec![*suffix],
            }
        }
        Op::Advance { .. } => return None,
    })
}

/// Applies `ops`, checking every property after each step; returns the final catalog and how
/// many commands succeeded.
fn run(ops: &[Op]) -> Result<(ClusterCatalog, usize), TestCaseError> {
    let mut cat = setup();
    let mut now = T0;
    let mut cached: RoutingTable = cat.routing_table(NS).expect("sharded");
    let mut successes = 0;
    for (step, op) in ops.iter().enumerate() {
        if let Op::Advance { ms } = op {
            now += ms;
        }
        let Some(cmd) = command(&cat, op) else { continue };
        let before = cat.clone();
        let before_coll = before.collection(NS).expect("sharded").clone();
        match cat.apply(&cmd, now) {
            Err(e) => {
                prop_assert_eq!(&cat, &before, "step {}: refused `{}` ({}) changed the catalog", step, cmd, e);
            }
            Ok(_) => {
                successes += 1;
                if let Err(v) = cat.check_invariants() {
                    return Err(TestCaseError::fail(format!("step {step}: `{cmd}` broke {v}")));
                }
                let coll = cat.collection(NS).expect("sharded");
                check_collection(coll).map_err(|v| TestCaseError::fail(format!("step {step}: {v}")))?;
                check_versions_grew(&before_coll, coll)
                    .map_err(|v| TestCaseError::fail(format!("step {step}: {v}")))?;
                let old_versions: Vec<_> = before_coll.chunks.values().map(|c| c.version).collect();
                for c in coll.chunks.values().filter(|c| !old_versions.contains(&c.version)) {
                    prop_assert!(
                        c.version > before_coll.version,
                        "step {}: new version {} not above {}",
                        step,
                        c.version,
                        before_coll.version
                    );
                }
                let expected_version = if cat == before { before.version() } else { before.version() + 1 };
                // The catalog version is part of the state, so compare the rest through it.
                prop_assert_eq!(cat.version(), expected_version, "step {}: `{}`", step, cmd);
                prop_assert!(cat.leases().last_token() >= before.leases().last_token());
            }
        }
        // Refresh the cached routing table incrementally every few steps.
        if step % 3 == 2 {
            match cat.chunks_since(NS, cached.epoch, cached.version) {
                ChangedChunks::Changed { collection_version, chunks } => {
                    cached.merge_changes(collection_version.version, &chunks);
                    let full = cat.routing_table(NS);
                    prop_assert_eq!(Some(&cached), full.as_ref(), "step {}: incremental refresh", step);
                }
                // A refine started a new generation: reload, as routers and shards do.
                ChangedChunks::EpochChanged { .. } => cached = cat.routing_table(NS).expect("sharded"),
                other => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            }
        }
    }
    Ok((cat, successes))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn chunk_commits_keep_every_invariant(ops in prop::collection::vec(op(), 1..80)) {
        let (cat, _) = run(&ops)?;
        // Replaying the same commands gives the same catalog, which survives the Raft codec.
        let (again, _) = run(&ops)?;
        prop_assert_eq!(&cat, &again);
        let json = serde_json::to_vec(&cat).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: ClusterCatalog = serde_json::from_slice(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back, cat);
    }
}

/// The generator is not so hostile that nothing succeeds: most runs commit real changes.
#[test]
fn sequences_mostly_make_progress() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(op(), 40);
    let mut total = 0;
    for _ in 0..20 {
        let ops = strategy.new_tree(&mut runner).expect("generate").current();
        total += run(&ops).expect("properties hold").1;
    }
    assert!(total > 200, "only {total} of 800 commands succeeded");
}
