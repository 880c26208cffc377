//! Fault tests on a config cluster of real `shoal configsvr` processes: kill -9 of the leader,
//! of everyone, a follower that misses thousands of entries, membership change under load, and a
//! lost quorum. Needs the `shoal` binary (`cargo build -p shoal`, or `SHOAL_BIN`).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

mod raft_common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use raft_common::{ProcCluster, add_shard, client_settings, eventually, has_shard, no_quorum_client_settings};
use shoal_cluster::config_client::ConfigClient;
use shoal_configsvr::catalog::Parts;
use shoal_proto::ErrorCode;
use tokio::task::JoinHandle;

const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(90);

/// Writes shards `from..` one after another until `stop`, recording which were acknowledged.
/// Errors (leader killed mid-write, election in progress) are expected and tolerated.
struct Writer {
    stop: Arc<AtomicBool>,
    acked_count: Arc<AtomicU64>,
    task: JoinHandle<BTreeSet<u64>>,
}

impl Writer {
    fn start(client: Arc<ConfigClient>, from: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked_count = Arc::new(AtomicU64::new(0));
        let (stop2, count2) = (Arc::clone(&stop), Arc::clone(&acked_count));
        let task = tokio::spawn(async move {
            let mut acked = BTreeSet::new();
            let mut i = from;
            while !stop2.load(Ordering::SeqCst) {
                if let Ok(out) = client.write(&add_shard(i)).await {
                    assert!(out.outcome.is_ok(), "catalog refused shard {i}: {:?}", out.outcome);
                    acked.insert(i);
                    count2.fetch_add(1, Ordering::SeqCst);
                }
                i += 1;
            }
            acked
        });
        Self { stop, acked_count, task }
    }

    async fn wait_acked(&self, n: u64, what: &str) {
        let start = self.acked_count.load(Ordering::SeqCst);
        eventually(what, CATCH_UP_TIMEOUT, || async {
            (self.acked_count.load(Ordering::SeqCst) >= start + n).then_some(())
        })
        .await;
    }

    async fn finish(self) -> BTreeSet<u64> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("writer task")
    }
}

async fn assert_all_present(client: &ConfigClient, acked: &BTreeSet<u64>) {
    let (catalog, _) = client.view(Parts::ALL, true).await.expect("linearizable read");
    let missing: Vec<u64> = acked.iter().copied().filter(|i| !has_shard(catalog.shards(), *i)).collect();
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
}

