//! The shutdown trigger shared by every subcommand: a future that resolves on SIGINT or SIGTERM,
//! and optionally when stdin reaches EOF (servers started by `shoal up`).

use std::future::Future;
use std::io::Read;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tracing::info;

/// Registers the handlers now, so a signal that arrives before the future is polled is not lost
/// (and does not kill the process with the default action). Must be called inside a runtime.
pub fn shutdown_signal(exit_on_stdin_eof: bool) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let stdin_eof = if exit_on_stdin_eof { Some(watch_stdin_eof()?) } else { None };
    Ok(async move {
        let stdin_closed = async {
            match stdin_eof {
                // A dropped sender means the watcher thread ended, which it only does at EOF/error.
                Some(eof) => {
                    let _ = eof.await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interrupt.recv() => info!("SIGINT received, shutting down"),
            _ = terminate.recv() => info!("SIGTERM received, shutting down"),
            () = stdin_closed => info!("stdin closed (launcher gone), shutting down"),
        }
    })
}

/// A plain thread rather than `tokio::io::stdin`: tokio reads stdin on its blocking pool, and a
/// runtime waits for blocking reads at shutdown, which would hang exit on a stdin that stays open.
fn watch_stdin_eof() -> std::io::Result<oneshot::Receiver<()>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new().name("stdin-eof".into()).spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 256];
        // Anything written to stdin is ignored; only its end matters.
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        let _ = tx.send(());
    })?;
    Ok(rx)
}
