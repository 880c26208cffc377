//! The document store: collections, documents by `_id`, and the oplog, over an [`Engine`].
//!
//! Writes go through [`Store::write`], which holds the single writer lock for the duration of one
//! command's statements: reads inside it see every committed write, and each document change is
//! staged together with its oplog entry so one storage batch carries both. Staged batches are
//! committed when they grow past [`STAGED_BATCH_MAX_BYTES`] and at the end; the caller then waits
//! for durability through [`GroupCommit`] *after* releasing the lock, so concurrent writers share
//! one journal sync.
//!
//! Reads ([`Store::get`], [`Store::scan`]) take no lock; they see committed batches.
//!
//! Replication: client writes are accepted only while the member may write ([`Writability`]: a
//! member outside any replica group always may; a primary until its lease lapses; a secondary
//! never), checked when a write starts and again as each staged batch commits. That state is the
//! store's lease ([`lease`]), kept apart from the writer lock: the heartbeat renewing it never
//! waits for a command to finish (a range deletion holds the writer lock for seconds). Secondaries
//! write through [`Store::apply`] instead, which stores the primary's entries verbatim. Every
//! commit publishes the new [`Position`] (see [`Store::subscribe`]).

mod apply;
mod index_write;
pub mod indexes;
pub mod keys;
mod lease;
pub mod local_catalog;
pub mod oplog;
pub mod oplog_size;
mod oplog_tail;
mod purge;

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use bson::{Bson, DateTime, Document, RawDocument, RawDocumentBuf, Timestamp, Uuid, doc};
use bytes::Bytes;
use shoal_proto::Namespace;
use tokio::sync::watch;

use crate::storage::{Engine, GroupCommit, KvIter, Space, StorageError, WriteBatch, prefix_upper_bound};
use lease::Lease;
pub use lease::Writability;
use local_catalog::{CollectionInfo, LocalCatalog};
use oplog::{Entry, EntryView, INITIAL_TERM, OpKind, OpTime, TimestampClock};

/// A staged batch is committed once it holds this much, bounding a command's memory.
pub const STAGED_BATCH_MAX_BYTES: usize = 16 << 20;
/// Documents of dropped collections are deleted in batches of this many keys.
pub const DROP_DELETE_BATCH_KEYS: usize = 10_000;

pub struct Store {
    engine: Arc<dyn Engine>,
    group: GroupCommit,
    catalog: RwLock<LocalCatalog>,
    writer: Mutex<WriterState>,
    /// Who may write, in which term: apart from `writer`, so a heartbeat never waits on a write.
    lease: Lease,
    position: watch::Sender<Position>,
    /// The oplog's size and how far it was truncated ([`oplog_size`]).
    oplog_size: oplog_size::OplogSize,
    /// The newest committed entries, for the secondaries' streams ([`oplog_tail`]).
    tail: oplog_tail::OplogTail,
}

/// The newest committed batch: its group-commit sequence number (wait on it for durability) and
/// the optime of the newest oplog entry at that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub seq: u64,
    pub optime: OpTime,
}

struct WriterState {
    clock: TimestampClock,
    /// The newest entry staged or committed.
    last: OpTime,
}

