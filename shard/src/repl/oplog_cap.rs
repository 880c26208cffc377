//! The oplog size cap (MongoDB's `oplogSizeMB`): every member deletes its oldest oplog entries
//! once the oplog grows past [`ReplSettings::oplog_size_max_bytes`](super::ReplSettings).
//!
//! Rule ([`decide`]): above the cap, delete the oldest entries until the oplog is back at the cap,
//! but keep what is still *needed* — entries after the majority commit point (a rollback looks for
//! its common point there) and, on a primary, entries after the applied optime of each secondary
//! heard from within [`RETAIN_FOR_MEMBER_SEEN_WITHIN`] — as long as the oplog stays under twice
//! the cap. Past twice the cap the size wins: MongoDB truncates by size too (its 4.4+ minimum
//! retention is time-based; ours is progress-based and bounded by size). A secondary whose next
//! entry was deleted is never silently skipped: its stream is refused `TooStale`
//! ([`super::source`]) and it resyncs with an initial sync ([`super::fetcher`]).
//!
//! ```text
//!  every OPLOG_CAP_CHECK_INTERVAL:  size (Store::oplog_size_bytes) --decide(size, cap, needed)--> truncate_oplog batches
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Repl;
use super::state::MemberState;
use crate::store::oplog::{OpTime, TsKey};

/// The default cap: a fixed 1 GiB (MongoDB's default is 5% of the free disk, at least 990 MB).
pub const OPLOG_SIZE_MAX_BYTES_DEFAULT: u64 = 1 << 30;
/// How often a member compares its oplog's size with the cap.
pub const OPLOG_CAP_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Entries one truncation batch deletes at most (it holds the writer lock).
pub const TRUNCATE_BATCH_ENTRIES_MAX: usize = 2_000;
/// Batches one check runs at most before it waits for the next.
pub const TRUNCATE_BATCHES_PER_CHECK_MAX: usize = 64;
/// A secondary heard from within this long is live: the primary keeps the entries it still needs
/// while the oplog is under twice the cap.
pub const RETAIN_FOR_MEMBER_SEEN_WITHIN: Duration = Duration::from_secs(60);

/// One truncation step: free `bytes` from the oldest end, deleting nothing at or after
/// `keep_from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    pub bytes: u64,
    pub keep_from: Option<TsKey>,
}

/// What to truncate given the oplog's size, the cap, and the oldest entry still needed (`None`:
/// none is).
pub fn decide(size_bytes: u64, cap_bytes: u64, needed: Option<TsKey>) -> Option<Truncation> {
    if size_bytes <= cap_bytes {
        return None;
    }
    let keep_from = if size_bytes < cap_bytes.saturating_mul(2) { needed } else { None };
    Some(Truncation { bytes: size_bytes - cap_bytes, keep_from })
}

impl Repl {
    /// The oldest entry this member should keep for others: the commit point and, on a primary,
    /// live secondaries' last applied entries (each secondary's own last entry is kept, since a
    /// stream starts by finding it).
    fn oplog_needed(&self, now: Instant) -> Option<TsKey> {
        let inner = self.lock();
        let mut needed: Option<OpTime> = Some(self.commit_point()).filter(|o| !o.is_zero());
        if inner.state == MemberState::Primary {
            let live = inner
                .peers
                .values()
                .filter(|p| p.seen.is_some_and(|s| now.duration_since(s) <= RETAIN_FOR_MEMBER_SEEN_WITHIN))
                .map(|p| p.applied)
                // One that already fell off resyncs anyway: keeping entries for it helps nobody.
                .filter(|o| !o.is_zero() && !self.store.oplog_truncated_after(o.timestamp()));
            for applied in live {
                needed = Some(needed.map_or(applied, |n| n.min(applied)));
            }
        }
        needed.map(|o| o.ts)
    }
}

/// Runs for the member's lifetime.
pub async fn run(repl: Arc<Repl>) {
    let cap = repl.settings.oplog_size_max_bytes;
    let mut tick = tokio::time::interval(OPLOG_CAP_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for _ in 0..TRUNCATE_BATCHES_PER_CHECK_MAX {
            let size = repl.store.oplog_size_bytes();
            let Some(step) = decide(size, cap, repl.oplog_needed(Instant::now())) else { break };
            let store = Arc::clone(&repl.store);
            let cut = tokio::task::spawn_blocking(move || {
                store.truncate_oplog(step.keep_from, step.bytes, TRUNCATE_BATCH_ENTRIES_MAX)
            })
            .await;
            match cut {
                Ok(Ok(cut)) if cut.entries > 0 => {
                    tracing::debug!(entries = cut.entries, bytes = cut.bytes, size, cap, "oplog truncated");
                }
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "truncating the oplog failed; will retry");
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn ts(time: u32) -> TsKey {
        TsKey { time, increment: 1 }
    }

    #[test]
    fn under_the_cap_nothing_is_truncated() {
        assert_eq!(decide(MB, MB, None), None);
        assert_eq!(decide(0, MB, Some(ts(1))), None);
    }

    #[test]
    fn over_the_cap_the_excess_goes_from_the_oldest_end() {
        assert_eq!(decide(3 * MB / 2, MB, None), Some(Truncation { bytes: MB / 2, keep_from: None }));
    }

    #[test]
    fn needed_entries_are_kept_while_under_twice_the_cap() {
        let step = decide(3 * MB / 2, MB, Some(ts(7))).expect("over the cap");
        assert_eq!(step.keep_from, Some(ts(7)));
        assert_eq!(step.bytes, MB / 2);
    }

    #[test]
    fn past_twice_the_cap_size_wins_over_a_lagging_member() {
        let step = decide(2 * MB, MB, Some(ts(7))).expect("over the cap");
        assert_eq!(step, Truncation { bytes: MB, keep_from: None });
    }
}
