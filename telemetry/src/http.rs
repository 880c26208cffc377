//! A process's HTTP port: `GET /metrics` (the Prometheus text exposition of its [`Metrics`]) and the
//! pages its server adds (the router's status page). Read-only: nothing served here changes state.
//!
//! Must not: block the runtime (rendering is in memory), outlive the process's shutdown, or let
//! clients hold it open for free: a request's headers must arrive within [`HEADER_TIMEOUT`] and at
//! most [`MAX_CONNECTIONS`] connections are served at once (more are closed on accept).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::{CONTENT_TYPE, Metrics};

/// How long a client has to send a request's headers (a new connection's first request, or the
/// next one on a kept-alive connection) before the connection is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; Prometheus needs one per scrape, a status page one per tab.
pub const MAX_CONNECTIONS: usize = 64;

/// How long shutdown waits for requests in flight before dropping their connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The default metrics port of a process listening on `port`: its own port + 1000, as mongod's
/// HTTP status interface was (27017 → 28017). None when that would overflow or `port` is 0.
pub fn default_port(port: u16) -> Option<u16> {
    if port == 0 { None } else { port.checked_add(1000) }
}

/// Binds the port now, so a taken port fails the server's start instead of a background task.
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen for metrics on {addr}: {e}")))
}

/// Serves `/metrics` and `pages` on `listener` until `shutdown` resolves.
pub fn spawn(
    listener: TcpListener,
    metrics: Metrics,
    pages: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let app = pages.route("/metrics", get(move || exposition(metrics.clone())));
    let addr = listener.local_addr().ok();
    tracing::info!(?addr, "metrics listening");
    tokio::spawn(serve(listener, app, shutdown))
}

/// Accepts connections until `shutdown`, each served by hyper's HTTP/1 with a header timeout
/// (axum's own `serve` has no timer, so a client that never finishes its headers would hold a
/// connection and its task forever), then waits up to [`DRAIN_TIMEOUT`] for requests in flight.
async fn serve(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()> + Send) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or a connection reset before accept: wait, then go on.
                tracing::warn!(error = %e, "the metrics port could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!("the metrics port is at its connection limit; closing a new one");
            continue;
        };
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a metrics connection ended with an error");
            }
            drop(slot);
        });
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::debug!("metrics requests still in flight at shutdown were dropped");
    }
}

async fn exposition(metrics: Metrics) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_default_port_is_a_thousand_above() {
        assert_eq!(default_port(27017), Some(28017));
        assert_eq!(default_port(0), None);
        assert_eq!(default_port(65000), None);
    }

    #[tokio::test]
    async fn metrics_are_served_over_http() {
        let metrics = Metrics::new().unwrap();
        metrics.counter("served_total", "served").unwrap().inc();
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = spawn(listener, metrics, Router::new(), async {
            let _ = stopped.await;
        });
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("text/plain; version=0.0.4"), "{reply}");
        assert!(reply.contains("shoal_served_total 1"), "{reply}");
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    /// A client that sends half a request is closed after the header timeout instead of holding
    /// the connection; a complete request on another connection is served meanwhile.
    #[tokio::test(start_paused = true)]
    async fn unfinished_headers_time_out() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = spawn(listener, Metrics::new().unwrap(), Router::new(), async {
            let _ = stopped.await;
        });
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let mut other = tokio::net::TcpStream::connect(addr).await.unwrap();
        other.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut reply = String::new();
        other.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let started = tokio::time::Instant::now();
        let mut rest = Vec::new();
        // Without the timeout this read would wait forever; the outer limit turns that into a failure.
        tokio::time::timeout(HEADER_TIMEOUT * 3, slow.read_to_end(&mut rest))
            .await
            .expect("the half-sent request was never closed")
            .ok();
        assert!(started.elapsed() >= HEADER_TIMEOUT - Duration::from_secs(1), "{:?}", started.elapsed());
        assert!(!String::from_utf8_lossy(&rest).contains("200 OK"), "{rest:?}");
        stop.send(()).unwrap();
        task.await.unwrap();
    }
}
