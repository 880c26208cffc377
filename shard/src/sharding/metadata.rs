//! The collection metadata cache: per namespace, what the catalog said the last time this shard
//! asked (unsharded, or sharded with its generation, key, versions and the chunks this shard owns).
//!
//! Loaded on first use and refreshed on demand. A refresh is single-flight per namespace: requests
//! that need one while another runs wait for it and use its result instead of asking again. It is
//! incremental (the chunks changed since the cached collection version, folded in with
//! `RoutingTable::merge_changes`) while the epoch is unchanged, and a full reload otherwise.
//!
//! ```text
//!  check(ns) --Unknown/Refresh--> refresh(ns): lock ns ── someone refreshed meanwhile? ── yes: done
//!                                                   \── no: catalog.routing_table(ns, since) ── install
//! ```
//!
//! Must not: decide whether a request is stale (see `version.rs`) or touch storage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use shoal_cluster::config_client::ConfigClient;
use shoal_proto::catalog::{ChangedChunks, PlacementVersion, RoutingTable};
use shoal_proto::catalog::{RoutingAnswer, RoutingSince};
use shoal_query::shard_key::KeyField;
use std::future::Future;

use super::error::ShardingError;
use super::ownership::Ownership;
use super::version::Known;

/// A sharded collection as this shard knows it.
#[derive(Debug, Clone)]
pub struct ShardedMetadata {
    /// The catalog's routing table (all chunks, kept for incremental refreshes).
    pub table: RoutingTable,
    /// This shard's chunks, and its shard version.
    pub ownership: Arc<Ownership>,
}

impl ShardedMetadata {
    pub fn from_table(table: RoutingTable, shard_id: &str) -> Self {
        let version =
            PlacementVersion { epoch: table.epoch, timestamp: table.timestamp, version: table.shard_version(shard_id) };
        let ranges =
            table.chunks.iter().filter(|c| c.shard == shard_id).map(|c| (c.min.clone(), c.max.clone())).collect();
        let ownership = Arc::new(Ownership::new(table.ns.clone(), KeyField::of(&table.key), version, ranges));
        Self { table, ownership }
    }

    pub fn shard_version(&self) -> PlacementVersion {
        self.ownership.version
    }

    pub fn collection_version(&self) -> PlacementVersion {
        self.table.collection_version()
    }
}

#[derive(Debug, Clone)]
pub enum CollectionMetadata {
    Unsharded,
    Sharded(Arc<ShardedMetadata>),
}

impl CollectionMetadata {
    pub fn known(meta: Option<&CollectionMetadata>) -> Known {
        match meta {
            None => Known::Unknown,
            Some(CollectionMetadata::Unsharded) => Known::Unsharded,
            Some(CollectionMetadata::Sharded(m)) => Known::Sharded(m.shard_version()),
        }
    }

    pub fn ownership(&self) -> Option<Arc<Ownership>> {
        match self {
            CollectionMetadata::Unsharded => None,
            CollectionMetadata::Sharded(m) => Some(Arc::clone(&m.ownership)),
        }
    }
}

/// Where routing tables come from: the config servers ([`ConfigClient`]), or a fake in tests.
pub trait RoutingSource: Sync {
    fn routing_table(
        &self,
        ns: &str,
        since: Option<RoutingSince>,
        linearizable: bool,
    ) -> impl Future<Output = Result<RoutingAnswer, ShardingError>> + Send;
}

impl RoutingSource for ConfigClient {
    async fn routing_table(
        &self,
        ns: &str,
        since: Option<RoutingSince>,
        linearizable: bool,
    ) -> Result<RoutingAnswer, ShardingError> {
        match ConfigClient::routing_table(self, ns, since, linearizable).await {
            Ok((answer, _)) => Ok(answer),
            Err(e) => Err(ShardingError::Catalog { ns: ns.to_owned(), code: e.code(), detail: e.to_string() }),
        }
    }
}

