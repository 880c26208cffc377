//! Admission control for migrations: the shard measures the latency of its foreground commands
//! ([`LatencyMonitor`], fed by the gRPC service), and a donor that was given a latency target
//! ([`Throttle`]) pauses before each clone batch and catch-up pass while the recent p99 is above
//! it, with a bounded backoff and a bounded total per migration, so a busy shard still converges.
//!
//! ```text
//!  client cmd --> service --(elapsed)--> LatencyMonitor (1 s windows, fixed log buckets)
//!  donor: before each batch --> Throttle::wait --> p99 of the last two windows --> pause(..)
//! ```
//!
//! Must not: block foreground commands (they only add one count under a short lock), or pause
//! a migration for more than [`THROTTLE_TOTAL_MAX_MS`] in all.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first pause when the p99 is above target; each further pause in a row doubles it.
pub const THROTTLE_BACKOFF_MIN_MS: u64 = 10;
pub const THROTTLE_BACKOFF_MAX_MS: u64 = 500;
/// The most one migration pauses in all; past it, it goes on at full speed.
pub const THROTTLE_TOTAL_MAX_MS: u64 = 60_000;
/// One latency window; the p99 covers the current and the previous one.
pub const LATENCY_WINDOW_MS: u64 = 1_000;
/// Fewer commands than this in the two windows give no p99 (too few to tell).
pub const LATENCY_SAMPLES_MIN: u64 = 20;
/// Latency buckets: bucket `i` holds latencies below `2^(i/4)` µs (≈19% wide), up to ~68 s.
const LATENCY_BUCKETS: usize = 105;

fn bucket_of(micros: u64) -> usize {
    // The smallest i with micros < 2^(i/4), by log2 in quarter steps.
    let x = (micros as f64).max(1.0).log2() * 4.0;
    ((x.floor() as usize) + 1).min(LATENCY_BUCKETS - 1)
}

fn bucket_upper_ms(i: usize) -> f64 {
    2f64.powf(i as f64 / 4.0) / 1000.0
}

#[derive(Clone)]
struct Window {
    index: u64,
    counts: [u64; LATENCY_BUCKETS],
}

impl Window {
    fn new(index: u64) -> Self {
        Self { index, counts: [0; LATENCY_BUCKETS] }
    }
}

/// Foreground command latencies in two rotating windows. `std::sync::Mutex`: one increment per
/// command, never held across an await.
pub struct LatencyMonitor {
    epoch: Instant,
    windows: Mutex<[Window; 2]>,
}

impl Default for LatencyMonitor {
    fn default() -> Self {
        Self { epoch: Instant::now(), windows: Mutex::new([Window::new(0), Window::new(u64::MAX)]) }
    }
}

impl LatencyMonitor {
    fn window_index(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 / LATENCY_WINDOW_MS
    }

    /// Counts one foreground command that took `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        self.observe_at(elapsed, self.window_index());
    }

    fn observe_at(&self, elapsed: Duration, index: u64) {
        let b = bucket_of(elapsed.as_micros() as u64);
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if w[0].index != index {
            let previous = if w[0].index + 1 == index { w[0].clone() } else { Window::new(u64::MAX) };
            *w = [Window::new(index), previous];
        }
        w[0].counts[b] += 1;
    }

    /// The p99 in milliseconds (a bucket's upper bound) over the current and previous window;
    /// `None` with fewer than [`LATENCY_SAMPLES_MIN`] commands.
    pub fn p99_ms(&self) -> Option<f64> {
        self.p99_at(self.window_index())
    }

    fn p99_at(&self, index: u64) -> Option<f64> {
        let w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let mut counts = [0u64; LATENCY_BUCKETS];
        for win in w.iter().filter(|win| win.index == index || win.index.checked_add(1) == Some(index)) {
            for (c, n) in counts.iter_mut().zip(win.counts) {
                *c += n;
            }
        }
        drop(w);
        let total: u64 = counts.iter().sum();
        if total < LATENCY_SAMPLES_MIN {
            return None;
        }
        // The smallest bucket at or below which 99% of the commands fall.
        let want = total - total / 100;
        let mut seen = 0;
        counts.iter().enumerate().find_map(|(i, n)| {
            seen += n;
            (seen >= want).then(|| bucket_upper_ms(i))
        })
    }
}

