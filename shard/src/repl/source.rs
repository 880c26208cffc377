//! The primary's side of replication: the `Replication` gRPC service that streams the oplog to
//! secondaries, answers rollback's optime questions and serves initial-sync clones.
//!
//! A stream starts only if this member is primary of the secondary's term and holds the
//! secondary's last entry with the same term: then everything after it is the same history, and
//! the entries that follow extend it. Otherwise the refusal tells the secondary what to do
//! (`NotPrimary`: ask the config service again; `Diverged`: roll back; `TooStale`: resync).
//! The stream ends when this member stops being primary of that term.

use std::pin::Pin;
use std::sync::Arc;

use bson::RawDocument;
use bytes::Bytes;
use futures::Stream;
use shoal_proto::shard::replication_server::Replication;
use shoal_proto::shard::{CloneChunk, CloneRequest, OpTimesReply, OpTimesRequest, SyncBatch, SyncRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::state::MemberState;
use super::wire::{from_shard, to_shard};
use super::{Repl, RoleView};
use crate::storage::StorageError;
use crate::store::Store;
use crate::store::oplog::{EntryView, OpTime};

/// Most optimes one `OpTimes` call returns.
pub const OPTIMES_PER_CALL_MAX: u32 = 10_000;
/// Waiting for a new stream's first message.
const FIRST_MESSAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

pub struct ReplicationService {
    repl: Arc<Repl>,
}

impl ReplicationService {
    pub fn new(repl: Arc<Repl>) -> Self {
        Self { repl }
    }
}

/// Why a stream cannot start from a member's last entry.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    NotPrimary,
    Diverged,
    TooStale,
}

impl Refusal {
    pub fn name(&self) -> &'static str {
        match self {
            Refusal::NotPrimary => "NotPrimary",
            Refusal::Diverged => "Diverged",
            Refusal::TooStale => "TooStale",
        }
    }
}

fn refusal(r: Refusal, message: String, term: u64) -> SyncBatch {
    SyncBatch { refusal: r.name().into(), message, term, ..Default::default() }
}

/// Whether this oplog continues a member's history that ends at `last`.
pub fn check_start(store: &Store, last: OpTime) -> Result<Result<(), Refusal>, StorageError> {
    if last.is_zero() {
        // An empty member copies everything first: the oplog may not reach back to the start.
        return Ok(Err(Refusal::TooStale));
    }
    if let Some(raw) = store.oplog_entry(last.timestamp())? {
        let doc = RawDocument::from_bytes(&raw)
            .map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
        let here = EntryView::parse(doc)?.optime;
        return Ok(if here == last { Ok(()) } else { Err(Refusal::Diverged) });
    }
    match store.oplog_first()? {
        Some(first) if crate::store::oplog::TsKey::from(first) > last.ts => Ok(Err(Refusal::TooStale)),
        _ => Ok(Err(Refusal::Diverged)),
    }
}

/// Up to the settings' limits of entries after `after`, with the newest one's timestamp.
fn read_batch(
    store: &Store,
    after: bson::Timestamp,
    entries_max: usize,
    bytes_max: usize,
) -> Result<Vec<Bytes>, StorageError> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for kv in store.oplog_after(after) {
        let (_, value) = kv?;
        bytes += value.len();
        out.push(value);
        if out.len() >= entries_max || bytes >= bytes_max {
            break;
        }
    }
    Ok(out)
}

fn last_ts(entries: &[Bytes]) -> Result<bson::Timestamp, StorageError> {
    let raw = entries.last().ok_or_else(|| StorageError::Corrupt { space: "oplog", detail: "empty batch".into() })?;
    let doc =
        RawDocument::from_bytes(raw).map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
    Ok(EntryView::parse(doc)?.optime.timestamp())
}

fn still_primary(view: &RoleView, term: u64) -> bool {
    view.term == term && matches!(view.state, MemberState::Primary)
}

