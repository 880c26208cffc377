//! Databases and sharded collections: `CreateDatabase`, `DropDatabase`, `MovePrimary`,
//! `ShardCollection` (with its initial chunks), `DropCollection`, `ConfigureCollection`.
//!
//! Invariants: a database's primary is an existing shard; a sharded collection's database exists;
//! a new collection's chunks cover `Min..Max` with versions `1|0, 1|1, ...` in key order (MongoDB's
//! initial split policy), so they are distinct and the collection version is the last one.
//! Creating something that already exists the same way is a no-op, so a retried proposal is safe.

use std::collections::{BTreeMap, BTreeSet};

use shoal_proto::Namespace;
use shoal_proto::namespace::validate_db;
use uuid::Uuid;

use super::CatalogError;
use super::changelog::LogDraft;
use super::{
    Chunk, ChunkBound, ChunkHistoryEntry, ChunkVersion, Collection, Database, DatabaseVersion, Epoch, KeyPattern,
    ShardId,
};
use super::{ClusterCatalog, Outcome};
use super::{InitialChunks, Reply};

/// Chunks `ShardCollection` may create at once. MongoDB caps `numInitialChunks` at 8192 per
/// shard; a bound on the total keeps one Raft entry small.
pub const INITIAL_CHUNKS_MAX: usize = 8192;

/// Databases that live on the config service itself or on each node.
const RESERVED_DATABASES: [&str; 3] = ["admin", "config", "local"];

/// The first version of every collection's chunks.
const FIRST_MAJOR: u32 = 1;

impl ClusterCatalog {
    /// An active shard, or why it cannot take new data.
    fn target_shard(&self, id: &str) -> Result<(), CatalogError> {
        match self.shards.get(id) {
            None => Err(CatalogError::ShardNotFound { shard: id.to_owned() }),
            Some(s) if s.is_draining() => Err(CatalogError::ShardDraining { shard: id.to_owned() }),
            Some(_) => Ok(()),
        }
    }

    pub(super) fn create_database(
        &mut self,
        name: &str,
        primary: &str,
        uuid: Uuid,
        now: u64,
    ) -> Result<Outcome, CatalogError> {
        if validate_db(name).is_err() {
            return Err(CatalogError::InvalidNamespace { ns: name.to_owned() });
        }
        if RESERVED_DATABASES.contains(&name) {
            return Err(CatalogError::ReservedDatabase { db: name.to_owned() });
        }
        if let Some(db) = self.databases.get(name) {
            if db.primary == primary {
                return Ok(Outcome::unchanged(Reply::Database(db.clone())));
            }
            return Err(CatalogError::DatabaseExists { db: name.to_owned(), primary: db.primary.clone() });
        }
        self.target_shard(primary)?;
        let version = DatabaseVersion { uuid, timestamp: self.clock.next_timestamp(now), last_mod: 1 };
        let db = Database { name: name.to_owned(), primary: primary.to_owned(), version };
        self.databases.insert(name.to_owned(), db.clone());
        let log = LogDraft::new("createDatabase", name).with("primary", primary);
        Ok(Outcome::logged(Reply::Database(db), log))
    }

    /// Drops the database with its sharded collections and their zone ranges.
    pub(super) fn drop_database(&mut self, name: &str) -> Result<Outcome, CatalogError> {
        if self.databases.remove(name).is_none() {
            return Ok(Outcome::unchanged(Reply::Dropped { existed: false }));
        }
        let prefix = format!("{name}.");
        let dropped: Vec<String> = self.collections.keys().filter(|ns| ns.starts_with(&prefix)).cloned().collect();
        for ns in &dropped {
            self.collections.remove(ns);
        }
        self.zone_ranges.retain(|ns, _| !ns.starts_with(&prefix));
        let names = dropped.into_iter().map(Into::into).collect();
        let log = LogDraft::new("dropDatabase", name).with("collections", super::Detail::List(names));
        Ok(Outcome::logged(Reply::Dropped { existed: true }, log))
    }

    pub(super) fn move_primary(&mut self, name: &str, to: &str) -> Result<Outcome, CatalogError> {
        let Some(db) = self.databases.get(name) else {
            return Err(CatalogError::DatabaseNotFound { db: name.to_owned() });
        };
        if db.primary == to {
            return Ok(Outcome::unchanged(Reply::Database(db.clone())));
        }
        self.target_shard(to)?;
        let Some(last_mod) = db.version.last_mod.checked_add(1) else {
            return Err(CatalogError::VersionOverflow { ns: name.to_owned() });
        };
        let log = LogDraft::new("movePrimary", name).with("from", db.primary.clone()).with("to", to);
        let mut db = db.clone();
        db.primary = to.to_owned();
        db.version.last_mod = last_mod;
        self.databases.insert(name.to_owned(), db.clone());
        Ok(Outcome::logged(Reply::Database(db), log))
    }

