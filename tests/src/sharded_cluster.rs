//! A sharded cluster: three config servers, two shards on fixed loopback ports (so a shard
//! restarted on its data dir keeps the address the catalog has for it) and routers started with
//! `--config` only, so every request is routed by the catalog's chunks. Each shard is registered
//! in the catalog under its `--name` (`shard0`, `shard1`) through the router's `addShard`.
//! Processes are killed when the cluster is dropped.
//!
//! ```text
//!   test ──driver──> router(s) ──gRPC (routed by chunk)──> shard0, shard1
//!     │                └──── gRPC ─────> cfg1..3 (Raft) <──── shard0, shard1
//!     └──gRPC (direct finds, versioned writes)──> shard0, shard1 ──migration──> each other
//! ```

use std::path::Path;

use bson::doc;

use crate::process::{Process, ProcessSpec};

pub const SHARDS: usize = 2;

pub struct ShardedCluster {
    dir: tempfile::TempDir,
    _config: Vec<Process>,
    shards: Vec<Option<Process>>,
    shard_ports: Vec<u16>,
    pub router: Process,
    /// `host:port` of each config server, for a catalog client.
    pub config_addrs: Vec<String>,
}

impl ShardedCluster {
    pub async fn start() -> anyhow::Result<ShardedCluster> {
        Self::start_with_router_args(&[]).await
    }

    /// The same cluster, its first router started with `router_args` added (e.g. balancer flags).
    pub async fn start_with_router_args(router_args: &[&str]) -> anyhow::Result<ShardedCluster> {
        let dir = tempfile::tempdir()?;
        let ports = crate::up::free_ports(3 + SHARDS)?;
        let (cfg_ports, shard_ports) = ports.split_at(3);
        let (config, config_addrs) = crate::catalog_cluster::start_config_servers(dir.path(), cfg_ports).await?;
        let mut shards = Vec::new();
        for (i, port) in shard_ports.iter().enumerate() {
            shards.push(Some(Process::start(shard_spec(dir.path(), i, *port, &config_addrs, "")).await?));
        }
        let router = start_router(dir.path(), "router", &config_addrs, router_args).await?;
        let cluster =
            ShardedCluster { dir, _config: config, shards, shard_ports: shard_ports.to_vec(), router, config_addrs };
        let admin = cluster.client().await?.database("admin");
        for i in 0..SHARDS {
            let name = Self::shard_name(i);
            admin.run_command(doc! { "addShard": format!("{name}/{}", cluster.shard_addr(i)), "name": &name }).await?;
        }
        Ok(cluster)
    }

    pub fn shard_name(i: usize) -> String {
        format!("shard{i}")
    }

    /// `127.0.0.1:<port>` of shard `i` (stable across restarts).
    pub fn shard_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.shard_ports[i])
    }

    /// Starts shard `i` on its port and data dir; `failpoints` as for `shoal shard --failpoints`.
    pub async fn start_shard(&mut self, i: usize, failpoints: &str) -> anyhow::Result<()> {
        let spec = shard_spec(self.dir.path(), i, self.shard_ports[i], &self.config_addrs, failpoints);
        self.shards[i] = Some(Process::start(spec).await?);
        Ok(())
    }

    pub fn shard(&self, i: usize) -> Option<&Process> {
        self.shards[i].as_ref()
    }

    pub fn kill9_shard(&mut self, i: usize) {
        if let Some(p) = self.shards[i].take() {
            p.kill9();
        }
    }

    /// Waits (bounded) for shard `i` to exit by itself (a failpoint aborted it).
    pub async fn wait_shard_exit(&mut self, i: usize, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.shards[i].as_ref().is_none_or(|p| !p.is_alive()) {
                self.kill9_shard(i);
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    }

    pub async fn client(&self) -> anyhow::Result<mongodb::Client> {
        client_of(&self.router).await
    }

    /// Another router on the same catalog (its own routing cache), e.g. to make one stale.
    pub async fn start_router(&self, name: &str) -> anyhow::Result<Process> {
        start_router(self.dir.path(), name, &self.config_addrs, &[]).await
    }

    /// Another router with `args` added to its command line.
    pub async fn start_router_with_args(&self, name: &str, args: &[&str]) -> anyhow::Result<Process> {
        start_router(self.dir.path(), name, &self.config_addrs, args).await
    }

    /// A client of the catalog (the config servers).
    pub fn catalog(&self) -> shoal_configsvr::client::ConfigClient {
        let settings = shoal_configsvr::client::ClientSettings::default();
        shoal_configsvr::client::ConfigClient::new(self.config_addrs.clone(), settings)
    }

    /// The tails of every log, for a failing test's message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for name in ["shard0", "shard1", "router", "cfg1"] {
            let path = self.dir.path().join(format!("{name}.log"));
            out.push_str(&format!("--- {name} ---\n{}\n", crate::process::log_tail(&path, lines)));
        }
        out
    }
}

fn shard_spec(dir: &Path, i: usize, port: u16, config_addrs: &[String], failpoints: &str) -> ProcessSpec {
    let name = ShardedCluster::shard_name(i);
    let mut args = vec![
        "shard".into(),
        "--name".into(),
        name.clone(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--data-dir".into(),
        dir.join(&name).display().to_string(),
        "--config".into(),
        config_addrs.join(","),
    ];
    if !failpoints.is_empty() {
        args.extend(["--failpoints".into(), failpoints.to_owned()]);
    }
    let log_path = dir.join(format!("{name}.log"));
    ProcessSpec { name, role: "shard".into(), args, log_path }
}

/// A driver client connected directly to `router`.
pub async fn client_of(router: &Process) -> anyhow::Result<mongodb::Client> {
    let uri = format!("mongodb://{}/?directConnection=true&serverSelectionTimeoutMS=5000", router.addr());
    Ok(mongodb::Client::with_uri_str(uri).await?)
}

async fn start_router(dir: &Path, name: &str, config_addrs: &[String], extra: &[&str]) -> anyhow::Result<Process> {
    let mut args: Vec<String> =
        vec!["router".into(), "--listen".into(), "127.0.0.1:0".into(), "--config".into(), config_addrs.join(",")];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Process::start(ProcessSpec {
        name: name.into(),
        role: "router".into(),
        args,
        log_path: dir.join(format!("{name}.log")),
    })
    .await
}
