//! Commands by name, as every server counts them (router, shard): one latency histogram per
//! command (its count is how many ran), its failures, and failures by error code name; a name
//! outside the server's list counts as [`UNKNOWN_COMMAND`], as `serverStatus.metrics.commands`
//! does. Also every command's latency added up ([`LatencyTotals`], what a status page samples for
//! ops/s and percentiles) and the guard that keeps an "open now" gauge ([`Open`]).
//!
//! Must not: register or resolve a handle per request (every name's handles are resolved when
//! the server starts; the map is read-only), or know any server's command list.

use std::collections::HashMap;
use std::time::Duration;

use prometheus::core::Metric as _;

use crate::{Error, Histogram, IntCounter, IntCounterVec, IntGauge, LATENCY_BUCKETS_SECONDS, Metrics};

/// The `command` label of a name not in the server's list.
pub const UNKNOWN_COMMAND: &str = "<UNKNOWN>";

/// One command's handles (cloning shares them).
#[derive(Clone)]
pub struct PerCommand {
    latency: Histogram,
    failed: IntCounter,
}

/// One command's counts at one moment (`serverStatus.metrics.commands.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandCount {
    pub name: &'static str,
    pub total: u64,
    pub failed: u64,
    /// Time spent in it, summed (`serverStatus.opLatencies` adds these up by kind).
    pub latency_micros: u64,
}

/// Every command's latency histogram added together at one moment: how many commands finished
/// and, per bucket of [`LATENCY_BUCKETS_SECONDS`], how many took at most its bound (cumulative, as
/// Prometheus counts). Two of them apart give the rate and the percentiles of that interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencyTotals {
    pub count: u64,
    pub buckets: [u64; LATENCY_BUCKETS_SECONDS.len()],
}

/// `command_duration_seconds{command}`, `command_failures_total{command}` and
/// `command_errors_total{code_name}`.
pub struct CommandMetrics {
    by_name: HashMap<&'static str, PerCommand>,
    unknown: PerCommand,
    errors: IntCounterVec,
}

impl CommandMetrics {
    /// Handles for every name of `names`; `latency_help` says what the server times.
    pub fn new(
        metrics: &Metrics,
        latency_help: &str,
        names: impl IntoIterator<Item = &'static str>,
    ) -> Result<Self, Error> {
        let latency = metrics.latency_vec("command_duration_seconds", latency_help, &["command"])?;
        let failed = metrics.counter_vec("command_failures_total", "Commands that failed, by name", &["command"])?;
        let per = |name: &str| PerCommand {
            latency: latency.with_label_values(&[name]),
            failed: failed.with_label_values(&[name]),
        };
        Ok(Self {
            by_name: names.into_iter().map(|name| (name, per(name))).collect(),
            unknown: per(UNKNOWN_COMMAND),
            errors: metrics.counter_vec(
                "command_errors_total",
                "Failed commands by error code name",
                &["code_name"],
            )?,
        })
    }

    /// The handles of `name` (`None`, or a name not in the list: [`UNKNOWN_COMMAND`]'s).
    pub fn of(&self, name: Option<&str>) -> &PerCommand {
        name.and_then(|n| self.by_name.get(n)).unwrap_or(&self.unknown)
    }

    /// One command done after `elapsed`; `failed` is its error's code name.
    pub fn finished(&self, per: &PerCommand, elapsed: Duration, failed: Option<&str>) {
        per.latency.observe(elapsed.as_secs_f64());
        if let Some(code_name) = failed {
            per.failed.inc();
            self.errors.with_label_values(&[code_name]).inc();
        }
    }

    /// Every command that ran at least once, in name order.
    pub fn snapshot(&self) -> Vec<CommandCount> {
        let mut out: Vec<CommandCount> = self
            .by_name
            .iter()
            .map(|(name, per)| (*name, per))
            .chain([(UNKNOWN_COMMAND, &self.unknown)])
            .map(|(name, per)| CommandCount {
                name,
                total: per.latency.get_sample_count(),
                failed: per.failed.get(),
                latency_micros: (per.latency.get_sample_sum() * 1e6) as u64,
            })
            .filter(|c| c.total > 0)
            .collect();
        out.sort_unstable_by_key(|c| c.name);
        out
    }

    /// Every command's latency added up (commands that never ran are skipped without reading
    /// their buckets).
    pub fn latency_totals(&self) -> LatencyTotals {
        let mut totals = LatencyTotals::default();
        for per in self.by_name.values().chain([&self.unknown]) {
            if per.latency.get_sample_count() == 0 {
                continue;
            }
            let metric = per.latency.metric();
            let histogram = metric.get_histogram();
            totals.count += histogram.get_sample_count();
            for (sum, bucket) in totals.buckets.iter_mut().zip(histogram.get_bucket()) {
                *sum += bucket.cumulative_count();
            }
        }
        totals
    }
}

/// Counts one thing open (a connection, a stream) in a gauge for as long as it lives, including
/// when its task panics.
pub struct Open(IntGauge);

impl Open {
    pub fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_count_by_name_with_failures_by_code_in_both_views() {
        let metrics = Metrics::new().unwrap();
        let c = CommandMetrics::new(&metrics, "timed", ["find", "insert"]).unwrap();
        c.finished(c.of(Some("find")), Duration::from_micros(300), None);
        c.finished(c.of(Some("find")), Duration::from_micros(300), Some("BadValue"));
        c.finished(c.of(Some("nope")), Duration::from_micros(1), Some("CommandNotFound"));
        let want = vec![
            CommandCount { name: UNKNOWN_COMMAND, total: 1, failed: 1, latency_micros: 1 },
            CommandCount { name: "find", total: 2, failed: 1, latency_micros: 600 },
        ];
        assert_eq!(c.snapshot(), want);
        let text = metrics.render();
        assert!(text.contains(r#"shoal_command_duration_seconds_count{command="find"} 2"#), "{text}");
        assert!(text.contains(r#"shoal_command_failures_total{command="find"} 1"#), "{text}");
        assert!(text.contains(r#"shoal_command_errors_total{code_name="BadValue"} 1"#), "{text}");
        assert!(text.contains(r#"shoal_command_errors_total{code_name="CommandNotFound"} 1"#), "{text}");
    }

    #[test]
    fn latency_totals_add_every_command_by_bucket() {
        let metrics = Metrics::new().unwrap();
        let c = CommandMetrics::new(&metrics, "timed", ["find", "insert"]).unwrap();
        assert_eq!(c.latency_totals(), LatencyTotals::default());
        c.finished(c.of(Some("find")), Duration::from_micros(40), None);
        c.finished(c.of(Some("insert")), Duration::from_micros(150), None);
        c.finished(c.of(Some("nope")), Duration::from_secs(60), Some("CommandNotFound"));
        let t = c.latency_totals();
        assert_eq!(t.count, 3);
        // Bounds 50 µs, 100 µs, 200 µs, ...: 40 µs is in the first, 150 µs from the third on, and
        // a minute is above every bound (only in the count).
        assert_eq!(&t.buckets[..3], &[1, 1, 2]);
        assert_eq!(t.buckets[LATENCY_BUCKETS_SECONDS.len() - 1], 2);
    }

    #[test]
    fn an_open_guard_counts_while_it_lives() {
        let metrics = Metrics::new().unwrap();
        let gauge = metrics.gauge("open_things", "open").unwrap();
        let first = Open::new(&gauge);
        {
            let _second = Open::new(&gauge);
            assert_eq!(gauge.get(), 2);
        }
        drop(first);
        assert_eq!(gauge.get(), 0);
    }
}
