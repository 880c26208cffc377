//! Open cursors of this shard: the rest of a find or aggregate, fetched batch by batch with
//! `getMore`, and killed by `killCursors`, by exhaustion, or after sitting idle.
//!
//! A cursor is taken out of the table while a batch is produced and put back after, so a batch is
//! built without holding the table lock; a concurrent `getMore` on the same id finds it missing.
//!
//! Every open cursor (and every versioned read while it runs) holds a [`ReadPin`] on its
//! namespace, numbered in the order pins were taken. The range deleter remembers the newest number
//! when a deletion is scheduled and waits until no older pin on that namespace is left, so queries
//! that could still see the range finish first (a pin lives as long as its cursor, even while a
//! `getMore` has the cursor out of the table). A cursor opened by a versioned read keeps the
//! number of the read's own pin ([`Cursor::pinned_since`]), taken before its version check, so a
//! deletion scheduled between the check and the cursor's registration still waits for it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_query::filter::Filter;
use shoal_query::projection::Projection;
use std::sync::Arc;

use crate::exec::plan::AccessPath;
use crate::store::local_catalog::CollectionInfo;

/// What remains to be returned.
pub enum CursorSource {
    /// Results computed up front (sorted finds, aggregations).
    Buffered(VecDeque<Bytes>),
    /// A resumable scan: the next batch continues after the last key returned (boxed: it is
    /// much larger than a queue handle).
    Scan(Box<ScanCursor>),
}

pub struct ScanCursor {
    pub coll: Arc<CollectionInfo>,
    pub path: AccessPath,
    pub reverse: bool,
    pub filter: Option<Filter>,
    pub projection: Option<Projection>,
    pub skip: u64,
    pub remaining: Option<u64>,
    /// The ownership the find was checked against: getMores keep hiding the same orphans.
    pub ownership: Option<Arc<crate::sharding::Ownership>>,
}

pub struct Cursor {
    pub ns: String,
    pub source: CursorSource,
    last_used: Instant,
    /// The pin number this cursor holds deletions back as (default: a new one at registration).
    pin_since: Option<u64>,
    _pin: Option<ReadPin>,
}

impl Cursor {
    pub fn new(ns: String, source: CursorSource) -> Self {
        Self { ns, source, last_used: Instant::now(), pin_since: None, _pin: None }
    }

    /// Holds range deletions back as a pin numbered `seq` would (the opening read's pin).
    pub fn pinned_since(mut self, seq: Option<u64>) -> Self {
        self.pin_since = seq;
        self
    }
}

#[derive(Default)]
struct Pins {
    /// The number the last pin got (the first is 1).
    next: u64,
    /// Makes keys unique when pins share a number.
    uniq: u64,
    live: BTreeMap<(u64, u64), String>,
}

/// Keeps a namespace's range deletions waiting while it lives (see the module docs).
pub struct ReadPin {
    pins: Arc<Mutex<Pins>>,
    key: (u64, u64),
}

impl ReadPin {
    pub fn seq(&self) -> u64 {
        self.key.0
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.pins.lock().unwrap_or_else(|p| p.into_inner()).live.remove(&self.key);
    }
}

pub struct CursorManager {
    open: Mutex<HashMap<i64, Cursor>>,
    idle_timeout: Duration,
    pins: Arc<Mutex<Pins>>,
}

impl CursorManager {
    pub fn new(idle_timeout: Duration) -> Self {
        Self { open: Mutex::new(HashMap::new()), idle_timeout, pins: Arc::default() }
    }

    /// A pin on `ns` held by a read while it runs.
    pub fn pin(&self, ns: &str) -> ReadPin {
        self.pin_as_of(ns, None)
    }