#[derive(Default)]
struct Entry {
    meta: RwLock<Option<CollectionMetadata>>,
    /// Held while a refresh of this namespace talks to the catalog.
    refreshing: tokio::sync::Mutex<()>,
    /// Completed refreshes; lets a waiter see that one finished while it waited.
    refreshes: AtomicU64,
}

#[derive(Default)]
pub struct MetadataCache {
    by_ns: Mutex<HashMap<String, Arc<Entry>>>,
}

impl MetadataCache {
    fn entry(&self, ns: &str) -> Arc<Entry> {
        let mut map = self.by_ns.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(ns.to_owned()).or_default())
    }

    pub fn get(&self, ns: &str) -> Option<CollectionMetadata> {
        let entry = self.entry(ns);
        let meta = entry.meta.read().unwrap_or_else(|p| p.into_inner());
        meta.clone()
    }

    /// Replaces what is cached for `ns` (tests, and callers that learned the metadata otherwise).
    pub fn install(&self, ns: &str, meta: CollectionMetadata) {
        let entry = self.entry(ns);
        *entry.meta.write().unwrap_or_else(|p| p.into_inner()) = Some(meta);
        entry.refreshes.fetch_add(1, Ordering::AcqRel);
    }

    pub fn forget(&self, ns: &str) {
        self.by_ns.lock().unwrap_or_else(|p| p.into_inner()).remove(ns);
    }

    /// Every namespace with loaded metadata, sorted.
    pub fn loaded(&self) -> Vec<(String, CollectionMetadata)> {
        let entries: Vec<(String, Arc<Entry>)> = {
            let map = self.by_ns.lock().unwrap_or_else(|p| p.into_inner());
            map.iter().map(|(ns, e)| (ns.clone(), Arc::clone(e))).collect()
        };
        let mut out: Vec<_> = entries
            .into_iter()
            .filter_map(|(ns, e)| e.meta.read().unwrap_or_else(|p| p.into_inner()).clone().map(|m| (ns, m)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    pub fn forget_database(&self, db: &str) {
        let prefix = format!("{db}.");
        self.by_ns.lock().unwrap_or_else(|p| p.into_inner()).retain(|ns, _| !ns.starts_with(&prefix));
    }

    /// Refreshes `ns` from the catalog. With `join`, a refresh that finished while this call
    /// waited for the namespace's lock counts as this one (single flight); without it (a caller
    /// that must see a change it just committed) the catalog is always asked after the wait.
    /// Returns the metadata now cached.
    pub async fn refresh(
        &self,
        catalog: &impl RoutingSource,
        shard_id: &str,
        ns: &str,
        linearizable: bool,
        join: bool,
    ) -> Result<CollectionMetadata, ShardingError> {
        let entry = self.entry(ns);
        let seen = entry.refreshes.load(Ordering::Acquire);
        let _flight = entry.refreshing.lock().await;
        if join
            && entry.refreshes.load(Ordering::Acquire) != seen
            && let Some(m) = entry.meta.read().unwrap_or_else(|p| p.into_inner()).clone()
        {
            return Ok(m);
        }
        let cached = entry.meta.read().unwrap_or_else(|p| p.into_inner()).clone();
        let fresh = load(catalog, shard_id, ns, cached.as_ref(), linearizable).await?;
        *entry.meta.write().unwrap_or_else(|p| p.into_inner()) = Some(fresh.clone());
        entry.refreshes.fetch_add(1, Ordering::AcqRel);
        Ok(fresh)
    }
}

async fn load(
    catalog: &impl RoutingSource,
    shard_id: &str,
    ns: &str,
    cached: Option<&CollectionMetadata>,
    linearizable: bool,
) -> Result<CollectionMetadata, ShardingError> {
    if let Some(CollectionMetadata::Sharded(m)) = cached {
        let since = RoutingSince { epoch: m.table.epoch, version: m.table.version };
        let answer = catalog.routing_table(ns, Some(since), linearizable).await?;
        match apply_answer(Some(&m.table), answer, shard_id) {
            Some(meta) => return Ok(meta),
            None => tracing::debug!(ns, "collection generation changed; reloading its metadata"),
        }
    }
    let answer = catalog.routing_table(ns, None, linearizable).await?;
    apply_answer(None, answer, shard_id).ok_or_else(|| ShardingError::Catalog {
        ns: ns.to_owned(),
        code: None,
        detail: "the catalog answered a full read with an epoch change".into(),
    })
}

/// Folds a catalog answer into the cached table; `None` when a full reload is needed.
pub fn apply_answer(
    cached: Option<&RoutingTable>,
    answer: RoutingAnswer,
    shard_id: &str,
) -> Option<CollectionMetadata> {
    match answer {
        RoutingAnswer::Full(None) | RoutingAnswer::Changes(ChangedChunks::NotSharded) => {
            Some(CollectionMetadata::Unsharded)
        }
        RoutingAnswer::Full(Some(table)) => {
            Some(CollectionMetadata::Sharded(Arc::new(ShardedMetadata::from_table(table, shard_id))))
        }
        RoutingAnswer::Changes(ChangedChunks::EpochChanged { .. }) => None,
        RoutingAnswer::Changes(ChangedChunks::Changed { collection_version, chunks }) => {
            let mut table = cached?.clone();
            if collection_version.epoch != table.epoch {
                return None;
            }
            table.merge_changes(collection_version.version, &chunks);
            Some(CollectionMetadata::Sharded(Arc::new(ShardedMetadata::from_table(table, shard_id))))
        }
    }
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::{Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, Timestamp};

    use super::*;

    fn chunk(min: ChunkBound, max: ChunkBound, shard: &str, major: u32, minor: u32) -> Chunk {
        Chunk {
            min,
            max,
            shard: shard.into(),
            version: ChunkVersion::new(major, minor),
            history: Vec::new(),
            jumbo: false,
            on_current_shard_since: Timestamp::default(),
        }
    }

    fn key(b: u8) -> ChunkBound {
        ChunkBound::Key(vec![b])
    }

    pub(crate) fn table(chunks: Vec<Chunk>) -> RoutingTable {
        let version = chunks.iter().map(|c| c.version).max().unwrap_or_default();
        RoutingTable {
            ns: "d.c".into(),
            uuid: uuid::Uuid::nil(),
            epoch: Epoch([1; 12]),
            timestamp: Timestamp { secs: 1, inc: 0 },
            key: KeyPattern::range(&["a"]),
            unique: false,
            version,
            chunks,
        }
    }

    fn sharded(meta: CollectionMetadata) -> Arc<ShardedMetadata> {
        match meta {
            CollectionMetadata::Sharded(m) => m,
            CollectionMetadata::Unsharded => panic!("expected sharded"),
        }
    }

    #[test]
    fn versions_and_owned_ranges_come_from_the_table() {
        let t = table(vec![
            chunk(ChunkBound::Min, key(10), "s1", 1, 1),
            chunk(key(10), key(20), "s2", 2, 0),
            chunk(key(20), ChunkBound::Max, "s1", 1, 2),
        ]);
        let m = ShardedMetadata::from_table(t.clone(), "s1");
        assert_eq!(m.shard_version().version, ChunkVersion::new(1, 2));
        assert_eq!(m.collection_version().version, ChunkVersion::new(2, 0));
        assert_eq!(m.ownership.ranges().len(), 2);
        let none = ShardedMetadata::from_table(t, "s3");
        assert_eq!(none.shard_version().version, ChunkVersion::ZERO);
        assert!(none.ownership.ranges().is_empty());
    }

    #[test]
    fn incremental_answers_merge_and_epoch_changes_reload() {
        let t = table(vec![chunk(ChunkBound::Min, key(10), "s1", 1, 0), chunk(key(10), ChunkBound::Max, "s1", 1, 1)]);
        // A migration moved [10, Max) to s2: new chunk 2|0 on s2, control chunk 2|1 on s1.
        let cv = PlacementVersion { epoch: t.epoch, timestamp: t.timestamp, version: ChunkVersion::new(2, 1) };
        let answer = RoutingAnswer::Changes(ChangedChunks::Changed {
            collection_version: cv,
            chunks: vec![chunk(ChunkBound::Min, key(10), "s1", 2, 1), chunk(key(10), ChunkBound::Max, "s2", 2, 0)],
        });
        let m = sharded(apply_answer(Some(&t), answer, "s1").unwrap());
        assert_eq!(m.shard_version().version, ChunkVersion::new(2, 1));
        assert!(m.ownership.owns_key(&key(5)));
        assert!(!m.ownership.owns_key(&key(15)));
        assert_eq!(m.table.chunks.len(), 2);

        let epoch_changed = RoutingAnswer::Changes(ChangedChunks::EpochChanged { current: cv });
        assert!(apply_answer(Some(&t), epoch_changed, "s1").is_none());
        let dropped = RoutingAnswer::Changes(ChangedChunks::NotSharded);
        assert!(matches!(apply_answer(Some(&t), dropped, "s1"), Some(CollectionMetadata::Unsharded)));
        assert!(matches!(apply_answer(None, RoutingAnswer::Full(None), "s1"), Some(CollectionMetadata::Unsharded)));
    }

    /// A catalog that answers with `table` (full or as "nothing changed"), counting calls, and
    /// blocks each call until the test adds a permit.
    struct FakeCatalog {
        table: RoutingTable,
        calls: std::sync::Mutex<Vec<Option<RoutingSince>>>,
        gate: tokio::sync::Semaphore,
    }

    impl RoutingSource for FakeCatalog {
        async fn routing_table(
            &self,
            _ns: &str,
            since: Option<RoutingSince>,
            _linearizable: bool,
        ) -> Result<RoutingAnswer, ShardingError> {
            self.calls.lock().unwrap().push(since);
            self.gate.acquire().await.unwrap().forget();
            Ok(match since {
                None => RoutingAnswer::Full(Some(self.table.clone())),
                Some(_) => RoutingAnswer::Changes(ChangedChunks::Changed {
                    collection_version: self.table.collection_version(),
                    chunks: Vec::new(),
                }),
            })
        }
    }

    #[tokio::test]
    async fn concurrent_refreshes_share_one_catalog_read_then_go_incremental() {
        let t = table(vec![chunk(ChunkBound::Min, ChunkBound::Max, "s1", 1, 0)]);
        let fake =
            Arc::new(FakeCatalog { table: t.clone(), calls: Default::default(), gate: tokio::sync::Semaphore::new(0) });
        let cache = Arc::new(MetadataCache::default());
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let (c, f) = (Arc::clone(&cache), Arc::clone(&fake));
            waiters.push(tokio::spawn(async move { c.refresh(f.as_ref(), "s1", "d.c", true, true).await }));
        }
        // Let every task reach the catalog call or the namespace's lock (single-threaded runtime).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(fake.calls.lock().unwrap().len(), 1, "one refresh in flight");
        // Enough permits that a broken single flight fails below instead of hanging.
        fake.gate.add_permits(3);
        for w in waiters {
            assert!(matches!(w.await.unwrap().unwrap(), CollectionMetadata::Sharded(_)));
        }
        assert_eq!(fake.calls.lock().unwrap().len(), 1, "the waiters used the refresh that ran");

        // A refresh that must see a fresh commit always asks, incrementally from the cached version.
        cache.refresh(fake.as_ref(), "s1", "d.c", true, false).await.unwrap();
        let calls = fake.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1], Some(RoutingSince { epoch: t.epoch, version: t.version }));
    }

    #[test]
    fn install_get_forget() {
        let cache = MetadataCache::default();
        assert!(cache.get("d.c").is_none());
        cache.install("d.c", CollectionMetadata::Unsharded);
        assert!(matches!(cache.get("d.c"), Some(CollectionMetadata::Unsharded)));
        cache.forget("d.c");
        assert!(cache.get("d.c").is_none());
    }
}
