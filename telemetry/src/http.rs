//! A process's HTTP port: `GET /metrics` (the Prometheus text exposition of its [`Metrics`]) and the
//! pages its server adds (the router's status page). Read-only: nothing served here changes state.
//!
//! Must not: block the runtime (rendering is in memory) or outlive the process's shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::{CONTENT_TYPE, Metrics};

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
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::warn!(error = %e, "the metrics port stopped");
        }
    })
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
}
