//! Routing: where a namespace's data lives, as this router last learnt it from the cluster
//! catalog ([`Placement`]).
//!
//! Owns: the channel pools by shard id ([`pool`]), the routing cache ([`cache`]) and following
//! catalog changes ([`follow`]), read preferences and the choice of a replica-group member for a
//! read ([`read_pref`], pure) with the members' channels and status ([`members`]), the shard and
//! database versions a request carries ([`versioned`]), the refresh after a StaleConfig /
//! StaleDbVersion ([`is_stale`], [`on_stale`]; the retry loop around it is
//! `exec::call::with_placement`) and the targeting counters `serverStatus` shows. Without config
//! servers everything goes to the legacy `--shard` pool, unversioned.
//!
//! Must not: choose the shards of a request (`exec::target` does), call shards, shape client
//! replies or evaluate queries.

pub mod cache;
pub mod follow;
pub mod members;
pub mod pool;
pub mod read_pref;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ClusterCatalogView, Command, Database, DatabaseVersion, RoutingTable, Shard, ShardId};
use shoal_proto::config::CatalogPart;
use shoal_proto::shard::{self as wire, CommandRequest, ShardVersion};

use crate::error::CommandError;
use crate::exec::call::channels::ShardPool;
use crate::state::RouterState;
use cache::CachedCollection;
use pool::LEGACY_SHARD;

/// Attempts of a request whose shard keeps answering StaleConfig.
pub const STALE_ATTEMPTS_MAX: u32 = 10;
/// First backoff after a StaleConfig; doubles per attempt up to [`STALE_BACKOFF_MAX`].
pub const STALE_BACKOFF: Duration = Duration::from_millis(5);
pub const STALE_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Where a namespace's documents are.
#[derive(Clone, Debug)]
pub enum Placement {
    /// The database does not exist: reads answer empty.
    NoDatabase,
    /// On one shard (the database's primary at `version`, or the legacy shard: no version).
    Unsharded {
        shard: ShardId,
        version: Option<DatabaseVersion>,
    },
    Sharded(Arc<RoutingTable>),
}

impl Placement {
    /// The version a request to `shard` carries: none in legacy mode, an empty epoch for
    /// unsharded collections, the shard's version in the cached table otherwise.
    pub fn version_for(&self, shard: &str) -> Option<ShardVersion> {
        match self {
            Placement::NoDatabase => None,
            Placement::Unsharded { shard, .. } if shard == LEGACY_SHARD => None,
            Placement::Unsharded { .. } => Some(ShardVersion::default()),
            Placement::Sharded(t) => {
                let v = t.shard_version(shard);
                Some(ShardVersion {
                    epoch: Bytes::copy_from_slice(&t.epoch.0),
                    timestamp_secs: t.timestamp.secs,
                    timestamp_inc: t.timestamp.inc,
                    major: v.major,
                    minor: v.minor,
                })
            }
        }
    }

    /// The database version a request carries: the one the primary was read at, for an
    /// unsharded namespace; none otherwise.
    pub fn database_version(&self) -> Option<wire::DatabaseVersion> {
        match self {
            Placement::Unsharded { version: Some(v), .. } => Some(wire::DatabaseVersion {
                uuid: v.uuid.as_bytes().to_vec().into(),
                timestamp_secs: v.timestamp.secs,
                timestamp_inc: v.timestamp.inc,
                last_mod: v.last_mod,
            }),
            _ => None,
        }
    }

    /// Every shard that may hold the namespace's documents.
    pub fn all_shards(&self) -> BTreeSet<ShardId> {
        match self {
            Placement::NoDatabase => BTreeSet::new(),
            Placement::Unsharded { shard, .. } => BTreeSet::from([shard.clone()]),
            Placement::Sharded(t) => t.chunks.iter().map(|c| c.shard.clone()).collect(),
        }
    }
}

/// Reads `parts` of the catalog and its shards (admin commands and `config.*` reads),
/// refreshing the shard pools from them.
pub async fn read_view(state: &RouterState, parts: &[CatalogPart]) -> Result<ClusterCatalogView, CommandError> {
    let view = state.catalog.view(&[parts, &[CatalogPart::Shards]].concat()).await?;
    state.shards.update(view.shards().values());
    Ok(view)
}

/// [`refresh_shards`] from any config server's applied catalog, without confirming it with a
/// quorum: answered while the config service elects a leader, for a request waiting on a
/// failover (a catalog a little behind only means another pause and read).
pub async fn refresh_shards_applied(state: &RouterState) -> Result<Vec<Shard>, CommandError> {
    let (shards, _) = state.catalog.shards_applied().await?;
    state.shards.update(&shards);
    Ok(shards)
}

/// Reads every shard, refreshing the shard pools from them.
pub async fn refresh_shards(state: &RouterState) -> Result<Vec<Shard>, CommandError> {
    let shards = state.catalog.shards().await?;
    state.shards.update(&shards);
    Ok(shards)
}

