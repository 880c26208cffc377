//! Router-owned cursors: the ids clients see, mapped to the shard cursor behind each (and the
//! replica-group member holding it, when a read preference sent the read off the primary), or to
//! the rest of a result the router built itself (`config.*` reads) held here in batches.
//!
//! Ids are random positive int64 (drivers require int64; 0 means exhausted), unique across both
//! kinds. A cursor unused for the idle timeout is forgotten here (and killed on its shard).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct RouterCursor {
    pub ns: String,
    /// The shard holding the cursor (`routing::pool::LEGACY_SHARD` in single-shard mode).
    pub shard: String,
    /// The member holding it (`None`: the primary), see `member::Served`.
    pub member: Option<String>,
    pub shard_cursor_id: i64,
    last_used: Instant,
}

/// Buffered cursors held at once; each holds at most one catalog-sized result, so this bounds
/// the memory they take. Beyond it a result goes out whole in its first batch.
pub const BUFFERED_CURSORS_MAX: usize = 1024;

/// The unsent rest of a router-built result.
struct BufferedCursor {
    ns: String,
    documents: VecDeque<bytes::Bytes>,
    last_used: Instant,
}

/// One batch of a buffered cursor.
pub struct BufferedBatch {
    pub documents: Vec<bytes::Bytes>,
    /// Whether documents remain (the cursor stays open).
    pub more: bool,
}

/// A router cursor merging several shard cursors, locked while a `getMore` runs on it.
pub type SharedMergeCursor = std::sync::Arc<tokio::sync::Mutex<crate::exec::merge::cursor::MergeCursor>>;

pub struct CursorRegistry {
    open: Mutex<HashMap<i64, RouterCursor>>,
    /// Multi-shard cursors: (namespace, cursor, last used).
    merging: Mutex<HashMap<i64, (String, SharedMergeCursor, Instant)>>,
    /// Locked only after `open` when both are needed, so the two never deadlock.
    buffered: Mutex<HashMap<i64, BufferedCursor>>,
    idle_timeout: Duration,
    opened: AtomicU64,
    timed_out: AtomicU64,
}

/// The registry's counts at one moment (`serverStatus.metrics.cursor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CursorCounts {
    /// Open cursors on one shard.
    pub single_target: u64,
    /// Open cursors merging several shards.
    pub multi_target: u64,
    /// Open router-built results.
    pub buffered: u64,
    /// Cursors opened since the router started.
    pub opened: u64,
    /// Cursors forgotten after the idle timeout.
    pub timed_out: u64,
}

