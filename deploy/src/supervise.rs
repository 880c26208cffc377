//! What `shoal up` does once its processes run: restarts the ones that die (the spec's
//! `restart:` policy, with backoff), and serves restart requests from `shoal restart` on a control
//! socket in the data dir.
//!
//! The decision (restart or not, and after how long) is [`Backoff::after_exit`], a pure function
//! of the policy, the exit status and how long the process had run; [`supervise`] does the I/O.
//!
//! ```text
//!  launcher.next_exit ──> Backoff::after_exit ──> pending restarts (deadline, name)
//!  deadline reached   ──> launcher.start(plan)  (failure: counted, rescheduled with more backoff)
//!  control socket     ──> "restart NAME" ──> stop gracefully, start, wait ready ──> "ok" | "error: ..."
//! ```
//!
//! Must not: restart a process the operator stopped through the socket before answering it, or
//! spin: every restart waits at least [`RESTART_DELAY_INITIAL`], growing to [`RESTART_DELAY_MAX`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::launcher::Launcher;
use crate::plan::ProcessPlan;
use crate::spec::RestartPolicy;

pub const RESTART_DELAY_INITIAL: Duration = Duration::from_secs(1);
pub const RESTART_DELAY_MAX: Duration = Duration::from_secs(30);
/// A process that ran this long before dying starts again from the initial delay.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// The control socket's file name in the data dir.
pub const CONTROL_SOCKET: &str = "shoal-up.sock";
/// Bounds one control request end to end on the client's side (a restart waits for the
/// process's ready line, which may take the launcher's whole ready timeout).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest request line read from the socket.
const CONTROL_LINE_BYTES_MAX: u64 = 1024;

/// Restart bookkeeping of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backoff {
    /// Restarts since it last ran [`HEALTHY_AFTER`].
    pub attempts: u32,
}

impl Backoff {
    /// After an exit: `Some(delay)` to restart after `delay`, `None` to leave it down. `success`:
    /// the process exited with status 0 (it was asked to, or chose to); `ran_for`: since start.
    pub fn after_exit(&mut self, policy: RestartPolicy, success: bool, ran_for: Duration) -> Option<Duration> {
        if policy == RestartPolicy::Never || success {
            return None;
        }
        if ran_for >= HEALTHY_AFTER {
            self.attempts = 0;
        }
        let delay = RESTART_DELAY_INITIAL.saturating_mul(2u32.saturating_pow(self.attempts.min(16)));
        self.attempts = self.attempts.saturating_add(1);
        Some(delay.min(RESTART_DELAY_MAX))
    }
}

/// A request from the control socket.
pub enum Control {
    /// Stop `name` gracefully and start it again; answers once it is ready (or failed).
    Restart { name: String, reply: oneshot::Sender<Result<(), String>> },
    /// The names of the processes running now.
    List { reply: oneshot::Sender<Vec<String>> },
}