/// Every shard of the cluster (the legacy one without config servers).
pub async fn every_shard(state: &RouterState) -> Result<Vec<String>, CommandError> {
    if !state.catalog.is_configured() {
        return Ok(vec![LEGACY_SHARD.to_owned()]);
    }
    Ok(refresh_shards(state).await?.into_iter().map(|s| s.id).collect())
}

/// The pool of `shard`, reading the shards once if it is not known yet.
pub async fn pool(state: &RouterState, shard: &str) -> Result<Arc<ShardPool>, CommandError> {
    if let Some(p) = state.shards.get(shard) {
        return Ok(p);
    }
    refresh_shards(state).await?;
    state.shards.get(shard).ok_or_else(|| pool::unknown_shard(shard))
}

/// The database, from the cache or the catalog; created (on the shard with the fewest
/// databases, ties by id) when `create` and the catalog does not have it.
async fn database(state: &RouterState, name: &str, create: bool) -> Result<Option<Database>, CommandError> {
    if let Some(db) = state.routing.database(name) {
        return Ok(Some(db));
    }
    if let Some(db) = state.catalog.database(name).await? {
        state.routing.put_database(db.clone());
        return Ok(Some(db));
    }
    if !create {
        return Ok(None);
    }
    let (shards, databases) = state.catalog.shards_and_databases().await?;
    state.shards.update(&shards);
    if let Some(db) = databases.iter().find(|d| d.name == name) {
        state.routing.put_database(db.clone());
        return Ok(Some(db.clone()));
    }
    let primary = least_loaded_shard(&shards, &databases)?;
    let command = Command::CreateDatabase { name: name.to_owned(), primary, uuid: uuid::Uuid::new_v4() };
    match state.catalog.write(&command).await? {
        shoal_proto::catalog::Reply::Database(db) => {
            tracing::info!(db = %name, primary = %db.primary, "database created implicitly");
            state.routing.put_database(db.clone());
            Ok(Some(db))
        }
        _ => state.catalog.database(name).await,
    }
}

/// Where a new database goes: the active shard that is primary for the fewest databases, ties by
/// id (MongoDB picks the least loaded).
pub fn least_loaded_shard(shards: &[Shard], databases: &[Database]) -> Result<ShardId, CommandError> {
    shards
        .iter()
        .filter(|s| !s.is_draining())
        .min_by_key(|s| (databases.iter().filter(|d| d.primary == s.id).count(), s.id.clone()))
        .map(|s| s.id.clone())
        .ok_or_else(|| CommandError::new(ErrorCode::ShardNotFound, "no shards in the cluster: run addShard first"))
}

/// Where `db.coll` lives; `create`: a write, which creates a missing database.
pub async fn placement(state: &RouterState, db: &str, coll: &str, create: bool) -> Result<Placement, CommandError> {
    if !state.catalog.is_configured() {
        return Ok(Placement::Unsharded { shard: LEGACY_SHARD.into(), version: None });
    }
    let ns = format!("{db}.{coll}");
    if let CachedCollection::Sharded(t) = state.routing.load(&state.catalog, &ns).await? {
        return Ok(Placement::Sharded(t));
    }
    Ok(match database(state, db, create).await? {
        Some(d) => Placement::Unsharded { shard: d.primary, version: Some(d.version) },
        None => Placement::NoDatabase,
    })
}

/// StaleConfig (the collection's placement changed) or StaleDbVersion (the database's primary
/// moved): both are retried after [`on_stale`].
pub fn is_stale(e: &CommandError) -> bool {
    e.is(ErrorCode::StaleConfig) || e.is(ErrorCode::StaleDbVersion)
}

/// After a StaleConfig or StaleDbVersion `e` from a request sent with `placement`: refresh the
/// namespace, then wait a little, longer on each `attempt`. A StaleConfig names the shard's
/// versions and the refresh is decided from them ([`cache::step`]); the database entry is not in
/// question then. Otherwise the database entry is dropped (re-read on the retry) and the refresh
/// goes by the version the request was routed with.
pub async fn on_stale(
    state: &RouterState,
    db: &str,
    coll: &str,
    placement: &Placement,
    e: &CommandError,
    attempt: u32,
) {
    state.counters.routing.stale_retry(&e.code_name);
    let ns = format!("{db}.{coll}");
    let stale = match e.stale_config.as_deref() {
        Some(s) if s.ns == ns => cache::Stale::Config(s),
        _ => {
            state.routing.forget_database(db);
            if !matches!(placement, Placement::Sharded(_)) {
                state.routing.forget_collection(&ns);
            }
            cache::Stale::Seen(match placement {
                Placement::Sharded(t) => Some(t.version),
                _ => None,
            })
        }
    };
    if let Err(e) = state.routing.refresh(&state.catalog, &ns, stale).await {
        tracing::warn!(%ns, error = %e, "routing refresh failed");
    }
    let backoff = STALE_BACKOFF.saturating_mul(1 << attempt.min(10)).min(STALE_BACKOFF_MAX);
    tracing::info!(%ns, attempt, ?backoff, error = %e.errmsg, "shard answered stale: refreshed routing, retrying");
    tokio::time::sleep(backoff).await;
}