impl Store {
    pub fn open(engine: Arc<dyn Engine>) -> Result<Self, StorageError> {
        let mut catalog = LocalCatalog::default();
        let upper = prefix_upper_bound(keys::COLLECTION_PREFIX);
        let records = engine.scan(
            Space::Meta,
            Bound::Included(keys::COLLECTION_PREFIX),
            upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            false,
        );
        for kv in records {
            let (_, value) = kv?;
            let record = Document::from_reader(&mut &value[..])
                .map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })?;
            let info = CollectionInfo::from_record(&record)?;
            catalog.next_id = catalog.next_id.max(info.id + 1);
            catalog.by_ns.insert(info.full_name(), Arc::new(info));
        }
        // Ids of dropped collections and indexes are not reused either.
        for prefix in [keys::DROPPED_PREFIX, keys::DROPPED_INDEX_PREFIX] {
            catalog.next_id = catalog.next_id.max(after_marked_ids(engine.as_ref(), prefix)?);
        }
        catalog.next_id = catalog.next_id.max(1);
        abandon_unfinished_builds(engine.as_ref(), &mut catalog)?;
        let last = last_optime(engine.as_ref())?;
        let oplog_size = oplog_size::OplogSize::measure(engine.as_ref())?;
        let group = GroupCommit::start(Arc::clone(&engine))?;
        let (position, _) = watch::channel(Position { seq: 0, optime: last });
        Ok(Self {
            engine,
            group,
            catalog: RwLock::new(catalog),
            writer: Mutex::new(WriterState { clock: TimestampClock::new(last.timestamp()), last }),
            lease: Lease::new(last.term.max(INITIAL_TERM)),
            position,
            oplog_size,
            tail: oplog_tail::OplogTail::new(oplog_tail::TAIL_BYTES_MAX),
        })
    }

    /// The newest committed position, and a receiver that sees every later one.
    pub fn subscribe(&self) -> watch::Receiver<Position> {
        self.position.subscribe()
    }

    pub fn position(&self) -> Position {
        *self.position.borrow()
    }

    pub fn writability(&self) -> (i64, Writability) {
        let lease = self.lease.get();
        (lease.term, lease.writable)
    }

    /// Stops client writes (a secondary, or a primary stepping down). Writes already inside
    /// [`Store::write`] fail at their next commit.
    pub fn set_not_writable(&self) {
        self.lease.set_not_writable();
    }

    /// Makes this member the primary of `term` until `until`: writes the new primary's no-op entry
    /// in `term` (the first entry of the term; once it is majority-committed, so is everything
    /// before it) and returns its optime. Refused if the oplog already holds a newer term.
    pub fn become_primary(&self, term: i64, until: Instant) -> Result<OpTime, StorageError> {
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if w.last.term > term {
            return Err(StorageError::NotWritable {
                reason: format!("the oplog holds term {} entries, newer than term {term}", w.last.term),
            });
        }
        self.lease.enter(term)?;
        // The no-op is written whether or not a lease came with the promotion: it is not a
        // client write, and it is what makes this term's commit point count.
        let mut txn = WriteTxn::new(self, w, false);
        txn.gated = false;
        let o = RawDocumentBuf::try_from(&doc! {"msg": "new primary"})
            .map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
        txn.log(OpKind::Noop, "", None, &o, None)?;
        txn.flush()?;
        self.lease.grant(term, until);
        Ok(txn.writer.last)
    }

    /// Extends the primary's lease (a heartbeat answered); ignored unless it is still primary of
    /// `term`. Never waits on a write in progress.
    pub fn extend_lease(&self, term: i64, until: Instant) {
        self.lease.extend(term, until);
    }

    /// Takes writes again until `until` if still in `term` (a step-down that found no successor).
    pub fn set_writable_until(&self, term: i64, until: Instant) {
        self.lease.resume(term, until);
    }

    /// Follows `term` without writing in it (a secondary learning a new term). Never waits on a
    /// write in progress: one begun in an older term fails at its next commit.
    pub fn set_term(&self, term: i64) {
        self.lease.follow(term);
    }

    pub fn collection(&self, ns: &str) -> Option<Arc<CollectionInfo>> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).get(ns)
    }

    pub fn collections_in(&self, db: &str) -> Vec<Arc<CollectionInfo>> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).in_db(db).cloned().collect()
    }

    pub fn all_collections(&self) -> Vec<Arc<CollectionInfo>> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).by_ns.values().cloned().collect()
    }

    pub fn databases(&self) -> Vec<String> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).databases()
    }

    pub fn disk_space_bytes(&self) -> u64 {
        self.engine.disk_space_bytes()
    }

    /// Journal syncs completed by the group-commit syncer (a counter to register).
    pub fn journal_syncs(&self) -> &shoal_telemetry::IntCounter {
        self.group.syncs()
    }

    pub fn get(&self, coll: &CollectionInfo, id: &Bson) -> Result<Option<Bytes>, StorageError> {
        self.engine.get(Space::Documents, &keys::document_key(coll.id, id))
    }

    /// Documents of `coll` whose keys lie within the bounds (keys from [`keys::document_key`]);
    /// unbounded sides are clamped to the collection.
    pub fn scan(
        &self,
        coll: &CollectionInfo,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
        reverse: bool,
    ) -> KvIter<'static> {
        let prefix = keys::collection_prefix(coll.id);
        let lower = match lower {
            Bound::Unbounded => Bound::Included(prefix.to_vec()),
            b => b,
        };
        let upper = match upper {
            Bound::Unbounded => prefix_upper_bound(&prefix).map_or(Bound::Unbounded, Bound::Excluded),
            b => b,
        };
        if is_empty_range(&lower, &upper) {
            return Box::new(std::iter::empty());
        }
        self.engine.scan(Space::Documents, as_ref(&lower), as_ref(&upper), reverse)
    }

    /// Entries of secondary indexes within the bounds (keys from [`indexes`]).
    pub fn index_scan(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, reverse: bool) -> KvIter<'static> {
        let (l, u) = (bound_vec(lower), bound_vec(upper));
        if is_empty_range(&l, &u) {
            return Box::new(std::iter::empty());
        }
        self.engine.scan(Space::Indexes, lower, upper, reverse)
    }

    /// Entries and bytes (keys and values) of one secondary index.
    pub fn index_size(&self, ident: u64) -> Result<(u64, u64), StorageError> {
        let prefix = ident.to_be_bytes();
        let upper = prefix_upper_bound(&prefix);
        let (mut n, mut bytes) = (0u64, 0u64);
        for kv in self.index_scan(
            Bound::Included(&prefix[..]),
            upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            false,
        ) {
            let (k, v) = kv?;
            n += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        Ok((n, bytes))
    }

    /// Oplog entries after `after`, oldest first.
    pub fn oplog_after(&self, after: Timestamp) -> KvIter<'static> {
        let key = keys::oplog_key(after);
        self.engine.scan(Space::Oplog, Bound::Excluded(&key[..]), Bound::Unbounded, false)
    }

    /// The committed entries after `after` from memory (at most `entries_max`, stopping once
    /// `bytes_max` is reached) with the newest one's timestamp, or `None` if they must be read
    /// from storage ([`Store::oplog_after`]).
    pub fn oplog_tail_after(
        &self,
        after: Timestamp,
        entries_max: usize,
        bytes_max: usize,
    ) -> Option<(Vec<Bytes>, Timestamp)> {
        self.tail.after(after, entries_max, bytes_max).map(|(entries, last)| (entries, last.into()))
    }

    /// The newest committed oplog timestamp (`0|0` if none): every write at or before it is
    /// visible to a scan started afterwards, every later one is in [`Store::oplog_after`] of it.
    pub fn oplog_last(&self) -> Result<Timestamp, StorageError> {
        match self.engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, true).next() {
            Some(kv) => Ok(keys::oplog_ts(&kv?.0).unwrap_or(Timestamp { time: 0, increment: 0 })),
            None => Ok(Timestamp { time: 0, increment: 0 }),
        }
    }

    /// The stored entry at `ts`, if any.
    pub fn oplog_entry(&self, ts: Timestamp) -> Result<Option<Bytes>, StorageError> {
        self.engine.get(Space::Oplog, &keys::oplog_key(ts))
    }

    /// The oldest stored entry's timestamp (older ones were truncated), `None` if the oplog is empty.
    pub fn oplog_first(&self) -> Result<Option<Timestamp>, StorageError> {
        match self.oplog_from_oldest().next() {
            Some(kv) => Ok(keys::oplog_ts(&kv?.0)),
            None => Ok(None),
        }
    }

    /// The newest stored entry, `None` if the oplog is empty.
    pub fn oplog_newest(&self) -> Result<Option<Bytes>, StorageError> {
        match self.engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, true).next() {
            Some(kv) => Ok(Some(kv?.1)),
            None => Ok(None),
        }
    }

    /// Entries at or before `ts`, newest first.
    pub fn oplog_before(&self, ts: Timestamp) -> KvIter<'static> {
        let key = keys::oplog_key(ts);
        self.engine.scan(Space::Oplog, Bound::Unbounded, Bound::Included(&key[..]), true)
    }

    /// Deletes every document, collection, oplog entry and bookkeeping record (a member about to
    /// copy everything from another, or one whose copy was interrupted), in bounded batches.
    pub fn wipe(&self) -> Result<(), StorageError> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        self.tail.clear();
        for space in Space::ALL {
            loop {
                let mut batch = WriteBatch::new();
                for kv in
                    self.engine.scan(space, Bound::Unbounded, Bound::Unbounded, false).take(DROP_DELETE_BATCH_KEYS)
                {
                    batch.delete(space, kv?.0);
                }
                if batch.is_empty() {
                    break;
                }
                self.engine.commit(batch)?;
            }
        }
        let seq = self.group.committed();
        {
            let mut cat = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            let next_id = cat.next_id;
            *cat = LocalCatalog::default();
            // Ids are never reused, even across a wipe: stale keys of an interrupted wipe stay
            // unreachable.
            cat.next_id = next_id;
        }
        w.last = OpTime::ZERO;
        self.oplog_size.reset();
        self.position.send_replace(Position { seq, optime: OpTime::ZERO });
        Ok(())
    }

    /// Rollback: removes every oplog entry after `common`, sets each listed document to the
    /// given version (`None`: delete it) and removes the listed bookkeeping records, in one batch
    /// per bounded chunk. The data is a consistent copy again once the entries after `common` are
    /// re-applied from the primary.
    pub fn rollback_to(
        &self,
        common: OpTime,
        documents: Vec<(Arc<CollectionInfo>, Bson, Option<Bytes>)>,
        meta_keys: Vec<Vec<u8>>,
    ) -> Result<Position, StorageError> {
        let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        // The entries after `common` are about to go: readers fall back to storage meanwhile.
        self.tail.clear();
        let mut txn = WriteTxn::new(self, guard, true);
        for key in meta_keys {
            txn.put_meta(key, None)?;
        }
        for (coll, id, version) in documents {
            match version {
                Some(doc) => {
                    let raw = RawDocument::from_bytes(&doc)
                        .map_err(|e| StorageError::Corrupt { space: "documents", detail: e.to_string() })?;
                    txn.insert(&coll, &id, raw)?;
                }
                None => txn.delete(&coll, &id)?,
            }
        }
        let after = keys::oplog_key(common.timestamp());
        let mut removed_bytes = 0u64;
        for kv in self.engine.scan(Space::Oplog, Bound::Excluded(&after[..]), Bound::Unbounded, false) {
            let (key, value) = kv?;
            removed_bytes += oplog_size::entry_bytes(&key, &value);
            txn.batch.delete(Space::Oplog, key);
        }
        self.oplog_size.removed(removed_bytes);
        txn.writer.last = common;
        txn.flush()?;
        drop(txn);
        Ok(self.position())
    }

    /// Runs `f` as the single writer; returns its result and the sequence number to wait on for
    /// durability ([`Store::wait_durable`]). Statements that failed are part of `T`; only a storage
    /// failure aborts (batches already committed stay committed, as with MongoDB's
    /// per-document atomicity).
    pub fn write<T>(
        &self,
        f: impl FnOnce(&mut WriteTxn<'_>) -> Result<T, StorageError>,
    ) -> Result<(T, u64), StorageError> {
        let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut txn = WriteTxn::new(self, guard, false);
        self.lease.get().check(txn.term)?;
        let out = f(&mut txn)?;
        txn.flush()?;
        Ok((out, self.group.last_committed()))
    }

    /// Writes entries a primary wrote (BSON oplog entries, oldest first) with their effects, as a
    /// secondary does: idempotently (inserts and updates store the entry's whole document, deletes
    /// of missing documents do nothing) so re-applying a suffix converges. Entries of collections
    /// this member does not have (dropped later, seen while catching up after a clone) are
    /// stored but change nothing. Returns the new position.
    pub fn apply(&self, entries: &[Bytes]) -> Result<Position, StorageError> {
        let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut txn = WriteTxn::new(self, guard, true);
        for raw in entries {
            txn.apply_entry(raw)?;
        }
        txn.flush()?;
        drop(txn);
        Ok(self.position())
    }

    /// Writes collections and documents copied from another member (initial sync) without oplog
    /// entries: `f` runs as the single writer with logging off.
    pub fn write_unlogged<T>(
        &self,
        f: impl FnOnce(&mut WriteTxn<'_>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut txn = WriteTxn::new(self, guard, true);
        let out = f(&mut txn)?;
        txn.flush()?;
        Ok(out)
    }

    /// Grows with every committed batch: equal values mean nothing was written in between (what
    /// caches of derived data, like `_shoalChunkStats` sizes, compare).
    pub fn write_generation(&self) -> u64 {
        self.group.last_committed()
    }

    pub async fn wait_durable(&self, seq: u64) -> Result<(), StorageError> {
        if seq == 0 {
            return Ok(());
        }
        self.group.wait_durable(seq).await
    }

    pub fn shutdown(&self) {
        self.group.shutdown();
    }

    /// The bookkeeping records under `prefix` (see [`keys`]), in key order.
    pub fn meta_records(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        let upper = prefix_upper_bound(prefix);
        self.engine
            .scan(
                Space::Meta,
                Bound::Included(prefix),
                upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                false,
            )
            .collect()
    }

    /// One bookkeeping record.
    pub fn meta_get(&self, key: &[u8]) -> Result<Option<Bytes>, StorageError> {
        self.engine.get(Space::Meta, key)
    }

    /// Writes (`Some`) or removes (`None`) one replicated bookkeeping record (see
    /// [`keys::REPLICATED_META_PREFIXES`]) as a client write — only a writable primary (or a member
    /// outside any group) may — logged so the group applies it, durably here before returning.
    pub fn put_meta_replicated(&self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), StorageError> {
        self.write(|txn| txn.put_meta(key, value))?;
        self.engine.sync()
    }

    /// Writes (`Some`) or removes (`None`) one local bookkeeping record, durably before returning.
    pub fn put_meta(&self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), StorageError> {
        let mut batch = WriteBatch::new();
        match value {
            Some(v) => batch.put(Space::Meta, key, v),
            None => batch.delete(Space::Meta, key),
        }
        self.engine.commit(batch)?;
        self.engine.sync()
    }
}

/// One past the largest id named by a marker under `prefix` (`prefix ‖ id u64 BE`), 0 if none.
fn after_marked_ids(engine: &dyn Engine, prefix: &[u8]) -> Result<u64, StorageError> {
    let mut next = 0;
    let upper = prefix_upper_bound(prefix);
    for kv in engine.scan(
        Space::Meta,
        Bound::Included(prefix),
        upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        false,
    ) {
        let (key, _) = kv?;
        if let Ok(raw) = <[u8; 8]>::try_from(&key[prefix.len()..]) {
            next = next.max(u64::from_be_bytes(raw) + 1);
        }
    }
    Ok(next)
}

/// Index builds a restart interrupted are abandoned (their clients got no answer; MongoDB
/// resumes them instead): the specs leave the catalog and their entries are purged. Ident
/// counters also skip every live index's ident.
fn abandon_unfinished_builds(engine: &dyn Engine, catalog: &mut LocalCatalog) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    for info in catalog.by_ns.values_mut() {
        for spec in &info.indexes {
            catalog.next_id = catalog.next_id.max(spec.ident + 1);
        }
        if !info.indexes.iter().any(|s| s.building) {
            continue;
        }
        let mut kept = (**info).clone();
        for spec in info.indexes.iter().filter(|s| s.building) {
            tracing::warn!(ns = %info.full_name(), index = %spec.name, "index build interrupted by a restart: abandoned");
            batch.put(Space::Meta, keys::dropped_index_key(spec.ident), Vec::new());
        }
        kept.indexes.retain(|s| !s.building);
        batch.put(Space::Meta, keys::collection_record_key(&kept.full_name()), bson_bytes(&kept.to_record())?);
        *info = Arc::new(kept);
    }
    if !batch.is_empty() {
        engine.commit(batch)?;
    }
    Ok(())
}

