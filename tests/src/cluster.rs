//! A one-shard cluster in a temp dir: a `shoal shard` and a `shoal router` in front of it.
//!
//! ```text
//!   driver ──wire──> router (127.0.0.1:ephemeral) ──gRPC──> shard0 (127.0.0.1:ephemeral)
//!                                                             data: <tmp>/shard0/data
//!   logs: <tmp>/router.log, <tmp>/shard0.log (stderr + stdout, appended across restarts)
//! ```
//!
//! The shard restarts on the port it first bound, so the router (which was given that address)
//! reconnects without a restart. Dropping a [`Cluster`] kills both processes; if the thread is
//! panicking it first prints both log tails (and keeps the temp dir when
//! `SHOAL_KEEP_TEST_DIRS` is set).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use mongodb::Client;
use mongodb::options::ClientOptions;
use tempfile::TempDir;

use crate::process::{LOG_TAIL_LINES, Process, ProcessSpec};

/// How long the driver waits to find a usable server before an operation fails.
pub const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Attempts to rebind the shard's old port after a kill (the kernel may briefly hold it).
const RESTART_ATTEMPTS_MAX: u32 = 10;
const RESTART_RETRY_DELAY: Duration = Duration::from_millis(300);

pub const SHARD_NAME: &str = "shard0";

#[derive(Debug)]
pub struct Cluster {
    shard: Process,
    router: Process,
    /// Last: dropped after the processes, so a failing test can still print their logs.
    dir: Option<TempDir>,
}

impl Cluster {
    /// Starts a shard, then a router pointing at it, each on an ephemeral loopback port.
    pub async fn start() -> anyhow::Result<Cluster> {
        let dir = tempfile::Builder::new().prefix("shoal-test-").tempdir().context("creating the cluster temp dir")?;
        let data_dir = dir.path().join(SHARD_NAME).join("data");
        std::fs::create_dir_all(&data_dir)?;
        let shard = Process::start(shard_spec(dir.path(), "127.0.0.1:0")).await?;
        let router = Process::start(router_spec(dir.path(), shard.addr(), "127.0.0.1:0")).await?;
        Ok(Cluster { dir: Some(dir), shard, router })
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir is present until drop").path()
    }

    pub fn router(&self) -> &Process {
        &self.router
    }

    pub fn shard(&self) -> &Process {
        &self.shard
    }

    pub fn router_addr(&self) -> SocketAddr {
        self.router.addr()
    }

    pub fn shard_addr(&self) -> SocketAddr {
        self.shard.addr()
    }

    /// `mongodb://<router>/?directConnection=true&serverSelectionTimeoutMS=...`
    pub fn router_uri(&self) -> String {
        format!(
            "mongodb://{}/?directConnection=true&serverSelectionTimeoutMS={}",
            self.router_addr(),
            SERVER_SELECTION_TIMEOUT.as_millis()
        )
    }

    /// A new driver client for the router. Create one per test: a client is bound to the tokio
    /// runtime it was created on, and every `#[tokio::test]` has its own runtime.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let mut options = ClientOptions::parse(self.router_uri()).await?;
        options.connect_timeout = Some(SERVER_SELECTION_TIMEOUT);
        options.app_name = Some("shoal-tests".into());
        Ok(Client::with_options(options)?)
    }

    /// SIGKILLs the shard: no flush, no clean shutdown.
    pub fn kill9_shard(&mut self) {
        self.shard.kill9();
    }

    /// Starts the shard again on the same data dir and the same port (killing it first if it
    /// still runs). The router keeps running and reconnects to the same address.
    pub async fn restart_shard(&mut self) -> anyhow::Result<()> {
        self.shard.kill9();
        let listen = self.shard.addr().to_string();
        let mut attempt = 1;
        loop {
            match Process::start(shard_spec(self.dir(), &listen)).await {
                Ok(shard) => {
                    self.shard = shard;
                    return Ok(());
                }
                Err(e) if attempt >= RESTART_ATTEMPTS_MAX => {
                    return Err(e.context(format!("restarting the shard on {listen}")));
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(RESTART_RETRY_DELAY).await;
                }
            }
        }
    }

    /// Restarts the router on its old port, pointing at the shard's current address.
    pub async fn restart_router(&mut self) -> anyhow::Result<()> {
        self.router.kill9();
        let listen = self.router.addr().to_string();
        let mut attempt = 1;
        loop {
            match Process::start(router_spec(self.dir(), self.shard.addr(), &listen)).await {
                Ok(router) => {
                    self.router = router;
                    return Ok(());
                }
                Err(e) if attempt >= RESTART_ATTEMPTS_MAX => {
                    return Err(e.context(format!("restarting the router on {listen}")));
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(RESTART_RETRY_DELAY).await;
                }
            }
        }
    }

    /// Kills both processes and removes the temp dir, for a cluster that is never dropped (the
    /// shared one lives in a `static`). Runs at process exit: never blocks, never panics.
    pub fn cleanup_at_exit(&self) {
        self.router.kill9_quietly();
        self.shard.kill9_quietly();
        if std::env::var_os("SHOAL_KEEP_TEST_DIRS").is_none()
            && let Some(dir) = &self.dir
        {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }

    /// Log files of both processes, for a watchdog that outlives a borrow of the cluster.
    pub fn log_paths(&self) -> Vec<PathBuf> {
        vec![self.shard.log_path().to_path_buf(), self.router.log_path().to_path_buf()]
    }

    /// Prints the tail of each process's log to stderr (shown by the test runner on failure).
    pub fn print_log_tails(&self) {
        print_log_tails(&self.log_paths());
        for p in [&self.shard, &self.router] {
            if let Some(status) = p.exit_status() {
                eprintln!("--- {} has exited: {status}", p.name());
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The processes print their own log tails when a test fails (`Process`'s drop).
        if std::thread::panicking()
            && std::env::var_os("SHOAL_KEEP_TEST_DIRS").is_some()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("--- kept cluster dir {}", dir.keep().display());
        }
    }
}

pub(crate) fn print_log_tails(paths: &[PathBuf]) {
    for path in paths {
        eprintln!("--- tail of {} ---\n{}", path.display(), crate::process::log_tail(path, LOG_TAIL_LINES));
    }
}

fn shard_spec(dir: &Path, listen: &str) -> ProcessSpec {
    let data_dir = dir.join(SHARD_NAME).join("data");
    ProcessSpec {
        name: SHARD_NAME.into(),
        role: "shard".into(),
        args: vec![
            "shard".into(),
            "--name".into(),
            SHARD_NAME.into(),
            "--listen".into(),
            listen.into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
        ],
        log_path: dir.join(format!("{SHARD_NAME}.log")),
    }
}

fn router_spec(dir: &Path, shard: SocketAddr, listen: &str) -> ProcessSpec {
    ProcessSpec {
        name: "router".into(),
        role: "router".into(),
        args: vec!["router".into(), "--listen".into(), listen.into(), "--shard".into(), format!("http://{shard}")],
        log_path: dir.join("router.log"),
    }
}
