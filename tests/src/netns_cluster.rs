//! A five-host Shoal cluster on the network-namespace test bed ([`crate::netns`]): one spec with a
//! `host:` per process, `shoal secrets` run once and its key copied to every host, then
//! `shoal up -f spec --host ADDR` inside each host's namespace. The test drives it from the root
//! namespace through the official driver, as a user with a password.
//!
//! ```text
//!   host 1: cfg1  shard0-1                 (config servers: hosts 1-3)
//!   host 2: cfg2  shard0-2                 (shard0: hosts 1-3, port 27018)
//!   host 3: cfg3  shard0-3  shard1-1       (shard1: hosts 3-5, port 27028)
//!   host 4:                 shard1-2  router0 (27017)
//!   host 5:                 shard1-3  router1 (27017)
//! ```
//!
//! Authorization and keyFile cluster authentication are on. Every process listens on the wildcard
//! address of its namespace (`bind_ip: 0.0.0.0`) and advertises its host's address, so the first
//! user is created through MongoDB's localhost exception from inside a router's namespace.
//!
//! Must not: reach any address but the bed's own (every address in the spec is a bed host's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bson::doc;
use mongodb::options::{ClientOptions, Credential};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};

use crate::netns::Bed;
use crate::process::{Process, ProcessSpec, shoal_bin};

pub const HOSTS: usize = 5;
pub const USER: &str = "admin";
pub const PASSWORD: &str = "netns-admin-password";
pub const ROUTER_PORT: u16 = 27017;
pub const CONFIG_PORT: u16 = 27019;
/// Config servers' hosts (cfg1..cfg3).
pub const CONFIG_HOSTS: [usize; 3] = [1, 2, 3];
/// Routers' hosts (router0, router1).
pub const ROUTER_HOSTS: [usize; 2] = [4, 5];
/// Shards: name, port, members' hosts.
pub const SHARDS: [(&str, u16, [usize; 3]); 2] = [("shard0", 27018, [1, 2, 3]), ("shard1", 27028, [3, 4, 5])];

/// One gRPC question to a config server.
const CONFIG_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The bed, the spec and one `shoal up --host` per host.
pub struct NetnsCluster {
    /// By host index; dropped (SIGKILL) before the bed deletes the namespaces.
    launchers: BTreeMap<usize, Process>,
    runs: u32,
    pub bed: Bed,
    pub spec: PathBuf,
    key: PathBuf,
    pub dir: tempfile::TempDir,
}

impl NetnsCluster {
    /// Creates the bed, writes the spec and secrets, starts every host and creates the user.
    pub async fn start() -> anyhow::Result<NetnsCluster> {
        let bed = Bed::new(HOSTS)?;
        // SHOAL_NETNS_KEEP=1 keeps the spec, data and logs for a post-mortem.
        let keep = std::env::var_os("SHOAL_NETNS_KEEP").is_some();
        let dir = tempfile::Builder::new().prefix("shoal-netns-").disable_cleanup(keep).tempdir()?;
        if keep {
            eprintln!("netns cluster: keeping {}", dir.path().display());
        }
        let spec = dir.path().join("spec.yaml");
        std::fs::write(&spec, spec_text(&bed)).context("writing the spec")?;
        // The cluster's key, made once and copied to every host (docs/deploy.md).
        let secrets = dir.path().join("secrets");
        let out = tokio::process::Command::new(shoal_bin()?)
            .arg("secrets")
            .arg("-f")
            .arg(&spec)
            .arg("--data-dir")
            .arg(&secrets)
            .output()
            .await?;
        anyhow::ensure!(out.status.success(), "shoal secrets failed: {}", String::from_utf8_lossy(&out.stderr));
        let key = secrets.join("cluster.key");
        // This process's own gRPC channels (member status, config metrics) authenticate with it.
        let text = std::fs::read_to_string(&key).context("reading cluster.key")?;
        let parsed =
            shoal_cluster::net::ClusterKey::from_text(&text).map_err(|e| anyhow::anyhow!("cluster.key: {e}"))?;
        anyhow::ensure!(
            shoal_cluster::net::install(shoal_cluster::net::ClusterAuth::KeyFile(parsed)),
            "this test process already has another cluster key (one netns cluster per test process)"
        );
        let mut cluster = NetnsCluster { launchers: BTreeMap::new(), runs: 0, bed, spec, key, dir };
        let starts: Vec<_> = (1..=HOSTS).map(|i| cluster.launch(i)).collect::<anyhow::Result<_>>()?;
        for (i, started) in (1..=HOSTS).zip(futures::future::join_all(starts).await) {
            cluster.launchers.insert(i, started.with_context(|| format!("host {i}"))?);
        }
        cluster.create_user().await?;
        Ok(cluster)
    }

