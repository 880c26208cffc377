//! Initial sync: a member with no oplog (new, wiped, or too far behind the primary's oplog)
//! copies everything from the primary, then applies the primary's oplog from where the copy
//! began.
//!
//! ```text
//!  source: begin = newest entry --> collections + documents (a moving copy) --> replicated meta
//!          records (keys::REPLICATED_META_PREFIXES) --> min_valid = newest entry
//!  member: wipe, mark "initsync" --> create + put (no oplog entries) --> store `begin` --> Sync from begin
//!          ... applied >= min_valid: the copy is consistent, unmark, SECONDARY
//! ```
//!
//! The copy is not a snapshot: documents change while it is taken. Replaying every entry after
//! `begin` fixes that, because applying is idempotent (whole post-images, deletes of missing
//! documents do nothing) and the replay ends past every change the copy may have seen. Until then
//! the member is STARTUP2: not readable, not electable. A restart with the mark present starts
//! over from a wipe.

use std::sync::Arc;

use bson::{Bson, Document, RawDocument, Uuid};
use bytes::Bytes;
use shoal_proto::Namespace;
use shoal_proto::shard::replication_client::ReplicationClient;
use shoal_proto::shard::{CloneChunk, CloneCollection, CloneRequest};
use tokio::sync::mpsc;
use tonic::Status;

use super::Repl;
use super::fetcher::{FetchError, connect, within};
use super::state::MemberState;
use super::wire::{from_shard, to_shard};
use crate::storage::StorageError;
use crate::store::Store;
use crate::store::keys::{INITIAL_SYNC_KEY, REPLICATED_META_PREFIXES};
use crate::store::oplog::OpTime;

/// Bookkeeping records per clone chunk, at most (each is small: a task or migration record).
pub const CLONE_META_RECORDS_PER_CHUNK_MAX: usize = 1_000;

/// Source side (blocking): streams the whole data set to `tx`.
pub fn produce_clone(
    store: &Store,
    bytes_max: usize,
    tx: &mpsc::Sender<Result<CloneChunk, Status>>,
) -> Result<(), StorageError> {
    let Some(begin) = store.oplog_newest()? else {
        return Err(StorageError::Corrupt { space: "oplog", detail: "empty oplog on a clone source".into() });
    };
    if tx.blocking_send(Ok(CloneChunk { begin_entry: begin, ..Default::default() })).is_err() {
        return Ok(());
    }
    for coll in store.all_collections() {
        let header = CloneCollection {
            ns: coll.full_name(),
            uuid: Bytes::copy_from_slice(&coll.uuid.bytes()),
            options: coll
                .options
                .to_vec()
                .map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })?
                .into(),
            indexes: crate::store::indexes::encode_listings(&coll.indexes).into(),
        };
        if tx.blocking_send(Ok(CloneChunk { collection: Some(header), ..Default::default() })).is_err() {
            return Ok(());
        }
        let (mut documents, mut bytes) = (Vec::new(), 0usize);
        for kv in store.scan(&coll, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false) {
            let (_, value) = kv?;
            bytes += value.len();
            documents.push(value);
            if bytes >= bytes_max {
                let chunk = CloneChunk { documents: std::mem::take(&mut documents), ..Default::default() };
                if tx.blocking_send(Ok(chunk)).is_err() {
                    return Ok(());
                }
                bytes = 0;
            }
        }
        if !documents.is_empty() && tx.blocking_send(Ok(CloneChunk { documents, ..Default::default() })).is_err() {
            return Ok(());
        }
    }
    // Replicated bookkeeping records (migrations, range deletions): after the documents, so a
    // record's later change in the oplog replay lands on top of the copied one.
    for prefix in REPLICATED_META_PREFIXES {
        let records = store.meta_records(prefix)?;
        for chunk in records.chunks(CLONE_META_RECORDS_PER_CHUNK_MAX) {
            let (meta_keys, meta_values) = chunk.iter().cloned().unzip();
            if tx.blocking_send(Ok(CloneChunk { meta_keys, meta_values, ..Default::default() })).is_err() {
                return Ok(());
            }
        }
    }
    let min_valid = store.position().optime;
    let _ = tx.blocking_send(Ok(CloneChunk { min_valid: Some(to_shard(min_valid)), ..Default::default() }));
    Ok(())
}

/// Whether an earlier initial sync was interrupted (its data cannot be trusted).
pub fn interrupted(store: &Store) -> Result<bool, StorageError> {
    Ok(!store.meta_records(INITIAL_SYNC_KEY)?.is_empty())
}

/// The optime an unfinished initial sync must reach, if one is unfinished.
pub fn pending_min_valid(store: &Store) -> Result<Option<OpTime>, StorageError> {
    let records = store.meta_records(INITIAL_SYNC_KEY)?;
    let Some((_, value)) = records.first() else { return Ok(None) };
    let doc = Document::from_reader(&mut &value[..])
        .map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })?;
    let ts = doc.get_timestamp("ts").unwrap_or(bson::Timestamp { time: 0, increment: 0 });
    Ok(Some(OpTime::new(doc.get_i64("t").unwrap_or(0), ts)))
}

fn mark(store: &Store, min_valid: Option<OpTime>) -> Result<(), StorageError> {
    let doc = match min_valid {
        Some(o) => bson::doc! { "ts": o.timestamp(), "t": o.term },
        None => bson::doc! {},
    };
    let bytes = doc.to_vec().map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })?;
    store.put_meta(INITIAL_SYNC_KEY.to_vec(), Some(bytes))
}

/// Clears the mark once the member's data is a consistent copy.
pub fn finish(store: &Store) -> Result<(), StorageError> {
    store.put_meta(INITIAL_SYNC_KEY.to_vec(), None)
}