/// The optime of the newest oplog entry, zero if there is none.
fn last_optime(engine: &dyn Engine) -> Result<OpTime, StorageError> {
    match engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, true).next() {
        Some(kv) => {
            let (_, value) = kv?;
            let raw = RawDocument::from_bytes(&value)
                .map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
            Ok(EntryView::parse(raw)?.optime)
        }
        None => Ok(OpTime::ZERO),
    }
}

/// Ranges whose lower end is at or past their upper end (engines may reject them).
fn is_empty_range(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(u) | Bound::Excluded(u)) => l >= u,
        _ => false,
    }
}

fn bound_vec(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    b.map(<[u8]>::to_vec)
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// An entry logged but not yet in the batch (see [`WriteTxn::put_meta`]).
struct PendingEntry {
    ts: Timestamp,
    entry: RawDocumentBuf,
    meta: Vec<oplog::MetaWrite>,
}

enum CatalogChange {
    Created(Arc<CollectionInfo>),
    Dropped(String),
}

/// The writer's view during [`Store::write`].
pub struct WriteTxn<'a> {
    store: &'a Store,
    writer: MutexGuard<'a, WriterState>,
    /// The term this transaction's entries are written in (the lease's term when it began).
    term: i64,
    batch: WriteBatch,
    /// Document keys written in the not-yet-committed batch: reads inside the transaction see them.
    staged: HashMap<Vec<u8>, Option<Bytes>>,
    /// Bookkeeping records written in the not-yet-committed batch.
    staged_meta: HashMap<Bytes, Option<Bytes>>,
    /// Index entries written in the not-yet-committed batch (ordered: unique checks scan them).
    staged_index: std::collections::BTreeMap<Vec<u8>, Option<Bytes>>,
    /// Collections as the catalog has them now, by id (see `index_write`).
    current: HashMap<u64, Arc<CollectionInfo>>,
    /// The newest entry, not yet in `batch`: bookkeeping writes still attach to it.
    pending: Option<PendingEntry>,
    /// Bookkeeping writes made before any entry was logged (they go with the next one), and the
    /// size of all not-yet-logged ones.
    meta_log: Vec<oplog::MetaWrite>,
    meta_log_bytes: usize,
    catalog_changes: Vec<CatalogChange>,
    now: DateTime,
    from_migrate: bool,
    /// Writing entries another member logged (or copied data): write no entries of our own.
    replicating: bool,
    /// Flushes wait for the statement to end ([`WriteTxn::hold_together`]).
    held: bool,
    /// Commits only while client writes are allowed ([`Writability`]).
    gated: bool,
    /// Bytes of oplog entries in the not-yet-committed batch.
    staged_oplog_bytes: u64,
    /// Oplog entries in the not-yet-committed batch, for the store's tail once committed.
    staged_tail: Vec<(Timestamp, Bytes)>,
}

