//! The range deleter: removes the documents of a key range this shard no longer owns (a donor's
//! range after a migration committed, a recipient's after one aborted).
//!
//! A task is persisted in the store's meta space (`rangedel/` ‖ id) when scheduled, replicated
//! through the oplog, so a restart — or a member promoted after its primary died — resumes it.
//! Only a primary runs tasks (`crate::primary_only` starts [`run`] on promotion after
//! [`RangeDeleter::reload`], and stops it when the member loses the role). The background loop ([`run`]) takes tasks in id order:
//!
//! ```text
//!  schedule ── persist ── wait: no cursor/read pinned on ns before scheduling ── refresh metadata
//!     ── subtract ranges this shard owns again (logged) ── delete in batches (fromMigrate oplog)
//!     ── remove task ── wake wait_for_range_deletion
//! ```
//!
//! Documents are clustered by `_id`, not by shard key: a deletion reads the range through the
//! shard-key index (or the `_id` order when the key is `{_id: 1}`) when there is one, else scans
//! the collection ([`super::range_scan`]); each batch examines at most [`SCAN_DOCS_PER_BATCH_MAX`] documents and deletes at most
//! [`DELETE_DOCS_PER_BATCH_MAX`] in one store write, on the blocking pool. Deleting is idempotent:
//! a task resumed after a restart scans again from the start.
//!
//! Must not: delete anything this shard owns at the moment it deletes, or anything of another
//! incarnation of the collection (the catalog uuid must still match).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Binary, Bson, Document, doc, spec::BinarySubtype};
use bytes::Bytes;
use shoal_proto::catalog::ChunkBound;
use shoal_query::shard_key::{self, KeyField, Missing};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use super::metadata::CollectionMetadata;
use super::ownership::{KeyRange, in_ranges};
use crate::error::{ExecError, ExecResult};
use crate::exec::Node;
use crate::storage::StorageError;
use crate::store::{Store, keys};

/// Documents one batch examines (bounds the time a batch holds the blocking thread).
pub const SCAN_DOCS_PER_BATCH_MAX: usize = 10_000;
/// Documents one batch deletes in one store write.
pub const DELETE_DOCS_PER_BATCH_MAX: usize = 1_000;
/// How often the loop looks again while a task waits for pinned reads to finish.
pub const PIN_POLL_INTERVAL_MS: u64 = 100;
/// Backoff after a failed attempt, doubling up to the max; the task stays persisted and is retried.
pub const RETRY_BACKOFF_MIN_MS: u64 = 100;
pub const RETRY_BACKOFF_MAX_MS: u64 = 10_000;

/// What to delete: documents of `ns` (catalog uuid `uuid`) whose shard key is in `[min, max)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeDeletion {
    pub ns: String,
    /// The collection's uuid in the catalog (`RoutingTable::uuid`).
    pub uuid: Uuid,
    pub key: Vec<KeyField>,
    pub min: ChunkBound,
    pub max: ChunkBound,
}

impl RangeDeletion {
    /// The deletion of `[min, max)` of the collection `meta` describes (its catalog uuid and key).
    pub fn of(meta: &super::ShardedMetadata, min: ChunkBound, max: ChunkBound) -> Self {
        Self { ns: meta.table.ns.clone(), uuid: meta.table.uuid, key: meta.ownership.key.clone(), min, max }
    }

    fn to_record(&self) -> Document {
        let key: Vec<Bson> = self.key.iter().map(|f| Bson::Document(doc! { "f": &f.name, "h": f.hashed })).collect();
        doc! {
            "ns": &self.ns,
            "uuid": Binary { subtype: BinarySubtype::Generic, bytes: self.uuid.as_bytes().to_vec() },
            "key": key,
            "min": bound_to_bson(&self.min),
            "max": bound_to_bson(&self.max),
        }
    }

