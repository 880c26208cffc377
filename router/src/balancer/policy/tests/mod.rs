//! Tests of the decision core on real catalogs built through `ClusterCatalog::apply`, with hand-made
//! statistics: one file per decision family, and a property test of the plan invariants.

mod merges;
mod moves;
mod properties;
mod splits;

use std::collections::BTreeSet;

use shoal_configsvr::catalog::{ClusterCatalog, api};
use shoal_proto::catalog::{
    Chunk, ChunkBound, Collection, Command, Epoch, InitialChunks, KeyPattern, Parts, SettingsUpdate,
};
use uuid::Uuid;

use super::*;

/// A plausible wall-clock time.
const T0: u64 = 1_700_000_000_000;
const NS: &str = "test.c";
const MIB: u64 = 1 << 20;

fn k(bytes: &[u8]) -> ChunkBound {
    ChunkBound::Key(bytes.to_vec())
}

/// A catalog with statistics, memory and parameters, and the time the plan is made at.
struct Fx {
    cat: ClusterCatalog,
    stats: Stats,
    memory: Memory,
    params: Params,
    now: u64,
}

impl Fx {
    /// `n` shards `shard0..`, database `test` on `shard0`, a 1 MiB chunk size, and a lease held
    /// since now (so nothing merges unless a test says so).
    fn new(n: usize) -> Self {
        let mut fx = Self {
            cat: ClusterCatalog::new(),
            stats: Stats::default(),
            memory: Memory { since_ms: T0, ..Memory::default() },
            params: Params::default(),
            now: T0,
        };
        fx.ok(Command::InitCluster { cluster_id: Epoch([9; 12]) });
        for i in 0..n {
            fx.add_shard(&format!("shard{i}"));
        }
        fx.ok(Command::CreateDatabase {
            name: "test".into(),
            primary: "shard0".into(),
            uuid: Uuid::from_bytes([1; 16]),
        });
        fx.ok(Command::SetSettings(SettingsUpdate { chunk_size_mib: Some(1), ..SettingsUpdate::default() }));
        fx
    }

    fn ok(&mut self, cmd: Command) {
        if let Err(e) = self.cat.apply(&cmd, self.now) {
            panic!("`{cmd}` refused: {e}");
        }
    }

    fn add_shard(&mut self, id: &str) {
        self.ok(Command::AddShard {
            shard: id.into(),
            replica_set: format!("rs-{id}"),
            members: vec![format!("{id}-a:27018")],
        });
    }

    /// Shards `ns` on `{x: 1}`, cut at `points` and dealt round-robin over `shards`.
    fn shard(&mut self, ns: &str, points: &[&[u8]], shards: &[&str]) {
        let initial = if points.is_empty() && shards == ["shard0"] {
            InitialChunks::Single
        } else {
            InitialChunks::Distributed {
                split_points: points.iter().map(|p| p.to_vec()).collect(),
                shards: shards.iter().map(|s| (*s).to_owned()).collect(),
            }
        };
        self.ok(Command::ShardCollection {
            ns: ns.into(),
            uuid: Uuid::from_bytes([2; 16]),
            epoch: Epoch([7; 12]),
            key: KeyPattern::range(&["x"]),
            unique: false,
            initial,
        });
    }

    fn coll(&self, ns: &str) -> &Collection {
        self.cat.collection(ns).expect("collection is sharded")
    }

    fn chunk(&self, ns: &str, min: &ChunkBound) -> &Chunk {
        &self.coll(ns).chunks[min]
    }

    fn migrate(&mut self, ns: &str, min: &ChunkBound, to: &str) {
        let c = self.chunk(ns, min).clone();
        let epoch = self.coll(ns).epoch;
        self.ok(Command::CommitMigration {
            ns: ns.into(),
            epoch,
            min: c.min,
            max: c.max,
            from: c.shard,
            to: to.into(),
            expected_version: c.version,
            fencing: None,
        });
    }

    fn split(&mut self, ns: &str, min: &ChunkBound, points: &[&[u8]]) {
        let version = self.chunk(ns, min).version;
        let epoch = self.coll(ns).epoch;
        self.ok(Command::SplitChunk {
            ns: ns.into(),
            epoch,
            min: min.clone(),
            expected_version: version,
            split_points: points.iter().map(|p| p.to_vec()).collect(),
            fencing: None,
        });
    }

