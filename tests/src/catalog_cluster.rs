//! A cluster with a catalog: three config servers (one Raft group, separate processes), one
//! shard and one router pointed at them, in a temp dir on loopback ports.
//!
//! ```text
//!   test ──driver──> router ──gRPC──> shard0
//!                      └────gRPC────> cfg1, cfg2, cfg3 (Raft)  <── test (catalog client)
//! ```

use std::path::Path;

use crate::process::{Process, ProcessSpec};

pub struct CatalogCluster {
    /// The config servers, node id i+1 at index i.
    pub config: Vec<Process>,
    pub shard: Process,
    pub router: Process,
    /// `host:port` of each config server, for a catalog client.
    pub config_addrs: Vec<String>,
    /// The test chose the cluster's security itself: harness clients stay anonymous.
    secured_by_test: bool,
    /// Last: dropped after the processes, so a failing test can still print their logs.
    dir: tempfile::TempDir,
}

/// Starts one config server per port as a Raft group (node 1 with `--init`), data and logs in
/// `dir`; returns the processes and their `host:port` addresses. Config servers need each other's
/// ports before they start, so port 0 cannot be used.
pub async fn start_config_servers(dir: &Path, ports: &[u16]) -> anyhow::Result<(Vec<Process>, Vec<String>)> {
    start_config_servers_with(dir, ports, &[]).await
}

/// [`start_config_servers`] with `extra` arguments for each server (`--keyFile ...`).
pub async fn start_config_servers_with(
    dir: &Path,
    ports: &[u16],
    extra: &[String],
) -> anyhow::Result<(Vec<Process>, Vec<String>)> {
    let peers = ports.iter().enumerate().map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1)).collect::<Vec<_>>().join(",");
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
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
            dir.join(format!("cfg{id}")).display().to_string(),
            "--peers".into(),
            peers.clone(),
        ];
        if id == 1 {
            args.push("--init".into());
        }
        args.extend(extra.iter().cloned());
        let log_path = dir.join(format!("cfg{id}.log"));
        config.push(
            Process::start(ProcessSpec { name: format!("cfg{id}"), role: "configsvr".into(), args, log_path }).await?,
        );
    }
    Ok((config, addrs))
}

impl CatalogCluster {
    pub async fn start() -> anyhow::Result<CatalogCluster> {
        Self::start_with(&[]).await
    }

    /// A cluster whose router gets `router_args` too (`--auth`).
    pub async fn start_with(router_args: &[&str]) -> anyhow::Result<CatalogCluster> {
        Self::start_secured(&[], router_args).await
    }

    /// A cluster whose every process gets `every` (`--keyFile <path>`), the router `router_args`
    /// as well.
    pub async fn start_secured(every: &[String], router_args: &[&str]) -> anyhow::Result<CatalogCluster> {
        let dir = tempfile::tempdir()?;
        let (config, config_addrs) =
            start_config_servers_with(dir.path(), &crate::ports::free_ports(3)?, every).await?;
        let mut args: Vec<String> = vec![
            "shard".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            dir.path().join("shard0").display().to_string(),
            "--config".into(),
            config_addrs.join(","),
        ];
        args.extend(every.iter().cloned());
        let shard = Process::start(ProcessSpec {
            name: "shard0".into(),
            role: "shard".into(),
            args,
            log_path: dir.path().join("shard0.log"),
        })
        .await?;
        let mut router_all: Vec<&str> = every.iter().map(String::as_str).collect();
        router_all.extend_from_slice(router_args);
        let router = start_router(dir.path(), "router", &config_addrs, &router_all).await?;
        let secured_by_test = crate::security::names_own_security(&router_all);
        Ok(CatalogCluster { dir, config, shard, router, config_addrs, secured_by_test })
    }

    /// The cluster's temp dir (key files and certificates a test writes live there too).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Another router on the same catalog (the caller keeps it alive).
    pub async fn add_router(&self, name: &str, router_args: &[&str]) -> anyhow::Result<Process> {
        start_router(self.dir.path(), name, &self.config_addrs, router_args).await
    }

    /// A client of the router (authenticated as root when the suite runs secured, see
    /// [`crate::security`]; anonymous otherwise).
    pub async fn client(&self) -> anyhow::Result<mongodb::Client> {
        let uri = format!("mongodb://{}/?directConnection=true&serverSelectionTimeoutMS=5000", self.router.addr());
        let mut options = mongodb::options::ClientOptions::parse(uri).await?;
        if !self.secured_by_test {
            crate::security::authenticate(&mut options).await?;
        }
        Ok(mongodb::Client::with_options(options)?)
    }
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
