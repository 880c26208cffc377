//! `shoal up` as a user runs it: a spec with three config servers, one shard and one router on
//! free loopback ports, started by the launcher and stopped with SIGINT.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::process::{Process, ProcessSpec};

/// Bound on waiting for the launcher to stop its cluster after SIGINT.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A spec directory with its ports; `start` runs `shoal up` on it (again, after a stop).
pub struct LocalUp {
    pub dir: PathBuf,
    pub spec: PathBuf,
    /// cfg1, cfg2, cfg3, router0, shard0 (other layouts: see their constructors).
    pub ports: Vec<u16>,
    /// The router's metrics port when the spec names one (else its port + 1000).
    pub router_metrics: Option<u16>,
}

impl LocalUp {
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        Self::with_settings(dir, "")
    }

    /// The same spec with `extra` YAML appended (`security:`, `net:` sections).
    pub fn with_settings(dir: &Path, extra: &str) -> anyhow::Result<Self> {
        let ports = crate::ports::free_ports(5)?;
        let spec = dir.join("spec.yaml");
        let text = format!(
            "name: test\nbind_ip: 127.0.0.1\nconfig_servers:\n  - name: cfg1\n    port: {}\n  - name: cfg2\n    port: {}\n  - name: cfg3\n    port: {}\nrouters:\n  - name: router0\n    port: {}\nshards:\n  - name: shard0\n    members:\n      - port: {}\n",
            ports[0], ports[1], ports[2], ports[3], ports[4]
        ) + extra;
        std::fs::write(&spec, text).context("writing the spec")?;
        Ok(Self { dir: dir.to_path_buf(), spec, ports, router_metrics: None })
    }

    /// Three config servers, one router with its metrics port named, and two shards: `shard0` of
    /// three members and `shard1` of one. Ports: cfg1..3, router0, shard0-1..3, shard1, router0's
    /// metrics.
    pub fn two_shards(dir: &Path) -> anyhow::Result<Self> {
        let p = crate::ports::free_ports(9)?;
        let spec = dir.join("spec.yaml");
        let text = format!(
            "name: test\nbind_ip: 127.0.0.1\nconfig_servers:\n  - {{ name: cfg1, port: {} }}\n  - {{ name: cfg2, port: {} }}\n  - {{ name: cfg3, port: {} }}\n\
             routers:\n  - {{ name: router0, port: {}, metrics_port: {} }}\n\
             shards:\n  - name: shard0\n    members: [{{ port: {} }}, {{ port: {} }}, {{ port: {} }}]\n\
             \x20 - name: shard1\n    members: [{{ port: {} }}]\n",
            p[0], p[1], p[2], p[3], p[8], p[4], p[5], p[6], p[7]
        );
        std::fs::write(&spec, text).context("writing the spec")?;
        Ok(Self { dir: dir.to_path_buf(), spec, ports: p.clone(), router_metrics: Some(p[8]) })
    }

    /// Three config servers, one shard of three members and two routers, with `extra` appended:
    /// the smallest cluster a rolling restart keeps serving. Ports: cfg1..3, router0, router1,
    /// shard0-1..3.
    pub fn replicated(dir: &Path, extra: &str) -> anyhow::Result<Self> {
        let p = crate::ports::free_ports(8)?;
        let spec = dir.join("spec.yaml");
        let text = format!(
            "name: test\nconfig_servers:\n  - {{ name: cfg1, port: {} }}\n  - {{ name: cfg2, port: {} }}\n  - {{ name: cfg3, port: {} }}\n\
             routers:\n  - {{ name: router0, port: {} }}\n  - {{ name: router1, port: {} }}\n\
             shards:\n  - name: shard0\n    members: [{{ port: {} }}, {{ port: {} }}, {{ port: {} }}]\n",
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
        ) + extra;
        std::fs::write(&spec, text).context("writing the spec")?;
        Ok(Self { dir: dir.to_path_buf(), spec, ports: p, router_metrics: None })
    }

    /// The data dir `start` passes to `shoal up`.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn router_port(&self) -> u16 {
        self.ports[3]
    }

    /// The router's HTTP port (`/metrics`, the status page).
    pub fn router_metrics_port(&self) -> u16 {
        self.router_metrics.unwrap_or(self.router_port() + 1000)
    }

    /// A driver URI for the router.
    pub fn uri(&self, db: &str) -> String {
        format!("mongodb://127.0.0.1:{}/{db}?directConnection=true&serverSelectionTimeoutMS=5000", self.router_port())
    }

    /// Starts `shoal up` (the `run`th time; it names the launcher's log) and waits for its
    /// `SHOAL_READY cluster` line.
    pub async fn start(&self, run: u32) -> anyhow::Result<Process> {
        Process::start(ProcessSpec {
            name: format!("up{run}"),
            role: "cluster".into(),
            args: up_args(&self.spec, &self.data_dir()),
            log_path: self.dir.join(format!("up{run}.log")),
        })
        .await
    }
}

/// SIGINT to the launcher, then waits (bounded) for it to stop its cluster and exit 0.
pub async fn stop(launcher: &Process) -> anyhow::Result<()> {
    kill(Pid::from_raw(launcher.pid() as i32), Signal::SIGINT).context("SIGINT")?;
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    while launcher.exit_status().is_none() {
        if tokio::time::Instant::now() >= deadline {
            bail!("shoal up did not stop after SIGINT:\n{}", launcher.log_tail(40));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match launcher.exit_status() {
        Some(s) if s.success() => Ok(()),
        other => bail!("shoal up exit status: {other:?}"),
    }
}

/// The pid of the running process whose command line holds `needle` (e.g. a child's data dir).
pub fn pid_with_arg(needle: &str) -> Option<i32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a == needle) {
            // Skip zombies: a killed child not yet reaped still has a /proc entry.
            let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            if state.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) {
                continue;
            }
            return Some(pid);
        }
    }
    None
}

/// `shoal up`'s arguments for a spec and a data dir (the multi-host bed adds `--host`).
pub fn up_args(spec: &std::path::Path, data_dir: &std::path::Path) -> Vec<String> {
    vec!["up".into(), "-f".into(), spec.display().to_string(), "--data-dir".into(), data_dir.display().to_string()]
}