    fn from_record(d: &Document) -> Option<Self> {
        let uuid = match d.get("uuid")? {
            Bson::Binary(b) => Uuid::from_slice(&b.bytes).ok()?,
            _ => return None,
        };
        let mut key = Vec::new();
        for f in d.get_array("key").ok()? {
            let f = f.as_document()?;
            key.push(KeyField { name: f.get_str("f").ok()?.to_owned(), hashed: f.get_bool("h").ok()? });
        }
        Some(Self {
            ns: d.get_str("ns").ok()?.to_owned(),
            uuid,
            key,
            min: bound_from_bson(d.get("min")?)?,
            max: bound_from_bson(d.get("max")?)?,
        })
    }

    fn overlaps(&self, ns: &str, min: &ChunkBound, max: &ChunkBound) -> bool {
        self.ns == ns && self.min < *max && *min < self.max
    }
}

fn bound_to_bson(b: &ChunkBound) -> Bson {
    match b {
        ChunkBound::Min => Bson::MinKey,
        ChunkBound::Max => Bson::MaxKey,
        ChunkBound::Key(k) => Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: k.clone() }),
    }
}

fn bound_from_bson(b: &Bson) -> Option<ChunkBound> {
    match b {
        Bson::MinKey => Some(ChunkBound::Min),
        Bson::MaxKey => Some(ChunkBound::Max),
        Bson::Binary(b) => Some(ChunkBound::Key(b.bytes.clone())),
        _ => None,
    }
}

struct Pending {
    task: RangeDeletion,
    /// Reads pinned at or before this number must finish first (0: none, e.g. after a restart).
    pin_barrier: u64,
}

#[derive(Default)]
struct Tasks {
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
}

pub struct RangeDeleter {
    tasks: Mutex<Tasks>,
    wake: Notify,
    /// Bumped whenever a task completes.
    done: watch::Sender<u64>,
}

impl Default for RangeDeleter {
    fn default() -> Self {
        Self { tasks: Mutex::default(), wake: Notify::new(), done: watch::channel(0).0 }
    }
}