impl CursorRegistry {
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            merging: Mutex::new(HashMap::new()),
            buffered: Mutex::new(HashMap::new()),
            idle_timeout,
            opened: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        }
    }

    /// How many cursors are open, by kind, and how many were opened and timed out.
    pub fn counts(&self) -> CursorCounts {
        let len = |n: usize| n as u64;
        CursorCounts {
            single_target: len(self.open.lock().unwrap_or_else(|p| p.into_inner()).len()),
            multi_target: len(self.merging.lock().unwrap_or_else(|p| p.into_inner()).len()),
            buffered: len(self.buffered.lock().unwrap_or_else(|p| p.into_inner()).len()),
            opened: self.opened.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
        }
    }

    pub fn register(&self, ns: String, shard: String, member: Option<String>, shard_cursor_id: i64) -> i64 {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let buffered = self.buffered.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 && !open.contains_key(&id) && !buffered.contains_key(&id) && !self.merging_has(id) {
                open.insert(id, RouterCursor { ns, shard, member, shard_cursor_id, last_used: Instant::now() });
                self.opened.fetch_add(1, Ordering::Relaxed);
                return id;
            }
        }
    }

    /// Holds `documents` for later `getMore`s on `ns`; the cursor id, or the documents back when
    /// [`BUFFERED_CURSORS_MAX`] cursors are already held.
    pub fn register_buffered(
        &self,
        ns: String,
        documents: VecDeque<bytes::Bytes>,
    ) -> Result<i64, VecDeque<bytes::Bytes>> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let mut buffered = self.buffered.lock().unwrap_or_else(|p| p.into_inner());
        if buffered.len() >= BUFFERED_CURSORS_MAX {
            return Err(documents);
        }
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 && !open.contains_key(&id) && !buffered.contains_key(&id) && !self.merging_has(id) {
                buffered.insert(id, BufferedCursor { ns, documents, last_used: Instant::now() });
                self.opened.fetch_add(1, Ordering::Relaxed);
                return Ok(id);
            }
        }
    }

    fn merging_has(&self, id: i64) -> bool {
        self.merging.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&id)
    }

    /// Holds a multi-shard cursor for later `getMore`s; its id.
    pub fn register_merging(&self, ns: String, cursor: crate::exec::merge::cursor::MergeCursor) -> i64 {
        let shared = std::sync::Arc::new(tokio::sync::Mutex::new(cursor));
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            let taken = {
                let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
                let buffered = self.buffered.lock().unwrap_or_else(|p| p.into_inner());
                open.contains_key(&id) || buffered.contains_key(&id)
            };
            let mut merging = self.merging.lock().unwrap_or_else(|p| p.into_inner());
            if id != 0 && !taken && !merging.contains_key(&id) {
                merging.insert(id, (ns, shared, Instant::now()));
                self.opened.fetch_add(1, Ordering::Relaxed);
                return id;
            }
        }
    }

    /// Multi-shard cursor `id` and its namespace, marked used.
    pub fn merging(&self, id: i64) -> Option<(String, SharedMergeCursor)> {
        let mut merging = self.merging.lock().unwrap_or_else(|p| p.into_inner());
        let entry = merging.get_mut(&id)?;
        entry.2 = Instant::now();
        Some((entry.0.clone(), entry.1.clone()))
    }

    pub fn remove_merging(&self, id: i64) -> Option<SharedMergeCursor> {
        self.merging.lock().unwrap_or_else(|p| p.into_inner()).remove(&id).map(|(_, c, _)| c)
    }

    /// Forgets idle multi-shard cursors not in use and returns them, to have their shard cursors killed.
    pub fn reap_idle_merging(&self) -> Vec<SharedMergeCursor> {
        let timeout = self.idle_timeout;
        let mut merging = self.merging.lock().unwrap_or_else(|p| p.into_inner());
        let idle: Vec<i64> = merging
            .iter()
            .filter(|(_, (_, c, used))| used.elapsed() >= timeout && c.try_lock().is_ok())
            .map(|(id, _)| *id)
            .collect();
        let reaped: Vec<SharedMergeCursor> =
            idle.iter().filter_map(|id| merging.remove(id)).map(|(_, c, _)| c).collect();
        self.timed_out.fetch_add(reaped.len() as u64, Ordering::Relaxed);
        reaped
    }

    /// The namespace of buffered cursor `id`, if it is one.
    pub fn buffered_ns(&self, id: i64) -> Option<String> {
        self.buffered.lock().unwrap_or_else(|p| p.into_inner()).get(&id).map(|c| c.ns.clone())
    }

    /// The next batch of buffered cursor `id` (`batch_size` 0: all that is left); an exhausted
    /// cursor is forgotten.
    pub fn next_buffered(&self, id: i64, batch_size: usize) -> Option<BufferedBatch> {
        let mut buffered = self.buffered.lock().unwrap_or_else(|p| p.into_inner());
        let c = buffered.get_mut(&id)?;
        c.last_used = Instant::now();
        let n = if batch_size == 0 { c.documents.len() } else { batch_size.min(c.documents.len()) };
        let documents: Vec<bytes::Bytes> = c.documents.drain(..n).collect();
        let more = !c.documents.is_empty();
        if !more {
            buffered.remove(&id);
        }
        Some(BufferedBatch { documents, more })
    }

    /// Forgets buffered cursor `id`; whether it existed.
    pub fn remove_buffered(&self, id: i64) -> bool {
        self.buffered.lock().unwrap_or_else(|p| p.into_inner()).remove(&id).is_some()
    }

    /// The cursor, marked used.
    pub fn touch(&self, id: i64) -> Option<RouterCursor> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let c = open.get_mut(&id)?;
        c.last_used = Instant::now();
        Some(c.clone())
    }

    pub fn remove(&self, id: i64) -> Option<RouterCursor> {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&id)
    }

    /// Open cursors of both kinds.
    pub fn len(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner()).len();
        let merging = self.merging.lock().unwrap_or_else(|p| p.into_inner()).len();
        open + merging + self.buffered.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether cursor `id` (of any kind) is open.
    pub fn contains(&self, id: i64) -> bool {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&id)
            || self.merging_has(id)
            || self.buffered.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&id)
    }

    /// Removes idle cursors and returns them, to have their shard cursors killed.
    pub fn reap_idle(&self) -> Vec<RouterCursor> {
        let timeout = self.idle_timeout;
        let mut buffered = self.buffered.lock().unwrap_or_else(|p| p.into_inner());
        let before = buffered.len();
        buffered.retain(|_, c| c.last_used.elapsed() < timeout);
        let dropped = before - buffered.len();
        drop(buffered);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let idle: Vec<i64> = open.iter().filter(|(_, c)| c.last_used.elapsed() >= timeout).map(|(id, _)| *id).collect();
        let reaped: Vec<RouterCursor> = idle.iter().filter_map(|id| open.remove(id)).collect();
        self.timed_out.fetch_add((dropped + reaped.len()) as u64, Ordering::Relaxed);
        reaped
    }
}

