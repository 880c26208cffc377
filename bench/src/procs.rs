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

impl Server {
    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// `n` distinct loopback ports that were free a moment ago, for servers that must know each
/// other's addresses before they start (Raft peers). All `n` are bound at once so they differ;
/// another process could take one before the server binds it, which only fails the run.
pub fn free_loopback_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect()
}

/// Linux reports process CPU times in clock ticks of `USER_HZ`, which is 100 on every mainstream
/// kernel configuration (`getconf CLK_TCK`).
const USER_HZ: u64 = 100;

/// CPU time (user + system) the process `pid` has used so far, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|ticks| Duration::from_millis(ticks * 1000 / USER_HZ))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2) is
/// in parentheses and may contain spaces, so fields are counted after its closing parenthesis.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_cpu_ticks() {
        let stat = "1234 (shoal conf) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert_eq!(parse_cpu_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_loopback_ports(6).expect("loopback ports");
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 6);
    }
}