async fn blocking<T: Send + 'static>(
    store: &Arc<Store>,
    f: impl FnOnce(&Store) -> Result<T, StorageError> + Send + 'static,
) -> Result<T, FetchError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| FetchError::Transport(e.to_string()))?
        .map_err(FetchError::Storage)
}

fn put_documents(store: &Store, coll: &str, docs: Vec<Bytes>) -> Result<(), StorageError> {
    store.write_unlogged(|txn| {
        let Some(info) = txn.collection(coll) else { return Ok(()) };
        for raw in docs {
            let doc = RawDocument::from_bytes(&raw)
                .map_err(|e| StorageError::Corrupt { space: "documents", detail: e.to_string() })?;
            let id = doc.get("_id").ok().flatten().and_then(|v| Bson::try_from(v).ok()).ok_or_else(|| {
                StorageError::Corrupt { space: "documents", detail: "cloned document without _id".into() }
            })?;
            txn.insert(&info, &id, doc)?;
        }
        Ok(())
    })
}

/// Copied bookkeeping records; only the replicated kinds are accepted.
pub(crate) fn put_meta_records(store: &Store, records: Vec<(Bytes, Bytes)>) -> Result<(), StorageError> {
    store.write_unlogged(|txn| {
        for (key, value) in records {
            if !REPLICATED_META_PREFIXES.iter().any(|p| key.starts_with(p)) {
                return Err(StorageError::Corrupt {
                    space: "meta",
                    detail: format!("cloned record {:?} is not a replicated kind", String::from_utf8_lossy(&key)),
                });
            }
            txn.put_meta(key.to_vec(), Some(value.to_vec()))?;
        }
        Ok(())
    })
}

fn create(store: &Store, header: CloneCollection) -> Result<String, StorageError> {
    let corrupt = |what: String| StorageError::Corrupt { space: "meta", detail: format!("cloned collection: {what}") };
    let (db, coll) = header.ns.split_once('.').ok_or_else(|| corrupt(header.ns.clone()))?;
    let ns = Namespace::new(db, coll).map_err(|e| corrupt(e.to_string()))?;
    let uuid = Uuid::from_bytes(header.uuid.as_ref().try_into().map_err(|_| corrupt("uuid".into()))?);
    let options = Document::from_reader(&mut &header.options[..]).map_err(|e| corrupt(e.to_string()))?;
    let indexes = crate::store::indexes::decode_listings(&header.indexes).map_err(|e| corrupt(e.message))?;
    store.write_unlogged(|txn| {
        let coll = txn.create_collection(&ns, uuid, options)?;
        txn.ensure_indexes(&coll, indexes)
    })?;
    Ok(header.ns)
}

/// Member side: wipes this member and copies `source`'s data. On return the member holds the
/// copy and the entry it began at; the fetcher then applies the rest up to the returned
/// `min_valid`.
pub async fn run(repl: &Arc<Repl>, source: &str) -> Result<OpTime, FetchError> {
    repl.set_state(MemberState::Startup2, format!("initial sync from {source}: cloning"));
    tracing::info!(%source, "initial sync: wiping and cloning");
    let store = Arc::clone(&repl.store);
    blocking(&store, |s| {
        s.wipe()?;
        mark(s, None)
    })
    .await?;
    let mut client: ReplicationClient<_> = connect(repl, source).await?;
    let request = client.clone_data(CloneRequest { member: repl.me.clone() });
    let mut stream = within(repl.settings.connect_timeout, "clone", request).await?;
    let (mut begin, mut min_valid, mut current) = (None, None, None::<String>);
    let (mut collections, mut documents) = (0u64, 0u64);
    loop {
        let next = tokio::time::timeout(repl.settings.stream_idle_timeout, stream.message()).await;
        let chunk = match next {
            Ok(Ok(Some(c))) => c,
            Ok(Ok(None)) => break,
            Ok(Err(s)) => return Err(FetchError::Transport(s.message().to_owned())),
            Err(_) => return Err(FetchError::Transport("the clone stream went silent".into())),
        };
        if !chunk.begin_entry.is_empty() {
            begin = Some(chunk.begin_entry.clone());
        }
        if let Some(header) = chunk.collection {
            current = Some(blocking(&store, move |s| create(s, header)).await?);
            collections += 1;
        }
        if !chunk.documents.is_empty() {
            let Some(coll) = current.clone() else {
                return Err(FetchError::Transport("documents before any collection".into()));
            };
            documents += chunk.documents.len() as u64;
            let docs = chunk.documents;
            blocking(&store, move |s| put_documents(s, &coll, docs)).await?;
            repl.set_progress(format!("initial sync from {source}: {collections} collections, {documents} documents"));
        }
        if !chunk.meta_keys.is_empty() {
            if chunk.meta_keys.len() != chunk.meta_values.len() {
                return Err(FetchError::Transport("a clone chunk's meta keys and values differ in number".into()));
            }
            let records: Vec<(Bytes, Bytes)> = chunk.meta_keys.into_iter().zip(chunk.meta_values).collect();
            blocking(&store, move |s| put_meta_records(s, records)).await?;
        }
        if let Some(m) = chunk.min_valid {
            min_valid = Some(from_shard(Some(&m)));
        }
    }
    let (Some(begin), Some(min_valid)) = (begin, min_valid) else {
        return Err(FetchError::Transport("the clone stream ended early".into()));
    };
    blocking(&store, move |s| {
        s.apply(&[begin])?;
        mark(s, Some(min_valid))
    })
    .await?;
    tracing::info!(%source, collections, documents, %min_valid, "initial sync: copied; catching up");
    repl.set_progress(format!("initial sync from {source}: catching up to {min_valid}"));
    Ok(min_valid)
}
