//! Router-owned cursors: the ids clients see, mapped to the shard cursor behind each.
//!
//! Ids are random positive int64 (drivers require int64; 0 means exhausted). A cursor unused for
//! the idle timeout is forgotten here and killed on its shard.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct RouterCursor {
    pub ns: String,
    pub shard_cursor_id: i64,
    last_used: Instant,
}

pub struct CursorRegistry {
    open: Mutex<HashMap<i64, RouterCursor>>,
    idle_timeout: Duration,
}

impl CursorRegistry {
    pub fn new(idle_timeout: Duration) -> Self {
        Self { open: Mutex::new(HashMap::new()), idle_timeout }
    }

    pub fn register(&self, ns: String, shard_cursor_id: i64) -> i64 {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 && !open.contains_key(&id) {
                open.insert(id, RouterCursor { ns, shard_cursor_id, last_used: Instant::now() });
                return id;
            }
        }
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

    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes idle cursors and returns their shard cursor ids, to be killed there.
    pub fn reap_idle(&self) -> Vec<i64> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let timeout = self.idle_timeout;
        let idle: Vec<i64> = open.iter().filter(|(_, c)| c.last_used.elapsed() >= timeout).map(|(id, _)| *id).collect();
        idle.iter().filter_map(|id| open.remove(id)).map(|c| c.shard_cursor_id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_touch_remove_reap() {
        let r = CursorRegistry::new(Duration::from_secs(0));
        let id = r.register("d.c".into(), 42);
        assert!(id > 0);
        assert_eq!(r.touch(id).map(|c| c.shard_cursor_id), Some(42));
        assert_eq!(r.reap_idle(), vec![42]);
        assert!(r.touch(id).is_none());
        assert!(r.remove(id).is_none());
    }
}

/// How often idle router cursors are looked for.
pub const REAP_INTERVAL: Duration = Duration::from_secs(30);

/// Forgets idle router cursors and kills their shard cursors, forever (abort the task to stop).
pub async fn reap_idle_forever(state: std::sync::Arc<crate::state::RouterState>) {
    let mut tick = tokio::time::interval(REAP_INTERVAL);
    loop {
        tick.tick().await;
        let shard_ids = state.cursors.reap_idle();
        if shard_ids.is_empty() {
            continue;
        }
        tracing::info!(count = shard_ids.len(), "killing idle cursors");
        let req = shoal_proto::shard::KillCursorsRequest { request_id: "reaper".into(), cursor_ids: shard_ids };
        // Shard cursors we fail to kill here are reaped by the shard's own idle timeout.
        if let Err(status) = state.shards.client().kill_cursors(req).await {
            state.shards.status_error(&status);
        }
    }
}
