//! The child processes of `shoal up`: starting each one with its log file, waiting for its
//! `SHOAL_READY` line, noticing the first one that exits, and stopping them all in order.
//!
//! ```text
//!  launcher --spawn--> child (own process group, so a terminal Ctrl-C reaches only the launcher)
//!     stdin  : pipe held by the launcher; EOF tells the child its launcher is gone
//!     stdout : read by a task: first `SHOAL_READY <role> <addr>` -> start(); other lines -> log
//!     stderr : <data-dir>/<name>.log (O_APPEND, shared with the stdout task)
//!  stop: reverse start order; SIGTERM, wait STOP_GRACE, then SIGKILL
//! ```
//!
//! Invariant: every spawned child is in `children` before anything is awaited, so whatever ends
//! the launcher's work (error, signal, dropped future) leaves `stop_all` able to reach it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::plan::ProcessPlan;

/// How long a process may take from spawn to its `SHOAL_READY` line (opening a large store
/// included).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a process gets to exit after SIGTERM before it is SIGKILLed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long to wait for an exit status once a child closed its stdout, or after SIGKILL.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(5);
/// Longest stdout line kept whole; longer ones are split, so a runaway child cannot grow memory.
const STDOUT_LINE_BYTES_MAX: u64 = 64 * 1024;
/// How much of a log's end is shown when a process fails.
const LOG_TAIL_BYTES_MAX: u64 = 16 * 1024;
const LOG_TAIL_LINES_MAX: usize = 20;

/// A child that exited on its own, for the report.
#[derive(Debug)]
pub struct Exited {
    pub name: String,
    pub status: std::io::Result<ExitStatus>,
    pub log_path: PathBuf,
    /// How long it ran (the supervisor's backoff resets after a long run).
    pub ran_for: Duration,
}

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match &self.status {
            Ok(status) => status.to_string(),
            Err(e) => format!("status unknown: {e}"),
        };
        write!(f, "{} exited unexpectedly ({status}); log {}", self.name, self.log_path.display())?;
        write!(f, "{}", log_tail(&self.log_path))
    }
}

struct Running {
    name: String,
    log_path: PathBuf,
    started: tokio::time::Instant,
    child: Child,
    /// Never written; held so the child's stdin stays open exactly as long as the launcher lives.
    _stdin: Option<ChildStdin>,
}

pub struct Launcher {
    exe: PathBuf,
    /// In start order.
    children: Vec<Running>,
}

impl Launcher {
    /// `exe` is the `shoal` executable the children run.
    pub fn new(exe: PathBuf) -> Self {
        Self { exe, children: Vec::new() }
    }

    /// Spawns `plan` and waits for its `SHOAL_READY` line.
    pub async fn start(&mut self, plan: &ProcessPlan) -> anyhow::Result<()> {
        if let Some(dir) = &plan.data_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create data dir {}", dir.display()))?;
        }
        // Truncate first so a failure's log tail shows this run only; then both writers append.
        File::create(&plan.log_path).with_context(|| format!("cannot create log {}", plan.log_path.display()))?;
        let stderr = open_append(&plan.log_path)?;
        let stdout_log = tokio::fs::File::from_std(open_append(&plan.log_path)?);

        let mut child = Command::new(&self.exe)
            .args(&plan.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {} ({})", plan.name, self.exe.display()))?;
        let stdout = child.stdout.take();
        let stdin = child.stdin.take();
        info!(name = %plan.name, pid = child.id(), log = %plan.log_path.display(), "started {}", plan.role.as_str());
        self.children.push(Running {
            name: plan.name.clone(),
            log_path: plan.log_path.clone(),
            started: tokio::time::Instant::now(),
            child,
            _stdin: stdin,
        });

        let (ready_tx, ready_rx) = oneshot::channel();
        match stdout {
            // Spawned, not awaited here: the pipe must keep draining after start() returns or is
            // dropped, or the child would block (or die of EPIPE) on its next stdout write.
            Some(stdout) => drop(tokio::spawn(read_stdout(stdout, stdout_log, ready_tx))),
            None => bail!("{}: stdout was not captured", plan.name),
        }
        let ready = tokio::time::timeout(READY_TIMEOUT, ready_rx).await;
        let (role, addr) = match ready {
            Ok(Ok(ready)) => ready,
            Ok(Err(_)) => {
                let status = match self.children.last_mut() {
                    Some(running) => describe_exit(tokio::time::timeout(EXIT_STATUS_WAIT, running.child.wait()).await),
                    None => "status unknown".to_owned(),
                };
                let log = plan.log_path.display();
                bail!("{} exited before it was ready ({status}); log {log}{}", plan.name, log_tail(&plan.log_path))
            }
            Err(_) => bail!(
                "{} did not print SHOAL_READY within {} s; log {}{}",
                plan.name,
                READY_TIMEOUT.as_secs(),
                plan.log_path.display(),
                log_tail(&plan.log_path)
            ),
        };
        if role != plan.role.as_str() {
            bail!("{} reported ready as a {role}, expected a {}", plan.name, plan.role.as_str());
        }
        info!(name = %plan.name, %addr, "ready");
        Ok(())
    }