    /// A pin numbered `seq` (an older pin's number), or a new number.
    fn pin_as_of(&self, ns: &str, seq: Option<u64>) -> ReadPin {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let seq = match seq {
            Some(s) => s,
            None => {
                pins.next += 1;
                pins.next
            }
        };
        pins.uniq += 1;
        let key = (seq, pins.uniq);
        pins.live.insert(key, ns.to_owned());
        ReadPin { pins: Arc::clone(&self.pins), key }
    }

    /// The number of the newest pin taken so far (0 if none).
    pub fn pin_seq(&self) -> u64 {
        self.pins.lock().unwrap_or_else(|p| p.into_inner()).next
    }

    /// Whether a pin on `ns` numbered `seq` or lower is still held.
    pub fn pinned_at_or_before(&self, ns: &str, seq: u64) -> bool {
        self.pins.lock().unwrap_or_else(|p| p.into_inner()).live.range(..=(seq, u64::MAX)).any(|(_, n)| n == ns)
    }

    /// Registers `cursor`, returning its id (positive, random, never 0).
    pub fn insert(&self, mut cursor: Cursor) -> i64 {
        cursor.last_used = Instant::now();
        if cursor._pin.is_none() {
            cursor._pin = Some(self.pin_as_of(&cursor.ns, cursor.pin_since));
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let id = (uuid::Uuid::new_v4().as_u128() as i64) & i64::MAX;
            if id != 0 && !open.contains_key(&id) {
                open.insert(id, cursor);
                return id;
            }
        }
    }

    pub fn take(&self, id: i64) -> Option<Cursor> {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&id)
    }

    pub fn put_back(&self, id: i64, mut cursor: Cursor) {
        cursor.last_used = Instant::now();
        self.open.lock().unwrap_or_else(|p| p.into_inner()).insert(id, cursor);
    }

    pub fn kill(&self, id: i64) -> bool {
        self.take(id).is_some()
    }

    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Kills cursors idle longer than the timeout; returns how many.
    pub fn reap_idle(&self) -> usize {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let before = open.len();
        let timeout = self.idle_timeout;
        open.retain(|_, c| c.last_used.elapsed() < timeout);
        before - open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_take_reap() {
        let m = CursorManager::new(Duration::from_millis(0));
        let id = m.insert(Cursor::new("d.c".into(), CursorSource::Buffered(VecDeque::new())));
        assert!(id > 0);
        let c = m.take(id).expect("present");
        assert!(m.take(id).is_none());
        m.put_back(id, c);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(m.reap_idle(), 1);
        assert!(m.is_empty());
    }

    #[test]
    fn pins_live_as_long_as_their_cursor() {
        let m = CursorManager::new(Duration::from_secs(60));
        let before = m.pin_seq();
        let id = m.insert(Cursor::new("d.c".into(), CursorSource::Buffered(VecDeque::new())));
        let at = m.pin_seq();
        assert!(at > before);
        assert!(m.pinned_at_or_before("d.c", at));
        assert!(!m.pinned_at_or_before("d.other", at));
        assert!(!m.pinned_at_or_before("d.c", before));
        // Taken out for a getMore: still pinned.
        let c = m.take(id).expect("present");
        assert!(m.pinned_at_or_before("d.c", at));
        drop(c);
        assert!(!m.pinned_at_or_before("d.c", at));
        let read = m.pin("d.c");
        let later = m.pin_seq();
        assert!(!m.pinned_at_or_before("d.c", at), "newer pins do not hold older deletions");
        assert!(m.pinned_at_or_before("d.c", later));
        drop(read);
        assert!(!m.pinned_at_or_before("d.c", later));
        // A cursor opened by an older read holds deletions back as that read did.
        let read = m.pin("d.c");
        let barrier = m.pin_seq();
        let id =
            m.insert(Cursor::new("d.c".into(), CursorSource::Buffered(VecDeque::new())).pinned_since(Some(read.seq())));
        drop(read);
        assert!(m.pinned_at_or_before("d.c", barrier));
        m.kill(id);
        assert!(!m.pinned_at_or_before("d.c", barrier));
    }
}
