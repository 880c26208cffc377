//! The newest committed oplog entries, in memory: a primary streams what it has just written to
//! its secondaries from here, without a storage scan or a blocking-pool hop per batch.
//!
//! The tail is always a suffix of the stored oplog, with no gap: every commit that adds entries
//! appends them here (in timestamp order, under the writer lock, before the new position is
//! published), and anything that removes entries other than the oldest (rollback, wipe) clears it
//! first. So when the tail's oldest entry is at or before a reader's cursor, every committed entry
//! after the cursor is in the tail; otherwise the reader falls back to storage. Truncation removes
//! entries from the oldest end only, so it never breaks the suffix; readers still check
//! [`Store::oplog_truncated_after`](super::Store::oplog_truncated_after) as they do after a
//! storage read. Bounded by bytes: the oldest entries leave first.
//!
//! It owns no durability and decides nothing: a cache of bytes also in the engine.

use std::collections::VecDeque;
use std::sync::Mutex;

use bson::Timestamp;
use bytes::Bytes;

use super::oplog::TsKey;

/// Bytes of entries the tail keeps (a few seconds of writes at the rates we measure).
pub const TAIL_BYTES_MAX: usize = 16 << 20;

#[derive(Default)]
struct Tail {
    entries: VecDeque<(TsKey, Bytes)>,
    bytes: usize,
}

pub struct OplogTail {
    inner: Mutex<Tail>,
    bytes_max: usize,
}

impl OplogTail {
    pub fn new(bytes_max: usize) -> Self {
        Self { inner: Mutex::new(Tail::default()), bytes_max }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends entries just committed, oldest first. An entry not newer than the tail's newest
    /// (which no writer produces) empties the tail instead of leaving it out of order.
    pub fn extend(&self, committed: impl IntoIterator<Item = (Timestamp, Bytes)>) {
        let mut tail = self.lock();
        for (ts, raw) in committed {
            let key = TsKey::from(ts);
            if tail.entries.back().is_some_and(|(newest, _)| *newest >= key) {
                tail.entries.clear();
                tail.bytes = 0;
            }
            tail.bytes += raw.len();
            tail.entries.push_back((key, raw));
        }
        while tail.bytes > self.bytes_max {
            let Some((_, raw)) = tail.entries.pop_front() else { break };
            tail.bytes -= raw.len();
        }
    }

    /// Forgets every entry (before a rollback or wipe deletes stored ones).
    pub fn clear(&self) {
        let mut tail = self.lock();
        tail.entries.clear();
        tail.bytes = 0;
    }

    /// The committed entries after `after`, oldest first, up to `entries_max` entries or until
    /// `bytes_max` bytes are reached, with the newest one's timestamp; `None` when the tail does
    /// not reach back to `after` (read storage instead).
    pub fn after(&self, after: Timestamp, entries_max: usize, bytes_max: usize) -> Option<(Vec<Bytes>, TsKey)> {
        let tail = self.lock();
        let after = TsKey::from(after);
        let (oldest, _) = tail.entries.front()?;
        if *oldest > after {
            return None;
        }
        let start = tail.entries.partition_point(|(ts, _)| *ts <= after);
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut last = after;
        for (ts, raw) in tail.entries.range(start..) {
            bytes += raw.len();
            out.push(raw.clone());
            last = *ts;
            if out.len() >= entries_max || bytes >= bytes_max {
                break;
            }
        }
        Some((out, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(i: u32) -> Timestamp {
        Timestamp { time: 100, increment: i }
    }

    fn entry(i: u32) -> (Timestamp, Bytes) {
        (ts(i), Bytes::from(vec![i as u8; 10]))
    }

    fn incs(out: &(Vec<Bytes>, TsKey)) -> Vec<u8> {
        out.0.iter().map(|b| b[0]).collect()
    }

    #[test]
    fn serves_what_follows_a_cursor_it_reaches_back_to() {
        let tail = OplogTail::new(1 << 20);
        assert!(tail.after(ts(0), 10, 1 << 20).is_none(), "an empty tail reaches nothing");
        tail.extend((3..=6).map(entry));
        assert!(tail.after(ts(2), 10, 1 << 20).is_none(), "entry 3 may not be the one after 2");
        let out = tail.after(ts(3), 10, 1 << 20).unwrap();
        assert_eq!(incs(&out), vec![4, 5, 6]);
        assert_eq!(out.1, TsKey::from(ts(6)));
        let caught_up = tail.after(ts(6), 10, 1 << 20).unwrap();
        assert!(caught_up.0.is_empty());
        assert_eq!(caught_up.1, TsKey::from(ts(6)));
    }

    #[test]
    fn batches_stop_at_either_limit() {
        let tail = OplogTail::new(1 << 20);
        tail.extend((1..=9).map(entry));
        assert_eq!(incs(&tail.after(ts(1), 3, 1 << 20).unwrap()), vec![2, 3, 4]);
        assert_eq!(incs(&tail.after(ts(1), 100, 25).unwrap()), vec![2, 3, 4]);
    }

    #[test]
    fn the_oldest_leave_first_and_readers_behind_them_go_to_storage() {
        let tail = OplogTail::new(35);
        tail.extend((1..=5).map(entry));
        assert!(tail.after(ts(1), 10, 1 << 20).is_none());
        assert_eq!(incs(&tail.after(ts(3), 10, 1 << 20).unwrap()), vec![4, 5]);
    }

    #[test]
    fn clear_and_out_of_order_entries_leave_no_gap_behind() {
        let tail = OplogTail::new(1 << 20);
        tail.extend((1..=5).map(entry));
        tail.clear();
        assert!(tail.after(ts(3), 10, 1 << 20).is_none());
        tail.extend((1..=5).map(entry));
        tail.extend([entry(2)]);
        assert!(tail.after(ts(1), 10, 1 << 20).is_none());
        assert_eq!(incs(&tail.after(ts(2), 10, 1 << 20).unwrap()), Vec::<u8>::new());
    }
}