    /// Resolves when any started child exits (reaping it); never resolves while none are running.
    pub async fn first_exit(&mut self) -> Exited {
        if self.children.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.children.iter_mut().map(|running| Box::pin(running.child.wait()));
        let (status, index, rest) = futures::future::select_all(waits).await;
        drop(rest);
        let running = &self.children[index];
        Exited {
            name: running.name.clone(),
            status,
            log_path: running.log_path.clone(),
            ran_for: running.started.elapsed(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Like [`Launcher::first_exit`], and forgets the child: the rest keep running.
    pub async fn next_exit(&mut self) -> Exited {
        if self.children.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.children.iter_mut().map(|running| Box::pin(running.child.wait()));
        let (status, index, rest) = futures::future::select_all(waits).await;
        drop(rest);
        let running = self.children.remove(index);
        Exited { ran_for: running.started.elapsed(), name: running.name, status, log_path: running.log_path }
    }

    /// The names of the running children, in start order.
    pub fn names(&self) -> Vec<String> {
        self.children.iter().map(|running| running.name.clone()).collect()
    }

    /// Stops the child `name` (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and forgets it; a
    /// name not running is a no-op.
    pub async fn stop_one(&mut self, name: &str) {
        if let Some(index) = self.children.iter().position(|running| running.name == name) {
            let mut running = self.children.remove(index);
            stop(&mut running).await;
        }
    }

    /// Stops every child, last started first: SIGTERM, up to [`STOP_GRACE`], then SIGKILL.
    pub async fn stop_all(&mut self) {
        while let Some(mut running) = self.children.pop() {
            stop(&mut running).await;
        }
    }
}

async fn stop(running: &mut Running) {
    let name = &running.name;
    match running.child.try_wait() {
        Ok(Some(status)) => {
            info!(%name, "already exited ({status})");
            return;
        }
        Ok(None) => {}
        Err(e) => warn!(%name, "cannot query its state: {e}"),
    }
    // `id()` is `None` once reaped; while it is `Some` the pid cannot belong to another process.
    let pid = running.child.id().and_then(|pid| i32::try_from(pid).ok());
    if let Some(pid) = pid
        && let Err(e) = kill(Pid::from_raw(pid), Signal::SIGTERM)
    {
        warn!(%name, "SIGTERM failed: {e}");
    }
    match tokio::time::timeout(STOP_GRACE, running.child.wait()).await {
        Ok(Ok(status)) => info!(%name, "stopped ({status})"),
        Ok(Err(e)) => warn!(%name, "cannot wait for it: {e}"),
        Err(_) => {
            warn!(%name, "did not stop within {} s of SIGTERM; killing it", STOP_GRACE.as_secs());
            if let Err(e) = running.child.start_kill() {
                warn!(%name, "SIGKILL failed: {e}");
            }
            let status = tokio::time::timeout(EXIT_STATUS_WAIT, running.child.wait()).await;
            info!(%name, "killed ({})", describe_exit(status));
        }
    }
}

fn describe_exit(status: Result<std::io::Result<ExitStatus>, tokio::time::error::Elapsed>) -> String {
    match status {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => format!("status unknown: {e}"),
        Err(_) => "still running".to_owned(),
    }
}

fn open_append(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new().append(true).open(path).with_context(|| format!("cannot open log {}", path.display()))
}

/// Reads the child's stdout: the first `SHOAL_READY` line goes to `ready`, everything else to the
/// log. Returns at EOF (the child exited or closed stdout), which drops `ready` if still unsent.
async fn read_stdout(stdout: ChildStdout, mut log: tokio::fs::File, ready: oneshot::Sender<(String, SocketAddr)>) {
    let mut reader = BufReader::new(stdout);
    let mut ready = Some(ready);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(STDOUT_LINE_BYTES_MAX).read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                warn!("reading a child's stdout failed: {e}");
                return;
            }
        }
        if ready.is_some()
            && let Some(parsed) =
                shoal_proto::ready::parse(&String::from_utf8_lossy(&line)).map(|(r, a)| (r.to_owned(), a))
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(parsed);
            continue;
        }
        // A log write failing must not stop the draining; the line is lost, the child lives on.
        let _ = log.write_all(&line).await;
    }
}

/// The last lines of a log, indented, for error messages; empty if there is nothing to show.
fn log_tail(path: &Path) -> String {
    let mut text = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES_MAX)))?;
        file.take(LOG_TAIL_BYTES_MAX).read_to_end(&mut text)
    });
    if read.is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES_MAX)..];
    if tail.is_empty() {
        return " (empty)".to_owned();
    }
    let mut out = String::from(", last lines:");
    for line in tail {
        out.push_str("\n  | ");
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("x.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).expect("write log");
        let tail = log_tail(&path);
        assert!(tail.ends_with("\n  | line 99"), "{tail}");
        assert!(tail.contains("line 80") && !tail.contains("line 79"), "{tail}");
        std::fs::write(&path, "").expect("truncate log");
        assert_eq!(log_tail(&path), " (empty)");
        assert_eq!(log_tail(&dir.path().join("missing.log")), "");
    }
}
