//! Shared harness of the `raft_*` tests: config clusters in this process ([`InProcCluster`]) or
//! as `shoal configsvr` child processes ([`ProcCluster`]), and polling helpers.
//!
//! Tests never sleep for a fixed time to "let things settle": they poll a condition with a
//! bounded timeout ([`eventually`]). Child processes are SIGKILLed and reaped on drop, and also
//! exit by themselves when this process dies (their stdin pipe closes: `--exit-on-stdin-eof`).

#![allow(dead_code)] // each test file uses a different part of the harness
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test harness: a panic fails the calling test")]

pub mod process;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::{Command, Shard};
use shoal_configsvr::server::{ConfigServer, ConfigServerSettings};
use tokio::net::TcpListener;

#[allow(unused_imports)]
pub use process::ProcCluster;

/// Polls `check` every 50 ms until it returns `Some`, panicking after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A distinct catalog change per `i`: registering shard `s<i>`.
pub fn add_shard(i: u64) -> Command {
    Command::AddShard {
        shard: format!("s{i}"),
        replica_set: format!("rs{i}"),
        members: vec![format!("h{i}.example:27018")],
    }
}

pub fn has_shard(shards: &BTreeMap<String, Shard>, i: u64) -> bool {
    shards.contains_key(&format!("s{i}"))
}

/// Client settings for tests: patient enough for elections on a loaded machine.
pub fn client_settings() -> ClientSettings {
    ClientSettings { deadline: Duration::from_secs(30), attempts_max: 200, ..ClientSettings::default() }
}

/// A client that gives up after 10 s, for lost-quorum tests.
pub fn no_quorum_client_settings() -> ClientSettings {
    ClientSettings { deadline: Duration::from_secs(10), ..ClientSettings::default() }
}

/// Fast Raft timings for in-process clusters.
pub fn fast_config(config: &mut ConfigServerSettings) {
    config.raft.heartbeat_interval_ms = 50;
    config.raft.election_timeout_min_ms = 300;
    config.raft.election_timeout_max_ms = 600;
    config.api.write_timeout = Duration::from_secs(2);
    config.api.read_timeout = Duration::from_secs(2);
    config.init_probe = Duration::from_millis(500);
}

pub struct InProcNode {
    pub id: u64,
    pub addr: SocketAddr,
    pub config: ConfigServerSettings,
    pub server: Option<ConfigServer>,
}

/// Config servers running as tasks of the test's runtime, each with its own data dir and port.
pub struct InProcCluster {
    pub nodes: Vec<InProcNode>,
    pub dir: tempfile::TempDir,
}

impl InProcCluster {
    /// Starts `n` voters (node 1 with `--init`); `tweak` adjusts every node's config.
    pub async fn start(n: u64, tweak: impl Fn(&mut ConfigServerSettings)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind a local port"));
        }
        let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().expect("bound address")).collect();
        let peers: BTreeMap<u64, String> =
            addrs.iter().enumerate().map(|(i, a)| (i as u64 + 1, a.to_string())).collect();
        let mut nodes = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = i as u64 + 1;
            let mut config = ConfigServerSettings::new(id, addrs[i], dir.path().join(format!("n{id}")));
            config.peers = peers.clone();
            config.init = id == 1;
            fast_config(&mut config);
            tweak(&mut config);
            let server = ConfigServer::start(config.clone(), listener).await.expect("start config server");
            nodes.push(InProcNode { id, addr: addrs[i], config, server: Some(server) });
        }
        Self { nodes, dir }
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.to_string()).collect()
    }

    pub fn client(&self) -> ConfigClient {
        ConfigClient::new(self.addrs(), client_settings())
    }

    pub fn node(&self, id: u64) -> &InProcNode {
        self.nodes.iter().find(|n| n.id == id).expect("known node id")
    }

    fn node_mut(&mut self, id: u64) -> &mut InProcNode {
        self.nodes.iter_mut().find(|n| n.id == id).expect("known node id")
    }

    /// The leader all running nodes agree on.
    pub async fn wait_leader(&self, timeout: Duration) -> u64 {
        eventually("a leader all running nodes agree on", timeout, || async {
            let mut leaders = self
                .nodes
                .iter()
                .filter_map(|n| n.server.as_ref())
                .map(|s| s.raft().metrics().borrow_watched().current_leader);
            let first = leaders.next()??;
            leaders.all(|l| l == Some(first)).then_some(first)
        })
        .await
    }

    /// Stops node `id` cleanly (its data stays).
    pub async fn stop(&mut self, id: u64) {
        if let Some(server) = self.node_mut(id).server.take() {
            server.shutdown().await.expect("clean shutdown");
        }
    }

    /// Restarts a stopped node on its old address and data dir.
    pub async fn restart(&mut self, id: u64) {
        let node = self.node_mut(id);
        assert!(node.server.is_none(), "node {id} is running");
        let listener = TcpListener::bind(node.addr).await.expect("rebind the node's port");
        let server = ConfigServer::start(node.config.clone(), listener).await.expect("restart config server");
        node.server = Some(server);
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<u64> = self.nodes.iter().map(|n| n.id).collect();
        for id in ids {
            self.stop(id).await;
        }
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.node(id).config.data_dir.clone()
    }
}