    /// Host `index`'s `shoal up --data-dir`.
    pub fn data_dir(&self, index: usize) -> PathBuf {
        self.dir.path().join(format!("h{index}"))
    }

    /// Copies the key into host `index`'s data dir and returns its `shoal up --host` start.
    fn launch(
        &mut self,
        index: usize,
    ) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<Process>> + use<>> {
        let data = self.data_dir(index);
        std::fs::create_dir_all(&data)?;
        if !data.join("cluster.key").exists() {
            shoal_cluster::pki::write_private(&data.join("cluster.key"), &std::fs::read_to_string(&self.key)?)?;
        }
        self.runs += 1;
        let ip = self.bed.host(index).ip.to_string();
        let spec = ProcessSpec {
            name: format!("h{index}-up{}", self.runs),
            role: "cluster".into(),
            args: [crate::up::up_args(&self.spec, &data), vec!["--host".into(), ip]].concat(),
            log_path: self.dir.path().join(format!("h{index}-up{}.log", self.runs)),
        };
        Ok(Process::start_wrapped(spec, self.bed.wrapper(index)))
    }

    /// Starts `shoal up --host` on host `index` again (after [`NetnsCluster::kill_host`] or a
    /// replacement) and waits for its ready line.
    pub async fn start_host(&mut self, index: usize) -> anyhow::Result<()> {
        let start = self.launch(index)?;
        let process = start.await?;
        self.launchers.insert(index, process);
        Ok(())
    }

    /// SIGKILL to every process of host `index`, `shoal up` included.
    pub fn kill_host(&mut self, index: usize) {
        self.bed.kill_host(index);
        if let Some(launcher) = self.launchers.remove(&index) {
            launcher.kill9();
        }
    }

    /// Host `index` lost for good and replaced: its processes killed, its namespace and data
    /// deleted, a new namespace with the same address and an empty data dir (the key copied
    /// again) running `shoal up --host` with the same spec.
    pub async fn replace_host(&mut self, index: usize) -> anyhow::Result<()> {
        self.kill_host(index);
        self.bed.remove_host(index)?;
        std::fs::remove_dir_all(self.data_dir(index)).context("deleting the lost host's data")?;
        self.bed.add_host(index)?;
        self.start_host(index).await
    }

    /// The first user, through the localhost exception inside router0's namespace.
    async fn create_user(&self) -> anyhow::Result<()> {
        self.bed.within(ROUTER_HOSTS[0], || async {
            let uri =
                format!("mongodb://127.0.0.1:{ROUTER_PORT}/?directConnection=true&serverSelectionTimeoutMS=20000");
            let client = mongodb::Client::with_uri_str(uri).await?;
            client
                .database("admin")
                .run_command(doc! { "createUser": USER, "pwd": PASSWORD, "roles": ["root"] })
                .await
                .context("createUser through the localhost exception")?;
            Ok(())
        })
    }

    /// A driver client of both routers, authenticated as [`USER`].
    pub async fn client(&self) -> anyhow::Result<mongodb::Client> {
        let routers: Vec<String> =
            ROUTER_HOSTS.iter().map(|h| format!("{}:{ROUTER_PORT}", self.bed.host(*h).ip)).collect();
        let uri = format!("mongodb://{}/?serverSelectionTimeoutMS=10000&connectTimeoutMS=5000", routers.join(","));
        let mut options = ClientOptions::parse(uri).await?;
        options.credential = Some(
            Credential::builder()
                .username(USER.to_owned())
                .password(PASSWORD.to_owned())
                .source("admin".to_owned())
                .build(),
        );
        Ok(mongodb::Client::with_options(options)?)
    }

