//! Child `shoal` server processes for benchmarks: started with port 0, their bound address read
//! from the `SHOAL_READY` line, killed when dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a server may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Server {
    pub addr: SocketAddr,
    child: Child,
}

impl Server {
    pub async fn start(exe: &Path, args: &[&str], log: &Path) -> anyhow::Result<Self> {
        let log_file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdout = child.stdout.take().context("child stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(READY_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.strip_prefix("SHOAL_READY ") {
                    let addr = rest.split_whitespace().nth(1).context("ready line without address")?;
                    return Ok(addr.parse::<SocketAddr>()?);
                }
            }
            bail!("process exited before it was ready; see {}", log.display())
        })
        .await
        .with_context(|| format!("waiting for {:?} to be ready", args.first()))??;
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { addr: ready, child })
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}
