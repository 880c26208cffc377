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

pub mod catalog;
pub mod keys;
pub mod oplog;

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bson::{Bson, DateTime, Document, RawDocument, RawDocumentBuf, Timestamp, Uuid, doc};
use bytes::Bytes;
use shoal_proto::Namespace;

use crate::storage::{Engine, GroupCommit, KvIter, Space, StorageError, WriteBatch, prefix_upper_bound};
use catalog::{Catalog, CollectionInfo};
use oplog::{Entry, OpKind, TimestampClock};

/// A staged batch is committed once it holds this much, bounding a command's memory.
pub const STAGED_BATCH_MAX_BYTES: usize = 16 << 20;
/// Documents of dropped collections are deleted in batches of this many keys.
pub const DROP_DELETE_BATCH_KEYS: usize = 10_000;

pub struct Store {
    engine: Arc<dyn Engine>,
    group: GroupCommit,
    catalog: RwLock<Catalog>,
    writer: Mutex<WriterState>,
}

struct WriterState {
    clock: TimestampClock,
}

impl Store {
    pub fn open(engine: Arc<dyn Engine>) -> Result<Self, StorageError> {
        let mut catalog = Catalog::default();
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
        // Ids of dropped collections are not reused either.
        for kv in engine.scan(
            Space::Meta,
            Bound::Included(keys::DROPPED_PREFIX),
            prefix_upper_bound(keys::DROPPED_PREFIX).as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            false,
        ) {
            let (key, _) = kv?;
            if let Ok(raw) = <[u8; 8]>::try_from(&key[keys::DROPPED_PREFIX.len()..]) {
                catalog.next_id = catalog.next_id.max(u64::from_be_bytes(raw) + 1);
            }
        }
        catalog.next_id = catalog.next_id.max(1);
        let last_ts = match engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, true).next() {
            Some(kv) => keys::oplog_ts(&kv?.0).unwrap_or(Timestamp { time: 0, increment: 0 }),
            None => Timestamp { time: 0, increment: 0 },
        };
        let group = GroupCommit::start(Arc::clone(&engine));
        Ok(Self {
            engine,
            group,
            catalog: RwLock::new(catalog),
            writer: Mutex::new(WriterState { clock: TimestampClock::new(last_ts) }),
        })
    }

    pub fn collection(&self, ns: &str) -> Option<Arc<CollectionInfo>> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).get(ns)
    }

    pub fn collections_in(&self, db: &str) -> Vec<Arc<CollectionInfo>> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).in_db(db).cloned().collect()
    }

    pub fn databases(&self) -> Vec<String> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).databases()
    }

    pub fn disk_space_bytes(&self) -> u64 {
        self.engine.disk_space_bytes()
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

    /// Oplog entries after `after`, oldest first.
    pub fn oplog_after(&self, after: Timestamp) -> KvIter<'static> {
        let key = keys::oplog_key(after);
        self.engine.scan(Space::Oplog, Bound::Excluded(&key[..]), Bound::Unbounded, false)
    }

    /// The newest committed oplog timestamp (`0|0` if none): every write at or before it is
    /// visible to a scan started afterwards, every later one is in [`Store::oplog_after`] of it.
    pub fn oplog_last(&self) -> Result<Timestamp, StorageError> {
        match self.engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, true).next() {
            Some(kv) => Ok(keys::oplog_ts(&kv?.0).unwrap_or(Timestamp { time: 0, increment: 0 })),
            None => Ok(Timestamp { time: 0, increment: 0 }),
        }
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
        let mut txn = WriteTxn {
            store: self,
            writer: guard,
            batch: WriteBatch::new(),
            staged: HashMap::new(),
            catalog_changes: Vec::new(),
            now: DateTime::now(),
            from_migrate: false,
        };
        let out = f(&mut txn)?;
        txn.flush()?;
        Ok((out, self.group.last_committed()))
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

    /// Deletes the documents of collections dropped earlier, in bounded batches. Returns how many
    /// keys it deleted; run it until it returns 0.
    pub fn purge_dropped(&self) -> Result<usize, StorageError> {
        let upper = prefix_upper_bound(keys::DROPPED_PREFIX);
        let first = self
            .engine
            .scan(
                Space::Meta,
                Bound::Included(keys::DROPPED_PREFIX),
                upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                false,
            )
            .next();
        let Some(kv) = first else { return Ok(0) };
        let (marker, _) = kv?;
        let Ok(raw) = <[u8; 8]>::try_from(&marker[keys::DROPPED_PREFIX.len()..]) else {
            return Err(StorageError::Corrupt { space: "meta", detail: "dropped-collection marker".into() });
        };
        let prefix = raw;
        let upper = prefix_upper_bound(&prefix);
        let mut batch = WriteBatch::new();
        for kv in self
            .engine
            .scan(
                Space::Documents,
                Bound::Included(&prefix[..]),
                upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                false,
            )
            .take(DROP_DELETE_BATCH_KEYS)
        {
            batch.delete(Space::Documents, kv?.0);
        }
        let deleted = batch.len();
        if deleted < DROP_DELETE_BATCH_KEYS {
            batch.delete(Space::Meta, marker);
        }
        self.engine.commit(batch)?;
        Ok(deleted.max(1))
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

    /// Writes (`Some`) or removes (`None`) one bookkeeping record, durably before returning.
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

/// Ranges whose lower end is at or past their upper end (engines may reject them).
fn is_empty_range(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(u) | Bound::Excluded(u)) => l >= u,
        _ => false,
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

enum CatalogChange {
    Created(Arc<CollectionInfo>),
    Dropped(String),
}

/// The writer's view during [`Store::write`].
pub struct WriteTxn<'a> {
    store: &'a Store,
    writer: MutexGuard<'a, WriterState>,
    batch: WriteBatch,
    /// Document keys written in the not-yet-committed batch: reads inside the transaction see them.
    staged: HashMap<Vec<u8>, Option<Bytes>>,
    catalog_changes: Vec<CatalogChange>,
    now: DateTime,
    from_migrate: bool,
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
        let id = {
            let mut cat = self.store.catalog.write().unwrap_or_else(|p| p.into_inner());
            let id = cat.next_id;
            cat.next_id += 1;
            id
        };
        let info = Arc::new(CollectionInfo { id, ns: ns.clone(), uuid: Uuid::new(), options });
        let record = bson_bytes(&info.to_record())?;
        self.batch.put(Space::Meta, keys::collection_record_key(&info.full_name()), record);
        let mut o = doc! { "create": &ns.coll };
        o.extend(info.options.clone());
        self.log_command(&ns.db, Some(info.uuid), &o)?;
        self.catalog_changes.push(CatalogChange::Created(Arc::clone(&info)));
        Ok((info, true))
    }

    /// Removes the collection from the catalog; its documents are deleted later by
    /// [`Store::purge_dropped`].
    pub fn drop_collection(&mut self, coll: &CollectionInfo) -> Result<(), StorageError> {
        self.batch.delete(Space::Meta, keys::collection_record_key(&coll.full_name()));
        self.batch.put(Space::Meta, keys::dropped_key(coll.id), Bytes::new());
        self.log_command(&coll.ns.db, Some(coll.uuid), &doc! { "drop": &coll.ns.coll })?;
        self.catalog_changes.push(CatalogChange::Dropped(coll.full_name()));
        Ok(())
    }

    pub fn get(&self, coll: &CollectionInfo, id: &Bson) -> Result<Option<Bytes>, StorageError> {
        let key = keys::document_key(coll.id, id);
        if let Some(staged) = self.staged.get(&key) {
            return Ok(staged.clone());
        }
        self.store.engine.get(Space::Documents, &key)
    }

    pub fn insert(&mut self, coll: &CollectionInfo, id: &Bson, doc: &RawDocument) -> Result<(), StorageError> {
        self.put_document(coll, id, doc, OpKind::Insert)
    }

    pub fn update(&mut self, coll: &CollectionInfo, id: &Bson, doc: &RawDocument) -> Result<(), StorageError> {
        self.put_document(coll, id, doc, OpKind::Update)
    }

    pub fn delete(&mut self, coll: &CollectionInfo, id: &Bson) -> Result<(), StorageError> {
        let key = keys::document_key(coll.id, id);
        let o = id_document(id)?;
        self.log(OpKind::Delete, &coll.full_name(), Some(coll.uuid), &o, None)?;
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
        let key = keys::document_key(coll.id, id);
        let value = Bytes::copy_from_slice(doc.as_bytes());
        match kind {
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
        let ts = self.writer.clock.next(self.now);
        let entry = Entry { ts, wall: self.now, kind, ns, uuid, o, o2, from_migrate: self.from_migrate }.encode();
        self.batch.put(Space::Oplog, keys::oplog_key(ts).to_vec(), entry.into_bytes());
        Ok(())
    }

    /// Commits what the statement staged, so the next statement's scans see it.
    pub fn end_statement(&mut self) -> Result<(), StorageError> {
        self.flush()
    }

    fn flush_if_large(&mut self) -> Result<(), StorageError> {
        if self.batch.size_bytes() >= STAGED_BATCH_MAX_BYTES { self.flush() } else { Ok(()) }
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.store.engine.commit(batch)?;
        self.store.group.committed();
        self.staged.clear();
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
