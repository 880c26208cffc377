//! The status page's traffic history: every [`SAMPLE_INTERVAL`] a task adds up the router's
//! command latency histograms (`shoal_telemetry::commands::LatencyTotals`) and keeps, for the
//! interval since the previous snapshot, commands per second and the p50/p99 latency in a ring of
//! [`SAMPLES_MAX`] points (ten minutes).
//!
//! Percentiles come from bucket deltas the way Prometheus's `histogram_quantile` computes them:
//! the bucket holding the rank, interpolated linearly inside it; a rank above the last finite
//! bound answers that bound.
//!
//! Must not: keep more than [`SAMPLES_MAX`] points, hold the router's state alive (it keeps a weak
//! reference and ends when the state is gone) or outlive the router's shutdown.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use shoal_telemetry::LATENCY_BUCKETS_SECONDS;
use shoal_telemetry::commands::LatencyTotals;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::RouterState;

/// How often the counters are snapshotted.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Points kept: ten minutes of [`SAMPLE_INTERVAL`]s.
pub const SAMPLES_MAX: usize = 120;

/// One interval between two snapshots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Wall-clock milliseconds since the Unix epoch at the interval's end.
    pub at_ms: u64,
    pub ops_per_sec: f64,
    /// `None` when no command finished in the interval.
    pub p50_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
}

/// The last snapshot and the points so far.
#[derive(Debug, Default)]
pub struct Ring {
    last: Option<(Instant, LatencyTotals)>,
    points: VecDeque<Point>,
}

impl Ring {
    /// Adds the snapshot `totals` taken at `now` (wall clock `at_ms`); the first snapshot only
    /// starts the first interval. Totals lower than the previous (counters cannot go back in a
    /// process) restart the interval without a point.
    pub fn push(&mut self, now: Instant, at_ms: u64, totals: LatencyTotals) {
        let previous = self.last.replace((now, totals));
        let Some((then, before)) = previous else { return };
        let secs = now.saturating_duration_since(then).as_secs_f64();
        if totals.count < before.count || secs <= 0.0 {
            return;
        }
        let delta = totals.count - before.count;
        self.points.push_back(Point {
            at_ms,
            ops_per_sec: delta as f64 / secs,
            p50_seconds: quantile(&before, &totals, 0.5),
            p99_seconds: quantile(&before, &totals, 0.99),
        });
        while self.points.len() > SAMPLES_MAX {
            self.points.pop_front();
        }
    }

    /// The points, oldest first.
    pub fn points(&self) -> Vec<Point> {
        self.points.iter().copied().collect()
    }
}

/// The `q` quantile (0..=1) of the commands that finished between `before` and `after`, in
/// seconds; `None` when none did.
pub fn quantile(before: &LatencyTotals, after: &LatencyTotals, q: f64) -> Option<f64> {
    let total = after.count.checked_sub(before.count).filter(|n| *n > 0)?;
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut lower_bound = 0.0;
    let mut lower_count = 0_u64;
    for (i, bound) in LATENCY_BUCKETS_SECONDS.iter().enumerate() {
        let count = after.buckets[i].saturating_sub(before.buckets[i]);
        if count as f64 >= rank {
            let inside = count.saturating_sub(lower_count);
            if inside == 0 {
                return Some(*bound);
            }
            let fraction = (rank - lower_count as f64) / inside as f64;
            return Some(lower_bound + (bound - lower_bound) * fraction.clamp(0.0, 1.0));
        }
        lower_bound = *bound;
        lower_count = count;
    }
    LATENCY_BUCKETS_SECONDS.last().copied()
}

/// The ring the page reads, shared with the sampler task.
pub type Samples = Arc<Mutex<Ring>>;

/// Starts the task snapshotting `state`'s command counters into `samples` until `stop` changes
/// (or its sender is gone) or the state is dropped.
pub fn spawn(state: Weak<RouterState>, samples: Samples, mut stop: watch::Receiver<()>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {}
            }
            let Some(state) = state.upgrade() else { return };
            let totals = state.counters.commands.latency_totals();
            drop(state);
            let at_ms = crate::balancer::runtime::now_ms();
            samples.lock().unwrap_or_else(|p| p.into_inner()).push(Instant::now(), at_ms, totals);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Totals with `per_bucket[i]` commands inside bucket `i` (not cumulative).
    fn totals(per_bucket: &[(usize, u64)], above: u64) -> LatencyTotals {
        let mut t = LatencyTotals::default();
        for &(i, n) in per_bucket {
            for b in &mut t.buckets[i..] {
                *b += n;
            }
            t.count += n;
        }
        t.count += above;
        t
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_of_the_rank() {
        let zero = LatencyTotals::default();
        // 100 commands: 90 at most 50 µs, 10 in (50 µs, 100 µs].
        let t = totals(&[(0, 90), (1, 10)], 0);
        assert!(close(quantile(&zero, &t, 0.5), 0.000_05 * 50.0 / 90.0));
        // p99: rank 99 is the 9th of the 10 in the second bucket.
        assert!(close(quantile(&zero, &t, 0.99), 0.000_05 + 0.000_05 * 9.0 / 10.0));
        assert_eq!(quantile(&t, &t, 0.99), None, "nothing finished in between");
        // Slower than every bound: the last bound, as histogram_quantile answers.
        let slow = totals(&[], 5);
        assert_eq!(quantile(&zero, &slow, 0.99), LATENCY_BUCKETS_SECONDS.last().copied());
    }

    #[test]
    fn quantiles_are_of_the_interval_not_of_all_time() {
        // Before: a thousand fast commands. In the interval: 10 commands near 1 ms.
        let before = totals(&[(0, 1000)], 0);
        let after = totals(&[(0, 1000), (5, 10)], 0);
        let p99 = quantile(&before, &after, 0.99).unwrap();
        let (lo, hi) = (LATENCY_BUCKETS_SECONDS[4], LATENCY_BUCKETS_SECONDS[5]);
        assert!(p99 > lo && p99 <= hi, "{p99} in ({lo}, {hi}]");
    }

    #[test]
    fn the_ring_keeps_rates_of_intervals_and_forgets_the_oldest() {
        let start = Instant::now();
        let mut ring = Ring::default();
        ring.push(start, 0, totals(&[(0, 10)], 0));
        assert!(ring.points().is_empty(), "the first snapshot only starts an interval");
        for i in 1..=(SAMPLES_MAX as u64 + 5) {
            let now = start + SAMPLE_INTERVAL * i as u32;
            ring.push(now, i * 5000, totals(&[(0, 10 + 50 * i)], 0));
        }
        let points = ring.points();
        assert_eq!(points.len(), SAMPLES_MAX);
        assert_eq!(points[0].at_ms, 6 * 5000, "the five oldest are gone");
        assert!(points.iter().all(|p| (p.ops_per_sec - 10.0).abs() < 1e-9), "50 commands per 5 s");
        assert!(points.iter().all(|p| p.p99_seconds.is_some_and(|s| s <= 0.000_05)));
        // Counters that went back (cannot happen in one process) give no point.
        let now = start + SAMPLE_INTERVAL * 200;
        ring.push(now, 1, LatencyTotals::default());
        assert_eq!(ring.points().len(), SAMPLES_MAX);
        assert_eq!(ring.points().last().map(|p| p.at_ms), Some((SAMPLES_MAX as u64 + 5) * 5000));
    }
}
