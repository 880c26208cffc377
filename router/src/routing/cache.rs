//! The router's routing cache: databases (primary shard) and per-collection routing tables,
//! loaded lazily from the catalog and refreshed incrementally (the chunks changed since the
//! cached version; a full reload only on an epoch change) when a shard answers StaleConfig, with
//! the cluster client's loader (`shoal_cluster::routing`). One refresh per namespace runs at a
//! time (`shoal_cluster::single_flight`); callers arriving during it wait and reuse it. Every
//! read of a routing table from the catalog (first load, incremental or full refresh) counts in
//! `routing_refreshes_total` ([`RoutingCache::refreshes`], registered with the router's metrics).
//!
//! Must not: choose shards for requests (see `target`) or talk to shards.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shoal_cluster::routing::{self, RoutingSource};
use shoal_cluster::single_flight::SingleFlight;
use shoal_proto::catalog::{ChunkVersion, Database, RoutingTable};
use shoal_proto::stale_config::{CollectionVersion, StaleConfig};
use shoal_telemetry::IntCounter;

use crate::error::CommandError;

/// A cached collection: sharded (its table) or known unsharded.
#[derive(Clone, Debug)]
pub enum CachedCollection {
    Unsharded,
    Sharded(Arc<RoutingTable>),
}

pub struct RoutingCache {
    dbs: Mutex<HashMap<String, Database>>,
    colls: SingleFlight<CachedCollection>,
    refreshes: IntCounter,
}

impl Default for RoutingCache {
    fn default() -> Self {
        Self { dbs: Mutex::default(), colls: SingleFlight::default(), refreshes: refreshes_counter() }
    }
}

/// `routing_refreshes_total`, not yet in a registry: the cache is built before the router's
/// metrics take it (`http::register_pulled`).
#[allow(clippy::expect_used, reason = "a constant name and help that are valid for Prometheus")]
fn refreshes_counter() -> IntCounter {
    IntCounter::new(
        format!("{}routing_refreshes_total", shoal_telemetry::PREFIX),
        "Routing tables read from the config servers (first loads and refreshes after a stale answer)",
    )
    .expect("a valid metric name")
}

impl RoutingCache {
    /// The counter of catalog reads of routing tables (a handle sharing it).
    pub fn refreshes(&self) -> &IntCounter {
        &self.refreshes
    }

    /// Every collection cached now, by namespace.
    pub fn loaded(&self) -> Vec<(String, CachedCollection)> {
        self.colls.loaded()
    }

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
        self.colls.get_or_load(ns, || fetch(catalog, ns, None, &self.refreshes)).await
    }

    /// Brings `ns` up to date after a shard answered a request for it stale, as [`step`] decides
    /// from what the shard said. One refresh per namespace at a time: a caller that waited for
    /// another's finds that refresh's table cached, and [`step`] keeps it if it is what the shard
    /// wants.
    pub async fn refresh(
        &self,
        catalog: &impl RoutingSource,
        ns: &str,
        stale: Stale<'_>,
    ) -> Result<CachedCollection, CommandError> {
        self.colls
            .refresh(ns, false, |cached| async move {
                match (step(cached.as_ref(), &stale), cached) {
                    (Step::Keep, Some(c)) => Ok(c),
                    (Step::Incremental, Some(CachedCollection::Sharded(t))) => {
                        fetch(catalog, ns, Some(&t), &self.refreshes).await
                    }
                    _ => fetch(catalog, ns, None, &self.refreshes).await,
                }
            })
            .await
    }
}

/// What a shard's stale answer tells the routing cache.
#[derive(Clone, Copy, Debug)]
pub enum Stale<'a> {
    /// A StaleConfig with its versions: `shard` has `wanted` of the namespace.
    Config(&'a StaleConfig),
    /// An answer without versions (StaleDbVersion, or a StaleConfig that names none): all the
    /// router knows is the collection version it routed with (`None`: as unsharded).
    Seen(Option<ChunkVersion>),
}

/// What a refresh after a stale answer does with the cached entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The cache already has what the shard wants (another request refreshed it): no catalog read.
    Keep,
    /// Same collection generation: ask the catalog for the chunks changed since the cached version.
    Incremental,
    /// No cached table of the shard's generation: load the collection whole.
    Reload,
}

/// The refresh a stale answer calls for, given what is cached now. With the shard's versions the
/// cache is kept only if it already holds exactly the version the shard compares against (same
/// generation and major for that shard, or unsharded on both sides); anything else asks the
/// catalog, incrementally when the generation is the cached one. A `wanted` the shard does not
/// know leaves only the catalog to ask.
pub fn step(cached: Option<&CachedCollection>, stale: &Stale<'_>) -> Step {
    use CachedCollection::{Sharded, Unsharded};
    let Some(cached) = cached else { return Step::Reload };
    match (stale, cached) {
        (Stale::Seen(seen), Sharded(t)) if seen.is_some_and(|s| s != t.version) => Step::Keep,
        (Stale::Seen(_), Sharded(_)) => Step::Incremental,
        (Stale::Seen(_), Unsharded) => Step::Reload,
        (Stale::Config(s), cached) => {
            match (s.wanted, cached) {
                (Some(CollectionVersion::Unsharded), Unsharded) => Step::Keep,
                (Some(CollectionVersion::Sharded(w)), Sharded(t))
                    if t.epoch == w.epoch && t.timestamp == w.timestamp =>
                {
                    if t.shard_version(&s.shard).major == w.version.major { Step::Keep } else { Step::Incremental }
                }
                (None, Sharded(_)) => Step::Incremental,
                _ => Step::Reload,
            }
        }
    }
}

