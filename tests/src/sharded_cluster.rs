//! A multi-shard cluster: three config servers (one Raft group), N shards named `shard0..`,
//! each registered in the catalog (`AddShard`), and routers started with `--config` only, so
//! every request is routed by the catalog. Loopback ports, one temp dir, processes killed on drop.
//!
//! ```text
//!   test ──driver──> router(s) ──gRPC──> shard0, shard1, ...
//!                        └──────gRPC──> cfg1, cfg2, cfg3 (Raft)  <── test (catalog client)
//! ```

use shoal_configsvr::catalog::Command;
use shoal_configsvr::client::{ClientSettings, ConfigClient};

use crate::process::{Process, ProcessSpec};

pub struct ShardedCluster {
    dir: tempfile::TempDir,
    _config: Vec<Process>,
    pub shards: Vec<Process>,
    pub router: Process,
    /// `host:port` of each config server, for a catalog client.
    pub config_addrs: Vec<String>,
}

impl ShardedCluster {
    /// Starts the cluster with `shards` shards and one router.
    pub async fn start(shards: usize) -> anyhow::Result<ShardedCluster> {
        let dir = tempfile::tempdir()?;
        let ports = crate::up::free_ports(3)?;
        let peers =
            ports.iter().enumerate().map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
        let config_addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut config = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let id = i + 1;
            let mut args = vec![
                "configsvr".to_string(),
                "--id".into(),
                id.to_string(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--data-dir".into(),
                dir.path().join(format!("cfg{id}")).display().to_string(),
                "--peers".into(),
                peers.clone(),
            ];
            if id == 1 {
                args.push("--init".into());
            }
            let log_path = dir.path().join(format!("cfg{id}.log"));
            config.push(
                Process::start(ProcessSpec { name: format!("cfg{id}"), role: "configsvr".into(), args, log_path })
                    .await?,
            );
        }
        let catalog = ConfigClient::new(config_addrs.clone(), ClientSettings::default());
        let mut started = Vec::new();
        for i in 0..shards {
            let name = format!("shard{i}");
            let shard = Process::start(ProcessSpec {
                name: name.clone(),
                role: "shard".into(),
                args: vec![
                    "shard".into(),
                    "--name".into(),
                    name.clone(),
                    "--listen".into(),
                    "127.0.0.1:0".into(),
                    "--data-dir".into(),
                    dir.path().join(&name).display().to_string(),
                    "--config".into(),
                    config_addrs.join(","),
                ],
                log_path: dir.path().join(format!("{name}.log")),
            })
            .await?;
            let add =
                Command::AddShard { shard: name.clone(), replica_set: name, members: vec![shard.addr().to_string()] };
            catalog.write(&add).await?.outcome.map_err(|e| anyhow::anyhow!("AddShard: {e}"))?;
            started.push(shard);
        }
        let router = start_router(dir.path(), "router", &config_addrs).await?;
        Ok(ShardedCluster { dir, _config: config, shards: started, router, config_addrs })
    }

    /// Another router on the same catalog (its own routing cache), e.g. to make one stale.
    pub async fn start_router(&self, name: &str) -> anyhow::Result<Process> {
        start_router(self.dir.path(), name, &self.config_addrs).await
    }

    pub fn catalog(&self) -> ConfigClient {
        ConfigClient::new(self.config_addrs.clone(), ClientSettings::default())
    }

    pub async fn client(&self) -> anyhow::Result<mongodb::Client> {
        client_of(&self.router).await
    }
}

/// A driver client connected directly to `router`.
pub async fn client_of(router: &Process) -> anyhow::Result<mongodb::Client> {
    let uri = format!("mongodb://{}/?directConnection=true&serverSelectionTimeoutMS=5000", router.addr());
    Ok(mongodb::Client::with_uri_str(uri).await?)
}

async fn start_router(dir: &std::path::Path, name: &str, config_addrs: &[String]) -> anyhow::Result<Process> {
    Process::start(ProcessSpec {
        name: name.into(),
        role: "router".into(),
        args: vec!["router".into(), "--listen".into(), "127.0.0.1:0".into(), "--config".into(), config_addrs.join(",")],
        log_path: dir.join(format!("{name}.log")),
    })
    .await
}
