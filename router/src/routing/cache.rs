//! The router's routing cache: databases (primary shard) and per-collection routing tables,
//! loaded lazily from the catalog and refreshed incrementally (the chunks changed since the
//! cached version; a full reload only on an epoch change) when a shard answers StaleConfig.
//! One refresh per namespace runs at a time; callers arriving during it wait and reuse it.
//!
//! Must not: choose shards for requests (see `target`) or talk to shards.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shoal_proto::catalog::{ChangedChunks, ChunkVersion, Database, RoutingTable};
use shoal_proto::catalog::{RoutingAnswer, RoutingSince};

use crate::catalog::CatalogAccess;
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
    colls: Mutex<HashMap<String, CachedCollection>>,
    /// Single-flight locks per namespace.
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl RoutingCache {
    pub fn database(&self, name: &str) -> Option<Database> {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    pub fn put_database(&self, db: Database) {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).insert(db.name.clone(), db);
    }

    pub fn collection(&self, ns: &str) -> Option<CachedCollection> {
        self.colls.lock().unwrap_or_else(|p| p.into_inner()).get(ns).cloned()
    }

    /// Drops everything (`flushRouterConfig: 1`).
    pub fn clear(&self) {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.colls.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Drops a database and its collections (`flushRouterConfig: "db"`, dropDatabase).
    pub fn forget_database(&self, db: &str) {
        self.dbs.lock().unwrap_or_else(|p| p.into_inner()).remove(db);
        let prefix = format!("{db}.");
        self.colls.lock().unwrap_or_else(|p| p.into_inner()).retain(|ns, _| !ns.starts_with(&prefix));
    }

    /// Drops one collection (`flushRouterConfig: "db.coll"`, drop).
    pub fn forget_collection(&self, ns: &str) {
        self.colls.lock().unwrap_or_else(|p| p.into_inner()).remove(ns);
    }

    fn lock_for(&self, ns: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.refreshing.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() > 10_000 {
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry(ns.to_owned()).or_default().clone()
    }

    /// The cached collection, loading it (whole) if absent.
    pub async fn load(&self, catalog: &CatalogAccess, ns: &str) -> Result<CachedCollection, CommandError> {
        if let Some(c) = self.collection(ns) {
            return Ok(c);
        }
        let lock = self.lock_for(ns);
        let _guard = lock.lock().await;
        if let Some(c) = self.collection(ns) {
            return Ok(c);
        }
        let loaded = full(catalog, ns).await?;
        self.colls.lock().unwrap_or_else(|p| p.into_inner()).insert(ns.to_owned(), loaded.clone());
        Ok(loaded)
    }

    /// Brings `ns` up to date after a shard said the router's version `seen` is stale
    /// (`None`: the router sent it as unsharded). Incremental when the cached table is still the
    /// one `seen` came from; a refresh that someone else finished meanwhile is reused.
    pub async fn refresh(
        &self,
        catalog: &CatalogAccess,
        ns: &str,
        seen: Option<ChunkVersion>,
    ) -> Result<CachedCollection, CommandError> {
        let lock = self.lock_for(ns);
        let _guard = lock.lock().await;
        let cached = self.collection(ns);
        let fresh = match &cached {
            Some(CachedCollection::Sharded(t)) if seen.is_some_and(|s| s != t.version) => {
                return Ok(CachedCollection::Sharded(t.clone()));
            }
            Some(CachedCollection::Sharded(t)) => {
                let since = RoutingSince { epoch: t.epoch, version: t.version };
                match catalog.routing_table(ns, Some(since)).await? {
                    RoutingAnswer::Changes(ChangedChunks::Changed { collection_version, chunks }) => {
                        let mut table = (**t).clone();
                        table.merge_changes(collection_version.version, &chunks);
                        tracing::debug!(%ns, changed = chunks.len(), version = %table.version, "routing refreshed");
                        CachedCollection::Sharded(Arc::new(table))
                    }
                    RoutingAnswer::Changes(ChangedChunks::NotSharded) => CachedCollection::Unsharded,
                    RoutingAnswer::Changes(ChangedChunks::EpochChanged { .. }) | RoutingAnswer::Full(_) => {
                        full(catalog, ns).await?
                    }
                }
            }
            _ => full(catalog, ns).await?,
        };
        self.colls.lock().unwrap_or_else(|p| p.into_inner()).insert(ns.to_owned(), fresh.clone());
        Ok(fresh)
    }
}

async fn full(catalog: &CatalogAccess, ns: &str) -> Result<CachedCollection, CommandError> {
    Ok(match catalog.routing_table(ns, None).await? {
        RoutingAnswer::Full(Some(t)) => CachedCollection::Sharded(Arc::new(t)),
        _ => CachedCollection::Unsharded,
    })
}
