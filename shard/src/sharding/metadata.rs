//! The collection metadata cache: per namespace, what the catalog said the last time this shard
//! asked (unsharded, or sharded with its generation, key, versions and the chunks this shard owns).
//!
//! Loaded on first use and refreshed on demand, through the cluster client's single-flight cache
//! (`shoal_cluster::single_flight`: requests that need a refresh while another runs wait for it
//! and use its result) and its routing-table loader (`shoal_cluster::routing`: incremental while
//! the epoch is unchanged, a full reload otherwise).
//!
//! Must not: decide whether a request is stale (see `version.rs`) or touch storage.

use std::sync::Arc;

use shoal_cluster::routing::{self, RoutingSource};
use shoal_cluster::single_flight::SingleFlight;
use shoal_proto::catalog::{PlacementVersion, RoutingTable};
use shoal_query::shard_key::KeyField;

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

/// Per namespace, what the catalog said the last time this shard asked.
#[derive(Default)]
pub struct MetadataCache {
    by_ns: SingleFlight<CollectionMetadata>,
}

impl MetadataCache {
    pub fn get(&self, ns: &str) -> Option<CollectionMetadata> {
        self.by_ns.get(ns)
    }

    /// Replaces what is cached for `ns` (tests, and callers that learned the metadata otherwise).
    pub fn install(&self, ns: &str, meta: CollectionMetadata) {
        self.by_ns.install(ns, meta);
    }

    pub fn forget(&self, ns: &str) {
        self.by_ns.forget(ns);
    }

    /// Every namespace with loaded metadata, sorted.
    pub fn loaded(&self) -> Vec<(String, CollectionMetadata)> {
        self.by_ns.loaded()
    }

    pub fn forget_database(&self, db: &str) {
        self.by_ns.forget_prefix(&format!("{db}."));
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
        self.by_ns
            .refresh(ns, join, |cached| async move {
                let cached = match &cached {
                    Some(CollectionMetadata::Sharded(m)) => Some(&m.table),
                    _ => None,
                };
                let table = routing::load(catalog, ns, cached, linearizable)
                    .await
                    .map_err(|e| ShardingError::Catalog { ns: ns.to_owned(), code: e.code(), detail: e.to_string() })?;
                Ok(match table {
                    None => CollectionMetadata::Unsharded,
                    Some(t) => CollectionMetadata::Sharded(Arc::new(ShardedMetadata::from_table(t, shard_id))),
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use shoal_cluster::config_client::ClientError;
    use shoal_proto::catalog::{
        ChangedChunks, Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, RoutingAnswer, RoutingSince, Timestamp,
    };

    use super::*;

    fn chunk(min: ChunkBound, max: ChunkBound, shard: &str, major: u32, minor: u32) -> Chunk {
        Chunk::new(min, max, shard, ChunkVersion::new(major, minor))
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
        let folded = routing::fold(Some(&t), answer).unwrap().unwrap();
        let m = ShardedMetadata::from_table(folded, "s1");
        assert_eq!(m.shard_version().version, ChunkVersion::new(2, 1));
        assert!(m.ownership.owns_key(&key(5)));
        assert!(!m.ownership.owns_key(&key(15)));
        assert_eq!(m.table.chunks.len(), 2);

        let epoch_changed = RoutingAnswer::Changes(ChangedChunks::EpochChanged { current: cv });
        assert!(routing::fold(Some(&t), epoch_changed).is_none());
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
        ) -> Result<RoutingAnswer, ClientError> {
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
