use std::collections::BTreeMap;
use std::time::Duration;

use shoal_proto::catalog::wire;
use shoal_proto::config::config_client::ConfigClient;
use shoal_proto::config::{MetricsRequest, WatchRequest, WriteRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::catalog::Command;
use crate::error::ServerError;
use crate::raft::network::connect_lazy;
use crate::raft::types::{RaftRequest, now_ms};
use crate::server::{ConfigServer, ConfigServerSettings, run};

/// The value of the sample `series` (a name with its labels, as rendered) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A one-node config group that has elected itself, in a temporary directory.
async fn one_node() -> (tempfile::TempDir, ConfigServer) {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ConfigServerSettings::new(1, addr, dir.path().join("n1"));
    config.init = true;
    config.raft.heartbeat_interval_ms = 50;
    config.raft.election_timeout_min_ms = 300;
    config.raft.election_timeout_max_ms = 600;
    let server = ConfigServer::start(config, listener).await.unwrap();
    server.raft().wait(Some(Duration::from_secs(30))).current_leader(1, "node 1 leads").await.unwrap();
    (dir, server)
}

/// `n` config servers in this process (node 1 forms the group), once all agree on a leader.
async fn group(n: u64) -> (tempfile::TempDir, Vec<ConfigServer>) {
    let dir = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let peers: BTreeMap<NodeId, String> =
        listeners.iter().enumerate().map(|(i, l)| (i as u64 + 1, l.local_addr().unwrap().to_string())).collect();
    let mut servers = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let mut config =
            ConfigServerSettings::new(id, listener.local_addr().unwrap(), dir.path().join(format!("n{id}")));
        config.peers = peers.clone();
        config.init = id == 1;
        config.raft.heartbeat_interval_ms = 50;
        config.raft.election_timeout_min_ms = 300;
        config.raft.election_timeout_max_ms = 600;
        config.init_probe = Duration::from_millis(500);
        servers.push(ConfigServer::start(config, listener).await.unwrap());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let leaders: Vec<_> = servers.iter().map(|s| s.raft().metrics().borrow_watched().current_leader).collect();
        if leaders[0].is_some() && leaders.iter().all(|l| *l == leaders[0]) {
            return (dir, servers);
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader all agree on: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn add_shard(i: u64) -> Command {
    Command::AddShard { shard: format!("s{i}"), replica_set: format!("rs{i}"), members: vec![format!("h{i}:27018")] }
}

/// Polls the rendered metrics until `check` accepts them.
async fn rendered_until(server: &ConfigServer, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = server.metrics().render();
        if check(&text) {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_group_reports_its_raft_state_and_catalog() {
    let (_dir, server) = one_node().await;
    let reply =
        server.raft().client_write(RaftRequest { issued_at_ms: now_ms(), command: add_shard(1) }).await.unwrap();
    let written = reply.log_id.index();
    server.raft().wait(Some(Duration::from_secs(10))).applied_index_at_least(Some(written), "applied").await.unwrap();

    let text = server.metrics().render();
    let raft = server.raft().metrics().borrow_watched().clone();
    assert!(raft.current_term >= 1);
    assert_eq!(sample(&text, "shoal_raft_term"), Some(raft.current_term as f64), "{text}");
    assert_eq!(sample(&text, "shoal_raft_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_leader_id"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_server_state{state=\"Leader\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_server_state{state=\"Follower\"}"), Some(0.0), "{text}");
    let applied = sample(&text, "shoal_raft_applied_index").unwrap();
    assert!(applied >= written as f64, "applied {applied} < written {written}: {text}");
    assert!(sample(&text, "shoal_raft_last_log_index").unwrap() >= applied, "{text}");
    assert!(sample(&text, "shoal_raft_committed_index").unwrap() >= applied, "{text}");
    assert_eq!(sample(&text, "shoal_raft_snapshot_index"), Some(0.0), "no snapshot yet: {text}");
    assert_eq!(sample(&text, "shoal_raft_membership_voters"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_membership_learners"), Some(0.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_membership_change_pending"), Some(0.0), "{text}");
    assert!(!text.contains("shoal_raft_replication_lag_entries{"), "a lone leader has no followers: {text}");
    assert_eq!(sample(&text, "shoal_raft_quorum_ack_age_seconds"), Some(0.0), "a lone voter is its quorum: {text}");
    assert_eq!(sample(&text, "shoal_raft_leader_changes_total"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_catalog_shards"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_catalog_collections"), Some(0.0), "{text}");
    assert_eq!(sample(&text, "shoal_catalog_chunks"), Some(0.0), "{text}");
    assert!(sample(&text, "shoal_catalog_version").unwrap() >= 1.0, "{text}");
    assert!(text.contains("# HELP shoal_raft_term "), "every metric says what it counts: {text}");
    assert!(text.contains("process_open_fds"), "{text}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_reports_each_followers_lag_and_followers_report_none() {
    let (_dir, servers) = group(3).await;
    let leader_id = servers[0].raft().metrics().borrow_watched().current_leader.unwrap();
    let (leaders, followers): (Vec<_>, Vec<_>) = servers.iter().partition(|s| *s.raft().node_id() == leader_id);
    let leader = leaders[0];
    let reply =
        leader.raft().client_write(RaftRequest { issued_at_ms: now_ms(), command: add_shard(1) }).await.unwrap();
    let written = reply.log_id.index() as f64;

    let others: Vec<String> = followers.iter().map(|f| f.raft().node_id().to_string()).collect();
    let text = rendered_until(leader, "both followers caught up", |t| {
        others.iter().all(|n| sample(t, &format!("shoal_raft_replication_lag_entries{{node=\"{n}\"}}")) == Some(0.0))
    })
    .await;
    assert_eq!(sample(&text, "shoal_raft_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_membership_voters"), Some(3.0), "{text}");
    assert!(sample(&text, "shoal_raft_last_log_index").unwrap() >= written, "{text}");
    let age = sample(&text, "shoal_raft_quorum_ack_age_seconds").unwrap();
    assert!((0.0..5.0).contains(&age), "heartbeats keep the quorum ack fresh: {age} s: {text}");
    assert!(text.contains(&format!("shoal_raft_heartbeat_age_seconds{{node=\"{}\"}}", others[0])), "{text}");
    assert!(!text.contains(&format!("shoal_raft_replication_lag_entries{{node=\"{leader_id}\"}}")), "{text}");

    for follower in &followers {
        let text = rendered_until(follower, "the write applied", |t| {
            sample(t, "shoal_raft_applied_index").is_some_and(|a| a >= written)
        })
        .await;
        assert_eq!(sample(&text, "shoal_raft_leader"), Some(0.0), "{text}");
        assert_eq!(sample(&text, "shoal_raft_leader_id"), Some(leader_id as f64), "{text}");
        assert_eq!(sample(&text, "shoal_raft_server_state{state=\"Follower\"}"), Some(1.0), "{text}");
        assert_eq!(sample(&text, "shoal_catalog_shards"), Some(1.0), "{text}");
        assert!(!text.contains("shoal_raft_replication_lag_entries{"), "{text}");
        assert!(!text.contains("\nshoal_raft_quorum_ack_age_seconds "), "{text}");
        assert!(sample(&text, "shoal_raft_leader_changes_total").unwrap() >= 1.0, "{text}");
    }
    for server in servers {
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_api_is_timed_by_method_and_its_errors_counted_by_code() {
    let (_dir, server) = one_node().await;
    let channel = connect_lazy(&server.addr().to_string(), Duration::from_secs(2)).unwrap();
    let mut client = ConfigClient::new(channel);
    client.metrics(MetricsRequest {}).await.unwrap();
    let bad = client.write(WriteRequest { command: vec![0xc1].into(), forwarded: false }).await.unwrap().into_inner();
    assert_eq!(bad.error.map(|e| e.code_name).as_deref(), Some("FailedToParse"));
    let good = wire::encode(&add_shard(2)).unwrap();
    let ok = client.write(WriteRequest { command: good.into(), forwarded: false }).await.unwrap().into_inner();
    assert!(ok.error.is_none(), "{:?}", ok.error);

    let text = server.metrics().render();
    assert_eq!(sample(&text, "shoal_command_duration_seconds_count{command=\"Metrics\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_command_duration_seconds_count{command=\"Write\"}"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "shoal_command_duration_seconds_count{command=\"Query\"}"), Some(0.0), "{text}");
    assert_eq!(sample(&text, "shoal_command_errors_total{code_name=\"FailedToParse\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_watch_streams_open"), Some(0.0), "{text}");

    let mut watch = client.watch(WatchRequest { from_version: 0 }).await.unwrap().into_inner();
    assert!(watch.message().await.unwrap().is_some(), "the catalog has a version to send");
    rendered_until(&server, "one open watch stream", |t| sample(t, "shoal_watch_streams_open") == Some(1.0)).await;
    drop(watch);
    rendered_until(&server, "the watch stream closed", |t| sample(t, "shoal_watch_streams_open") == Some(0.0)).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_over_http_until_shutdown() {
    let (_dir, server) = one_node().await;
    let listener = shoal_telemetry::http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = server.serve_metrics(listener);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\nshoal_raft_leader 1\n"), "{reply}");
    server.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_taken_metrics_port_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = ConfigServerSettings::new(1, "127.0.0.1:0".parse().unwrap(), dir.path().join("n1"));
    config.metrics_listen = Some(taken.local_addr().unwrap());
    let result = tokio::time::timeout(Duration::from_secs(10), run(config, std::future::pending())).await.unwrap();
    match result {
        Err(ServerError::Io(e)) => assert!(e.to_string().contains("cannot listen for metrics"), "{e}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(!dir.path().join("n1").exists(), "nothing was opened before the port failed");
}

fn leader_metrics(last_log: u64, replication: BTreeMap<NodeId, Option<LogId>>) -> RaftMetrics {
    let mut m = RaftMetrics::new_initial(1);
    m.state = ServerState::Leader;
    m.current_leader = Some(1);
    m.last_log_index = Some(last_log);
    m.replication = Some(replication);
    m
}

#[test]
fn replication_lag_is_the_leaders_last_index_minus_each_match() {
    let log_id = |index| Some(openraft::testing::log_id::<TypeConfig>(1, 1, index));
    let m = leader_metrics(10, BTreeMap::from([(1, log_id(10)), (2, log_id(7)), (3, None), (4, log_id(12))]));
    assert_eq!(replication_lag(&m), vec![(2, 3), (3, 10), (4, 0)], "self excluded, unknown = nothing, never negative");
    let mut follower = m.clone();
    follower.state = ServerState::Follower;
    follower.current_leader = Some(2);
    assert!(replication_lag(&follower).is_empty(), "only the leader knows its followers' progress");
}

#[tokio::test]
async fn the_api_labels_are_the_proto_method_names() {
    let metrics = Metrics::new().unwrap();
    let api = ApiMetrics::new(&metrics).unwrap();
    for method in ApiMethod::ALL {
        assert_eq!(api.latency(method).get_sample_count(), 0);
    }
    let _ = api.latency(ApiMethod::GroupStatus).start_timer();
    let peers = PeerRpcMetrics::new(&metrics).unwrap();
    let failed: Result<(), ()> = peers.observe(PeerRpc::Vote, async { Err(()) }).await;
    assert!(failed.is_err());
    let text = metrics.render();
    assert_eq!(sample(&text, "shoal_command_duration_seconds_count{command=\"GroupStatus\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_command_duration_seconds_count{command=\"ChangeMembership\"}"), Some(0.0));
    assert_eq!(sample(&text, "shoal_raft_rpc_duration_seconds_count{rpc=\"Vote\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_rpc_failures_total{rpc=\"Vote\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "shoal_raft_rpc_failures_total{rpc=\"AppendEntries\"}"), Some(0.0), "{text}");
}
