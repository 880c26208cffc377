//! The recipient's side: `ReceiveStart`, `ReceiveBatch`, `ReceiveCommit`, `ReceiveAbort`.
//!
//! A batch is acknowledged only once durable. Batches name their migration id: after a restart
//! (or an abort) the id is unknown and every further call fails, so the donor aborts. Writes are
//! `fromMigrate` in the oplog, so a later migration of the range away from here skips them.
//!
//! `ReceiveStart`, `ReceiveCommit` and `ReceiveAbort` are runs of
//! [`super::recipient_machine::Receive`]: this module performs its actions and feeds back events.
//!
//! Must not: decide ownership (the donor's catalog commit does) or delete data directly except
//! leftovers of the range it is about to receive and does not own; decide what the machine
//! decides (what a failure frees, what the metadata allows).

use std::sync::Arc;
use std::time::Duration;

use bson::{Document, RawDocumentBuf};
use shoal_proto::shard::{ReceiveBatchRequest, ReceiveEndRequest, ReceiveStartRequest};
use shoal_proto::{ErrorCode, Namespace};
use uuid::Uuid;

use super::failpoint;
use super::mods::{Mod, RangeFilter};
use super::recipient_machine::{Action, Event, Ownership, Receive};
use super::record::{Phase, Record, Side};
use super::{MigrationError, Migrations, RANGE_DELETION_WAIT_MS, bound_from_wire};
use crate::error::ExecError;
use crate::metrics::MigrationEnd;
use crate::sharding::range_deleter::delete_batch;
use crate::sharding::{CollectionMetadata, RangeDeletion};
use crate::storage::StorageError;
use crate::store::indexes::IndexSpec;

/// What `ReceiveStart` carries beyond the record.
struct Incoming {
    ns: Namespace,
    options: Document,
    indexes: Vec<IndexSpec>,
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
    let indexes = crate::store::indexes::decode_listings(&req.indexes).map_err(ExecError::from)?;
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
    let running = mig.receiving(&record.id).is_some();
    let (machine, first) = Receive::start(&record, running);
    let result = drive(mig, machine, first, &record, Some(Incoming { ns, options, indexes })).await;
    if let Err(e) = &result {
        mig.node.metrics.migrations.ended(Side::Recipient, MigrationEnd::Refused);
        tracing::warn!(id = %record.id, error = %e, "receive start failed");
    }
    result
}

/// Runs `machine` to its end: perform the action, feed back the event.
async fn drive(
    mig: &Migrations,
    mut machine: Receive,
    mut action: Action,
    record: &Record,
    mut incoming: Option<Incoming>,
) -> Result<(), MigrationError> {
    let mut stale = None;
    loop {
        let event = match &action {
            Action::Finish(result) => return result.clone(),
            Action::Claim => match mig.claim(Side::Recipient, record) {
                Ok(replaced) => {
                    let event = Event::Claimed { replaced: replaced.is_some() };
                    stale = replaced;
                    event
                }
                Err(e) => Event::Failed(e),
            },
            Action::AbortStale => match stale.take() {
                Some(s) => {
                    tracing::warn!(stale = %s.record.id, "a new migration replaces an abandoned one; deleting what it received");
                    mig.node.metrics.migrations.ended(Side::Recipient, MigrationEnd::Aborted);
                    done(abort_record(mig, &s.record).await)
                }
                None => Event::Done,
            },
            Action::Refresh => refresh(mig, record).await,
            Action::WaitRangeDeletions => done(wait_range_deletions(mig, record).await),
            Action::PersistRecord => {
                let (store, rec) = (Arc::clone(&mig.node.store), record.clone());
                done(blocking(move || Ok(rec.save(&store, Side::Recipient)?)).await)
            }
            Action::CreateCollection => {
                let Some(Incoming { ns, options, indexes }) = incoming.take() else {
                    return Err(MigrationError::Task("ReceiveStart without its collection".into()));
                };
                // The donor's indexes exist before its documents arrive, so they arrive indexed.
                let store = Arc::clone(&mig.node.store);
                done(
                    blocking(move || {
                        store.write(|txn| {
                            let (coll, _) = txn.ensure_collection(&ns, options)?;
                            txn.ensure_indexes(&coll, indexes)
                        })?;
                        Ok(())
                    })
                    .await,
                )
            }
            Action::DeleteLeftovers => match delete_leftovers(mig, record).await {
                Ok(removed) => {
                    tracing::info!(id = %record.id, ns = %record.ns, from = %record.from, leftovers_removed = removed, "receiving a range");
                    failpoint::hit("migration.recipient_after_start");
                    Event::Done
                }
                Err(e) => Event::Failed(e),
            },
            Action::RemoveRecord => {
                let (store, id) = (Arc::clone(&mig.node.store), record.id.clone());
                done(blocking(move || Ok(Record::remove(&store, Side::Recipient, &id)?)).await)
            }
            Action::DeleteReceived => done(abort_record(mig, record).await),
            Action::Release => {
                mig.release(&record.id);
                Event::Done
            }
        };
        if let Event::Failed(e) = &event {
            tracing::warn!(id = %record.id, ?action, error = %e, "receive step failed");
        }
        action = machine.step(event);
    }
}