impl RangeDeleter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads the persisted tasks (at startup, on the blocking pool), each waiting for reads pinned
    /// at or before `pin_barrier` (0 at startup: no read is open yet). Unreadable records are
    /// logged and left in place for an operator rather than deleted.
    pub fn load(&self, store: &Store, pin_barrier: u64) -> Result<usize, StorageError> {
        let records = store.meta_records(keys::RANGE_DELETION_PREFIX)?;
        let mut tasks = self.lock();
        for (key, value) in records {
            let Ok(raw) = <[u8; 8]>::try_from(&key[keys::RANGE_DELETION_PREFIX.len()..]) else { continue };
            let id = u64::from_be_bytes(raw);
            tasks.next_id = tasks.next_id.max(id + 1);
            match Document::from_reader(&mut &value[..]).ok().as_ref().and_then(RangeDeletion::from_record) {
                Some(task) => {
                    tasks.pending.insert(id, Pending { task, pin_barrier });
                }
                None => tracing::error!(id, "unreadable range-deletion task record; leaving it in place"),
            }
        }
        Ok(tasks.pending.len())
    }

    /// Replaces the queued tasks with the persisted ones (a member becoming primary: tasks its
    /// predecessor scheduled arrived through the oplog; ones it finished are gone). Blocking.
    /// Reads this member began before taking over (`pin_barrier`, `CursorManager::pin_seq`: its
    /// cursors as a secondary) finish first, as they would have had it scheduled the tasks itself.
    pub fn reload(&self, store: &Store, pin_barrier: u64) -> Result<usize, StorageError> {
        self.lock().pending.clear();
        let n = self.load(store, pin_barrier)?;
        self.done.send_modify(|d| *d += 1);
        if n > 0 {
            self.wake.notify_one();
        }
        Ok(n)
    }

    /// Persists `task` and queues it; returns its id. Reads on the namespace that hold a pin now
    /// (`pin_barrier`, from `CursorManager::pin_seq`) finish before it deletes anything.
    pub async fn schedule(&self, store: &Arc<Store>, task: RangeDeletion, pin_barrier: u64) -> ExecResult<u64> {
        let id = {
            let mut tasks = self.lock();
            tasks.next_id = tasks.next_id.max(1);
            let id = tasks.next_id;
            tasks.next_id += 1;
            id
        };
        let record = task.to_record().to_vec()?;
        let s = Arc::clone(store);
        tokio::task::spawn_blocking(move || s.put_meta_replicated(keys::range_deletion_key(id), Some(record)))
            .await
            .map_err(|e| ExecError::new(shoal_proto::ErrorCode::InternalError, format!("task failed: {e}")))??;
        tracing::info!(id, ns = %task.ns, min = %task.min, max = %task.max, "range deletion scheduled");
        self.lock().pending.insert(id, Pending { task, pin_barrier });
        self.wake.notify_one();
        Ok(id)
    }

    /// Waits until no pending task of `ns` overlaps `[min, max)`.
    pub async fn wait_for(&self, ns: &str, min: &ChunkBound, max: &ChunkBound) {
        let mut done = self.done.subscribe();
        loop {
            if !self.lock().pending.values().any(|p| p.task.overlaps(ns, min, max)) {
                return;
            }
            if done.changed().await.is_err() {
                return;
            }
        }
    }

    pub fn pending_count(&self) -> usize {
        self.lock().pending.len()
    }

    /// A pending task of `ns` overlapping `[min, max)` that waits for reads begun before it was
    /// scheduled (an open cursor on the range), if any: its id and range. Such a task may wait as
    /// long as a client keeps its cursor open.
    pub fn held_by_reads(
        &self,
        cursors: &crate::cursors::CursorManager,
        ns: &str,
        min: &ChunkBound,
        max: &ChunkBound,
    ) -> Option<(u64, ChunkBound, ChunkBound)> {
        let tasks = self.lock();
        tasks
            .pending
            .iter()
            .filter(|(_, p)| p.task.overlaps(ns, min, max))
            .find(|(_, p)| p.pin_barrier != 0 && cursors.pinned_at_or_before(&p.task.ns, p.pin_barrier))
            .map(|(id, p)| (*id, p.task.min.clone(), p.task.max.clone()))
    }

    /// The first task (in id order) whose pinned reads are gone.
    fn next_ready(&self, node: &Node) -> Option<(u64, RangeDeletion)> {
        let tasks = self.lock();
        tasks
            .pending
            .iter()
            .find(|(_, p)| p.pin_barrier == 0 || !node.cursors.pinned_at_or_before(&p.task.ns, p.pin_barrier))
            .map(|(id, p)| (*id, p.task.clone()))
    }

    fn complete(&self, id: u64) {
        self.lock().pending.remove(&id);
        self.done.send_modify(|n| *n += 1);
    }
}

/// The background loop (started by `crate::run`). Never returns; abort it to stop.
pub async fn run(node: Arc<Node>) {
    let mut backoff = Duration::from_millis(RETRY_BACKOFF_MIN_MS);
    loop {
        let deleter = &node.sharding.range_deleter;
        let Some((id, task)) = deleter.next_ready(&node) else {
            if deleter.pending_count() == 0 {
                // Nothing to do until a task is scheduled (`notify_one` keeps a wake-up for us).
                deleter.wake.notified().await;
            } else {
                let poll = Duration::from_millis(PIN_POLL_INTERVAL_MS);
                let _ = tokio::time::timeout(poll, deleter.wake.notified()).await;
            }
            continue;
        };
        match run_task(&node, id, &task).await {
            Ok(deleted) => {
                tracing::info!(id, ns = %task.ns, deleted, "range deletion finished");
                deleter.complete(id);
                node.metrics.range_deletions.finished(deleted);
                backoff = Duration::from_millis(RETRY_BACKOFF_MIN_MS);
            }
            Err(e) => {
                tracing::warn!(id, ns = %task.ns, error = %e, retry_in = ?backoff, "range deletion failed; will retry");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(RETRY_BACKOFF_MAX_MS));
            }
        }
    }
}

