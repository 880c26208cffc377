//! The recipient's side: `ReceiveStart`, `ReceiveBatch`, `ReceiveCommit`, `ReceiveAbort`.
//!
//! A batch is acknowledged only once durable. Batches name their migration id: after a restart
//! (or an abort) the id is unknown and every further call fails, so the donor aborts. Writes are
//! `fromMigrate` in the oplog, so a later migration of the range away from here skips them.
//!
//! Must not: decide ownership (the donor's catalog commit does) or delete data directly except
//! leftovers of the range it is about to receive and does not own.

use std::sync::Arc;
use std::time::Duration;

use bson::{Document, RawDocumentBuf};
use shoal_proto::shard::{ReceiveBatchRequest, ReceiveEndRequest, ReceiveStartRequest};
use shoal_proto::{ErrorCode, Namespace};
use uuid::Uuid;

use super::failpoint;
use super::mods::{Mod, RangeFilter};
use super::record::{Phase, Record, Side};
use super::{MigrationError, Migrations, RANGE_DELETION_WAIT_MS, bound_from_wire};
use crate::error::ExecError;
use crate::sharding::range_deleter::delete_batch;
use crate::sharding::{CollectionMetadata, RangeDeletion};
use crate::storage::StorageError;

fn internal(e: impl std::fmt::Display) -> MigrationError {
    MigrationError::refused(ErrorCode::InternalError, format!("task failed: {e}"))
}

/// `ReceiveStart`: claim the slot, check the range is not ours, persist the record, create the
/// collection, remove leftovers of the range.
pub async fn start(mig: &Migrations, req: ReceiveStartRequest) -> Result<(), MigrationError> {
    let ns =
        Namespace::parse(&req.ns).map_err(|e| MigrationError::refused(ErrorCode::InvalidNamespace, e.to_string()))?;
    let uuid = Uuid::from_slice(&req.uuid).map_err(|e| MigrationError::refused(ErrorCode::BadValue, e.to_string()))?;
    let options = if req.options.is_empty() {
        Document::new()
    } else {
        Document::from_reader(&mut &req.options[..]).map_err(ExecError::from)?
    };
    if req.key_fields.is_empty() || req.key_fields.len() != req.key_hashed.len() {
        return Err(MigrationError::refused(ErrorCode::BadValue, "ReceiveStart: malformed shard key"));
    }
    let record = Record {
        id: req.migration_id.clone(),
        ns: req.ns.clone(),
        uuid,
        key: req.key_fields.iter().cloned().zip(req.key_hashed.iter().copied()).collect(),
        min: bound_from_wire(req.min.as_ref(), "min")?,
        max: bound_from_wire(req.max.as_ref(), "max")?,
        from: req.from_shard.clone(),
        to: mig.node.sharding.shard_id().to_owned(),
        epoch: Default::default(),
        expected_version: Default::default(),
        phase: Phase::Cloning,
    };
    if mig.receiving(&record.id).is_some() {
        return Ok(()); // a retried start
    }
    if let Some(stale) = mig.claim(Side::Recipient, &record)? {
        tracing::warn!(stale = %stale.record.id, "a new migration replaces an abandoned one; deleting what it received");
        abort_record(mig, &stale.record).await?;
    }
    let indexes = crate::store::indexes::decode_listings(&req.indexes).map_err(ExecError::from)?;
    let result = prepare(mig, &record, &ns, options, indexes).await;
    if let Err(e) = &result {
        tracing::warn!(id = %record.id, error = %e, "receive start failed");
        mig.release(&record.id);
    }
    result
}

async fn prepare(
    mig: &Migrations,
    record: &Record,
    ns: &Namespace,
    options: Document,
    indexes: Vec<crate::store::indexes::IndexSpec>,
) -> Result<(), MigrationError> {
    let node = &mig.node;
    let sharding = &node.sharding;
    sharding.refresh(&record.ns).await?;
    if let Some(CollectionMetadata::Sharded(m)) = sharding.metadata(&record.ns) {
        if m.table.uuid != record.uuid {
            return Err(MigrationError::refused(ErrorCode::StaleEpoch, format!("{} changed incarnation", record.ns)));
        }
        if m.ownership.unowned_parts(&record.min, &record.max) != vec![(record.min.clone(), record.max.clone())] {
            return Err(MigrationError::refused(
                ErrorCode::IllegalOperation,
                format!("this shard already owns part of {} [{}, {})", record.ns, record.min, record.max),
            ));
        }
    }
    // An earlier aborted attempt's deletion must not run over what we are about to receive.
    let wait = Duration::from_millis(RANGE_DELETION_WAIT_MS);
    if tokio::time::timeout(wait, sharding.wait_for_range_deletion(&record.ns, &record.min, &record.max)).await.is_err()
    {
        return Err(MigrationError::refused(
            ErrorCode::ConflictingOperationInProgress,
            format!("a deletion of an overlapping range of {} is still running", record.ns),
        ));
    }
    let (store, rec, ns) = (Arc::clone(&node.store), record.clone(), ns.clone());
    let removed = tokio::task::spawn_blocking(move || -> Result<u64, MigrationError> {
        rec.save(&store, Side::Recipient)?;
        // The donor's indexes exist before its documents arrive, so they arrive indexed.
        store.write(|txn| {
            let (coll, _) = txn.ensure_collection(&ns, options)?;
            txn.ensure_indexes(&coll, indexes)
        })?;
        let task = RangeDeletion {
            ns: rec.ns.clone(),
            uuid: rec.uuid,
            key: rec.key_fields(),
            min: rec.min.clone(),
            max: rec.max.clone(),
        };
        let parts = vec![(rec.min.clone(), rec.max.clone())];
        let (mut removed, mut after) = (0, None);
        loop {
            let (n, next) = delete_batch(&store, &task, &parts, after)?;
            removed += n;
            match next {
                Some(k) => after = Some(k),
                None => return Ok(removed),
            }
        }
    })
    .await
    .map_err(internal)??;
    tracing::info!(id = %record.id, ns = %record.ns, from = %record.from, leftovers_removed = removed, "receiving a range");
    failpoint::hit("migration.recipient_after_start");
    Ok(())
}