/// How long to pause before the next batch (0: go on). `target_ms` 0 turns throttling off; a
/// p99 at or under target, or unknown, lets the batch go; otherwise the pause doubles with each
/// pause in a row (`streak`) up to [`THROTTLE_BACKOFF_MAX_MS`], and the total never passes
/// [`THROTTLE_TOTAL_MAX_MS`].
pub fn pause_ms(target_ms: u32, p99_ms: Option<f64>, paused_ms: u64, streak: u32) -> u64 {
    let over = target_ms > 0 && p99_ms.is_some_and(|p| p > f64::from(target_ms));
    if !over {
        return 0;
    }
    let backoff = THROTTLE_BACKOFF_MIN_MS.saturating_mul(1u64 << streak.min(16)).min(THROTTLE_BACKOFF_MAX_MS);
    backoff.min(THROTTLE_TOTAL_MAX_MS.saturating_sub(paused_ms))
}

/// One migration's throttle.
#[derive(Debug, Default)]
pub struct Throttle {
    target_ms: u32,
    /// Paused so far.
    pub paused_ms: u64,
}

impl Throttle {
    pub fn new(target_ms: u32) -> Self {
        Self { target_ms, paused_ms: 0 }
    }

    /// Waits while the foreground p99 is above target (bounded, see [`pause_ms`]).
    pub async fn wait(&mut self, monitor: &LatencyMonitor) {
        let mut streak = 0;
        loop {
            let ms = pause_ms(self.target_ms, monitor.p99_ms(), self.paused_ms, streak);
            if ms == 0 {
                return;
            }
            if streak == 0 {
                tracing::debug!(p99_ms = ?monitor.p99_ms(), target_ms = self.target_ms, "migration throttled");
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.paused_ms += ms;
            streak += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_backs_off_and_is_bounded() {
        assert_eq!(pause_ms(0, Some(1000.0), 0, 0), 0, "off");
        assert_eq!(pause_ms(50, None, 0, 0), 0, "unknown p99");
        assert_eq!(pause_ms(50, Some(50.0), 0, 0), 0, "at target");
        assert_eq!(pause_ms(50, Some(51.0), 0, 0), THROTTLE_BACKOFF_MIN_MS);
        assert_eq!(pause_ms(50, Some(51.0), 0, 1), 2 * THROTTLE_BACKOFF_MIN_MS);
        assert_eq!(pause_ms(50, Some(51.0), 0, 30), THROTTLE_BACKOFF_MAX_MS);
        assert_eq!(pause_ms(50, Some(51.0), THROTTLE_TOTAL_MAX_MS - 7, 30), 7, "the total is capped");
        assert_eq!(pause_ms(50, Some(51.0), THROTTLE_TOTAL_MAX_MS, 3), 0);
        // Whatever happens, the sum of pauses stays under the cap.
        let (mut total, mut streak) = (0, 0);
        loop {
            let ms = pause_ms(1, Some(1e9), total, streak);
            if ms == 0 {
                break;
            }
            total += ms;
            streak += 1;
        }
        assert_eq!(total, THROTTLE_TOTAL_MAX_MS);
    }

    #[test]
    fn p99_comes_from_the_last_two_windows() {
        let m = LatencyMonitor::default();
        assert_eq!(m.p99_at(0), None);
        for _ in 0..990 {
            m.observe_at(Duration::from_micros(500), 5);
        }
        for _ in 0..10 {
            m.observe_at(Duration::from_millis(200), 5);
        }
        let p = m.p99_at(5).expect("enough");
        assert!((0.5..0.7).contains(&p), "{p}");
        for _ in 0..30 {
            m.observe_at(Duration::from_millis(200), 6);
        }
        let p = m.p99_at(6).expect("enough");
        assert!((200.0..240.0).contains(&p), "{p}");
        assert!(m.p99_at(6).expect("two windows") > 100.0);
        assert_eq!(m.p99_at(8), None, "old windows expire");
        m.observe_at(Duration::from_millis(1), 20);
        assert_eq!(m.p99_at(20), None, "a gap forgets the old window");
    }

    #[test]
    fn buckets_are_ordered_and_cover_the_range() {
        assert_eq!(bucket_of(0), bucket_of(1));
        for us in [1u64, 10, 999, 1000, 65_000, 10_000_000] {
            let b = bucket_of(us);
            assert!(bucket_upper_ms(b) * 1000.0 >= us as f64, "{us} in {b}");
        }
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
    }
}
