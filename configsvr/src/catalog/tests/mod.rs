//! Unit tests of the catalog state machine, one file per command family, sharing the fixture
//! below. Every refusal goes through [`Fx::err`], which also asserts the catalog is unchanged;
//! every success goes through [`Fx::ok`], which also checks all invariants.

mod admin;
mod api;
mod chunks;
mod leases;
mod refine;
mod security;

use uuid::Uuid;

use super::*;

/// A plausible wall-clock time for log entries.
const T0: u64 = 1_700_000_000_000;
const NS: &str = "db.c";

fn k(bytes: &[u8]) -> ChunkBound {
    ChunkBound::Key(bytes.to_vec())
}

fn epoch(n: u8) -> Epoch {
    Epoch([n; 12])
}

fn uuid(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn members(shard: &str) -> Vec<String> {
    vec![format!("{shard}-a:27018"), format!("{shard}-b:27018"), format!("{shard}-c:27018")]
}

/// A catalog and the log time to apply at.
struct Fx {
    cat: ClusterCatalog,
    now: u64,
}

impl Fx {
    fn new() -> Self {
        Self { cat: ClusterCatalog::new(), now: T0 }
    }

    /// `n` shards `s0..`, database `db` on `s0`.
    fn with_shards(n: usize) -> Self {
        let mut fx = Self::new();
        for i in 0..n {
            let id = format!("s{i}");
            fx.ok(Command::AddShard { shard: id.clone(), replica_set: format!("rs{i}"), members: members(&id) });
        }
        fx.ok(Command::CreateDatabase { name: "db".into(), primary: "s0".into(), uuid: uuid(1) });
        fx
    }

    /// [`Fx::with_shards`] plus `db.c` sharded on `{x: 1}` in one chunk on `s0`.
    fn with_collection(n: usize) -> Self {
        let mut fx = Self::with_shards(n);
        fx.ok(shard_cmd(NS, InitialChunks::Single));
        fx
    }

    fn ok(&mut self, cmd: Command) -> Reply {
        let version = self.cat.version();
        let response = match self.cat.apply(&cmd, self.now) {
            Ok(r) => r,
            Err(e) => panic!("`{cmd}` refused: {e}"),
        };
        if let Err(v) = self.cat.check_invariants() {
            panic!("after `{cmd}`: {v}");
        }
        assert!(self.cat.version() >= version);
        response
    }

    /// Applies a command that must be refused, and checks it changed nothing.
    fn err(&mut self, cmd: Command) -> CatalogError {
        let before = self.cat.clone();
        match self.cat.apply(&cmd, self.now) {
            Ok(r) => panic!("`{cmd}` should be refused, got {r:?}"),
            Err(e) => {
                assert_eq!(self.cat, before, "refused `{cmd}` changed the catalog");
                e
            }
        }
    }

    /// Applies a command that must succeed without changing anything.
    fn noop(&mut self, cmd: Command) -> Reply {
        let before = self.cat.clone();
        let r = self.ok(cmd);
        assert_eq!(self.cat, before, "no-op changed the catalog");
        r
    }

    fn coll(&self) -> &Collection {
        self.cat.collection(NS).expect("db.c is sharded")
    }

    /// (min, version, shard) of each chunk of `db.c`.
    fn layout(&self) -> Vec<(ChunkBound, ChunkVersion, String)> {
        self.coll().chunks.values().map(|c| (c.min.clone(), c.version, c.shard.clone())).collect()
    }

    fn version_at(&self, min: &ChunkBound) -> ChunkVersion {
        self.coll().chunks[min].version
    }

    fn split(&self, min: &ChunkBound, points: &[&[u8]]) -> Command {
        Command::SplitChunk {
            ns: NS.into(),
            epoch: self.coll().epoch,
            min: min.clone(),
            expected_version: self.version_at(min),
            split_points: points.iter().map(|p| p.to_vec()).collect(),
            fencing: None,
        }
    }

    fn merge(&self, min: &ChunkBound, max: &ChunkBound) -> Command {
        let expected_versions =
            self.coll().chunks.range(min.clone()..).take_while(|(m, _)| *m < max).map(|(_, c)| c.version).collect();
        Command::MergeChunks {
            ns: NS.into(),
            epoch: self.coll().epoch,
            min: min.clone(),
            max: max.clone(),
            expected_versions,
            fencing: None,
        }
    }

    fn migrate(&self, min: &ChunkBound, to: &str) -> Command {
        let c = &self.coll().chunks[min];
        Command::CommitMigration {
            ns: NS.into(),
            epoch: self.coll().epoch,
            min: c.min.clone(),
            max: c.max.clone(),
            from: c.shard.clone(),
            to: to.into(),
            expected_version: c.version,
            fencing: None,
        }
    }
}

fn shard_cmd(ns: &str, initial: InitialChunks) -> Command {
    Command::ShardCollection {
        ns: ns.into(),
        uuid: uuid(2),
        epoch: epoch(7),
        key: KeyPattern::range(&["x"]),
        unique: false,
        initial,
    }
}

#[test]
fn catalog_version_counts_effective_changes_only() {
    let mut fx = Fx::with_collection(2);
    let v = fx.cat.version();
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    assert_eq!(fx.cat.version(), v + 1);
    fx.err(fx.split(&ChunkBound::Min, &[b"m"]));
    fx.noop(Command::CreateDatabase { name: "db".into(), primary: "s0".into(), uuid: uuid(9) });
    assert_eq!(fx.cat.version(), v + 1);
    let last = fx.cat.changelog().entries().next_back().expect("logged");
    assert_eq!((last.what.as_str(), last.catalog_version), ("split", v + 1));
}

#[test]
fn replay_is_deterministic_and_survives_json() {
    let script = |fx: &mut Fx| {
        fx.ok(fx.split(&ChunkBound::Min, &[b"f", b"p"]));
        fx.ok(fx.migrate(&k(b"f"), "s1"));
        fx.ok(Command::AcquireLease { name: BALANCER_LEASE.into(), holder: "r1".into(), ttl_ms: 10_000 });
        fx.ok(Command::AddShardToZone { shard: "s1".into(), zone: "eu".into() });
        fx.ok(Command::UpdateZoneKeyRange { ns: NS.into(), min: k(b"a"), max: k(b"b"), zone: Some("eu".into()) });
    };
    let (mut a, mut b) = (Fx::with_collection(2), Fx::with_collection(2));
    script(&mut a);
    script(&mut b);
    assert_eq!(a.cat, b.cat);

    let json = serde_json::to_vec(&a.cat).expect("encode");
    let back: ClusterCatalog = serde_json::from_slice(&json).expect("decode");
    assert_eq!(back, a.cat);
    let cmd = a.split(&k(b"p"), &[b"q", b"r"]);
    let cmd_back: Command = serde_json::from_slice(&serde_json::to_vec(&cmd).expect("encode")).expect("decode");
    assert_eq!(cmd_back, cmd);
    let err = a.err(a.split(&k(b"p"), &[b"p"]));
    let err_back: CatalogError = serde_json::from_slice(&serde_json::to_vec(&err).expect("encode")).expect("decode");
    assert_eq!(err_back, err);
}

#[test]
fn catalog_clock_never_goes_back() {
    let mut fx = Fx::with_collection(2);
    fx.now = T0 + 5_000;
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    let ts = fx.coll().chunks[&k(b"m")].on_current_shard_since;
    // A later entry stamped by a leader with a slower clock.
    fx.now = T0;
    fx.ok(fx.migrate(&k(b"m"), "s1"));
    assert_eq!(fx.cat.now_ms(), T0 + 5_000);
    assert!(fx.coll().chunks[&k(b"m")].on_current_shard_since > ts);
}

#[test]
fn changelog_is_a_bounded_ring() {
    let mut fx = Fx::with_collection(2);
    let first = fx.cat.version();
    for i in 0..CHANGELOG_ENTRIES_MAX + 10 {
        let zone = format!("z{}", i % 2);
        let cmd = if i % 2 == 0 {
            Command::AddShardToZone { shard: "s1".into(), zone }
        } else {
            Command::RemoveShardFromZone { shard: "s1".into(), zone: "z0".into() }
        };
        fx.ok(cmd);
    }
    let log = fx.cat.changelog();
    assert_eq!(log.entries().len(), CHANGELOG_ENTRIES_MAX);
    assert!(
        log.entries().zip(log.entries().skip(1)).all(|(a, b)| a.seq < b.seq && a.catalog_version < b.catalog_version)
    );
    assert!(log.since(first).is_none(), "entries after `first` were evicted");
    let recent = fx.cat.version() - 3;
    assert_eq!(log.since(recent).map(Iterator::count), Some(3));
}
