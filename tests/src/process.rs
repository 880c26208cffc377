//! One child `shoal` process: spawn, wait for its readiness line, capture its logs, kill it.
//!
//! ```text
//!  test ──spawn──> shoal <role> ...   stdout ──> drain thread ──> "SHOAL_READY <role> <addr>" ─┐
//!                                      stderr ──> <dir>/<name>.log    (stdout lines too)       │
//!  test <───────── ready address, or exit / timeout with the log tail ─────────────────────────┘
//! ```
//!
//! Invariants:
//! - a child never outlives its [`Process`]: `Drop` sends SIGKILL and reaps it;
//! - a child never outlives the test process either (`PR_SET_PDEATHSIG`), because a cluster shared
//!   by a file's tests lives in a `static` that is never dropped. The signal fires when the
//!   *spawning thread* exits, so every child is spawned from one thread that lives as long as the
//!   test process ([`spawner`]), never from a tokio blocking thread or a test thread;
//! - stdout is drained until the child exits, so a chatty child never blocks on a full pipe.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::thread;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a process may take from spawn to its `SHOAL_READY` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How many trailing log lines are printed when a test fails or a process fails to start.
pub const LOG_TAIL_LINES: usize = 80;

/// The `shoal` binary: `$SHOAL_BIN`, else `target/<profile>/shoal` next to the test executable
/// (which runs from `target/<profile>/deps/`).
pub fn shoal_bin() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("SHOAL_BIN") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("SHOAL_BIN={} is not a file", path.display());
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().context("locating the test executable")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow!("unexpected test executable path {}", exe.display()))?;
    let bin = profile_dir.join("shoal");
    if !bin.is_file() {
        bail!(
            "the shoal binary is missing at {}: run `cargo build -p shoal` first \
             (or set SHOAL_BIN to its path)",
            bin.display()
        );
    }
    Ok(bin)
}

/// What to start: `shoal <args...>`, expected to print `SHOAL_READY <role> <addr>`.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Short unique name, also the log file's stem (`shard0`, `router`).
    pub name: String,
    /// The role word of the readiness line (`shard`, `router`).
    pub role: String,
    pub args: Vec<String>,
    /// The log file (appended to across restarts).
    pub log_path: PathBuf,
}

/// A running child process. Killed with SIGKILL on drop.
#[derive(Debug)]
pub struct Process {
    spec: ProcessSpec,
    addr: SocketAddr,
    child: Mutex<Child>,
}

impl Process {
    /// Spawns the process and blocks until it prints its readiness line.
    /// On failure the error carries the exit status and the tail of its log.
    pub fn start_blocking(spec: ProcessSpec) -> anyhow::Result<Process> {
        Self::start_blocking_wrapped(spec, &[])
    }

