//! The oplog's size and its truncation from the oldest end (the size cap is enforced by
//! [`crate::repl::oplog_cap`], which decides how far; this module only counts and deletes).
//!
//! The size is an estimate kept without rescanning: measured once when the store opens, then
//! grown by every committed batch's entries and shrunk by truncation, rollback and wipe. It counts
//! key and value bytes, not the engine's on-disk footprint (compression, tombstones), as
//! MongoDB's `oplogSizeMB` counts data size.
//!
//! Invariants: truncation removes entries oldest first and never the newest entry (a stream
//! source and an initial-sync clone start from it), and it publishes how far it truncated
//! ([`Store::oplog_truncated_through`]) *before* committing the deletes, so a reader that finds
//! that mark at or before its position after a read knows the read saw every entry after it.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use bson::Timestamp;

use super::{Store, keys};
use crate::storage::{Engine, KvIter, Space, StorageError, WriteBatch};
use crate::store::oplog::TsKey;

/// What one oplog entry counts for.
pub fn entry_bytes(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

pub(super) struct OplogSize {
    bytes: AtomicU64,
    /// The newest timestamp truncation removed (as [`keys::oplog_key`] packs it), 0 if none.
    truncated_through: AtomicU64,
}

impl OplogSize {
    /// Scans the oplog once (store open).
    pub(super) fn measure(engine: &dyn Engine) -> Result<Self, StorageError> {
        let mut bytes = 0;
        for kv in engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, false) {
            let (k, v) = kv?;
            bytes += entry_bytes(&k, &v);
        }
        Ok(Self { bytes: AtomicU64::new(bytes), truncated_through: AtomicU64::new(0) })
    }

    pub(super) fn appended(&self, bytes: u64) {
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    pub(super) fn removed(&self, bytes: u64) {
        let _ = self.bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b.saturating_sub(bytes)));
    }

    pub(super) fn reset(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.truncated_through.store(0, Ordering::SeqCst);
    }
}

fn packed(ts: Timestamp) -> u64 {
    u64::from_be_bytes(keys::oplog_key(ts))
}

/// What one [`Store::truncate_oplog`] call removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Truncated {
    pub entries: usize,
    pub bytes: u64,
}

impl Store {
    /// The oplog's size estimate, in bytes.
    pub fn oplog_size_bytes(&self) -> u64 {
        self.oplog_size.bytes.load(Ordering::Relaxed)
    }

    /// The key of the newest entry truncation removed since the store opened (or was wiped),
    /// `None` if none: every stored entry is after it.
    fn oplog_truncated_key(&self) -> Option<[u8; 8]> {
        let packed = self.oplog_size.truncated_through.load(Ordering::SeqCst);
        (packed > 0).then(|| packed.to_be_bytes())
    }