    /// `host:port` of shard `shard`'s members with their host indexes.
    pub fn members(&self, shard: &str) -> Vec<(usize, String)> {
        let (_, port, hosts) = SHARDS.iter().find(|(name, _, _)| *name == shard).copied().unwrap_or(("", 0, [0; 3]));
        hosts.iter().map(|h| (*h, format!("{}:{port}", self.bed.ip_of(*h)))).collect()
    }

    /// The host of the member of `shard` that says it is PRIMARY, asking only hosts not in `skip`.
    pub async fn primary_of(&self, shard: &str, skip: &[usize]) -> Option<usize> {
        for (host, addr) in self.members(shard) {
            if skip.contains(&host) {
                continue;
            }
            if let Ok(status) = crate::repl::member_status(&addr).await
                && status.get_str("stateStr").is_ok_and(|s| s == "PRIMARY")
            {
                return Some(host);
            }
        }
        None
    }

    /// Waits (bounded) for a primary of `shard` on a host not in `skip`.
    pub async fn wait_primary(&self, shard: &str, skip: &[usize], within: Duration) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(host) = self.primary_of(shard, skip).await {
                return Ok(host);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no primary of {shard} outside hosts {skip:?} within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A config server's address.
    pub fn config_addr(&self, host: usize) -> String {
        format!("{}:{CONFIG_PORT}", self.bed.ip_of(host))
    }

    fn config_client(&self) -> ConfigClient {
        let settings = ClientSettings {
            rpc_timeout: CONFIG_CALL_TIMEOUT,
            connect_timeout: CONFIG_CALL_TIMEOUT,
            ..Default::default()
        };
        ConfigClient::new(CONFIG_HOSTS.iter().map(|h| self.config_addr(*h)).collect(), settings)
    }

    /// Raft metrics of the config server on `host`: (state, last applied index).
    pub async fn config_state(&self, host: usize) -> anyhow::Result<(String, u64)> {
        let metrics = self.config_client().metrics(&self.config_addr(host)).await?;
        Ok((metrics.state, metrics.last_applied_index))
    }

    /// The host of the config server that says it leads, asking only hosts not in `skip`.
    pub async fn config_leader(&self, skip: &[usize]) -> Option<usize> {
        for host in CONFIG_HOSTS {
            if skip.contains(&host) {
                continue;
            }
            if let Ok((state, _)) = self.config_state(host).await
                && state == "Leader"
            {
                return Some(host);
            }
        }
        None
    }

    /// Waits (bounded) for a config leader on a host not in `skip`.
    pub async fn wait_config_leader(&self, skip: &[usize], within: Duration) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(host) = self.config_leader(skip).await {
                return Ok(host);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no config leader outside hosts {skip:?} within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The tail of every host's `shoal up` log and of each process's log, for a failure report.
    pub fn logs(&self, lines: usize) -> String {
        let mut out = String::new();
        let mut paths: Vec<PathBuf> = Vec::new();
        collect_logs(self.dir.path(), &mut paths);
        paths.sort();
        for path in paths {
            out.push_str(&format!("\n--- {} ---\n{}\n", path.display(), crate::process::log_tail(&path, lines)));
        }
        out
    }
}

fn collect_logs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_logs(&path, out);
        } else if path.extension().is_some_and(|e| e == "log") {
            out.push(path);
        }
    }
}

/// The spec: every process on its bed host, authorization on (keyFile cluster authentication is
/// implied), listening on each namespace's wildcard address.
fn spec_text(bed: &Bed) -> String {
    let ip = |h: usize| bed.ip_of(h);
    let mut text =
        String::from("name: netns\nbind_ip: 0.0.0.0\nsecurity: { authorization: enabled }\nconfig_servers:\n");
    for (i, h) in CONFIG_HOSTS.iter().enumerate() {
        text.push_str(&format!("  - {{ name: cfg{}, port: {CONFIG_PORT}, host: {} }}\n", i + 1, ip(*h)));
    }
    text.push_str("routers:\n");
    for (i, h) in ROUTER_HOSTS.iter().enumerate() {
        text.push_str(&format!("  - {{ name: router{i}, port: {ROUTER_PORT}, host: {} }}\n", ip(*h)));
    }
    text.push_str("shards:\n");
    for (name, port, hosts) in SHARDS {
        text.push_str(&format!("  - name: {name}\n    members:\n"));
        for h in hosts {
            text.push_str(&format!("      - {{ port: {port}, host: {} }}\n", ip(h)));
        }
    }
    text
}