/// Writes shards `range` with `concurrency` writers; every write must succeed.
async fn write_all(client: &Arc<ConfigClient>, range: std::ops::Range<u64>, concurrency: u64) {
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let client = Arc::clone(client);
        let range = range.clone();
        tasks.push(tokio::spawn(async move {
            for i in range.filter(|i| i % concurrency == w) {
                let out = client.write(&add_shard(i)).await.unwrap_or_else(|e| panic!("write {i}: {e}"));
                assert!(out.outcome.is_ok(), "catalog refused shard {i}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_leader_new_leader_serves_writes_and_nothing_acked_is_lost() {
    let mut cluster = ProcCluster::start(3, &[]);
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = Arc::new(cluster.client());
    let writer = Writer::start(Arc::clone(&client), 0);
    writer.wait_acked(30, "writes before the kill").await;
    cluster.kill9(leader);
    let new_leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    assert_ne!(new_leader, leader);
    writer.wait_acked(30, "writes served by the new leader").await;
    let acked = writer.finish().await;
    assert_all_present(&client, &acked).await;
    // The old leader comes back as a follower and converges.
    cluster.spawn(leader);
    let (_, version) = client.view(Parts::ALL, true).await.expect("read");
    eventually("the old leader catches up", CATCH_UP_TIMEOUT, || async {
        let m = client.metrics(&cluster.node(leader).addr).await.ok()?;
        (m.catalog_version >= version && m.leader_id != 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_all_and_restart_gives_the_same_catalog() {
    let mut cluster = ProcCluster::start(3, &["--snapshot-logs-since-last", "100"]);
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = Arc::new(cluster.client());
    write_all(&client, 0..250, 4).await;
    let (before, version) = client.view(Parts::ALL, true).await.expect("read");
    for id in 1..=3 {
        cluster.kill9(id);
    }
    for id in 1..=3 {
        cluster.spawn(id);
    }
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let (after, after_version) = client.view(Parts::ALL, true).await.expect("read after restart");
    assert_eq!(after_version, version);
    assert!(after == before, "catalog differs after kill -9 of every node");
    // Every replica has it, not only the leader.
    for node in &cluster.nodes {
        eventually("each replica recovers the catalog", CATCH_UP_TIMEOUT, || async {
            let m = client.metrics(&node.addr).await.ok()?;
            (m.catalog_version == version).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_that_missed_thousands_of_entries_catches_up_by_snapshot() {
    let mut cluster = ProcCluster::start(3, &["--snapshot-logs-since-last", "500", "--snapshot-logs-to-keep", "100"]);
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let lagging = if leader == 3 { 2 } else { 3 };
    let client = Arc::new(cluster.client());
    write_all(&client, 0..20, 2).await;
    let lag_metrics = client.metrics(&cluster.node(lagging).addr).await.expect("metrics");
    cluster.kill9(lagging);
    write_all(&client, 20..3000, 8).await;
    // Precondition: the entries the follower misses are gone from the leader's log.
    // Snapshots and purges run in the background after the writes return: wait for them.
    eventually("the leader purges the entries the follower misses", CATCH_UP_TIMEOUT, || async {
        let m = client.metrics(&cluster.node(leader).addr).await.ok()?;
        (m.purged_index > lag_metrics.last_log_index).then_some(())
    })
    .await;
    let (_, version) = client.view(Parts::ALL, true).await.expect("read");
    cluster.spawn(lagging);
    eventually("the lagging follower installs a snapshot and catches up", CATCH_UP_TIMEOUT, || async {
        let m = client.metrics(&cluster.node(lagging).addr).await.ok()?;
        (m.catalog_version >= version && m.snapshot_index > lag_metrics.last_log_index).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn add_a_fourth_node_and_remove_one_while_writes_go_on() {
    let mut cluster = ProcCluster::start(3, &[]);
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let addr4 = cluster.add_fresh_node(4);
    cluster.spawn(4);
    let client = Arc::new(cluster.client());
    let writer = Writer::start(Arc::clone(&client), 0);
    writer.wait_acked(20, "writes before the membership change").await;
    client.add_learner(4, &addr4, true).await.expect("add learner");
    writer.wait_acked(10, "writes with a learner").await;
    client.change_membership(&[2, 3, 4], false).await.expect("replace node 1 with node 4");
    writer.wait_acked(30, "writes after the membership change").await;
    let acked = writer.finish().await;
    assert_all_present(&client, &acked).await;
    let (_, version) = client.view(Parts::ALL, true).await.expect("read");
    let m4 = eventually("node 4 is a voter with the whole catalog", CATCH_UP_TIMEOUT, || async {
        let m = client.metrics(&addr4).await.ok()?;
        (m.catalog_version >= version).then_some(m)
    })
    .await;
    let voters: BTreeSet<u64> = m4.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
    assert_eq!(voters, BTreeSet::from([2, 3, 4]));
    // Node 1 is out: the cluster keeps working without it.
    cluster.kill9(1);
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    assert_ne!(leader, 1);
    let out = client.write(&add_shard(1_000_000)).await.expect("write without node 1");
    assert!(out.outcome.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_quorum_makes_writes_fail_in_bounded_time() {
    let mut cluster = ProcCluster::start(3, &[]);
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    client.write(&add_shard(0)).await.expect("write with quorum");
    let survivor = if leader == 1 { 2 } else { 1 };
    for id in (1..=3).filter(|id| *id != survivor) {
        cluster.kill9(id);
    }
    let alone = ConfigClient::new(vec![cluster.node(survivor).addr.clone()], no_quorum_client_settings());
    let err = tokio::time::timeout(Duration::from_secs(60), alone.write(&add_shard(1)))
        .await
        .expect("a write without quorum must fail, not hang")
        .expect_err("no quorum, no commit");
    assert!(
        matches!(err.code(), Some(ErrorCode::ExceededTimeLimit | ErrorCode::NotWritablePrimary)),
        "unexpected error: {err}"
    );
    eprintln!("write without quorum failed as expected: {err}");
    // Quorum back: writes succeed again.
    let back = if survivor == 1 { 2 } else { 1 };
    cluster.spawn(back);
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let out = cluster.client().write(&add_shard(2)).await.expect("write after quorum is back");
    assert!(out.outcome.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_on_the_same_chunk_version_exactly_one_wins() {
    use shoal_configsvr::catalog::{ChunkBound, Command, Epoch, InitialChunks, KeyPattern, Reply};

    let cluster = ProcCluster::start(3, &[]);
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let setup = [
        add_shard(0),
        add_shard(1),
        Command::CreateDatabase { name: "db".into(), primary: "s0".into(), uuid: uuid::Uuid::new_v4() },
    ];
    for cmd in setup {
        assert!(client.write(&cmd).await.expect("setup").outcome.is_ok());
    }
    let epoch = Epoch([7; 12]);
    let sharded = client
        .write(&Command::ShardCollection {
            ns: "db.c".into(),
            uuid: uuid::Uuid::new_v4(),
            epoch,
            key: KeyPattern::range(&["x"]),
            unique: false,
            initial: InitialChunks::Single,
        })
        .await
        .expect("shardCollection");
    let Ok(Reply::CollectionSharded { version, .. }) = sharded.outcome else {
        panic!("unexpected shardCollection outcome: {:?}", sharded.outcome);
    };
    // Eight clients, each through a different server, split the same chunk version at once.
    let mut tasks = Vec::new();
    for k in 0..8u8 {
        let node_addr = cluster.nodes[usize::from(k) % cluster.nodes.len()].addr.clone();
        tasks.push(tokio::spawn(async move {
            let client = ConfigClient::new(vec![node_addr], client_settings());
            let split = Command::SplitChunk {
                ns: "db.c".into(),
                epoch,
                min: ChunkBound::Min,
                expected_version: version.version,
                split_points: vec![vec![0x10, k]],
                fencing: None,
            };
            client.write(&split).await.expect("split committed").outcome
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => wins += 1,
            Err(e) => assert_eq!(e.code(), ErrorCode::ConflictingOperationInProgress, "unexpected refusal: {e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one split on the same version must win");
}
