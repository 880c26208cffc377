//! etcd beside Shoal: an etcd cluster of child processes on loopback, and a minimal gRPC client of
//! its v3 API (`KV.Put`, `KV.Range`, `Maintenance.Status`) generated from `proto/etcd_kv.proto`
//! with the same tonic/prost as Shoal's own client, so both sides pay the same transport.
//!
//! ```text
//!  start: free ports -> etcd --name eN ... --initial-cluster e1=..,e2=..,e3=.. (each member)
//!         -> poll Status on every member until each answers and one names a leader
//!  bench: KvClient on the leader's client URL (a follower would forward to it)
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint};

use crate::procs;

pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::StatusRequest;
use pb::kv_client::KvClient;
use pb::maintenance_client::MaintenanceClient;

/// How long a new cluster may take until every member answers and a leader is elected.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Per-RPC limit of the benchmark's etcd calls.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

struct Member {
    client_url: String,
    child: Child,
}

pub struct EtcdCluster {
    members: Vec<Member>,
}

/// `etcd` on `PATH`, if any.
pub fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("etcd")).find(|p| p.is_file())
}

/// A channel to `url` with the benchmark's timeouts; connects on first use.
pub fn channel(url: &str) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(url.to_owned())?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(RPC_TIMEOUT)
        .tcp_nodelay(true)
        .connect_lazy())
}

pub fn kv_client(url: &str) -> anyhow::Result<KvClient<Channel>> {
    Ok(KvClient::new(channel(url)?))
}

impl EtcdCluster {
    /// Starts `size` members with data under `dir` (etcd's default durability: an fsync of its
    /// WAL per batch of entries) and waits until every member answers and a leader is elected.
    pub async fn start(bin: &Path, dir: &Path, size: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(size >= 1, "an etcd cluster needs at least one member");
        let ports = procs::free_loopback_ports(2 * size)?;
        let (client_ports, peer_ports) = ports.split_at(size);
        let initial_cluster = peer_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{}=http://127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for i in 0..size {
            let name = format!("e{}", i + 1);
            let client_url = format!("http://127.0.0.1:{}", client_ports[i]);
            let peer_url = format!("http://127.0.0.1:{}", peer_ports[i]);
            let log = dir.join(format!("{name}.log"));
            let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
            let child = Command::new(bin)
                .args(["--name", &name, "--data-dir"])
                .arg(dir.join(&name))
                .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial_cluster, "--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "shoal-bench", "--logger", "zap", "--log-outputs", "stderr"])
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            members.push(Member { client_url, child });
        }
        let cluster = Self { members };
        tokio::time::timeout(READY_TIMEOUT, cluster.wait_ready())
            .await
            .with_context(|| format!("etcd cluster not ready within {READY_TIMEOUT:?}; see {}", dir.display()))??;
        Ok(cluster)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        loop {
            if self.leader_url().await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The client URL of the member every member names as leader; fails unless all agree.
    pub async fn leader_url(&self) -> anyhow::Result<String> {
        let mut leader = None;
        let mut ids = Vec::new();
        for m in &self.members {
            let mut client = MaintenanceClient::new(channel(&m.client_url)?);
            let status = client.status(StatusRequest {}).await?.into_inner();
            let member_id = status.header.map(|h| h.member_id).unwrap_or(0);
            if status.leader == 0 || leader.is_some_and(|l| l != status.leader) {
                bail!("no agreed etcd leader yet");
            }
            leader = Some(status.leader);
            ids.push((member_id, m.client_url.clone()));
        }
        let leader = leader.context("no members")?;
        ids.into_iter().find(|(id, _)| *id == leader).map(|(_, url)| url).context("leader is not a member")
    }

    /// The leader's Raft term, as the leader reports it.
    pub async fn term(&self) -> anyhow::Result<u64> {
        let mut client = MaintenanceClient::new(channel(&self.leader_url().await?)?);
        Ok(client.status(StatusRequest {}).await?.into_inner().raft_term)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.child.id()).collect()
    }

    pub async fn stop(mut self) {
        for m in &self.members {
            if let Some(pid) = m.child.id() {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
            }
        }
        for m in &mut self.members {
            let _ = tokio::time::timeout(Duration::from_secs(10), m.child.wait()).await;
        }
    }
}