    #[allow(clippy::too_many_arguments)] // one per field of the command
    pub(super) fn shard_collection(
        &mut self,
        ns: &str,
        uuid: Uuid,
        epoch: Epoch,
        key: &KeyPattern,
        unique: bool,
        initial: &InitialChunks,
        now: u64,
    ) -> Result<Outcome, CatalogError> {
        let Ok(parsed) = Namespace::parse(ns) else {
            return Err(CatalogError::InvalidNamespace { ns: ns.to_owned() });
        };
        let Some(db) = self.databases.get(&parsed.db) else {
            return Err(CatalogError::DatabaseNotFound { db: parsed.db });
        };
        if let Some(reason) = key.problem() {
            return Err(CatalogError::bad_value("shard key", reason));
        }
        if unique && key.is_hashed() {
            return Err(CatalogError::bad_value("shard key", "a hashed shard key cannot be unique"));
        }
        if let Some(existing) = self.collections.get(ns) {
            if existing.key == *key && existing.unique == unique {
                let version = existing.placement(existing.version);
                return Ok(Outcome::unchanged(Reply::CollectionSharded { uuid: existing.uuid, version }));
            }
            return Err(CatalogError::AlreadySharded { ns: ns.to_owned() });
        }
        if epoch == Epoch::ZERO {
            return Err(CatalogError::bad_value("epoch", "the all-zero epoch means unsharded"));
        }
        // Cut points and the owner of each piece, in key order.
        let (points, owners): (&[Vec<u8>], Vec<&ShardId>) = match initial {
            InitialChunks::Single => (&[], vec![&db.primary]),
            InitialChunks::Distributed { split_points, shards } => {
                if shards.is_empty() {
                    return Err(CatalogError::bad_value("initial chunks", "no shards to distribute over"));
                }
                if shards.iter().collect::<BTreeSet<_>>().len() != shards.len() {
                    return Err(CatalogError::bad_value("initial chunks", "a shard is listed twice"));
                }
                if split_points.len() >= INITIAL_CHUNKS_MAX {
                    return Err(CatalogError::limit("initial chunks", INITIAL_CHUNKS_MAX));
                }
                if split_points.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(CatalogError::bad_value("initial chunks", "split points are not sorted and distinct"));
                }
                (split_points, (0..=split_points.len()).map(|i| &shards[i % shards.len()]).collect())
            }
        };
        for shard in owners.iter().collect::<BTreeSet<_>>() {
            self.target_shard(shard)?;
        }
        // Validated; build and insert.
        let timestamp = self.clock.next_timestamp(now);
        let mut bounds = Vec::with_capacity(points.len() + 2);
        bounds.push(ChunkBound::Min);
        bounds.extend(points.iter().map(|p| ChunkBound::Key(p.clone())));
        bounds.push(ChunkBound::Max);
        let mut chunks = BTreeMap::new();
        for (i, (pair, shard)) in bounds.windows(2).zip(owners).enumerate() {
            // i < INITIAL_CHUNKS_MAX, far below u32::MAX.
            let minor = u32::try_from(i).unwrap_or(u32::MAX);
            let chunk = Chunk {
                min: pair[0].clone(),
                max: pair[1].clone(),
                shard: shard.clone(),
                version: ChunkVersion::new(FIRST_MAJOR, minor),
                history: vec![ChunkHistoryEntry { valid_after: timestamp, shard: shard.clone() }],
                jumbo: false,
                on_current_shard_since: timestamp,
            };
            chunks.insert(chunk.min.clone(), chunk);
        }
        let version = chunks.values().map(|c| c.version).max().unwrap_or(ChunkVersion::new(FIRST_MAJOR, 0));
        let n_chunks = chunks.len() as u64;
        let coll = Collection {
            ns: ns.to_owned(),
            uuid,
            epoch,
            timestamp,
            key: key.clone(),
            unique,
            no_balance: false,
            no_auto_merge: false,
            max_chunk_size_bytes: None,
            version,
            chunks,
        };
        let placement = coll.placement(version);
        self.collections.insert(ns.to_owned(), coll);
        let log = LogDraft::new("shardCollection", ns).with("chunks", n_chunks).with("epoch", epoch.to_string());
        Ok(Outcome::logged(Reply::CollectionSharded { uuid, version: placement }, log))
    }

    /// Drops a sharded collection and its zone ranges; dropping an unknown one is a no-op.
    pub(super) fn drop_collection(&mut self, ns: &str) -> Result<Outcome, CatalogError> {
        let Some(coll) = self.collections.remove(ns) else {
            return Ok(Outcome::unchanged(Reply::Dropped { existed: false }));
        };
        self.zone_ranges.remove(ns);
        let log = LogDraft::new("dropCollection", ns).with("epoch", coll.epoch.to_string());
        Ok(Outcome::logged(Reply::Dropped { existed: true }, log))
    }

    pub(super) fn configure_collection(
        &mut self,
        ns: &str,
        no_balance: Option<bool>,
        chunk_size_mib: Option<u32>,
        enable_auto_merge: Option<bool>,
    ) -> Result<Outcome, CatalogError> {
        let Some(coll) = self.collections.get_mut(ns) else {
            return Err(CatalogError::NotSharded { ns: ns.to_owned() });
        };
        let max_chunk_size_bytes = match chunk_size_mib {
            None => coll.max_chunk_size_bytes,
            Some(0) => None,
            Some(mib) => {
                super::settings::check_chunk_size_mib(mib)?;
                Some(u64::from(mib) * 1024 * 1024)
            }
        };
        let no_balance = no_balance.unwrap_or(coll.no_balance);
        let no_auto_merge = enable_auto_merge.map_or(coll.no_auto_merge, |on| !on);
        let now = (no_balance, no_auto_merge, max_chunk_size_bytes);
        if now == (coll.no_balance, coll.no_auto_merge, coll.max_chunk_size_bytes) {
            return Ok(Outcome::unchanged(Reply::Done));
        }
        coll.no_balance = no_balance;
        coll.no_auto_merge = no_auto_merge;
        coll.max_chunk_size_bytes = max_chunk_size_bytes;
        let log = LogDraft::new("configureCollection", ns)
            .with("noBalance", no_balance)
            .with("enableAutoMerge", !no_auto_merge)
            .with("maxChunkSizeBytes", max_chunk_size_bytes.unwrap_or(0));
        Ok(Outcome::logged(Reply::Done, log))
    }
}