/// How often idle router cursors are looked for.
pub const REAP_INTERVAL: Duration = Duration::from_secs(30);

/// Forgets idle router cursors and kills their shard cursors, forever (abort the task to stop).
pub async fn reap_idle_forever(state: std::sync::Arc<crate::state::RouterState>) {
    let mut tick = tokio::time::interval(REAP_INTERVAL);
    loop {
        tick.tick().await;
        for cursor in state.cursors.reap_idle_merging() {
            cursor.lock().await.kill(&state).await;
        }
        let reaped = state.cursors.reap_idle();
        if reaped.is_empty() {
            continue;
        }
        tracing::info!(count = reaped.len(), "killing idle cursors");
        let mut by_member: std::collections::HashMap<(String, Option<String>), Vec<i64>> =
            std::collections::HashMap::new();
        for c in reaped {
            by_member.entry((c.shard, c.member)).or_default().push(c.shard_cursor_id);
        }
        for ((shard, member), cursor_ids) in by_member {
            let pool = match &member {
                Some(addr) => state.members.pool(addr).ok(),
                None => state.shards.get(&shard),
            };
            let Some(pool) = pool else { continue };
            let req = shoal_proto::shard::KillCursorsRequest { request_id: "reaper".into(), cursor_ids };
            // Shard cursors we fail to kill here are reaped by the shard's own idle timeout.
            if let Err(status) = pool.client().kill_cursors(req).await {
                pool.status_error(&status);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_touch_remove_reap() {
        let r = CursorRegistry::new(Duration::from_secs(0));
        let id = r.register("d.c".into(), String::new(), Some("m:1".into()), 42);
        assert!(id > 0);
        assert_eq!(r.touch(id).map(|c| c.shard_cursor_id), Some(42));
        let reaped: Vec<(String, Option<String>, i64)> =
            r.reap_idle().into_iter().map(|c| (c.shard, c.member, c.shard_cursor_id)).collect();
        assert_eq!(reaped, vec![(String::new(), Some("m:1".into()), 42)]);
        assert!(r.touch(id).is_none());
        assert!(r.remove(id).is_none());
    }

    #[test]
    fn buffered_cursors_hand_out_batches_then_close() {
        let r = CursorRegistry::new(Duration::from_secs(60));
        let docs: VecDeque<bytes::Bytes> = (0..5u8).map(|i| bytes::Bytes::from(vec![i])).collect();
        let id = r.register_buffered("config.chunks".into(), docs).expect("room");
        assert_eq!(r.buffered_ns(id).as_deref(), Some("config.chunks"));
        let first = r.next_buffered(id, 2).expect("open");
        assert_eq!((first.documents.len(), first.more), (2, true));
        let rest = r.next_buffered(id, 0).expect("open");
        assert_eq!((rest.documents.len(), rest.more), (3, false));
        assert!(r.next_buffered(id, 1).is_none() && r.is_empty());
        let id = r.register_buffered("config.chunks".into(), VecDeque::from([bytes::Bytes::new()])).expect("room");
        assert!(r.remove_buffered(id) && !r.remove_buffered(id));
        for _ in 0..BUFFERED_CURSORS_MAX {
            r.register_buffered("config.chunks".into(), VecDeque::new()).expect("room");
        }
        assert!(r.register_buffered("config.chunks".into(), VecDeque::new()).is_err());
    }
}
