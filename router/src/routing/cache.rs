//! The router's routing cache: databases (primary shard) and per-collection routing tables,
//! loaded lazily from the catalog and refreshed incrementally (the chunks changed since the
//! cached version; a full reload only on an epoch change) when a shard answers StaleConfig, with
//! the cluster client's loader (`shoal_cluster::routing`). One refresh per namespace runs at a
//! time (`shoal_cluster::single_flight`); callers arriving during it wait and reuse it.
//!
//! Must not: choose shards for requests (see `target`) or talk to shards.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shoal_cluster::routing::{self, RoutingSource};
use shoal_cluster::single_flight::SingleFlight;
use shoal_proto::catalog::{ChunkVersion, Database, RoutingTable};

use crate::error::CommandError;

/// A cached collection: sharded (its table) or known unsharded.
#[derive(Clone, Debug)]
pub enum CachedCollection {
    Unsharded,
    Sharded(Arc<RoutingTable>),
}

#[derive(Default)]
pub struct RoutingCache {
    dbs: Mutex<HashMap<String, Database>>,
    colls: SingleFlight<CachedCollection>,
}

impl RoutingCache {
    pub fn database(&self, name: &str) -> Option<Database> {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    pub fn put_database(&self, db: Database) {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).insert(db.name.clone(), db);
    }

    pub fn collection(&self, ns: &str) -> Option<CachedCollection> {
        self.colls.get(ns)
    }

    /// Drops everything (`flushRouterConfig: 1`).
    pub fn clear(&self) {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.colls.clear();
    }

    /// Drops a database and its collections (`flushRouterConfig: "db"`, dropDatabase).
    pub fn forget_database(&self, db: &str) {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).remove(db);
        self.colls.forget_prefix(&format!("{db}."));
    }

    /// Drops one collection (`flushRouterConfig: "db.coll"`, drop).
    pub fn forget_collection(&self, ns: &str) {
        self.colls.forget(ns);
    }

    /// The cached collection, loading it (whole) if absent.
    pub async fn load(&self, catalog: &impl RoutingSource, ns: &str) -> Result<CachedCollection, CommandError> {
        self.colls.get_or_load(ns, || fetch(catalog, ns, None)).await
    }

    /// Brings `ns` up to date after a shard said the router's version `seen` is stale
    /// (`None`: the router sent it as unsharded). Incremental when the cached table is still the
    /// collection's generation; a refresh that someone else finished meanwhile (the cached version
    /// is no longer `seen`) is reused.
    pub async fn refresh(
        &self,
        catalog: &impl RoutingSource,
        ns: &str,
        seen: Option<ChunkVersion>,
    ) -> Result<CachedCollection, CommandError> {
        self.colls
            .refresh(ns, false, |cached| async move {
                match cached {
                    Some(CachedCollection::Sharded(t)) if seen.is_some_and(|s| s != t.version) => {
                        Ok(CachedCollection::Sharded(t))
                    }
                    Some(CachedCollection::Sharded(t)) => fetch(catalog, ns, Some(&t)).await,
                    _ => fetch(catalog, ns, None).await,
                }
            })
            .await
    }
}

async fn fetch(
    catalog: &impl RoutingSource,
    ns: &str,
    cached: Option<&RoutingTable>,
) -> Result<CachedCollection, CommandError> {
    let table = routing::load(catalog, ns, cached, true).await.map_err(crate::catalog::client_error)?;
    if let Some(t) = &table {
        tracing::debug!(%ns, version = %t.version, incremental = cached.is_some(), "routing loaded");
    }
    Ok(match table {
        Some(t) => CachedCollection::Sharded(Arc::new(t)),
        None => CachedCollection::Unsharded,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use shoal_cluster::config_client::ClientError;
    use shoal_proto::catalog::{
        ChangedChunks, Chunk, ChunkBound, Epoch, KeyPattern, RoutingAnswer, RoutingSince, Timestamp,
    };

    use super::*;

    fn table(major: u32) -> RoutingTable {
        let version = ChunkVersion::new(major, 0);
        RoutingTable {
            ns: "db.c".into(),
            uuid: uuid::Uuid::from_u128(1),
            epoch: Epoch([1; 12]),
            timestamp: Timestamp { secs: 1, inc: 0 },
            key: KeyPattern::range(&["x"]),
            unique: false,
            version,
            chunks: vec![Chunk::new(ChunkBound::Min, ChunkBound::Max, "s0", version)],
        }
    }

    /// Answers the whole table at `major` or, asked for changes, the table's one chunk.
    struct Fake {
        major: u32,
        asked: Mutex<Vec<Option<RoutingSince>>>,
    }

    impl RoutingSource for Fake {
        async fn routing_table(
            &self,
            _: &str,
            since: Option<RoutingSince>,
            _: bool,
        ) -> Result<RoutingAnswer, ClientError> {
            self.asked.lock().unwrap_or_else(|p| p.into_inner()).push(since);
            let t = table(self.major);
            Ok(match since {
                None => RoutingAnswer::Full(Some(t)),
                Some(_) => RoutingAnswer::Changes(ChangedChunks::Changed {
                    collection_version: t.collection_version(),
                    chunks: t.chunks.clone(),
                }),
            })
        }
    }

    fn version_of(c: &CachedCollection) -> Option<ChunkVersion> {
        match c {
            CachedCollection::Sharded(t) => Some(t.version),
            CachedCollection::Unsharded => None,
        }
    }

    #[tokio::test]
    async fn stale_config_refreshes_incrementally_and_reuses_a_newer_table() {
        let cache = RoutingCache::default();
        let fake = Fake { major: 1, asked: Mutex::new(Vec::new()) };
        assert_eq!(version_of(&cache.load(&fake, "db.c").await.unwrap()), Some(ChunkVersion::new(1, 0)));
        assert_eq!(version_of(&cache.load(&fake, "db.c").await.unwrap()), Some(ChunkVersion::new(1, 0)));
        assert_eq!(fake.asked.lock().unwrap().len(), 1, "a cached table is not loaded again");

        // A shard said 1|0 is stale: the router asks for the changes since 1|0.
        let newer = Fake { major: 2, asked: Mutex::new(Vec::new()) };
        let got = cache.refresh(&newer, "db.c", Some(ChunkVersion::new(1, 0))).await.unwrap();
        assert_eq!(version_of(&got), Some(ChunkVersion::new(2, 0)));
        let since = newer.asked.lock().unwrap().clone();
        assert_eq!(since, vec![Some(RoutingSince { epoch: Epoch([1; 12]), version: ChunkVersion::new(1, 0) })]);

        // Another request that also saw 1|0 finds 2|0 cached and does not ask again.
        let got = cache.refresh(&newer, "db.c", Some(ChunkVersion::new(1, 0))).await.unwrap();
        assert_eq!(version_of(&got), Some(ChunkVersion::new(2, 0)));
        assert_eq!(newer.asked.lock().unwrap().len(), 1);

        cache.forget_database("db");
        assert!(cache.collection("db.c").is_none());
    }
}
