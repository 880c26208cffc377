//! Every process's metrics, with one owner each: the Prometheus registry a server registers its
//! counters, gauges and histograms in ([`Metrics`]), the process collector every registry carries
//! (CPU, memory, open files, threads), values read only when scraped ([`Metrics::pulled`]), the
//! latency buckets every histogram shares ([`LATENCY_BUCKETS_SECONDS`]), commands counted by name
//! ([`commands`]), the recent log `getLog` returns and the slow-query line ([`log`]), the
//! optional trace export over OTLP ([`otlp`]) and the HTTP port serving the text exposition
//! ([`http`]), which the router also serves its status page on.
//!
//! Must not: name a server's metrics (each server declares its own beside the code that counts,
//! and reads the same handles for its `serverStatus`), or cost a request more than an atomic add:
//! handles are resolved when a server starts, not looked up by name per event.

#![forbid(unsafe_code)]

pub mod commands;
pub mod http;
pub mod log;
pub mod otlp;
mod pulled;

use std::sync::Arc;

pub use prometheus::core::Collector;
pub use prometheus::{
    Error, GaugeVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

use prometheus::{HistogramOpts, Opts, TEXT_FORMAT, TextEncoder};

/// Buckets of every latency histogram, in seconds: 50 µs doubling to about 13 s, so a dashboard's
/// p50/p99 of a 100 µs read and of a 2 s migration step both land inside a bucket.
pub const LATENCY_BUCKETS_SECONDS: [f64; 19] = {
    let mut b = [0.0; 19];
    let mut i = 0;
    let mut v = 0.000_05;
    while i < b.len() {
        b[i] = v;
        v *= 2.0;
        i += 1;
    }
    b
};

/// Every metric name starts with this.
pub const PREFIX: &str = "shoal_";

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = TEXT_FORMAT;

/// One process's registry. Cloning shares it.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A registry with the process collector (`process_cpu_seconds_total`,
    /// `process_resident_memory_bytes`, `process_open_fds`, ...) in it.
    pub fn new() -> Result<Self, Error> {
        let registry = Registry::new();
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        Ok(Self { registry })
    }

    /// Registers any collector (a metric built elsewhere, or a custom one).
    pub fn register(&self, collector: impl Collector + 'static) -> Result<(), Error> {
        self.registry.register(Box::new(collector))
    }

    pub fn counter(&self, name: &str, help: &str) -> Result<IntCounter, Error> {
        self.registered(IntCounter::with_opts(Opts::new(full_name(name), help))?)
    }

    pub fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec, Error> {
        self.registered(IntCounterVec::new(Opts::new(full_name(name), help), labels)?)
    }

    pub fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, Error> {
        self.registered(IntGauge::with_opts(Opts::new(full_name(name), help))?)
    }

    pub fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, Error> {
        self.registered(IntGaugeVec::new(Opts::new(full_name(name), help), labels)?)
    }

    /// A latency histogram in seconds over [`LATENCY_BUCKETS_SECONDS`].
    pub fn latency(&self, name: &str, help: &str) -> Result<Histogram, Error> {
        self.registered(Histogram::with_opts(latency_opts(name, help))?)
    }

    /// Latency histograms in seconds over [`LATENCY_BUCKETS_SECONDS`], one per label set.
    pub fn latency_vec(&self, name: &str, help: &str, labels: &[&str]) -> Result<HistogramVec, Error> {
        self.registered(HistogramVec::new(latency_opts(name, help), labels)?)
    }

    /// A gauge whose value `read` gives when the registry is scraped (state the server keeps
    /// anyway: a queue's length, a term, a size on disk), so nothing is counted twice.
    pub fn pulled(&self, name: &str, help: &str, read: impl Fn() -> f64 + Send + Sync + 'static) -> Result<(), Error> {
        self.register(prometheus::PullingGauge::new(full_name(name), help, Box::new(read))?)
    }

    /// Gauges with labels whose values `fill` sets when the registry is scraped; label sets it
    /// does not set are gone from that scrape (a member that left, a collection dropped).
    pub fn pulled_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        fill: impl Fn(&GaugeVec) + Send + Sync + 'static,
    ) -> Result<(), Error> {
        let gauges = GaugeVec::new(Opts::new(full_name(name), help), labels)?;
        self.register(pulled::PulledVec::new(gauges, Arc::new(fill)))
    }

    /// `metric`, registered; the caller keeps a handle sharing it.
    fn registered<M: Collector + Clone + 'static>(&self, metric: M) -> Result<M, Error> {
        self.registry.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    /// The text exposition of everything registered.
    pub fn render(&self) -> String {
        match TextEncoder::new().encode_to_string(&self.registry.gather()) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode the metrics");
                String::new()
            }
        }
    }
}

fn full_name(name: &str) -> String {
    format!("{PREFIX}{name}")
}

fn latency_opts(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(full_name(name), help).buckets(LATENCY_BUCKETS_SECONDS.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_render_with_the_prefix_and_pulled_values() {
        let m = Metrics::new().unwrap();
        let c = m.counter_vec("things_total", "things", &["kind"]).unwrap();
        c.with_label_values(&["a"]).inc_by(3);
        m.pulled("answer", "the answer", || 42.0).unwrap();
        m.pulled_vec("lag_seconds", "lag", &["member"], |g| g.with_label_values(&["m1"]).set(1.5)).unwrap();
        m.latency("wait_seconds", "wait").unwrap().observe(0.0003);
        let text = m.render();
        assert!(text.contains("shoal_things_total{kind=\"a\"} 3"), "{text}");
        assert!(text.contains("shoal_answer 42"), "{text}");
        assert!(text.contains("shoal_lag_seconds{member=\"m1\"} 1.5"), "{text}");
        assert!(text.contains("shoal_wait_seconds_bucket{le=\"0.0004\"} 1"), "{text}");
        assert!(text.contains("process_open_fds"), "the process collector is in every registry: {text}");
    }

    #[test]
    fn a_name_registered_twice_is_an_error_not_a_panic() {
        let m = Metrics::new().unwrap();
        m.counter("once_total", "once").unwrap();
        assert!(m.counter("once_total", "twice").is_err());
    }

    #[test]
    fn buckets_double_from_fifty_microseconds() {
        assert_eq!(LATENCY_BUCKETS_SECONDS[0], 0.000_05);
        assert!(LATENCY_BUCKETS_SECONDS.windows(2).all(|w| (w[1] / w[0] - 2.0).abs() < 1e-9));
        let last = LATENCY_BUCKETS_SECONDS.last().copied().unwrap_or_default();
        assert!((10.0..20.0).contains(&last), "{last}");
    }
}