/// `request` for `shard` under `placement`.
pub fn versioned(mut request: CommandRequest, placement: &Placement, shard: &str) -> CommandRequest {
    request.shard_version = placement.version_for(shard);
    request.database_version = placement.database_version();
    request
}

/// Counters for `serverStatus.shardingStatistics`.
#[derive(Default)]
pub struct TargetingStats {
    inner: Mutex<(u64, u64, BTreeMap<String, u64>)>,
}

impl TargetingStats {
    /// Records one client operation sent to `shards`.
    pub fn record<'a>(&self, shards: impl IntoIterator<Item = &'a ShardId>) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        for s in shards {
            // The legacy single shard has no id to report.
            if s != LEGACY_SHARD {
                *g.2.entry(s.clone()).or_default() += 1;
            }
            n += 1;
        }
        if n > 1 {
            g.1 += 1;
        } else {
            g.0 += 1;
        }
    }

    /// `{targeted, scatter, perShard: {id: n}}`.
    pub fn to_document(&self) -> bson::Document {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let per: bson::Document = g.2.iter().map(|(k, v)| (k.clone(), bson::Bson::Int64(*v as i64))).collect();
        bson::doc! { "targeted": g.0 as i64, "scatter": g.1 as i64, "perShard": per }
    }
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::{Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, Timestamp};

    use super::*;

    fn table() -> RoutingTable {
        let chunk = |min: ChunkBound, max: ChunkBound, shard: &str, minor: u32| Chunk {
            min,
            max,
            shard: shard.into(),
            version: ChunkVersion::new(2, minor),
            history: Vec::new(),
            jumbo: false,
            on_current_shard_since: Timestamp::default(),
        };
        let mid = ChunkBound::Key(shoal_query::keystring::encode(&bson::Bson::Int32(0)));
        RoutingTable {
            ns: "d.c".into(),
            uuid: uuid::Uuid::nil(),
            epoch: Epoch([7; 12]),
            timestamp: Timestamp { secs: 5, inc: 1 },
            key: KeyPattern::range(&["a"]),
            unique: false,
            version: ChunkVersion::new(2, 1),
            chunks: vec![chunk(ChunkBound::Min, mid.clone(), "s0", 0), chunk(mid, ChunkBound::Max, "s1", 1)],
        }
    }

    #[test]
    fn versions_sent_to_shards() {
        let sharded = Placement::Sharded(Arc::new(table()));
        let v = sharded.version_for("s1").expect("versioned");
        assert_eq!((v.epoch.as_ref(), v.timestamp_secs, v.major, v.minor), (&[7u8; 12][..], 5, 2, 1));
        let none = sharded.version_for("s9").expect("versioned");
        assert_eq!((none.major, none.minor), (0, 0));
        let db_version = DatabaseVersion {
            uuid: uuid::Uuid::from_bytes([3; 16]),
            timestamp: Timestamp { secs: 4, inc: 0 },
            last_mod: 2,
        };
        let unsharded = Placement::Unsharded { shard: "s0".into(), version: Some(db_version) };
        assert!(unsharded.version_for("s0").expect("versioned").epoch.is_empty());
        let sent = unsharded.database_version().expect("a database version");
        assert_eq!((sent.uuid.as_ref(), sent.timestamp_secs, sent.last_mod), (&[3u8; 16][..], 4, 2));
        assert!(sharded.database_version().is_none(), "sharded requests carry shard versions only");
        let legacy = Placement::Unsharded { shard: LEGACY_SHARD.into(), version: None };
        assert!(legacy.version_for(LEGACY_SHARD).is_none() && legacy.database_version().is_none());
        assert_eq!(crate::exec::target::shards(&sharded, &bson::doc! { "a": 5 }), BTreeSet::from(["s1".to_string()]));
        assert_eq!(crate::exec::target::shards(&sharded, &bson::doc! { "b": 5 }).len(), 2);
    }

    #[test]
    fn stale_db_version_is_retried_like_stale_config() {
        assert!(is_stale(&CommandError::new(ErrorCode::StaleDbVersion, "moved")));
        assert!(is_stale(&CommandError::new(ErrorCode::StaleConfig, "moved")));
        assert!(!is_stale(&CommandError::new(ErrorCode::ShardNotFound, "gone")));
    }

    #[test]
    fn stats_count_targeted_and_scatter() {
        let stats = TargetingStats::default();
        stats.record([&"s0".to_string()]);
        stats.record([&"s0".to_string(), &"s1".to_string()]);
        stats.record([&LEGACY_SHARD.to_string()]);
        let d = stats.to_document();
        assert_eq!((d.get_i64("targeted").ok(), d.get_i64("scatter").ok()), (Some(2), Some(1)));
        assert_eq!(d.get_document("perShard").expect("perShard"), &bson::doc! { "s0": 2i64, "s1": 1i64 });
    }
}
