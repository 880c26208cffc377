//! Open cursors of this shard: the rest of a find or aggregate, fetched batch by batch with
//! `getMore`, and killed by `killCursors`, by exhaustion, or after sitting idle.
//!
//! A cursor is taken out of the table while a batch is produced and put back after, so a batch is
//! built without holding the table lock; a concurrent `getMore` on the same id finds it missing.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_query::filter::Filter;
use shoal_query::projection::Projection;
use std::sync::Arc;

use crate::exec::plan::AccessPath;
use crate::store::catalog::CollectionInfo;

/// What remains to be returned.
pub enum CursorSource {
    /// Results computed up front (sorted finds, aggregations).
    Buffered(VecDeque<Bytes>),
    /// A resumable scan: the next batch continues after the last key returned.
    Scan(ScanCursor),
}

pub struct ScanCursor {
    pub coll: Arc<CollectionInfo>,
    pub path: AccessPath,
    pub reverse: bool,
    pub filter: Option<Filter>,
    pub projection: Option<Projection>,
    pub skip: u64,
    pub remaining: Option<u64>,
}

pub struct Cursor {
    pub ns: String,
    pub source: CursorSource,
    last_used: Instant,
}

impl Cursor {
    pub fn new(ns: String, source: CursorSource) -> Self {
        Self { ns, source, last_used: Instant::now() }
    }
}

pub struct CursorManager {
    open: Mutex<HashMap<i64, Cursor>>,
    idle_timeout: Duration,
}

impl CursorManager {
    pub fn new(idle_timeout: Duration) -> Self {
        Self { open: Mutex::new(HashMap::new()), idle_timeout }
    }

    /// Registers `cursor`, returning its id (positive, random, never 0).
    pub fn insert(&self, mut cursor: Cursor) -> i64 {
        cursor.last_used = Instant::now();
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
}
