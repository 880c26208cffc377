//! Three config servers in this process (separate data dirs and ports, one tokio runtime):
//! forwarding, linearizable reads, narrow queries, the watch stream, restart recovery, snapshot catch-up, bad
//! input and a lost quorum.

mod raft_common;

use std::time::Duration;

use futures::StreamExt;
use openraft::async_runtime::WatchReceiver;
use raft_common::{InProcCluster, add_shard, client_settings, eventually, has_shard, no_quorum_client_settings};
use shoal_cluster::config_client::{self as client, CatalogQuery, ConfigClient, What};
use shoal_configsvr::catalog::{Parts, api};
use shoal_configsvr::raft::catalog_api::RoutingAnswer;
use shoal_proto::ErrorCode;
use shoal_proto::config::config_client::ConfigClient as GrpcClient;
use shoal_proto::config::{All, WriteRequest};

const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_accepts_writes_and_linearizable_reads() {
    let cluster = InProcCluster::start(3, |_| {}).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    // One client per server: followers must forward to the leader.
    for (i, addr) in cluster.addrs().into_iter().enumerate() {
        let client = ConfigClient::new(vec![addr], client_settings());
        let out = client.write(&add_shard(i as u64)).await.expect("write through any node");
        assert!(out.outcome.is_ok(), "catalog refused: {:?}", out.outcome);
        let (catalog, version) = client.view(Parts::ALL, true).await.expect("linearizable read");
        assert!(has_shard(catalog.shards(), i as u64), "read after write misses shard {i} (leader {leader})");
        assert!(version >= out.catalog_version);
    }
    // A catalog refusal is an answer, not a failure: re-adding s0 with other members.
    let refused = cluster
        .client()
        .write(&shoal_configsvr::catalog::Command::AddShard {
            shard: "s0".into(),
            replica_set: "other".into(),
            members: vec!["x.example:1".into()],
        })
        .await
        .expect("committed");
    let err = refused.outcome.expect_err("conflicting AddShard must be refused");
    assert_eq!(err.code(), ErrorCode::IllegalOperation);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_stream_wakes_on_apply_and_routing_table_answers() {
    let cluster = InProcCluster::start(3, |_| {}).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let follower = cluster.nodes.iter().find(|n| n.id != leader).expect("a follower").addr.to_string();
    let watcher = ConfigClient::new(vec![follower], client_settings());
    let mut stream = watcher.watch(0).await.expect("open watch");
    let client = cluster.client();
    let mut last = 0;
    for i in 0..5 {
        let out = client.write(&add_shard(i)).await.expect("write");
        // The follower's stream reaches (at least) this write's version.
        while last < out.catalog_version {
            let next = tokio::time::timeout(CATCH_UP_TIMEOUT, stream.next())
                .await
                .expect("watch did not wake")
                .expect("stream ended")
                .expect("stream error");
            assert!(next.version > last, "versions must increase: {} after {last}", next.version);
            last = next.version;
        }
    }
    let (answer, _) = client.routing_table("db.unsharded", None, true).await.expect("routing table");
    assert_eq!(answer, RoutingAnswer::Full(None));
    cluster.shutdown().await;
}

/// The narrow reads of the client API through a follower: linearizable ones are forwarded to the
/// leader and see the write just acknowledged; several queries in one request share one version;
/// a query naming nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn narrow_queries_answer_from_the_leader_through_a_follower() {
    let cluster = InProcCluster::start(3, |_| {}).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let follower = cluster.nodes.iter().find(|n| n.id != leader).expect("a follower").addr.to_string();
    let via_follower = ConfigClient::new(vec![follower.clone()], client_settings());
    let writer = cluster.client();
    for i in 0..3 {
        let out = writer.write(&add_shard(i)).await.expect("write");
        let (shards, version) = via_follower.shards(true).await.expect("shards");
        assert_eq!(shards.len() as u64, i + 1, "a linearizable read misses the acknowledged write");
        assert!(version >= out.catalog_version);
    }
    let s1 = via_follower.shard("s1", true).await.expect("shard").expect("s1 exists");
    assert_eq!((s1.id.as_str(), s1.group.members.as_slice()), ("s1", ["h1.example:27018".to_owned()].as_slice()));
    assert_eq!(via_follower.shard("s9", true).await.expect("shard"), None);
    assert_eq!(via_follower.database("nope", true).await.expect("database"), None);
    assert!(via_follower.collections_in("nope", true).await.expect("collections").is_empty());
    let settings = via_follower.settings(false).await.expect("settings from the follower's own state");
    assert_eq!(settings, shoal_configsvr::catalog::Settings::default());

    let (answers, _) = via_follower
        .query(vec![client::query(What::Shards(All {})), client::query(What::Shard("s0".into()))], true)
        .await
        .expect("two queries");
    let all: Vec<shoal_configsvr::catalog::Shard> = client::answer(&answers[0]).expect("decode");
    let s0: Option<shoal_configsvr::catalog::Shard> = client::answer(&answers[1]).expect("decode");
    assert_eq!(all.first(), s0.as_ref());

    let err = via_follower.query(vec![CatalogQuery { what: None }], true).await.expect_err("empty query");
    assert_eq!(err.code(), Some(ErrorCode::FailedToParse));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_requests_get_errors() {
    let cluster = InProcCluster::start(3, |_| {}).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    for node in &cluster.nodes {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let mut grpc = GrpcClient::new(channel);
        let reply = grpc
            .write(WriteRequest { command: bytes::Bytes::from_static(b"{not json"), forwarded: false })
            .await
            .expect("rpc")
            .into_inner();
        let error = reply.error.expect("garbage must be refused");
        assert_eq!(error.code, ErrorCode::FailedToParse.code());
    }
    let client = cluster.client();
    let err = client.change_membership(&[], false).await.expect_err("empty voter set");
    assert_eq!(err.code(), Some(ErrorCode::BadValue));
    let err = client.change_membership(&[1, 2, 3, 99], false).await.expect_err("unknown voter");
    assert_eq!(err.code(), Some(ErrorCode::BadValue));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_restart_recovers_the_same_catalog() {
    let mut cluster = InProcCluster::start(3, |c| c.raft.snapshot_logs_since_last = 40).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    for i in 0..100 {
        client.write(&add_shard(i)).await.expect("write");
    }
    let (before, version) = client.view(Parts::ALL, true).await.expect("read");
    for id in 1..=3 {
        cluster.stop(id).await;
    }
    for id in 1..=3 {
        cluster.restart(id).await;
    }
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let (after, after_version) = cluster.client().view(Parts::ALL, true).await.expect("read after restart");
    assert_eq!(after_version, version);
    assert!(after == before, "catalog differs after restart");
    // Every replica converges on it (snapshot + log replay).
    for node in &cluster.nodes {
        let state = node.server.as_ref().expect("running").state().clone();
        eventually("replica catches up after restart", CATCH_UP_TIMEOUT, || {
            let state = state.clone();
            let before = before.clone();
            async move { (api::view(&state.read().catalog, Parts::ALL) == before).then_some(()) }
        })
        .await;
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopped_follower_catches_up_by_snapshot() {
    let mut cluster = InProcCluster::start(3, |c| {
        c.raft.snapshot_logs_since_last = 50;
        c.raft.snapshot_logs_to_keep = 10;
    })
    .await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let lagging = if leader == 3 { 2 } else { 3 };
    cluster.stop(lagging).await;
    let client = cluster.client();
    for i in 0..400 {
        client.write(&add_shard(i)).await.expect("write with one node down");
    }
    // The leader purged the log behind its snapshots, so the follower cannot be fed from the log.
    // Snapshots and purges run in the background after the writes return: wait for one.
    let leader_raft = cluster.node(leader).server.as_ref().expect("leader running").raft().clone();
    eventually("leader purges its log behind a snapshot", CATCH_UP_TIMEOUT, || {
        let raft = leader_raft.clone();
        async move { raft.metrics().borrow_watched().purged.as_ref().is_some_and(|id| id.index > 0).then_some(()) }
    })
    .await;
    cluster.restart(lagging).await;
    let node = cluster.node(lagging).server.as_ref().expect("restarted");
    let (raft, state) = (node.raft().clone(), node.state().clone());
    eventually("lagging follower installs a snapshot and catches up", CATCH_UP_TIMEOUT, || {
        let (raft, state) = (raft.clone(), state.clone());
        async move {
            let snapshot = raft.metrics().borrow_watched().snapshot;
            let caught_up = (0..400).all(|i| has_shard(state.read().catalog.shards(), i));
            (caught_up && snapshot.is_some()).then_some(())
        }
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_quorum_fails_writes_in_bounded_time() {
    let mut cluster = InProcCluster::start(3, |_| {}).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    client.write(&add_shard(1)).await.expect("write with quorum");
    // Stop both followers: the leader is alone.
    for id in (1..=3).filter(|id| *id != leader) {
        cluster.stop(id).await;
    }
    let alone = ConfigClient::new(vec![cluster.node(leader).addr.to_string()], no_quorum_client_settings());
    let result = tokio::time::timeout(Duration::from_secs(60), alone.write(&add_shard(2)))
        .await
        .expect("a write without quorum must fail, not hang");
    let err = result.expect_err("no quorum, no commit");
    assert!(
        matches!(err.code(), Some(ErrorCode::ExceededTimeLimit | ErrorCode::NotWritablePrimary)),
        "unexpected error: {err}"
    );
    eprintln!("write without quorum failed as expected: {err}");
    let read = tokio::time::timeout(Duration::from_secs(60), alone.view(Parts::ALL, true))
        .await
        .expect("a linearizable read without quorum must fail, not hang");
    assert!(read.is_err(), "linearizable read without quorum must fail");
    cluster.shutdown().await;
}