/// `ReceiveBatch`: apply the mods in one store write, wait until durable, then ack.
pub async fn batch(mig: &Migrations, req: ReceiveBatchRequest) -> Result<(), MigrationError> {
    let record = mig.receiving(&req.migration_id).ok_or_else(|| {
        MigrationError::refused(
            ErrorCode::OperationFailed,
            format!("migration {} is not running here (aborted, or this shard restarted)", req.migration_id),
        )
    })?;
    let mut mods = Vec::with_capacity(req.mods.len());
    for m in &req.mods {
        let raw = RawDocumentBuf::from_bytes(m.doc.to_vec()).map_err(ExecError::from)?;
        mods.push(if m.delete {
            let id = raw.get("_id").ok().flatten().and_then(|v| bson::Bson::try_from(v).ok());
            Mod::Delete(id.ok_or_else(|| MigrationError::refused(ErrorCode::BadValue, "delete without _id"))?)
        } else {
            Mod::Upsert(raw)
        });
    }
    let sessions: Vec<(bytes::Bytes, bytes::Bytes)> = req.sessions.into_iter().map(|s| (s.key, s.value)).collect();
    let store = Arc::clone(&mig.node.store);
    let (applied, seq) =
        tokio::task::spawn_blocking(move || apply(&store, &record, &mods, &sessions)).await.map_err(internal)??;
    debug_assert!(seq <= mig.node.store.position().seq);
    super::majority_committed(&mig.node).await?;
    tracing::debug!(id = %req.migration_id, applied, "batch majority-committed");
    failpoint::hit("migration.recipient_after_batch");
    Ok(())
}

fn apply(
    store: &crate::store::Store,
    record: &Record,
    mods: &[Mod],
    sessions: &[(bytes::Bytes, bytes::Bytes)],
) -> Result<(usize, u64), MigrationError> {
    let key = record.key_fields();
    let filter = RangeFilter { ns: &record.ns, key: &key, min: &record.min, max: &record.max };
    let out = store.write(|txn| {
        txn.set_from_migrate(true);
        let Some(coll) = txn.collection(&record.ns) else {
            return Ok(Err(MigrationError::refused(ErrorCode::NamespaceNotFound, format!("{} is gone", record.ns))));
        };
        for m in mods {
            match m {
                Mod::Upsert(doc) => {
                    let id =
                        doc.get("_id").ok().flatten().and_then(|v| bson::Bson::try_from(v).ok()).ok_or_else(|| {
                            StorageError::Corrupt { space: "migration", detail: "document without _id".into() }
                        })?;
                    if txn.get(&coll, &id)?.is_some() {
                        txn.update(&coll, &id, doc)?;
                    } else {
                        txn.insert(&coll, &id, doc)?;
                    }
                }
                Mod::Delete(id) => {
                    let Some(raw) = txn.get(&coll, id)? else { continue };
                    if Document::from_reader(&mut &raw[..]).ok().is_some_and(|d| filter.contains(&d)) {
                        txn.delete(&coll, id)?;
                    }
                }
            }
        }
        crate::exec::retry::merge(txn, sessions)?;
        Ok(Ok(mods.len()))
    })?;
    let (applied, seq) = out;
    Ok((applied?, seq))
}

/// `ReceiveCommit`: the catalog names us owner; refresh and drop the record.
pub async fn commit(mig: &Migrations, req: ReceiveEndRequest) -> Result<(), MigrationError> {
    let Some(record) = mig.receiving(&req.migration_id) else { return Ok(()) };
    failpoint::hit("migration.recipient_before_commit");
    if let Err(e) = mig.node.sharding.refresh(&record.ns).await {
        // The next versioned request refreshes again; the data is ours either way.
        tracing::warn!(id = %record.id, error = %e, "refresh after commit failed");
    }
    let (store, id) = (Arc::clone(&mig.node.store), record.id.clone());
    tokio::task::spawn_blocking(move || Record::remove(&store, Side::Recipient, &id)).await.map_err(internal)??;
    mig.release(&record.id);
    tracing::info!(id = %record.id, ns = %record.ns, "received range committed");
    Ok(())
}

/// `ReceiveAbort`: schedule deletion of what was received, drop the record.
pub async fn abort(mig: &Migrations, req: ReceiveEndRequest) -> Result<(), MigrationError> {
    let Some(record) = mig.receiving(&req.migration_id) else { return Ok(()) };
    abort_record(mig, &record).await?;
    mig.release(&record.id);
    tracing::info!(id = %record.id, ns = %record.ns, "receive aborted; the range will be deleted");
    Ok(())
}

/// Schedules deletion of `record`'s range (the deleter keeps whatever this shard owns by then)
/// and removes the record.
pub async fn abort_record(mig: &Migrations, record: &Record) -> Result<(), MigrationError> {
    let task = RangeDeletion {
        ns: record.ns.clone(),
        uuid: record.uuid,
        key: record.key_fields(),
        min: record.min.clone(),
        max: record.max.clone(),
    };
    let node = &mig.node;
    node.sharding.schedule_range_deletion(&node.store, &node.cursors, task).await?;
    let (store, id) = (Arc::clone(&node.store), record.id.clone());
    tokio::task::spawn_blocking(move || Record::remove(&store, Side::Recipient, &id)).await.map_err(internal)??;
    Ok(())
}
