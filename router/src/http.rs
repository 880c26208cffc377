//! The router's HTTP port (`--metrics-port`): `/metrics`, the Prometheus text of its counters
//! ([`crate::counters`]) and of the gauges read when scraped, registered here.
//!
//! Must not: change state, or hold the router's state alive (the scrape-time gauges keep a weak
//! reference).

use std::sync::{Arc, Weak};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::RouterState;

/// Registers the gauges read from `state` when scraped.
pub fn register_pulled(state: &Arc<RouterState>) -> Result<(), shoal_telemetry::Error> {
    let read = |f: fn(&RouterState) -> f64| {
        let weak: Weak<RouterState> = Arc::downgrade(state);
        move || weak.upgrade().map_or(0.0, |s| f(&s))
    };
    let m = &state.metrics;
    m.pulled("cursors_open", "Router cursors open", read(|s| s.cursors.len() as f64))?;
    m.pulled("uptime_seconds", "Seconds since the router started", read(|s| s.started.elapsed().as_secs_f64()))?;
    Ok(())
}

/// Serves the port until `stop` changes (or its sender is gone).
pub fn spawn(listener: TcpListener, state: &RouterState, mut stop: watch::Receiver<()>) -> JoinHandle<()> {
    shoal_telemetry::http::spawn(listener, state.metrics.clone(), axum::Router::new(), async move {
        let _ = stop.changed().await;
    })
}