/// Runs until every process is gone for good (an error) or the future is dropped (shutdown).
pub async fn supervise(
    launcher: &mut Launcher,
    plans: &[ProcessPlan],
    policy: RestartPolicy,
    mut control: mpsc::Receiver<Control>,
) -> anyhow::Result<()> {
    let by_name: HashMap<&str, &ProcessPlan> = plans.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut backoff: HashMap<String, Backoff> = HashMap::new();
    let mut pending: Vec<(Instant, String)> = Vec::new();
    loop {
        if launcher.is_empty() && pending.is_empty() {
            bail!("every process of this host has exited and none is to be restarted");
        }
        let next_deadline = pending.iter().map(|(at, _)| *at).min();
        tokio::select! {
            exited = launcher.next_exit() => {
                let success = exited.status.as_ref().is_ok_and(|s| s.success());
                let delay = backoff.entry(exited.name.clone()).or_default().after_exit(policy, success, exited.ran_for);
                match delay {
                    Some(delay) => {
                        warn!("{exited}; restarting it in {} ms", delay.as_millis());
                        pending.push((Instant::now() + delay, exited.name.clone()));
                    }
                    None => warn!("{exited}; not restarting it (restart: {policy:?}, or it exited cleanly); the rest keep running"),
                }
            }
            () = sleep_until(next_deadline) => {
                let now = Instant::now();
                let due: Vec<String> = pending.iter().filter(|(at, _)| *at <= now).map(|(_, n)| n.clone()).collect();
                pending.retain(|(at, _)| *at > now);
                for name in due {
                    let Some(plan) = by_name.get(name.as_str()) else { continue };
                    info!(%name, "restarting");
                    if let Err(e) = launcher.start(plan).await {
                        let delay = backoff.entry(name.clone()).or_default().after_exit(policy, false, Duration::ZERO);
                        match delay {
                            Some(delay) => {
                                warn!(%name, "restart failed, trying again in {} ms: {e:#}", delay.as_millis());
                                pending.push((Instant::now() + delay, name));
                            }
                            None => warn!(%name, "restart failed: {e:#}"),
                        }
                    }
                }
            }
            request = control.recv() => match request {
                Some(Control::List { reply }) => drop(reply.send(launcher.names())),
                Some(Control::Restart { name, reply }) => {
                    let outcome = match by_name.get(name.as_str()) {
                        None => Err(format!("no process {name} on this host")),
                        Some(plan) => {
                            pending.retain(|(_, n)| *n != name);
                            launcher.stop_one(&name).await;
                            info!(%name, "restarting on request");
                            launcher.start(plan).await.map_err(|e| format!("{e:#}"))
                        }
                    };
                    let _ = reply.send(outcome);
                }
                // The socket task ended (it logs why); supervision goes on without it.
                None => control = mpsc::channel(1).1,
            },
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Binds `<data_dir>/shoal-up.sock` (replacing a stale one from a launcher that died) and feeds
/// its requests to `tx`. The socket is the operator's: mode 0600 under the data dir.
pub fn serve_control(data_dir: &Path, tx: mpsc::Sender<Control>) -> anyhow::Result<PathBuf> {
    let path = data_dir.join(CONTROL_SOCKET);
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            bail!(
                "another shoal up is running on {} (its control socket {} answers)",
                data_dir.display(),
                path.display()
            );
        }
        std::fs::remove_file(&path).with_context(|| format!("cannot remove stale {}", path.display()))?;
    }
    let listener = UnixListener::bind(&path).with_context(|| format!("cannot bind {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))?;
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => drop(tokio::spawn(answer(stream, tx.clone()))),
                Err(e) => {
                    warn!("control socket accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(path)
}

/// One connection: one request line, one answer line.
async fn answer(stream: UnixStream, tx: mpsc::Sender<Control>) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, CONTROL_LINE_BYTES_MAX));
    if reader.read_line(&mut line).await.is_err() {
        return;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let text = match words.as_slice() {
        ["list"] => {
            let (reply, rx) = oneshot::channel();
            match tx.send(Control::List { reply }).await {
                Ok(()) => rx.await.map_or_else(|_| "error: supervisor gone".to_owned(), |names| names.join(" ")),
                Err(_) => "error: supervisor gone".to_owned(),
            }
        }
        ["restart", name] => {
            let (reply, rx) = oneshot::channel();
            match tx.send(Control::Restart { name: (*name).to_owned(), reply }).await {
                Ok(()) => match rx.await {
                    Ok(Ok(())) => "ok".to_owned(),
                    Ok(Err(e)) => format!("error: {}", e.replace('\n', " | ")),
                    Err(_) => "error: supervisor gone".to_owned(),
                },
                Err(_) => "error: supervisor gone".to_owned(),
            }
        }
        _ => format!("error: unknown request {:?} (list | restart NAME)", line.trim()),
    };
    let _ = write.write_all(format!("{text}\n").as_bytes()).await;
}

/// The client side: sends one request line and returns the answer line (without `error: `
/// answers, which become errors).
pub async fn request(data_dir: &Path, line: &str) -> anyhow::Result<String> {
    let path = data_dir.join(CONTROL_SOCKET);
    let exchange = async {
        let mut stream = UnixStream::connect(&path).await.with_context(|| {
            format!(
                "cannot reach shoal up's control socket {}: is shoal up running with this --data-dir?",
                path.display()
            )
        })?;
        stream.write_all(format!("{line}\n").as_bytes()).await?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).await?;
        anyhow::Ok(answer.trim_end().to_owned())
    };
    let answer = tokio::time::timeout(CONTROL_TIMEOUT, exchange)
        .await
        .with_context(|| format!("shoal up did not answer {line:?} within {} s", CONTROL_TIMEOUT.as_secs()))??;
    match answer.strip_prefix("error: ") {
        Some(e) => bail!("{line}: {e}"),
        None => Ok(answer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_exponentially_up_to_the_cap() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8)
            .map(|_| b.after_exit(RestartPolicy::OnFailure, false, Duration::from_secs(1)).map_or(0, |d| d.as_secs()))
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn a_healthy_run_resets_the_backoff() {
        let mut b = Backoff::default();
        for _ in 0..5 {
            b.after_exit(RestartPolicy::OnFailure, false, Duration::ZERO);
        }
        assert_eq!(b.after_exit(RestartPolicy::OnFailure, false, HEALTHY_AFTER), Some(RESTART_DELAY_INITIAL));
    }

    #[test]
    fn clean_exits_and_never_leave_it_down() {
        let mut b = Backoff::default();
        assert_eq!(b.after_exit(RestartPolicy::OnFailure, true, Duration::ZERO), None);
        assert_eq!(b.after_exit(RestartPolicy::Never, false, Duration::ZERO), None);
        assert_eq!(b, Backoff::default());
    }

    #[tokio::test]
    async fn control_socket_answers_list_and_rejects_garbage() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (tx, mut rx) = mpsc::channel(4);
        serve_control(dir.path(), tx).expect("bind");
        tokio::spawn(async move {
            while let Some(request) = rx.recv().await {
                match request {
                    Control::List { reply } => drop(reply.send(vec!["a".into(), "b".into()])),
                    Control::Restart { name, reply } => drop(reply.send(Err(format!("no process {name}")))),
                }
            }
        });
        assert_eq!(request(dir.path(), "list").await.expect("list"), "a b");
        let e = request(dir.path(), "restart x").await.expect_err("refused");
        assert!(e.to_string().contains("no process x"), "{e}");
        assert!(request(dir.path(), "dance").await.is_err());
        // A second supervisor on the same data dir is refused while the first answers.
        let (tx2, _rx2) = mpsc::channel(1);
        assert!(serve_control(dir.path(), tx2).is_err());
    }
}