impl<'a> WriteTxn<'a> {
    fn new(store: &'a Store, writer: MutexGuard<'a, WriterState>, replicating: bool) -> Self {
        WriteTxn {
            store,
            writer,
            term: store.lease.get().term,
            batch: WriteBatch::new(),
            staged: HashMap::new(),
            staged_meta: HashMap::new(),
            staged_index: std::collections::BTreeMap::new(),
            current: HashMap::new(),
            pending: None,
            meta_log: Vec::new(),
            meta_log_bytes: 0,
            catalog_changes: Vec::new(),
            now: DateTime::now(),
            from_migrate: false,
            replicating,
            held: false,
            gated: !replicating,
            staged_oplog_bytes: 0,
            staged_tail: Vec::new(),
        }
    }
}

impl WriteTxn<'_> {
    pub fn now(&self) -> DateTime {
        self.now
    }

    /// Marks the oplog entries written from now on `fromMigrate: true` (migration and range
    /// deletion writes, which a later migration's catch-up must not treat as client writes).
    pub fn set_from_migrate(&mut self, from_migrate: bool) {
        self.from_migrate = from_migrate;
    }

    pub fn collection(&self, ns: &str) -> Option<Arc<CollectionInfo>> {
        for change in self.catalog_changes.iter().rev() {
            match change {
                CatalogChange::Created(c) if c.full_name() == ns => return Some(Arc::clone(c)),
                CatalogChange::Dropped(n) if n == ns => return None,
                _ => {}
            }
        }
        self.store.collection(ns)
    }

    /// The collection, created (with its oplog entry) if it does not exist.
    pub fn ensure_collection(
        &mut self,
        ns: &Namespace,
        options: Document,
    ) -> Result<(Arc<CollectionInfo>, bool), StorageError> {
        if let Some(c) = self.collection(&ns.to_string()) {
            return Ok((c, false));
        }
        let info = self.create_collection(ns, Uuid::new(), options)?;
        Ok((info, true))
    }

    /// Creates `ns` with the given UUID (logged unless replicating).
    pub fn create_collection(
        &mut self,
        ns: &Namespace,
        uuid: Uuid,
        options: Document,
    ) -> Result<Arc<CollectionInfo>, StorageError> {
        let id = {
            let mut cat = self.store.catalog.write().unwrap_or_else(|p| p.into_inner());
            let id = cat.next_id;
            cat.next_id += 1;
            id
        };
        let info = Arc::new(CollectionInfo { id, ns: ns.clone(), uuid, options, indexes: Vec::new() });
        let record = bson_bytes(&info.to_record())?;
        self.batch.put(Space::Meta, keys::collection_record_key(&info.full_name()), record);
        let mut o = doc! { "create": &ns.coll };
        o.extend(info.options.clone());
        self.log_command(&ns.db, Some(info.uuid), &o)?;
        self.catalog_changes.push(CatalogChange::Created(Arc::clone(&info)));
        Ok(info)
    }

    /// The collection with `uuid`, including ones created earlier in this transaction.
    fn collection_by_uuid(&self, uuid: Uuid) -> Option<Arc<CollectionInfo>> {
        let mut dropped = Vec::new();
        for change in self.catalog_changes.iter().rev() {
            match change {
                CatalogChange::Created(c) if c.uuid == uuid && !dropped.contains(&c.full_name()) => {
                    return Some(Arc::clone(c));
                }
                CatalogChange::Dropped(n) => dropped.push(n.clone()),
                _ => {}
            }
        }
        let found = self.store.catalog.read().unwrap_or_else(|p| p.into_inner()).by_uuid(uuid)?;
        (!dropped.contains(&found.full_name())).then_some(found)
    }

    /// Removes the collection from the catalog; its documents are deleted later by
    /// [`Store::purge_dropped`].
    pub fn drop_collection(&mut self, coll: &CollectionInfo) -> Result<(), StorageError> {
        self.batch.delete(Space::Meta, keys::collection_record_key(&coll.full_name()));
        self.batch.put(Space::Meta, keys::dropped_key(coll.id), Bytes::new());
        let current = self.current_collection(coll);
        for spec in current.as_deref().unwrap_or(coll).indexes.iter() {
            self.batch.put(Space::Meta, keys::dropped_index_key(spec.ident), Bytes::new());
        }
        self.current.remove(&coll.id);
        self.log_command(&coll.ns.db, Some(coll.uuid), &doc! { "drop": &coll.ns.coll })?;
        self.catalog_changes.push(CatalogChange::Dropped(coll.full_name()));
        Ok(())
    }

    /// Writes (`Some`) or removes (`None`) a bookkeeping record together with the transaction's
    /// documents, logged so members apply it too: it rides on the transaction's latest entry
    /// (its `meta` field; a no-op entry if there is none), so a member applies a write and its
    /// record together or not at all. Rollback removes such records written after the common
    /// point (the source's own are replayed).
    pub fn put_meta(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), StorageError> {
        if !self.replicating {
            self.meta_log_bytes += key.len() + value.as_ref().map_or(0, Vec::len);
            let write = (key.clone(), value.clone());
            match &mut self.pending {
                Some(p) => p.meta.push(write),
                None => self.meta_log.push(write),
            }
        }
        let key = Bytes::from(key);
        match value {
            Some(v) => {
                let v = Bytes::from(v);
                self.batch.put(Space::Meta, key.clone(), v.clone());
                self.staged_meta.insert(key, Some(v));
            }
            None => {
                self.batch.delete(Space::Meta, key.clone());
                self.staged_meta.insert(key, None);
            }
        }
        Ok(())
    }

    /// A bookkeeping record as this transaction sees it (its own staged writes included).
    pub fn get_meta(&self, key: &[u8]) -> Result<Option<Bytes>, StorageError> {
        if let Some(staged) = self.staged_meta.get(key) {
            return Ok(staged.clone());
        }
        self.store.engine.get(Space::Meta, key)
    }

    /// Bookkeeping records under `prefix` as this transaction sees them, in key order.
    pub fn meta_records(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        let mut records: std::collections::BTreeMap<Bytes, Bytes> =
            self.store.meta_records(prefix)?.into_iter().collect();
        for (k, v) in self.staged_meta.iter().filter(|(k, _)| k.starts_with(prefix)) {
            match v {
                Some(v) => records.insert(k.clone(), v.clone()),
                None => records.remove(k),
            };
        }
        Ok(records.into_iter().collect())
    }

    pub fn get(&self, coll: &CollectionInfo, id: &Bson) -> Result<Option<Bytes>, StorageError> {
        let key = keys::document_key(coll.id, id);
        if let Some(staged) = self.staged.get(&key) {
            return Ok(staged.clone());
        }
        self.store.engine.get(Space::Documents, &key)
    }

    /// Stores a new document; unless replicating, the caller has checked its `_id` is free.
    pub fn insert(&mut self, coll: &CollectionInfo, id: &Bson, doc: &RawDocument) -> Result<(), StorageError> {
        self.put_document(coll, id, doc, OpKind::Insert)
    }

    pub fn update(&mut self, coll: &CollectionInfo, id: &Bson, doc: &RawDocument) -> Result<(), StorageError> {
        self.put_document(coll, id, doc, OpKind::Update)
    }

    pub fn delete(&mut self, coll: &CollectionInfo, id: &Bson) -> Result<(), StorageError> {
        self.maintain_indexes(coll, id, None, false)?;
        let key = keys::document_key(coll.id, id);
        if !self.replicating {
            let o = id_document(id)?;
            self.log(OpKind::Delete, &coll.full_name(), Some(coll.uuid), &o, None)?;
        }
        self.batch.delete(Space::Documents, key.clone());
        self.staged.insert(key, None);
        self.flush_if_large()
    }

    fn put_document(
        &mut self,
        coll: &CollectionInfo,
        id: &Bson,
        doc: &RawDocument,
        kind: OpKind,
    ) -> Result<(), StorageError> {
        // A client insert's `_id` was checked free by the caller: no old version to unindex.
        let old_absent = kind == OpKind::Insert && !self.replicating;
        self.maintain_indexes(coll, id, Some(doc), old_absent)?;
        let key = keys::document_key(coll.id, id);
        let value = Bytes::copy_from_slice(doc.as_bytes());
        match kind {
            _ if self.replicating => {}
            OpKind::Update => {
                let o2 = id_document(id)?;
                self.log(kind, &coll.full_name(), Some(coll.uuid), doc, Some(&o2))?;
            }
            _ => self.log(kind, &coll.full_name(), Some(coll.uuid), doc, None)?,
        }
        self.batch.put(Space::Documents, key.clone(), value.clone());
        self.staged.insert(key, Some(value));
        self.flush_if_large()
    }

    fn log_command(&mut self, db: &str, uuid: Option<Uuid>, o: &Document) -> Result<(), StorageError> {
        if self.replicating {
            return Ok(());
        }
        let raw =
            RawDocumentBuf::try_from(o).map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
        self.log(OpKind::Command, &format!("{db}.$cmd"), uuid, &raw, None)
    }

    fn log(
        &mut self,
        kind: OpKind,
        ns: &str,
        uuid: Option<Uuid>,
        o: &RawDocument,
        o2: Option<&RawDocument>,
    ) -> Result<(), StorageError> {
        self.emit_pending();
        let ts = self.writer.clock.next(self.now);
        let term = self.term;
        let entry = Entry { ts, term, wall: self.now, kind, ns, uuid, o, o2, from_migrate: self.from_migrate }.encode();
        self.pending = Some(PendingEntry { ts, entry, meta: std::mem::take(&mut self.meta_log) });
        self.writer.last = OpTime::new(term, ts);
        Ok(())
    }

    /// Puts the pending entry, with the bookkeeping writes attached to it, into the batch.
    fn emit_pending(&mut self) {
        let Some(mut p) = self.pending.take() else { return };
        if !p.meta.is_empty() {
            p.entry.append(bson::cstr!("meta"), oplog::meta_array(&p.meta));
        }
        let key = keys::oplog_key(p.ts);
        self.staged_oplog_bytes += oplog_size::entry_bytes(&key, p.entry.as_bytes());
        let raw = Bytes::from(p.entry.into_bytes());
        self.staged_tail.push((p.ts, raw.clone()));
        self.batch.put(Space::Oplog, key.to_vec(), raw);
    }

    /// Commits what the statement staged, so the next statement's scans see it.
    pub fn end_statement(&mut self) -> Result<(), StorageError> {
        self.flush()
    }

    fn flush_if_large(&mut self) -> Result<(), StorageError> {
        if self.batch.size_bytes() + self.meta_log_bytes >= STAGED_BATCH_MAX_BYTES && !self.held {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// With `hold`, the statement's writes stay in one batch whatever their size (a retryable
    /// write's record and its document must commit together); the next flush point after release
    /// commits them.
    pub fn hold_together(&mut self, hold: bool) {
        self.held = hold;
    }

    /// Logs everything pending: bookkeeping writes no entry carries get a no-op entry of their own.
    fn log_pending(&mut self) -> Result<(), StorageError> {
        if !self.meta_log.is_empty() {
            let o = bson::rawdoc! { "msg": "bookkeeping" };
            self.log(OpKind::Noop, "", None, &o, None)?;
        }
        self.emit_pending();
        self.meta_log_bytes = 0;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        self.log_pending()?;
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let committed = if self.gated {
            // A lease may lapse during a long write: nothing is committed after it did.
            let engine = &self.store.engine;
            self.store.lease.commit_in(self.term, || engine.commit(batch))
        } else {
            self.store.engine.commit(batch)
        };
        if let Err(e) = committed {
            // Whether any of the batch reached storage is unknown: the tail must not skip it.
            self.staged_tail.clear();
            self.store.tail.clear();
            return Err(e);
        }
        self.store.tail.extend(self.staged_tail.drain(..));
        self.store.oplog_size.appended(std::mem::take(&mut self.staged_oplog_bytes));
        let seq = self.store.group.committed();
        self.store.position.send_replace(Position { seq, optime: self.writer.last });
        self.staged.clear();
        self.staged_meta.clear();
        self.staged_index.clear();
        if self.catalog_changes.is_empty() {
            // The common case: no catalog lock on a document write's path.
            return Ok(());
        }
        let mut cat = self.store.catalog.write().unwrap_or_else(|p| p.into_inner());
        for change in self.catalog_changes.drain(..) {
            match change {
                CatalogChange::Created(c) => {
                    cat.by_ns.insert(c.full_name(), c);
                }
                CatalogChange::Dropped(ns) => {
                    cat.by_ns.remove(&ns);
                }
            }
        }
        Ok(())
    }
}

fn id_document(id: &Bson) -> Result<RawDocumentBuf, StorageError> {
    RawDocumentBuf::try_from(&doc! { "_id": id.clone() })
        .map_err(|e| StorageError::Corrupt { space: "documents", detail: e.to_string() })
}

fn bson_bytes(doc: &Document) -> Result<Vec<u8>, StorageError> {
    doc.to_vec().map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })
}