    fn jumbo(&mut self, ns: &str, min: &ChunkBound) {
        let version = self.chunk(ns, min).version;
        let epoch = self.coll(ns).epoch;
        self.ok(Command::SetChunkJumbo {
            ns: ns.into(),
            epoch,
            min: min.clone(),
            expected_version: version,
            jumbo: true,
            fencing: None,
        });
    }

    /// `shards` join `zone`, which gets `[min, max)` of `ns`.
    fn zone(&mut self, ns: &str, zone: &str, shards: &[&str], min: ChunkBound, max: ChunkBound) {
        for s in shards {
            self.ok(Command::AddShardToZone { shard: (*s).into(), zone: zone.into() });
        }
        self.ok(Command::UpdateZoneKeyRange { ns: ns.into(), min, max, zone: Some(zone.into()) });
    }

    fn drain(&mut self, shard: &str) {
        self.ok(Command::RemoveShard { shard: shard.into() });
    }

    /// Reports `stats` for the chunk of `ns` at `min`, at its current version.
    fn report(&mut self, ns: &str, min: &ChunkBound, stats: ChunkStats) {
        let version = self.chunk(ns, min).version;
        self.stats.chunks.entry(ns.into()).or_default().insert(min.clone(), (version, stats));
    }

    /// Reports size and load for the chunk at `min`.
    fn stat(&mut self, ns: &str, min: &ChunkBound, bytes: u64, ops_per_sec: f64) {
        self.report(ns, min, ChunkStats { bytes, docs: bytes / 100, ops_per_sec, ..ChunkStats::default() });
    }

    /// Reports `bytes` and no load for every chunk of `ns`.
    fn stat_all(&mut self, ns: &str, bytes: u64) {
        let mins: Vec<ChunkBound> = self.coll(ns).chunks.keys().cloned().collect();
        for min in mins {
            self.stat(ns, &min, bytes, 0.0);
        }
    }

    fn plan(&self) -> Plan {
        // The policy sees exactly the parts it says it reads.
        let view = api::view(&self.cat, Parts::of(super::INPUT));
        plan(&view, &self.stats, &self.memory, &self.params, self.now)
    }

    fn actions(&self) -> Vec<Action> {
        self.plan().decisions.into_iter().map(|d| d.action).collect()
    }

    /// The plan's moves as (chunk min, from, to, reason).
    fn moves(&self) -> Vec<(ChunkBound, String, String, MoveReason)> {
        self.actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Move { min, from, to, reason, .. } => Some((min, from, to, reason)),
                _ => None,
            })
            .collect()
    }

    fn split_action(&self, ns: &str, min: &ChunkBound, at: SplitAt, reason: SplitReason) -> Action {
        let c = self.chunk(ns, min);
        Action::Split {
            ns: ns.into(),
            epoch: self.coll(ns).epoch,
            min: c.min.clone(),
            max: c.max.clone(),
            version: c.version,
            at,
            reason,
        }
    }

    fn move_action(&self, ns: &str, min: &ChunkBound, to: &str, reason: MoveReason) -> Action {
        let c = self.chunk(ns, min);
        Action::Move {
            ns: ns.into(),
            epoch: self.coll(ns).epoch,
            min: c.min.clone(),
            max: c.max.clone(),
            version: c.version,
            from: c.shard.clone(),
            to: to.into(),
            reason,
        }
    }
}

/// Single-byte split points `a`, `b`, ... (`n` of them).
fn points(n: u8) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![b'a' + i]).collect()
}

fn refs(points: &[Vec<u8>]) -> Vec<&[u8]> {
    points.iter().map(Vec::as_slice).collect()
}

/// Every shard a plan's moves touch, asserting none is touched twice.
fn assert_one_move_per_shard(plan: &Plan) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for d in &plan.decisions {
        if let Action::Move { from, to, .. } = &d.action {
            assert!(seen.insert(from.clone()), "{from} moves twice in {plan:#?}");
            assert!(seen.insert(to.clone()), "{to} moves twice in {plan:#?}");
        }
    }
    seen
}
