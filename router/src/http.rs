//! The router's HTTP port (`--metrics-port`): `/metrics`, the Prometheus text of its counters
//! ([`crate::counters`], the balancer's [`crate::balancer::metrics`], the routing cache's
//! refreshes) and of the gauges read when scraped, registered here; and the live status page
//! (`/`, `/status.json`: [`crate::status`]).
//!
//! Must not: change state, or hold the router's state alive (the scrape-time gauges and the
//! status page keep a weak reference).

use std::sync::{Arc, Weak};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::RouterState;

/// Registers the gauges read from `state` when scraped, and the counters built before the
/// registry took them (the routing cache's).
pub fn register_pulled(state: &Arc<RouterState>) -> Result<(), shoal_telemetry::Error> {
    let read = |f: fn(&RouterState) -> f64| {
        let weak: Weak<RouterState> = Arc::downgrade(state);
        move || weak.upgrade().map_or(0.0, |s| f(&s))
    };
    let m = &state.metrics;
    m.pulled("cursors_open", "Router cursors open", read(|s| s.cursors.len() as f64))?;
    m.pulled("uptime_seconds", "Seconds since the router started", read(|s| s.started.elapsed().as_secs_f64()))?;
    m.register(state.routing.refreshes().clone())?;
    crate::balancer::metrics::register_pulled(m, Arc::downgrade(state))?;
    Ok(())
}

/// Serves the port until `stop` changes (or its sender is gone); the status page's sampler stops
/// with it.
pub fn spawn(listener: TcpListener, state: &Arc<RouterState>, mut stop: watch::Receiver<()>) -> JoinHandle<()> {
    let pages = crate::status::routes(state, stop.clone());
    shoal_telemetry::http::spawn(listener, state.metrics.clone(), pages, async move {
        let _ = stop.changed().await;
    })
}