    /// The stored entries, oldest first, from just past the last truncation: the deleted entries
    /// before it are tombstones an unbounded scan would walk one by one every time (thousands per
    /// truncation pass once the cap is reached, under the writer lock) until compaction drops them.
    pub(super) fn oplog_from_oldest(&self) -> KvIter<'static> {
        let start = self.oplog_truncated_key();
        let from = start.as_ref().map_or(Bound::Unbounded, |k| Bound::Excluded(&k[..]));
        self.engine.scan(Space::Oplog, from, Bound::Unbounded, false)
    }

    /// Whether truncation removed an entry after `ts`: a reader that read entries after `ts`
    /// checks this afterwards to know it did not miss any.
    pub fn oplog_truncated_after(&self, ts: Timestamp) -> bool {
        self.oplog_size.truncated_through.load(Ordering::SeqCst) > packed(ts)
    }

    /// Deletes the oldest entries, one batch: stops after `entries_max` entries, once `bytes`
    /// bytes are freed, at the first entry at or after `keep_from` (if given), and before the
    /// newest entry, whichever comes first. Holds the writer lock so it never interleaves with a
    /// rollback or wipe (it is one bounded batch, so writers wait little).
    pub fn truncate_oplog(
        &self,
        keep_from: Option<TsKey>,
        bytes: u64,
        entries_max: usize,
    ) -> Result<Truncated, StorageError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let newest = self.oplog_last()?;
        let mut batch = WriteBatch::new();
        let mut out = Truncated::default();
        let mut through = None;
        for kv in self.oplog_from_oldest() {
            if out.entries >= entries_max || out.bytes >= bytes {
                break;
            }
            let (key, value) = kv?;
            let Some(ts) = keys::oplog_ts(&key) else {
                return Err(StorageError::Corrupt { space: "oplog", detail: "oplog key of the wrong length".into() });
            };
            if TsKey::from(ts) >= TsKey::from(newest) || keep_from.is_some_and(|k| TsKey::from(ts) >= k) {
                break;
            }
            out.entries += 1;
            out.bytes += entry_bytes(&key, &value);
            through = Some(ts);
            batch.delete(Space::Oplog, key);
        }
        let Some(through) = through else { return Ok(out) };
        // Published before the deletes commit: see the module header.
        self.oplog_size.truncated_through.fetch_max(packed(through), Ordering::SeqCst);
        self.engine.commit(batch)?;
        self.oplog_size.removed(out.bytes);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bson::doc;

    use super::*;
    use crate::storage::FjallEngine;
    use shoal_proto::Namespace;

    fn store(dir: &std::path::Path) -> Store {
        Store::open(Arc::new(FjallEngine::open(dir, 8 << 20).expect("engine"))).expect("store")
    }

    fn insert_many(store: &Store, n: i32) {
        let ns = Namespace::new("db", "c").expect("ns");
        store
            .write(|txn| {
                let (coll, _) = txn.ensure_collection(&ns, doc! {})?;
                for i in 0..n {
                    let d = bson::rawdoc! { "_id": i, "pad": "x".repeat(100) };
                    txn.insert(&coll, &bson::Bson::Int32(i), &d)?;
                }
                Ok(())
            })
            .expect("write");
    }

    fn oplog_scan_bytes(store: &Store) -> u64 {
        store
            .oplog_after(Timestamp { time: 0, increment: 0 })
            .map(|kv| kv.map(|(k, v)| entry_bytes(&k, &v)))
            .sum::<Result<u64, _>>()
            .expect("scan")
    }

    #[test]
    fn size_is_tracked_on_append_and_measured_at_open() {
        let dir = tempfile::tempdir().expect("dir");
        let s = store(dir.path());
        insert_many(&s, 50);
        assert_eq!(s.oplog_size_bytes(), oplog_scan_bytes(&s));
        s.shutdown();
        drop(s);
        let s = store(dir.path());
        assert_eq!(s.oplog_size_bytes(), oplog_scan_bytes(&s));
    }

    #[test]
    fn truncation_removes_oldest_first_keeps_the_newest_and_marks_how_far() {
        let dir = tempfile::tempdir().expect("dir");
        let s = store(dir.path());
        insert_many(&s, 100);
        let first = s.oplog_first().expect("first").expect("some");
        let newest = s.oplog_last().expect("last");
        let cut = s.truncate_oplog(None, u64::MAX, 10).expect("truncate");
        assert_eq!(cut.entries, 10);
        let now_first = s.oplog_first().expect("first").expect("some");
        assert!(TsKey::from(now_first) > TsKey::from(first));
        assert!(s.oplog_truncated_after(first));
        assert!(!s.oplog_truncated_after(now_first));
        assert_eq!(s.oplog_size_bytes(), oplog_scan_bytes(&s));
        // Everything but the newest entry, however much is asked.
        s.truncate_oplog(None, u64::MAX, 10_000).expect("truncate");
        assert_eq!(s.oplog_first().expect("first"), Some(newest));
        assert_eq!(s.oplog_size_bytes(), oplog_scan_bytes(&s));
        assert_eq!(s.truncate_oplog(None, u64::MAX, 10_000).expect("truncate"), Truncated::default());
    }

    #[test]
    fn truncation_stops_at_the_bytes_asked_and_at_keep_from() {
        let dir = tempfile::tempdir().expect("dir");
        let s = store(dir.path());
        insert_many(&s, 100);
        let cut = s.truncate_oplog(None, 1, 1000).expect("truncate");
        assert_eq!(cut.entries, 1);
        let keep: Vec<Timestamp> = s
            .oplog_after(Timestamp { time: 0, increment: 0 })
            .take(20)
            .map(|kv| keys::oplog_ts(&kv.expect("kv").0).expect("ts"))
            .collect();
        let keep_from = keep[19];
        s.truncate_oplog(Some(keep_from.into()), u64::MAX, 1000).expect("truncate");
        assert_eq!(s.oplog_first().expect("first"), Some(keep_from));
    }

    #[test]
    fn scans_start_past_the_last_truncation_and_from_the_start_after_a_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        let s = store(dir.path());
        insert_many(&s, 100);
        s.truncate_oplog(None, u64::MAX, 30).expect("truncate");
        let after_cut = s.oplog_first().expect("first").expect("some");
        assert!(s.oplog_truncated_key().is_some());
        s.truncate_oplog(None, u64::MAX, 30).expect("truncate");
        let second = s.oplog_first().expect("first").expect("some");
        assert!(TsKey::from(second) > TsKey::from(after_cut));
        s.shutdown();
        drop(s);
        // Reopened: no mark, so the scans walk from the oldest end and find the same entry.
        let s = store(dir.path());
        assert_eq!(s.oplog_truncated_key(), None);
        assert_eq!(s.oplog_first().expect("first"), Some(second));
        assert_eq!(s.truncate_oplog(None, 1, 1000).expect("truncate").entries, 1);
        assert_eq!(s.oplog_truncated_key(), Some(keys::oplog_key(second)));
        assert_eq!(s.oplog_size_bytes(), oplog_scan_bytes(&s));
    }
}
