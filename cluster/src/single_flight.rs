//! [`SingleFlight`]: a per-key cache of what the catalog said, refreshed at most once at a time
//! per key. Requests that need a refresh while one runs wait for it and, if they ask to join,
//! take its result instead of asking the config servers again. The routing caches of the router
//! (routing tables) and of the shard (collection metadata, database versions) are all this.
//!
//! ```text
//!  refresh(key, join, load) ── lock key ── join and a refresh finished while we waited? ── yes: its value
//!                                              \── no: load(cached) ── install, count the refresh
//! ```
//!
//! Must not: know what it caches or where values come from (the caller's `load` does).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

struct Entry<V> {
    value: RwLock<Option<V>>,
    /// Held while a refresh of this key runs.
    refreshing: tokio::sync::Mutex<()>,
    /// Completed refreshes and installs; lets a waiter see that one finished while it waited.
    refreshes: AtomicU64,
}

impl<V> Default for Entry<V> {
    fn default() -> Self {
        Self { value: RwLock::new(None), refreshing: tokio::sync::Mutex::new(()), refreshes: AtomicU64::new(0) }
    }
}

impl<V: Clone> Entry<V> {
    fn value(&self) -> Option<V> {
        self.value.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, value: V) {
        *self.value.write().unwrap_or_else(|p| p.into_inner()) = Some(value);
        self.refreshes.fetch_add(1, Ordering::AcqRel);
    }
}

/// A cache of `V` by string key (a namespace or a database name).
pub struct SingleFlight<V> {
    by_key: Mutex<HashMap<String, Arc<Entry<V>>>>,
}

impl<V> Default for SingleFlight<V> {
    fn default() -> Self {
        Self { by_key: Mutex::new(HashMap::new()) }
    }
}

impl<V: Clone> SingleFlight<V> {
    fn entry(&self, key: &str) -> Arc<Entry<V>> {
        let mut map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = map.get(key) {
            return Arc::clone(e);
        }
        Arc::clone(map.entry(key.to_owned()).or_default())
    }

    /// What is cached for `key`, if anything.
    pub fn get(&self, key: &str) -> Option<V> {
        let map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).and_then(|e| e.value())
    }

    /// Replaces what is cached for `key` (a caller that learned it otherwise; tests). Counts as a
    /// refresh for joiners.
    pub fn install(&self, key: &str, value: V) {
        self.entry(key).set(value);
    }

    pub fn forget(&self, key: &str) {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    /// Forgets every key starting with `prefix` (a database's namespaces: `"db."`).
    pub fn forget_prefix(&self, prefix: &str) {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| !k.starts_with(prefix));
    }

    pub fn clear(&self) {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Every key with a cached value, sorted.
    pub fn loaded(&self) -> Vec<(String, V)> {
        let entries: Vec<(String, Arc<Entry<V>>)> = {
            let map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
            map.iter().map(|(k, e)| (k.clone(), Arc::clone(e))).collect()
        };
        let mut out: Vec<_> = entries.into_iter().filter_map(|(k, e)| e.value().map(|v| (k, v))).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Refreshes `key` with `load`, which gets what is cached now and answers the new value.
    /// With `join`, a refresh that finished while this call waited for the key counts as this one
    /// (single flight); without it (a caller that must see a change it just committed) `load`
    /// always runs after the wait. A failed `load` leaves the cache as it was.
    pub async fn refresh<E, F, Fut>(&self, key: &str, join: bool, load: F) -> Result<V, E>
    where
        F: FnOnce(Option<V>) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let entry = self.entry(key);
        let seen = entry.refreshes.load(Ordering::Acquire);
        let _flight = entry.refreshing.lock().await;
        if join
            && entry.refreshes.load(Ordering::Acquire) != seen
            && let Some(v) = entry.value()
        {
            return Ok(v);
        }
        let fresh = load(entry.value()).await?;
        entry.set(fresh.clone());
        Ok(fresh)
    }

    /// The cached value, or a refresh (joined) when there is none.
    pub async fn get_or_load<E, F, Fut>(&self, key: &str, load: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        if let Some(v) = self.get(key) {
            return Ok(v);
        }
        self.refresh(key, true, |cached| async move {
            match cached {
                // Loaded by a caller that held the key's lock before us.
                Some(v) => Ok(v),
                None => load().await,
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[tokio::test]
    async fn concurrent_joined_refreshes_load_once() {
        let cache = Arc::new(SingleFlight::<u32>::default());
        let loads = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let first = {
            let (cache, loads, gate) = (Arc::clone(&cache), Arc::clone(&loads), Arc::clone(&gate));
            tokio::spawn(async move {
                cache
                    .refresh("a", true, |_| async move {
                        loads.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Ok::<_, ()>(7)
                    })
                    .await
            })
        };
        // Let the first take the key's lock, then queue a joiner behind it.
        while loads.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let second = {
            let (cache, loads) = (Arc::clone(&cache), Arc::clone(&loads));
            tokio::spawn(async move {
                cache
                    .refresh("a", true, |_| async move {
                        loads.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ()>(8)
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        gate.notify_one();
        assert_eq!(first.await.unwrap(), Ok(7));
        assert_eq!(second.await.unwrap(), Ok(7), "the joiner takes the refresh it waited for");
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_unjoined_refresh_always_loads_and_sees_the_cached_value() {
        let cache = SingleFlight::<u32>::default();
        cache.install("a", 1);
        let got = cache.refresh("a", false, |cached| async move { Ok::<_, ()>(cached.unwrap_or(0) + 10) }).await;
        assert_eq!(got, Ok(11));
        assert_eq!(cache.get("a"), Some(11));
    }

    #[tokio::test]
    async fn a_failed_load_keeps_the_cached_value() {
        let cache = SingleFlight::<u32>::default();
        cache.install("a", 1);
        assert_eq!(cache.refresh("a", false, |_| async { Err::<u32, _>("down") }).await, Err("down"));
        assert_eq!(cache.get("a"), Some(1));
    }

    #[tokio::test]
    async fn get_or_load_loads_only_what_is_missing() {
        let cache = SingleFlight::<u32>::default();
        cache.install("a", 1);
        assert_eq!(cache.get_or_load("a", || async { Ok::<_, ()>(2) }).await, Ok(1));
        assert_eq!(cache.get_or_load("b", || async { Ok::<_, ()>(3) }).await, Ok(3));
        assert_eq!(cache.get("b"), Some(3));
    }

    #[test]
    fn forgetting_by_prefix_and_listing() {
        let cache = SingleFlight::<u32>::default();
        cache.install("db.b", 2);
        cache.install("db.a", 1);
        cache.install("other.c", 3);
        assert_eq!(cache.loaded(), vec![("db.a".into(), 1), ("db.b".into(), 2), ("other.c".into(), 3)]);
        cache.forget_prefix("db.");
        assert_eq!(cache.loaded(), vec![("other.c".into(), 3)]);
        cache.forget("other.c");
        assert!(cache.get("other.c").is_none());
    }
}