    /// [`Process::start_blocking`] of `wrapper... shoal <args>` (e.g. `ip netns exec NS`, which
    /// execs `shoal` in the same process, so the pid and SIGKILL stay the child's).
    pub fn start_blocking_wrapped(mut spec: ProcessSpec, wrapper: &[String]) -> anyhow::Result<Process> {
        let bin = shoal_bin()?;
        let secured = crate::security::server_args(&spec.role, &spec.args, &spec.log_path)?;
        spec.args.extend(secured);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log_path)
            .with_context(|| format!("opening {}", spec.log_path.display()))?;
        writeln!(log, "=== {} {}", bin.display(), spec.args.join(" "))?;

        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(&bin);
                cmd
            }
            None => Command::new(&bin),
        };
        cmd.args(&spec.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log.try_clone()?))
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .env("RUST_BACKTRACE", "1");
        // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent.
        #[allow(unsafe_code, reason = "pre_exec is the only way to have a child die with the test process")]
        unsafe {
            cmd.pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
        }
        let mut child =
            spawn_from_long_lived_thread(cmd).with_context(|| format!("spawning {} ({})", spec.name, bin.display()))?;

        let stdout = child.stdout.take().expect("stdout is piped");
        let (ready_tx, ready_rx) = mpsc::channel::<String>();
        let drain_log = log;
        thread::Builder::new()
            .name(format!("{}-stdout", spec.name))
            .spawn(move || drain_stdout(stdout, ready_tx, drain_log))?;

        let outcome = ready_rx.recv_timeout(READY_TIMEOUT);
        let failure = match outcome {
            Ok(line) => match parse_ready_line(&line, &spec.role) {
                Ok(addr) => {
                    return Ok(Process { spec, addr, child: Mutex::new(child) });
                }
                Err(e) => format!("{e:#}"),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {
                format!("no SHOAL_READY line within {READY_TIMEOUT:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => "stdout closed before a SHOAL_READY line".to_string(),
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
        bail!(
            "{} failed to start: {failure} (exit status: {status})\n--- tail of {} ---\n{}",
            spec.name,
            spec.log_path.display(),
            log_tail(&spec.log_path, LOG_TAIL_LINES)
        )
    }

    /// [`Process::start_blocking`] off the async runtime's worker threads.
    pub async fn start(spec: ProcessSpec) -> anyhow::Result<Process> {
        tokio::task::spawn_blocking(move || Process::start_blocking(spec))
            .await
            .context("process start task panicked")?
    }

    /// [`Process::start_blocking_wrapped`] off the async runtime's worker threads.
    pub async fn start_wrapped(spec: ProcessSpec, wrapper: Vec<String>) -> anyhow::Result<Process> {
        tokio::task::spawn_blocking(move || Process::start_blocking_wrapped(spec, &wrapper))
            .await
            .context("process start task panicked")?
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn spec(&self) -> &ProcessSpec {
        &self.spec
    }

    /// The address from the readiness line.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().expect("child lock").id()
    }

    pub fn log_path(&self) -> &Path {
        &self.spec.log_path
    }

    /// True while the child has not exited.
    pub fn is_alive(&self) -> bool {
        matches!(self.child.lock().expect("child lock").try_wait(), Ok(None))
    }

    /// Exit status if the child has exited.
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().expect("child lock").try_wait().ok().flatten()
    }

    /// SIGKILL (no chance to flush or clean up) and reap. Idempotent.
    pub fn kill9(&self) {
        let mut child = self.child.lock().expect("child lock");
        if matches!(child.try_wait(), Ok(None)) {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        }
        let _ = child.wait();
    }

    /// SIGSTOP: the process freezes (a partitioned or hung member) until [`Process::resume`].
    pub fn pause(&self) {
        let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGSTOP);
    }

    /// SIGCONT after [`Process::pause`].
    pub fn resume(&self) {
        let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGCONT);
    }

    /// SIGKILL without waiting on locks or reaping; for exit-time cleanup, where blocking or
    /// panicking is not an option.
    pub fn kill9_quietly(&self) {
        if let Ok(mut child) = self.child.try_lock()
            && matches!(child.try_wait(), Ok(None))
        {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of this process's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.spec.log_path, lines)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill9();
        // A failing test's cluster is dropped while it unwinds: its processes' logs go with the
        // temp dir, so what they said last is printed first (CI keeps nothing else).
        if std::thread::panicking() {
            eprintln!("--- last lines of {} ---\n{}", self.spec.name, self.log_tail(LOG_TAIL_LINES));
        }
    }
}

/// Expects `SHOAL_READY <role> <addr>` for this `role`.
fn parse_ready_line(line: &str, role: &str) -> anyhow::Result<SocketAddr> {
    match shoal_proto::ready::parse(line) {
        Some((r, addr)) if r == role => Ok(addr),
        _ => bail!("expected `SHOAL_READY {role} <addr>`, got {line:?}"),
    }
}

/// Copies the child's stdout into its log; hands the first readiness line to the starter.
fn drain_stdout(stdout: impl Read, ready_tx: mpsc::Sender<String>, mut log: File) {
    let mut ready_tx = Some(ready_tx);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(log, "[stdout] {line}");
        if line.starts_with("SHOAL_READY")
            && let Some(tx) = ready_tx.take()
        {
            let _ = tx.send(line);
        }
    }
}

/// The last `lines` lines of a file (reads at most its last 256 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    const TAIL_BYTES_MAX: u64 = 256 * 1024;
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES_MAX)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// The thread every child is spawned from; see the module invariants for why it must outlive
/// every child.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        thread::Builder::new()
            .name("shoal-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the process-spawner thread");
        Mutex::new(tx)
    })
}

fn spawn_from_long_lived_thread(cmd: Command) -> io::Result<Child> {
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner()
        .lock()
        .expect("spawner lock")
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| io::Error::other("spawner thread dropped the request"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_parses() {
        let addr = parse_ready_line("SHOAL_READY shard 127.0.0.1:4000", "shard").unwrap();
        assert_eq!(addr, "127.0.0.1:4000".parse().unwrap());
        assert!(parse_ready_line("SHOAL_READY router 127.0.0.1:4000", "shard").is_err());
        assert!(parse_ready_line("SHOAL_READY shard nonsense", "shard").is_err());
    }
}