async fn fetch(
    catalog: &impl RoutingSource,
    ns: &str,
    cached: Option<&RoutingTable>,
    refreshes: &IntCounter,
) -> Result<CachedCollection, CommandError> {
    refreshes.inc();
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
        assert_eq!(cache.refreshes().get(), 1);
        assert_eq!(cache.loaded().len(), 1);

        // A shard said 1|0 is stale: the router asks for the changes since 1|0.
        let newer = Fake { major: 2, asked: Mutex::new(Vec::new()) };
        let got = cache.refresh(&newer, "db.c", Stale::Seen(Some(ChunkVersion::new(1, 0)))).await.unwrap();
        assert_eq!(version_of(&got), Some(ChunkVersion::new(2, 0)));
        let since = newer.asked.lock().unwrap().clone();
        assert_eq!(since, vec![Some(RoutingSince { epoch: Epoch([1; 12]), version: ChunkVersion::new(1, 0) })]);

        // Another request that also saw 1|0 finds 2|0 cached and does not ask again.
        let got = cache.refresh(&newer, "db.c", Stale::Seen(Some(ChunkVersion::new(1, 0)))).await.unwrap();
        assert_eq!(version_of(&got), Some(ChunkVersion::new(2, 0)));
        assert_eq!(newer.asked.lock().unwrap().len(), 1);
        assert_eq!(cache.refreshes().get(), 2, "a kept entry reads nothing and counts nothing");

        cache.forget_database("db");
        assert!(cache.collection("db.c").is_none());
    }

    fn stale(shard: &str, wanted: Option<CollectionVersion>) -> StaleConfig {
        StaleConfig { ns: "db.c".into(), received: CollectionVersion::Unsharded, wanted, shard: shard.into() }
    }

    fn wanted(epoch: u8, secs: u32, major: u32) -> Option<CollectionVersion> {
        Some(CollectionVersion::Sharded(shoal_proto::catalog::PlacementVersion {
            epoch: Epoch([epoch; 12]),
            timestamp: Timestamp { secs, inc: 0 },
            version: ChunkVersion::new(major, 0),
        }))
    }

    #[test]
    fn the_shards_wanted_version_decides_the_refresh() {
        let sharded = CachedCollection::Sharded(Arc::new(table(3)));
        let step_for = |cached: &CachedCollection, s: &StaleConfig| step(Some(cached), &Stale::Config(s));
        // The cache already has what s0 wants (another request refreshed): no catalog read; any
        // minor is the same to the shard.
        assert_eq!(step_for(&sharded, &stale("s0", wanted(1, 1, 3))), Step::Keep);
        // s0 is at another major of this generation: the changes since the cached version.
        assert_eq!(step_for(&sharded, &stale("s0", wanted(1, 1, 4))), Step::Incremental);
        // s1 owns nothing in the cached table (0|0) but has chunks now.
        assert_eq!(step_for(&sharded, &stale("s1", wanted(1, 1, 4))), Step::Incremental);
        // s0 gave its last chunk away (0|0) while the cache still places chunks there.
        assert_eq!(step_for(&sharded, &stale("s0", wanted(1, 1, 0))), Step::Incremental);
        // Another generation (dropped and sharded again), or unsharded since: load it whole.
        assert_eq!(step_for(&sharded, &stale("s0", wanted(2, 9, 1))), Step::Reload);
        assert_eq!(step_for(&sharded, &stale("s0", Some(CollectionVersion::Unsharded))), Step::Reload);
        // The shard could not say: only the catalog can.
        assert_eq!(step_for(&sharded, &stale("s0", None)), Step::Incremental);
        let unsharded = CachedCollection::Unsharded;
        assert_eq!(step_for(&unsharded, &stale("s0", wanted(1, 1, 1))), Step::Reload);
        assert_eq!(step_for(&unsharded, &stale("s0", Some(CollectionVersion::Unsharded))), Step::Keep);
        assert_eq!(step_for(&unsharded, &stale("s0", None)), Step::Reload);
        assert_eq!(step(None, &Stale::Config(&stale("s0", wanted(1, 1, 3)))), Step::Reload);
    }

    #[test]
    fn without_versions_the_version_routed_with_decides() {
        let sharded = CachedCollection::Sharded(Arc::new(table(3)));
        assert_eq!(step(Some(&sharded), &Stale::Seen(Some(ChunkVersion::new(2, 0)))), Step::Keep);
        assert_eq!(step(Some(&sharded), &Stale::Seen(Some(ChunkVersion::new(3, 0)))), Step::Incremental);
        assert_eq!(step(Some(&sharded), &Stale::Seen(None)), Step::Incremental);
        assert_eq!(step(Some(&CachedCollection::Unsharded), &Stale::Seen(None)), Step::Reload);
        assert_eq!(step(None, &Stale::Seen(None)), Step::Reload);
    }

    #[tokio::test]
    async fn a_typed_stale_config_reads_the_catalog_only_when_the_cache_lacks_the_wanted_version() {
        let cache = RoutingCache::default();
        let fake = Fake { major: 1, asked: Mutex::new(Vec::new()) };
        cache.load(&fake, "db.c").await.unwrap();
        let newer = Fake { major: 2, asked: Mutex::new(Vec::new()) };
        let got = cache.refresh(&newer, "db.c", Stale::Config(&stale("s0", wanted(1, 1, 2)))).await.unwrap();
        assert_eq!(version_of(&got), Some(ChunkVersion::new(2, 0)));
        // A second request refused by the same shard finds 2|0 cached: what s0 wants.
        let got = cache.refresh(&newer, "db.c", Stale::Config(&stale("s0", wanted(1, 1, 2)))).await.unwrap();
        assert_eq!(version_of(&got), Some(ChunkVersion::new(2, 0)));
        assert_eq!(newer.asked.lock().unwrap().len(), 1, "one catalog read for both");
    }
}
