//! The shard members' heartbeat period, in one place: a member reports the interval it heartbeats
//! at (`HeartbeatRequest.heartbeat_interval_ms`), the config leader passes it on in `GroupStatus`,
//! and routers size their staleness estimates and silence limits from it instead of assuming one.

use std::time::Duration;

/// The interval a member heartbeats at unless configured otherwise.
pub const INTERVAL_DEFAULT: Duration = Duration::from_millis(200);
/// The range a reported interval is clamped to (a bad report cannot make a member look silent at
/// once, nor alive for minutes).
pub const INTERVAL_MIN: Duration = Duration::from_millis(10);
pub const INTERVAL_MAX: Duration = Duration::from_secs(10);

/// The interval a member reported (`0`: a member that does not report one, so the default).
pub fn interval_of(reported_ms: u64) -> Duration {
    if reported_ms == 0 {
        return INTERVAL_DEFAULT;
    }
    Duration::from_millis(reported_ms).clamp(INTERVAL_MIN, INTERVAL_MAX)
}

/// What a member reports for `interval`.
pub fn report(interval: Duration) -> u64 {
    u64::try_from(interval.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_defaulted_and_clamped() {
        assert_eq!(interval_of(0), INTERVAL_DEFAULT);
        assert_eq!(interval_of(1), INTERVAL_MIN);
        assert_eq!(interval_of(500), Duration::from_millis(500));
        assert_eq!(interval_of(u64::MAX), INTERVAL_MAX);
        assert_eq!(interval_of(report(Duration::from_millis(250))), Duration::from_millis(250));
        assert_eq!(report(Duration::ZERO), 1, "zero would read back as 'not reported'");
    }
}
