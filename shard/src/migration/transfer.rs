//! What the donor moves: clone reads of the collection and catch-up reads of the oplog (blocking,
//! bounded per call), turned into batches the recipient acknowledges once durable.
//!
//! Must not: commit or abort (see `donor`, `outcome`).

use std::sync::Arc;

use bson::{Document, Timestamp};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::migration_client::MigrationClient;
use shoal_proto::shard::{MigrationMod, ReceiveBatchRequest, SessionRecord};
use tonic::transport::Channel;

use super::MigrationError;
use super::mods::{BATCH_BYTES_MAX, BATCH_DOCS_MAX, Mod, RangeFilter, Step, batches, id_document};
use super::record::Record;
use crate::sharding::range_scan;
use crate::store::Store;
use crate::store::local_catalog::CollectionInfo;

/// Documents one clone read examines (bounds a blocking-pool slice).
pub const CLONE_SCAN_DOCS_MAX: usize = 10_000;
/// Oplog entries one catch-up read examines.
pub const OPLOG_ENTRIES_PER_READ_MAX: usize = 20_000;

pub fn peer_err(peer: &str, e: tonic::Status) -> MigrationError {
    MigrationError::Peer { peer: peer.to_owned(), message: format!("unreachable: {}", e.message()) }
}

pub fn reply_ok(peer: &str, error: Option<shoal_proto::shard::CommandError>) -> Result<(), MigrationError> {
    match error {
        None => Ok(()),
        // A busy recipient is busy for the caller too: MongoDB clients retry 117.
        Some(e) if e.code == ErrorCode::ConflictingOperationInProgress.code() => {
            Err(MigrationError::Busy(format!("recipient {peer}: {}", e.errmsg)))
        }
        Some(e) => Err(MigrationError::Peer {
            peer: peer.to_owned(),
            message: format!("{} ({}): {}", e.code_name, e.code, e.errmsg),
        }),
    }
}

/// Sends `mods` in bounded batches, each acked once durable on the recipient.
pub async fn send(peer: &mut MigrationClient<Channel>, record: &Record, mods: Vec<Mod>) -> Result<(), MigrationError> {
    for batch in batches(mods) {
        let mods = batch
            .into_iter()
            .map(|m| match m {
                Mod::Upsert(d) => MigrationMod { doc: d.into_bytes().into(), delete: false },
                Mod::Delete(id) => {
                    MigrationMod { doc: id_document(&id).to_vec().unwrap_or_default().into(), delete: true }
                }
            })
            .collect();
        let req = ReceiveBatchRequest {
            request_id: record.id.clone(),
            migration_id: record.id.clone(),
            mods,
            sessions: Vec::new(),
        };
        let reply = peer.receive_batch(req).await.map_err(|e| peer_err(&record.to, e))?.into_inner();
        reply_ok(&record.to, reply.error)?;
    }
    Ok(())
}