/// Sends batches after `last` until the member goes away or this member stops being primary.
/// A secondary keeping up is served from the store's in-memory tail; one further behind from storage.
async fn stream_entries(repl: Arc<Repl>, term: u64, last: OpTime, tx: mpsc::Sender<Result<SyncBatch, Status>>) {
    let settings = repl.settings.clone();
    let mut cursor = last.timestamp();
    let mut positions = repl.store.subscribe();
    let mut commits = repl.subscribe_commit_point();
    let mut roles = repl.subscribe_role();
    let mut sent_commit = OpTime::ZERO;
    loop {
        if !still_primary(&roles.borrow_and_update(), term) {
            let _ = tx.send(Ok(refusal(Refusal::NotPrimary, format!("no longer primary of term {term}"), term))).await;
            return;
        }
        positions.borrow_and_update();
        let store = Arc::clone(&repl.store);
        let (entries_max, bytes_max) = (settings.batch_entries_max, settings.batch_bytes_max);
        let batch = match store.oplog_tail_after(cursor, entries_max, bytes_max) {
            // What was just written is in memory: no storage read, no blocking-pool hop.
            Some((entries, next)) => Ok(Ok((!store.oplog_truncated_after(cursor)).then_some((entries, next)))),
            None => {
                tokio::task::spawn_blocking(move || {
                    let entries = read_batch(&store, cursor, entries_max, bytes_max)?;
                    // Checked after the read: truncation marks before it deletes (store::oplog_size).
                    if store.oplog_truncated_after(cursor) {
                        return Ok(None);
                    }
                    let next = if entries.is_empty() { cursor } else { last_ts(&entries)? };
                    Ok::<_, StorageError>(Some((entries, next)))
                })
                .await
            }
        };
        let (entries, next) = match batch {
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => {
                let message = format!("the oplog was truncated past {cursor:?} before the secondary had it");
                tracing::warn!(%message, "secondary fell off the oplog");
                let _ = tx.send(Ok(refusal(Refusal::TooStale, message, term))).await;
                return;
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "reading the oplog for a secondary failed");
                let _ = tx.send(Err(Status::internal(e.to_string()))).await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(Status::internal(e.to_string()))).await;
                return;
            }
        };
        let commit_point = repl.commit_point();
        if !entries.is_empty() || commit_point != sent_commit {
            cursor = next;
            sent_commit = commit_point;
            let batch = SyncBatch { entries, commit_point: Some(to_shard(commit_point)), term, ..Default::default() };
            if tx.send(Ok(batch)).await.is_err() {
                return;
            }
            continue;
        }
        tokio::select! {
            _ = positions.changed() => {}
            _ = commits.changed() => {}
            _ = roles.changed() => {}
            _ = tokio::time::sleep(settings.keepalive_interval) => {
                let keepalive = SyncBatch { commit_point: Some(to_shard(commit_point)), term, ..Default::default() };
                if tx.send(Ok(keepalive)).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[tonic::async_trait]
impl Replication for ReplicationService {
    type SyncStream = BoxStream<SyncBatch>;
    type CloneDataStream = BoxStream<CloneChunk>;

    async fn sync(&self, request: Request<Streaming<SyncRequest>>) -> Result<Response<Self::SyncStream>, Status> {
        let mut inbound = request.into_inner();
        let first = match tokio::time::timeout(FIRST_MESSAGE_TIMEOUT, inbound.message()).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => return Err(Status::invalid_argument("the stream ended before its first message")),
            Ok(Err(s)) => return Err(s),
            Err(_) => return Err(Status::deadline_exceeded("no first message")),
        };
        let (tx, rx) = mpsc::channel(4);
        let view = self.repl.role();
        let reply = |b: SyncBatch| -> Result<Response<Self::SyncStream>, Status> {
            Ok(Response::new(Box::pin(tokio_stream::once(Ok(b)))))
        };
        if !still_primary(&view, first.term) {
            let msg = format!(
                "{} is not primary of term {} (term {}, {})",
                self.repl.me,
                first.term,
                view.term,
                view.state.name()
            );
            return reply(refusal(Refusal::NotPrimary, msg, view.term));
        }
        let last = from_shard(first.last.as_ref());
        let store = Arc::clone(&self.repl.store);
        let start = tokio::task::spawn_blocking(move || check_start(&store, last))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(e.to_string()))?;
        if let Err(r) = start {
            let msg = format!("{} cannot continue from {last}: {}", self.repl.me, r.name());
            tracing::info!(member = %first.member, %last, refusal = r.name(), "sync stream refused");
            return reply(refusal(r, msg, view.term));
        }
        tracing::info!(member = %first.member, %last, term = first.term, "secondary syncing");
        let member = first.member.clone();
        self.repl.record_progress(&member, from_shard(first.applied.as_ref()), from_shard(first.durable.as_ref()));
        let repl = Arc::clone(&self.repl);
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                repl.record_progress(&member, from_shard(m.applied.as_ref()), from_shard(m.durable.as_ref()));
            }
        });
        tokio::spawn(stream_entries(Arc::clone(&self.repl), first.term, last, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn op_times(&self, request: Request<OpTimesRequest>) -> Result<Response<OpTimesReply>, Status> {
        let req = request.into_inner();
        let at = from_shard(req.at.as_ref());
        let limit = req.limit.clamp(1, OPTIMES_PER_CALL_MAX) as usize;
        let store = Arc::clone(&self.repl.store);
        let optimes = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for kv in store.oplog_before(at.timestamp()).take(limit) {
                let (_, value) = kv?;
                let doc = RawDocument::from_bytes(&value)
                    .map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
                out.push(to_shard(EntryView::parse(doc)?.optime));
            }
            Ok::<_, StorageError>(out)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(OpTimesReply { optimes }))
    }

    async fn clone_data(&self, request: Request<CloneRequest>) -> Result<Response<Self::CloneDataStream>, Status> {
        let member = request.into_inner().member;
        let view = self.repl.role();
        // Members clone from the primary they were told to follow, once it is one (it has
        // written its term's no-op, so its oplog is never empty).
        if view.state != MemberState::Primary {
            return Err(Status::unavailable(format!("{} is {}, not primary", self.repl.me, view.state.name())));
        }
        tracing::info!(%member, "initial sync clone started");
        let (tx, rx) = mpsc::channel(4);
        let store = Arc::clone(&self.repl.store);
        let bytes_max = self.repl.settings.batch_bytes_max;
        tokio::task::spawn_blocking(move || {
            if let Err(e) = super::initial_sync::produce_clone(&store, bytes_max, &tx) {
                tracing::warn!(%member, error = %e, "initial sync clone failed");
                let _ = tx.blocking_send(Err(Status::internal(e.to_string())));
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