fn done(result: Result<(), MigrationError>) -> Event {
    result.map_or_else(Event::Failed, |()| Event::Done)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MigrationError> + Send + 'static,
) -> Result<T, MigrationError> {
    tokio::task::spawn_blocking(f).await?
}

/// Refreshes the collection and says how much of the range this shard's metadata gives it.
async fn refresh(mig: &Migrations, record: &Record) -> Event {
    let sharding = &mig.node.sharding;
    if let Err(e) = sharding.refresh(&record.ns).await {
        return Event::Failed(e.into());
    }
    let ownership = match sharding.metadata(&record.ns) {
        Some(CollectionMetadata::Sharded(m)) if m.table.uuid != record.uuid => Ownership::OtherIncarnation,
        Some(CollectionMetadata::Sharded(m))
            if m.ownership.unowned_parts(&record.min, &record.max)
                != vec![(record.min.clone(), record.max.clone())] =>
        {
            Ownership::OwnsPart
        }
        Some(CollectionMetadata::Sharded(_)) => Ownership::OwnsNone,
        _ => Ownership::Unsharded,
    };
    Event::Ownership(ownership)
}

/// Deletes what an earlier attempt left of the range (this shard owns none of it); answers how
/// many documents went.
async fn delete_leftovers(mig: &Migrations, record: &Record) -> Result<u64, MigrationError> {
    let (store, rec) = (Arc::clone(&mig.node.store), record.clone());
    blocking(move || {
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
}

/// `ReceiveBatch`: apply the mods in one store write, wait until durable, then ack.
pub async fn batch(mig: &Migrations, req: ReceiveBatchRequest) -> Result<(), MigrationError> {
    let record = mig.receiving(&req.migration_id).ok_or_else(|| {
        MigrationError::refused(
            ErrorCode::OperationFailed,
            format!("migration {} is not running here (aborted, or this shard restarted)", req.migration_id),
        )
    })?;
    let bytes: usize = req.mods.iter().map(|m| m.doc.len()).sum();
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
    let (applied, seq) = blocking(move || apply(&store, &record, &mods, &sessions)).await?;
    debug_assert!(seq <= mig.node.store.position().seq);
    super::majority_committed(&mig.node).await?;
    mig.node.metrics.migrations.moved(Side::Recipient, bytes as u64);
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
    // Not running here: settled already (a repeated call, or recovery's).
    let Some(record) = mig.receiving(&req.migration_id) else { return Ok(()) };
    failpoint::hit("migration.recipient_before_commit");
    let (machine, first) = Receive::commit();
    drive(mig, machine, first, &record, None).await?;
    mig.node.metrics.migrations.ended(Side::Recipient, MigrationEnd::Committed);
    tracing::info!(id = %record.id, ns = %record.ns, "received range committed");
    Ok(())
}

/// `ReceiveAbort`: schedule deletion of what was received, drop the record.
pub async fn abort(mig: &Migrations, req: ReceiveEndRequest) -> Result<(), MigrationError> {
    let Some(record) = mig.receiving(&req.migration_id) else { return Ok(()) };
    let (machine, first) = Receive::abort();
    drive(mig, machine, first, &record, None).await?;
    mig.node.metrics.migrations.ended(Side::Recipient, MigrationEnd::Aborted);
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
    blocking(move || Ok(Record::remove(&store, Side::Recipient, &id)?)).await
}

/// Waits for scheduled deletions overlapping the incoming range (an earlier owner's documents, or
/// an aborted attempt's) to finish: they must not run over what is about to arrive. A deletion
/// held back by reads that began before it (a client's open cursor on the range, which may stay
/// open indefinitely) fails the migration at once, naming it; one that is running gets
/// [`RANGE_DELETION_WAIT_MS`], less than the donor's call timeout, so the donor hears why.
async fn wait_range_deletions(mig: &Migrations, record: &Record) -> Result<(), MigrationError> {
    let (ns, min, max) = (&record.ns, &record.min, &record.max);
    let sharding = &mig.node.sharding;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(RANGE_DELETION_WAIT_MS);
    loop {
        if let Some((id, held_min, held_max)) = sharding.range_deletion_held_by_reads(&mig.node.cursors, ns, min, max) {
            return Err(MigrationError::refused(
                ErrorCode::ConflictingOperationInProgress,
                format!(
                    "cannot receive [{min}, {max}) of {ns}: this shard's deletion of the overlapping range \
                     [{held_min}, {held_max}) (range deletion {id}) waits for cursors and reads opened before it \
                     to finish; retry once they are closed (or killed)"
                ),
            ));
        }
        let poll = Duration::from_millis(crate::sharding::range_deleter::PIN_POLL_INTERVAL_MS);
        match tokio::time::timeout(poll, sharding.wait_for_range_deletion(ns, min, max)).await {
            Ok(()) => return Ok(()),
            Err(_) if tokio::time::Instant::now() >= deadline => {
                return Err(MigrationError::refused(
                    ErrorCode::ConflictingOperationInProgress,
                    format!(
                        "cannot receive [{min}, {max}) of {ns}: a deletion of an overlapping range is still \
                         running after {} s; retry later",
                        RANGE_DELETION_WAIT_MS / 1000
                    ),
                ));
            }
            Err(_) => {}
        }
    }
}
