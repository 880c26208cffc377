//! Child `shoal` server processes for benchmarks: started with port 0, their bound address read
//! from the `SHOAL_READY` line, killed when dropped. And what processes cost: CPU time from
//! `/proc`, of one process or of a server's whole process tree, over a measured window.

use std::collections::{HashMap, HashSet};
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

/// One `/proc/<pid>/stat` line's fields this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ppid: u32,
    /// utime + stime, in ticks.
    own: u64,
    /// cutime + cstime: children that exited and were reaped (a PostgreSQL backend's CPU lands
    /// in its postmaster's here when the connection closes).
    reaped: u64,
}

/// The fields of a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// contain spaces, so fields are counted after its closing parenthesis.
fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().take(15).collect();
    let n = |i: usize| f.get(i)?.parse::<u64>().ok();
    // After the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    Some(Stat { ppid: n(1)? as u32, own: n(11)? + n(12)?, reaped: n(13)? + n(14)? })
}

fn ticks(t: u64) -> Duration {
    Duration::from_millis(t * 1000 / USER_HZ)
}

/// CPU time (user + system) the process `pid` has used so far, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|s| ticks(s.own))
}

/// CPU time used so far by the processes `roots` and all their descendants, including children
/// they already reaped: a server's whole cost (`shoal up` and the processes it supervises, or a
/// PostgreSQL postmaster and its backends). Processes that are gone, or not readable, count as 0.
pub fn tree_cpu_time(roots: &[u32]) -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Duration::ZERO };
    let stats: Vec<(u32, Stat)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?)))
        .collect();
    ticks(sum_tree(&stats, roots))
}

/// The CPU the server processes (trees rooted at the given pids) and this benchmark client use
/// over a window: what one operation costs each, beside its throughput.
pub struct CpuWindow {
    servers: Vec<u32>,
    server_start: Duration,
    client_start: Duration,
}

impl CpuWindow {
    pub fn start(servers: &[u32]) -> Self {
        Self {
            servers: servers.to_vec(),
            server_start: tree_cpu_time(servers),
            client_start: cpu_time(std::process::id()).unwrap_or_default(),
        }
    }

    /// Microseconds of CPU per operation since the start: the servers' (None when no server
    /// process was given) and this client's.
    pub fn per_op(&self, ops: u64) -> (Option<f64>, f64) {
        let per_op = |d: Duration| d.as_secs_f64() * 1e6 / ops.max(1) as f64;
        let server =
            (!self.servers.is_empty()).then(|| per_op(tree_cpu_time(&self.servers).saturating_sub(self.server_start)));
        let client = per_op(cpu_time(std::process::id()).unwrap_or_default().saturating_sub(self.client_start));
        (server, client)
    }
}

/// Ticks of `roots` and their descendants among `stats` (pid, stat).
fn sum_tree(stats: &[(u32, Stat)], roots: &[u32]) -> u64 {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, s) in stats {
        children.entry(s.ppid).or_default().push(*pid);
    }
    let mut members: HashSet<u32> = roots.iter().copied().collect();
    let mut queue: Vec<u32> = roots.to_vec();
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if members.insert(*child) {
                queue.push(*child);
            }
        }
    }
    stats.iter().filter(|(p, _)| members.contains(p)).map(|(_, s)| s.own + s.reaped).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_cpu_ticks() {
        let stat = "1234 (shoal conf) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 75 7 3 20 0 9 0 100 0 0";
        assert_eq!(parse_stat(stat), Some(Stat { ppid: 77, own: 325, reaped: 10 }));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn a_tree_counts_descendants_and_what_they_reaped_only() {
        let s = |ppid, own, reaped| Stat { ppid, own, reaped };
        // 10 -> 11 -> 12, 10 -> 13; 20 is someone else's.
        let stats = [(10, s(1, 5, 100)), (11, s(10, 7, 0)), (12, s(11, 1, 0)), (13, s(10, 2, 0)), (20, s(1, 50, 0))];
        assert_eq!(sum_tree(&stats, &[10]), 115);
        assert_eq!(sum_tree(&stats, &[11, 20]), 58);
        assert_eq!(sum_tree(&stats, &[99]), 0);
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
