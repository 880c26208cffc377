//! What this shard knows about sharding, and what it does with it:
//!
//! - its id in the catalog and a client of the config servers;
//! - the collection metadata cache ([`metadata`]): per namespace, unsharded or the chunks this
//!   shard owns, refreshed from the catalog single-flight, incrementally when it can;
//! - the shard-version check ([`check`](ShardingState::check), decided by [`version::decide`]):
//!   a versioned request runs only if the router's version matches this shard's, else StaleConfig;
//! - the ownership filter ([`ownership`]) that versioned requests apply to hide orphans;
//! - the database-version check ([`check_database`](ShardingState::check_database), decided by
//!   [`db_version::decide`]): a request for an unsharded collection runs only on the database's
//!   primary at the router's database version, else StaleDbVersion;
//! - migration critical sections that hold writes back ([`critical_section`]);
//! - the range deleter ([`range_deleter`]) that removes ranges this shard no longer owns, and the
//!   walk over a shard-key range it and migrations' clones share ([`range_scan`]);
//! - what the balancer asks about its ranges ([`load`]): sampled request load per shard-key
//!   span with the load split finder, and cached range sizes.
//!
//! ```text
//!  service: write_permit(ns) ── check(ns, version) ──> Option<Arc<Ownership>> ── exec (filters)
//!                                   \── refresh(ns) ── catalog.routing_table(ns, since)
//! ```
//!
//! Must not: decide placement (the catalog and routers do), or call the storage engine directly
//! (the range deleter goes through the [`Store`]).

pub mod critical_section;
pub mod db_version;
pub mod error;
pub mod load;
pub mod metadata;
pub mod ownership;
pub mod range_deleter;
pub mod range_scan;
pub mod version;

use std::sync::Arc;

use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_proto::catalog::ChunkBound;
use shoal_proto::shard::ShardVersion;
use shoal_proto::stale_config::{CollectionVersion, StaleConfig};

use crate::cursors::CursorManager;
use crate::error::ExecResult;
use crate::store::Store;
pub use critical_section::{CriticalSection, Gates, WRITE_WAIT_MAX, WritePermit};
pub use error::ShardingError;
pub use metadata::{CollectionMetadata, ShardedMetadata};
pub use ownership::Ownership;
pub use range_deleter::{RangeDeleter, RangeDeletion};
use version::Decision;

pub struct ShardingState {
    shard_id: String,
    catalog: Option<ConfigClient>,
    pub gates: Gates,
    metadata: metadata::MetadataCache,
    databases: db_version::DatabaseCache,
    pub range_deleter: RangeDeleter,
    /// Sampled request load of sharded collections (for `_shoalChunkStats`).
    pub load: load::LoadSampler,
    /// The last `_shoalChunkStats` sizes per namespace.
    pub sizes: load::sizes::SizeCache,
}

impl ShardingState {
    /// `config_servers` empty: a shard outside any cluster (tests, benchmarks); requests without a
    /// shard version work as before, versioned ones are refused.
    pub fn new(shard_id: impl Into<String>, config_servers: &[String]) -> Self {
        let catalog =
            (!config_servers.is_empty()).then(|| ConfigClient::new(config_servers.to_vec(), ClientSettings::default()));
        Self {
            shard_id: shard_id.into(),
            catalog,
            gates: Gates::default(),
            metadata: metadata::MetadataCache::default(),
            databases: db_version::DatabaseCache::default(),
            range_deleter: RangeDeleter::default(),
            load: load::LoadSampler::new(),
            sizes: load::sizes::SizeCache::default(),
        }
    }

    /// This shard's id in the catalog (`config.shards._id`).
    pub fn shard_id(&self) -> &str {
        &self.shard_id
    }

    pub fn catalog(&self) -> Option<&ConfigClient> {
        self.catalog.as_ref()
    }

    /// Checks a request's shard version against this shard's metadata of `ns`.
    ///
    /// `None` (an unversioned request): `Ok(None)`, nothing checked, nothing filtered. Otherwise
    /// `Ok(Some(ownership))` when the collection is sharded and the versions match (the request
    /// must hide documents outside it), `Ok(None)` when both sides agree it is unsharded, and
    /// StaleConfig (13388) when they disagree after at most one refresh.
    pub async fn check(&self, ns: &str, received: Option<&ShardVersion>) -> ExecResult<Option<Arc<Ownership>>> {
        let Some(received) = received else { return Ok(None) };
        let received = version::received(received)?;
        let catalog = self.catalog.as_ref().ok_or(ShardingError::NoConfigServers)?;
        let mut meta = self.metadata.get(ns);
        let mut refreshed = false;
        loop {
            let known = CollectionMetadata::known(meta.as_ref());
            match version::decide(&received, &known, refreshed) {
                Decision::Accept => return Ok(meta.and_then(|m| m.ownership())),
                Decision::Refresh => {
                    meta = Some(self.metadata.refresh(catalog, &self.shard_id, ns, true, true).await?);
                    refreshed = true;
                }
                Decision::Stale => {
                    let wanted = match known {
                        version::Known::Unknown => None,
                        version::Known::Unsharded => Some(CollectionVersion::Unsharded),
                        version::Known::Sharded(w) => Some(CollectionVersion::Sharded(w)),
                    };
                    let e = ShardingError::StaleConfig(Box::new(StaleConfig {
                        ns: ns.to_owned(),
                        received: received.into(),
                        wanted,
                        shard: self.shard_id.clone(),
                    }));
                    tracing::debug!(error = %e, "stale shard version");
                    return Err(e.into());
                }
            }
        }
    }

