//! A sharded cluster: three config servers, two (or [`ClusterOptions::shards`]) shards on fixed loopback ports (so a shard
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

/// Shards a cluster starts with unless [`ClusterOptions`] say otherwise.
pub const SHARDS: usize = 2;

/// How a [`ShardedCluster`] starts.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Shards started and added to the catalog at once.
    pub shards: usize,
    /// Shards given a port and data dir but started and added only by [`ShardedCluster::add_shard`].
    pub spare_shards: usize,
    /// Extra flags for the cluster's router (e.g. the balancer's interval).
    pub router_args: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self { shards: SHARDS, spare_shards: 0, router_args: Vec::new() }
    }
}

pub struct ShardedCluster {
    _config: Vec<Process>,
    shards: Vec<Option<Process>>,
    shard_ports: Vec<u16>,
    /// Whether shard `i` was added to the catalog.
    registered: Vec<bool>,
    pub router: Process,
    /// `host:port` of each config server, for a catalog client.
    pub config_addrs: Vec<String>,
    /// Last: dropped after the processes, so a failing test can still print their logs.
    dir: tempfile::TempDir,
}

impl ShardedCluster {
    pub async fn start() -> anyhow::Result<ShardedCluster> {
        Self::start_with(ClusterOptions::default()).await
    }

    pub async fn start_with(options: ClusterOptions) -> anyhow::Result<ShardedCluster> {
        let dir = tempfile::tempdir()?;
        let total = options.shards + options.spare_shards;
        let ports = crate::ports::free_ports(3 + total)?;
        let (cfg_ports, shard_ports) = ports.split_at(3);
        let (config, config_addrs) = crate::catalog_cluster::start_config_servers(dir.path(), cfg_ports).await?;
        let mut shards = Vec::new();
        for (i, port) in shard_ports.iter().enumerate() {
            shards.push(match i < options.shards {
                true => Some(Process::start(shard_spec(dir.path(), i, *port, &config_addrs, "")).await?),
                false => None,
            });
        }
        let router = start_router(dir.path(), "router", &config_addrs, &options.router_args).await?;
        let mut cluster = ShardedCluster {
            dir,
            _config: config,
            shards,
            shard_ports: shard_ports.to_vec(),
            registered: vec![false; total],
            router,
            config_addrs,
        };
        for i in 0..options.shards {
            cluster.register_shard(i).await?;
        }
        Ok(cluster)
    }

    /// `db` on shard0, `db.coll` sharded on `{k: 1}` and split at `k: middle`, the upper chunk
    /// moved to shard1: a collection whose documents live on both shards.
    pub async fn shard_in_two(&self, db: &str, coll: &str, middle: i64) -> anyhow::Result<()> {
        let admin = self.client().await?.database("admin");
        let ns = format!("{db}.{coll}");
        admin.run_command(doc! { "enableSharding": db, "primaryShard": Self::shard_name(0) }).await?;
        admin.run_command(doc! { "shardCollection": &ns, "key": { "k": 1 } }).await?;
        admin.run_command(doc! { "split": &ns, "middle": { "k": middle } }).await?;
        admin.run_command(doc! { "moveChunk": &ns, "find": { "k": middle }, "to": Self::shard_name(1) }).await?;
        Ok(())
    }

    /// Starts spare shard `i` and adds it to the cluster (`addShard` through the router).
    pub async fn add_shard(&mut self, i: usize) -> anyhow::Result<()> {
        self.start_shard(i, "").await?;
        self.register_shard(i).await
    }

    /// `addShard` through the router, then waits for the config service to promote the shard's
    /// member (tests talk to shards directly right after).
    async fn register_shard(&mut self, i: usize) -> anyhow::Result<()> {
        let name = Self::shard_name(i);
        let admin = self.client().await?.database("admin");
        admin.run_command(doc! { "addShard": format!("{name}/{}", self.shard_addr(i)), "name": &name }).await?;
        self.registered[i] = true;
        crate::repl::wait_state(&self.shard_addr(i), "PRIMARY", crate::repl::PRIMARY_WAIT).await?;
        Ok(())
    }

    /// How many shards the cluster can hold (started or spare).
    pub fn shard_slots(&self) -> usize {
        self.shard_ports.len()
    }

    pub fn shard_name(i: usize) -> String {
        format!("shard{i}")
    }

    /// `127.0.0.1:<port>` of shard `i` (stable across restarts).
    pub fn shard_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.shard_ports[i])
    }

    /// Starts shard `i` on its port and data dir; `failpoints` as for `shoal shard --failpoints`.
    /// A registered shard is waited for until it is primary again.
    pub async fn start_shard(&mut self, i: usize, failpoints: &str) -> anyhow::Result<()> {
        let spec = shard_spec(self.dir.path(), i, self.shard_ports[i], &self.config_addrs, failpoints);
        self.shards[i] = Some(Process::start(spec).await?);
        if self.registered[i] {
            crate::repl::wait_state(&self.shard_addr(i), "PRIMARY", crate::repl::PRIMARY_WAIT).await?;
        }
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

    /// Another router with extra flags.
    pub async fn start_router_with(&self, name: &str, args: &[String]) -> anyhow::Result<Process> {
        start_router(self.dir.path(), name, &self.config_addrs, args).await
    }

    /// A client of the catalog (the config servers).
    pub fn catalog(&self) -> shoal_cluster::config_client::ConfigClient {
        let settings = shoal_cluster::config_client::ClientSettings::default();
        shoal_cluster::config_client::ConfigClient::new(self.config_addrs.clone(), settings)
    }

    /// The tails of every log, for a failing test's message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        let shards = (0..self.shard_slots()).map(Self::shard_name);
        for name in shards.chain(["router".to_owned(), "cfg1".to_owned()]) {
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
        // TTL tests wait for one pass; passes over collections without TTL indexes cost nothing.
        "--ttl-monitor-secs".into(),
        "1".into(),
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
    let mut options = mongodb::options::ClientOptions::parse(uri).await?;
    crate::security::authenticate(&mut options).await?;
    Ok(mongodb::Client::with_options(options)?)
}

async fn start_router(dir: &Path, name: &str, config_addrs: &[String], extra: &[String]) -> anyhow::Result<Process> {
    let mut args =
        vec!["router".into(), "--listen".into(), "127.0.0.1:0".into(), "--config".into(), config_addrs.join(",")];
    args.extend_from_slice(extra);
    Process::start(ProcessSpec {
        name: name.into(),
        role: "router".into(),
        args,
        log_path: dir.join(format!("{name}.log")),
    })
    .await
}
