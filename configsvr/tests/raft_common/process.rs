//! Config clusters of real `shoal configsvr` processes, for fault tests (kill -9, restarts).
//!
//! ```text
//!  test --spawn--> shoal configsvr --id N --listen 127.0.0.1:P --peers ... [--init]
//!        stdout: drain thread -> first "SHOAL_READY configsvr <addr>" -> spawn() returns
//!        stderr: <tmp>/n<N>.log (appended across restarts; its tail is printed if the test fails)
//!        stdin:  a pipe held open by the test; EOF (test died) makes the child exit
//! ```

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use shoal_cluster::config_client::ConfigClient;
use shoal_proto::config::MetricsReply;

use super::{client_settings, eventually};

/// How long a process may take from spawn to `SHOAL_READY`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const LOG_TAIL_BYTES: u64 = 6000;

/// `$SHOAL_BIN`, else `target/<profile>/shoal` next to this test executable (which runs from
/// `target/<profile>/deps/`).
pub fn shoal_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SHOAL_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("locating the test executable");
    let bin = exe.parent().and_then(Path::parent).map(|p| p.join("shoal")).expect("target/<profile>/deps layout");
    assert!(
        bin.is_file(),
        "the shoal binary is missing at {}: run `cargo build -p shoal` with the same target dir first \
         (or set SHOAL_BIN to its path)",
        bin.display()
    );
    bin
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    listener.local_addr().expect("bound address").port()
}

pub struct ProcNode {
    pub id: u64,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub init: bool,
    /// `--peers`; `None` for a node that joins later as a learner.
    pub peers: Option<String>,
    child: Option<Child>,
}

impl ProcNode {
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ProcNode {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A config cluster of child processes.
pub struct ProcCluster {
    pub nodes: Vec<ProcNode>,
    /// `--peers` of the initial voters.
    pub peers: String,
    pub extra_args: Vec<String>,
    pub dir: tempfile::TempDir,
}

impl ProcCluster {
    /// Starts `n` voters (node 1 with `--init`), each with `extra_args`.
    pub fn start(n: u64, extra_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: BTreeMap<u64, u16> = (1..=n).map(|id| (id, free_port())).collect();
        let peers = ports.iter().map(|(id, p)| format!("{id}=127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        let mut cluster =
            Self { nodes: Vec::new(), peers, extra_args: extra_args.iter().map(|s| s.to_string()).collect(), dir };
        for (id, port) in ports {
            let peers = cluster.peers.clone();
            cluster.add_node(id, port, id == 1, Some(peers));
        }
        for id in 1..=n {
            cluster.spawn(id);
        }
        cluster
    }

    /// Registers (does not start) node `id` on `port`.
    pub fn add_node(&mut self, id: u64, port: u16, init: bool, peers: Option<String>) {
        let data_dir = self.dir.path().join(format!("n{id}"));
        let log = self.dir.path().join(format!("n{id}.log"));
        let addr = format!("127.0.0.1:{port}");
        self.nodes.push(ProcNode { id, addr, data_dir, log, init, peers, child: None });
    }

    /// Registers a node on a fresh port with no `--peers`, to be added as a learner; returns its
    /// address.
    pub fn add_fresh_node(&mut self, id: u64) -> String {
        self.add_node(id, free_port(), false, None);
        self.node(id).addr.clone()
    }

    pub fn node(&self, id: u64) -> &ProcNode {
        self.nodes.iter().find(|n| n.id == id).expect("known node id")
    }

    pub fn node_mut(&mut self, id: u64) -> &mut ProcNode {
        self.nodes.iter_mut().find(|n| n.id == id).expect("known node id")
    }

    /// Starts node `id` and waits for its readiness line.
    pub fn spawn(&mut self, id: u64) {
        let extra = self.extra_args.clone();
        let node = self.node_mut(id);
        assert!(node.child.is_none(), "node {id} already running");
        let log = OpenOptions::new().create(true).append(true).open(&node.log).expect("open node log");
        let mut cmd = Command::new(shoal_bin());
        cmd.arg("configsvr")
            .args(["--id", &id.to_string(), "--listen", &node.addr])
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--exit-on-stdin-eof")
            .args(&extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        // SHOAL_TEST_LOG=debug,... overrides the children's log filter.
        if let Ok(filter) = std::env::var("SHOAL_TEST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        if let Some(peers) = &node.peers {
            cmd.args(["--peers", peers]);
        }
        if node.init {
            cmd.arg("--init");
        }
        let mut child = cmd.spawn().expect("spawn shoal configsvr");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("SHOAL_READY configsvr ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addr.to_owned());
                }
            }
        });
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(addr) => assert_eq!(addr, node.addr, "node {id} announced another address"),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("node {id} did not print SHOAL_READY within {READY_TIMEOUT:?}; log:\n{}", tail(&node.log));
            }
        }
        node.child = Some(child);
    }

    pub fn kill9(&mut self, id: u64) {
        self.node_mut(id).kill9();
    }

    pub fn running(&self) -> Vec<&ProcNode> {
        self.nodes.iter().filter(|n| n.is_running()).collect()
    }

    /// A client of every node registered so far.
    pub fn client(&self) -> ConfigClient {
        ConfigClient::new(self.nodes.iter().map(|n| n.addr.clone()).collect(), client_settings())
    }

    /// Metrics of every running node that answers.
    pub async fn metrics(&self) -> Vec<MetricsReply> {
        let client = self.client();
        let mut out = Vec::new();
        for node in self.running() {
            if let Ok(m) = client.metrics(&node.addr).await {
                out.push(m);
            }
        }
        out
    }

    /// The leader every running node agrees on (and that is itself running).
    pub async fn wait_leader(&self, timeout: Duration) -> u64 {
        let running: Vec<u64> = self.running().iter().map(|n| n.id).collect();
        eventually("a leader all running nodes agree on", timeout, || async {
            let metrics = self.metrics().await;
            if metrics.len() != running.len() {
                return None;
            }
            let leader = metrics[0].leader_id;
            (leader != 0 && running.contains(&leader) && metrics.iter().all(|m| m.leader_id == leader))
                .then_some(leader)
        })
        .await
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill9();
        }
        if std::thread::panicking() {
            for node in &self.nodes {
                eprintln!("----- log of node {} ({}) -----\n{}", node.id, node.log.display(), tail(&node.log));
            }
        }
    }
}

fn tail(path: &Path) -> String {
    let Ok(mut file) = File::open(path) else {
        return "(no log)".into();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    text
}