    /// Checks a router's database version of `db` against this shard's cached entry: runs only
    /// if this shard is the primary at that version; StaleDbVersion (249) otherwise, after at
    /// most one refresh when the router may know more. `None` (not sent): nothing checked.
    pub async fn check_database(
        &self,
        db: &str,
        received: Option<&shoal_proto::shard::DatabaseVersion>,
    ) -> ExecResult<()> {
        let Some(received) = received else { return Ok(()) };
        let received = db_version::received(received)?;
        let catalog = self.catalog.as_ref().ok_or(ShardingError::NoConfigServers)?;
        let mut known = self.databases.get(db);
        let mut refreshed = false;
        loop {
            match db_version::decide(&received, &known, refreshed) {
                Decision::Accept => return Ok(()),
                Decision::Refresh => {
                    known = self.databases.refresh(catalog, &self.shard_id, db, true).await?;
                    refreshed = true;
                }
                Decision::Stale => {
                    let wanted = match &known {
                        db_version::KnownDb::Present { version, .. } => Some(*version),
                        _ => None,
                    };
                    let e = ShardingError::StaleDbVersion {
                        db: db.to_owned(),
                        received: db_version::shown(Some(&received)),
                        wanted: db_version::shown(wanted.as_ref()),
                    };
                    tracing::debug!(error = %e, "stale database version");
                    return Err(e.into());
                }
            }
        }
    }

    /// Reloads `db`'s entry (linearizable): movePrimary calls it after committing.
    pub async fn refresh_database(&self, db: &str) -> ExecResult<db_version::KnownDb> {
        let catalog = self.catalog.as_ref().ok_or(ShardingError::NoConfigServers)?;
        Ok(self.databases.refresh(catalog, &self.shard_id, db, false).await?)
    }

    /// Drops `db`'s cached entry; the next request carrying a database version reloads it.
    pub fn forget_database_version(&self, db: &str) {
        self.databases.forget(db);
    }

    /// Installs a database entry without asking the catalog (tests).
    pub fn install_database(&self, db: &str, known: db_version::KnownDb) {
        self.databases.install(db, known);
    }

    /// Reloads `ns` from the catalog with a linearizable read, so a change committed before the
    /// call (a migration commit) is seen. Migration code calls it after committing.
    pub async fn refresh(&self, ns: &str) -> ExecResult<()> {
        let catalog = self.catalog.as_ref().ok_or(ShardingError::NoConfigServers)?;
        self.metadata.refresh(catalog, &self.shard_id, ns, true, false).await?;
        Ok(())
    }

    /// Drops what is cached for `ns` (after the collection or its database was dropped here); the
    /// next versioned request loads it again.
    pub fn forget(&self, ns: &str) {
        self.metadata.forget(ns);
    }

    /// [`Self::forget`] for every collection of `db` (after dropDatabase).
    pub fn forget_database(&self, db: &str) {
        self.metadata.forget_database(db);
        self.databases.forget(db);
    }

    /// The cached metadata of `ns`, if loaded.
    pub fn metadata(&self, ns: &str) -> Option<CollectionMetadata> {
        self.metadata.get(ns)
    }

    /// Installs metadata without asking the catalog (tests; a shard outside a cluster).
    pub fn install_metadata(&self, ns: &str, meta: CollectionMetadata) {
        self.metadata.install(ns, meta);
    }

    /// Persists a range deletion and queues it for the background deleter; returns the task id.
    /// Cursors and versioned reads on `task.ns` open now finish before anything is deleted, and
    /// parts of the range this shard owns again by then are kept. The donor schedules its range
    /// after a migration commits; a recipient schedules its range when a migration aborts.
    pub async fn schedule_range_deletion(
        &self,
        store: &Arc<Store>,
        cursors: &CursorManager,
        task: RangeDeletion,
    ) -> ExecResult<u64> {
        self.range_deleter.schedule(store, task, cursors.pin_seq()).await
    }

    /// Waits until no scheduled deletion of `ns` overlaps `[min, max)` (moveChunk's
    /// `_waitForDelete`). Unbounded: callers that need a limit wrap it in a timeout.
    pub async fn wait_for_range_deletion(&self, ns: &str, min: &ChunkBound, max: &ChunkBound) {
        self.range_deleter.wait_for(ns, min, max).await
    }

    /// A scheduled deletion overlapping `[min, max)` of `ns` that is held back by open reads
    /// (see `RangeDeleter::held_by_reads`).
    pub fn range_deletion_held_by_reads(
        &self,
        cursors: &CursorManager,
        ns: &str,
        min: &ChunkBound,
        max: &ChunkBound,
    ) -> Option<(u64, ChunkBound, ChunkBound)> {
        self.range_deleter.held_by_reads(cursors, ns, min, max)
    }

    /// Range deletions scheduled and not finished (for `serverStatus`-like reporting).
    pub fn range_deletions_pending(&self) -> usize {
        self.range_deleter.pending_count()
    }

    /// The `shardingState` command's reply, shaped like MongoDB's: whether the shard is in a
    /// cluster, its name, the shard version of each sharded collection it has metadata for
    /// (`Timestamp(major, minor)`), plus the number of pending range deletions.
    pub fn status(&self) -> bson::Document {
        let mut versions = bson::Document::new();
        for (ns, meta) in self.metadata.loaded() {
            if let CollectionMetadata::Sharded(m) = meta {
                let v = m.shard_version().version;
                versions.insert(ns, bson::Timestamp { time: v.major, increment: v.minor });
            }
        }
        bson::doc! {
            "enabled": self.catalog.is_some(),
            "shardName": &self.shard_id,
            "versions": versions,
            "rangeDeletionsPending": self.range_deletions_pending() as i64,
        }
    }
}