/// The retryable-write session records of `ns` (read off the runtime), in batches of at most
/// [`BATCH_BYTES_MAX`] bytes (a single larger record still goes, alone).
pub async fn session_batches(store: &Arc<Store>, ns: &str) -> Result<Vec<Vec<SessionRecord>>, MigrationError> {
    let (s, ns) = (Arc::clone(store), ns.to_owned());
    let records = tokio::task::spawn_blocking(move || crate::exec::retry::records_of(&s, &ns))
        .await?
        .map_err(|e| MigrationError::refused(ErrorCode::InternalError, format!("reading session records: {e}")))?;
    let mut out = Vec::new();
    let mut batch: Vec<SessionRecord> = Vec::new();
    let mut bytes = 0;
    for (key, value) in records {
        if !batch.is_empty() && bytes + key.len() + value.len() > BATCH_BYTES_MAX {
            out.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += key.len() + value.len();
        batch.push(SessionRecord { key, value });
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    Ok(out)
}

/// The collection's retryable-write session records, sent once writes to it wait (so none is
/// missing): a statement retried at the recipient after the move is answered from its record
/// instead of running again. Answers how many were sent.
pub async fn send_sessions(
    store: &Arc<Store>,
    peer: &mut MigrationClient<Channel>,
    record: &Record,
) -> Result<usize, MigrationError> {
    let mut total = 0;
    for sessions in session_batches(store, &record.ns).await? {
        total += sessions.len();
        let req = ReceiveBatchRequest {
            request_id: record.id.clone(),
            migration_id: record.id.clone(),
            mods: Vec::new(),
            sessions,
        };
        let reply = peer.receive_batch(req).await.map_err(|e| peer_err(&record.to, e))?.into_inner();
        reply_ok(&record.to, reply.error)?;
    }
    Ok(total)
}

/// An empty batch: fails if the recipient no longer runs this migration (it restarted since its
/// last ack), so the donor aborts instead of committing a range the recipient forgot.
pub async fn ping(peer: &mut MigrationClient<Channel>, record: &Record) -> Result<(), MigrationError> {
    let req = ReceiveBatchRequest {
        request_id: record.id.clone(),
        migration_id: record.id.clone(),
        mods: Vec::new(),
        sessions: Vec::new(),
    };
    let reply = peer.receive_batch(req).await.map_err(|e| peer_err(&record.to, e))?.into_inner();
    reply_ok(&record.to, reply.error)
}

/// One catch-up pass: every oplog entry after `pos` available now. Answers (mods, bytes, new pos).
pub async fn catch_up(
    store: &Arc<Store>,
    peer: &mut MigrationClient<Channel>,
    record: &Record,
    mut pos: Timestamp,
) -> Result<(usize, usize, Timestamp), MigrationError> {
    let (mut total, mut bytes) = (0, 0);
    loop {
        let (s, r) = (Arc::clone(store), record.clone());
        let (mods, next, more) = tokio::task::spawn_blocking(move || read_oplog(&s, &r, pos)).await??;
        pos = next;
        total += mods.len();
        bytes += mods.iter().map(Mod::size_bytes).sum::<usize>();
        send(peer, record, mods).await?;
        if !more {
            return Ok((total, bytes, pos));
        }
    }
}

/// Oplog entries after `after` (at most [`OPLOG_ENTRIES_PER_READ_MAX`]) as mods of the range.
pub fn read_oplog(
    store: &Store,
    record: &Record,
    after: Timestamp,
) -> Result<(Vec<Mod>, Timestamp, bool), MigrationError> {
    let key = record.key_fields();
    let filter = RangeFilter { ns: &record.ns, key: &key, min: &record.min, max: &record.max };
    let (mut mods, mut last, mut examined) = (Vec::new(), after, 0);
    for kv in store.oplog_after(after) {
        let (k, v) = kv?;
        if let Some(ts) = crate::store::keys::oplog_ts(&k) {
            last = ts;
        }
        let entry = Document::from_reader(&mut &v[..]).map_err(crate::error::ExecError::from)?;
        match filter.step(&entry) {
            Step::Skip => {}
            Step::Apply(m) => mods.push(m),
            Step::Fail(why) => return Err(MigrationError::refused(ErrorCode::OperationFailed, why)),
        }
        examined += 1;
        if examined >= OPLOG_ENTRIES_PER_READ_MAX {
            return Ok((mods, last, true));
        }
    }
    Ok((mods, last, false))
}

/// Documents of the range after position `after` ([`range_scan`]'s, which reads the range by
/// the shard-key index when the collection has one): one batch's worth. Answers where the next
/// read starts (`None`: the scan is done).
pub fn clone_batch(
    store: &Store,
    coll: &CollectionInfo,
    record: &Record,
    after: Option<Bytes>,
) -> Result<(Vec<Mod>, Option<Bytes>), MigrationError> {
    let key = record.key_fields();
    let filter = RangeFilter { ns: &record.ns, key: &key, min: &record.min, max: &record.max };
    let (mut mods, mut bytes, mut examined) = (Vec::new(), 0, 0);
    for kv in range_scan::candidates(store, coll, &key, &record.min, &record.max, after.as_deref()) {
        let (k, raw) = kv?;
        let doc = Document::from_reader(&mut &raw[..]).map_err(crate::error::ExecError::from)?;
        examined += 1;
        if filter.contains(&doc) {
            bytes += raw.len();
            let raw = bson::RawDocumentBuf::from_bytes(raw.to_vec()).map_err(crate::error::ExecError::from)?;
            mods.push(Mod::Upsert(raw));
        }
        if examined >= CLONE_SCAN_DOCS_MAX || mods.len() >= BATCH_DOCS_MAX || bytes >= BATCH_BYTES_MAX {
            return Ok((mods, Some(k)));
        }
    }
    Ok((mods, None))
}