/// Runs one task to the end: decides what may be deleted, deletes it, removes the task record.
pub async fn run_task(node: &Arc<Node>, id: u64, task: &RangeDeletion) -> ExecResult<u64> {
    let mut deleted = 0;
    if let Some(parts) = deletable_parts(node, task).await? {
        let mut after: Option<Bytes> = None;
        loop {
            let (e, t, p) = (Arc::clone(node), task.clone(), parts.clone());
            let (n, next) = tokio::task::spawn_blocking(move || delete_batch(&e.store, &t, &p, after))
                .await
                .map_err(|e| ExecError::new(shoal_proto::ErrorCode::InternalError, format!("task failed: {e}")))??;
            deleted += n;
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
    }
    let store = Arc::clone(&node.store);
    tokio::task::spawn_blocking(move || store.put_meta_replicated(keys::range_deletion_key(id), None))
        .await
        .map_err(|e| ExecError::new(shoal_proto::ErrorCode::InternalError, format!("task failed: {e}")))??;
    Ok(deleted)
}

/// The parts of the task's range to delete now: the range minus what this shard owns after a
/// refresh. `None`: delete nothing (the collection was dropped or re-created since).
async fn deletable_parts(node: &Node, task: &RangeDeletion) -> ExecResult<Option<Vec<KeyRange>>> {
    let sharding = &node.sharding;
    if sharding.catalog().is_some() {
        sharding.refresh(&task.ns).await?;
    }
    let whole = vec![(task.min.clone(), task.max.clone())];
    Ok(match sharding.metadata(&task.ns) {
        // No catalog and nothing installed: a shard outside a cluster (tests) deletes as told.
        None => Some(whole),
        Some(CollectionMetadata::Sharded(m)) if m.table.uuid == task.uuid => {
            let parts = m.ownership.unowned_parts(&task.min, &task.max);
            if parts != whole {
                tracing::warn!(
                    ns = %task.ns, min = %task.min, max = %task.max,
                    "this shard owns part of the range again (a migration moved it back); keeping those documents"
                );
            }
            Some(parts)
        }
        Some(_) => {
            tracing::warn!(ns = %task.ns, "collection dropped or re-created since the deletion was scheduled; nothing deleted");
            None
        }
    })
}

/// One batch: examines documents after `after` (a [`super::range_scan`] position), deletes those whose shard key
/// lies in `parts`. Returns how many it deleted and where the next batch starts (`None`: done).
pub fn delete_batch(
    store: &Store,
    task: &RangeDeletion,
    parts: &[KeyRange],
    after: Option<Bytes>,
) -> ExecResult<(u64, Option<Bytes>)> {
    let Some(coll) = store.collection(&task.ns) else { return Ok((0, None)) };
    let in_range = |doc: &Document| match shard_key::of_document(&task.key, doc, Missing::AsNull) {
        Ok(k) => in_ranges(parts, &ChunkBound::Key(k)),
        // A document the shard cannot place is never deleted.
        Err(_) => false,
    };
    let mut ids = Vec::new();
    let mut examined = 0;
    let mut last: Option<Bytes> = None;
    for kv in super::range_scan::candidates(store, &coll, &task.key, &task.min, &task.max, after.as_deref()) {
        let (key, raw) = kv?;
        let doc = crate::exec::scan::decode(&raw)?;
        examined += 1;
        last = Some(key);
        if in_range(&doc) {
            ids.push(doc.get("_id").cloned().unwrap_or(Bson::Null));
        }
        if examined >= SCAN_DOCS_PER_BATCH_MAX || ids.len() >= DELETE_DOCS_PER_BATCH_MAX {
            break;
        }
    }
    let more = examined >= SCAN_DOCS_PER_BATCH_MAX || ids.len() >= DELETE_DOCS_PER_BATCH_MAX;
    let (deleted, _) = store.write(|txn| {
        txn.set_from_migrate(true);
        let mut n = 0;
        for id in &ids {
            // Re-read under the writer lock: only what is still there and still in range goes.
            let Some(raw) = txn.get(&coll, id)? else { continue };
            let still = Document::from_reader(&mut &raw[..]).ok().is_some_and(|d| in_range(&d));
            if still {
                txn.delete(&coll, id)?;
                n += 1;
            }
        }
        Ok::<_, StorageError>(n)
    })?;
    Ok((deleted, if more { last } else { None }))
}

#[cfg(test)]
#[path = "range_deleter_tests.rs"]
mod tests;
