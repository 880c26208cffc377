//! The secondary's loop: follow the primary the config service named for this member's term,
//! pulling its oplog from the last entry this member has and applying it in order.
//!
//! A batch is applied only while the member is still in the term the stream was opened in (under
//! [`Repl::apply_gate`]): once it learns a newer term its optime freezes, which is what lets the
//! config service compare frozen optimes to pick the next primary. Progress (applied, durable)
//! flows back on the same stream and moves the primary's commit point.

use std::sync::Arc;
use std::time::Duration;

use shoal_proto::shard::SyncRequest;
use shoal_proto::shard::replication_client::ReplicationClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::state::MemberState;
use super::wire::{from_shard, to_shard};
use super::{Repl, RoleView, initial_sync, rollback};
use crate::storage::StorageError;
use crate::store::oplog::OpTime;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("sync source: {0}")]
    Transport(String),
    #[error("sync source refused: {refusal}: {message}")]
    Refused { refusal: String, message: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// `call` within `limit`, a silent peer being a transport failure.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, FetchError> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(reply)) => Ok(reply.into_inner()),
        Ok(Err(s)) => Err(FetchError::Transport(format!("{what}: {}", s.message()))),
        Err(_) => Err(FetchError::Transport(format!("{what}: no answer within {} ms", limit.as_millis()))),
    }
}

/// A gRPC client for `source` (`host:port`).
pub async fn connect(repl: &Repl, source: &str) -> Result<ReplicationClient<Channel>, FetchError> {
    let endpoint = tonic::transport::Endpoint::from_shared(shoal_proto::endpoint::uri(source))
        .map_err(|e| FetchError::Transport(format!("bad address {source}: {e}")))?
        .connect_timeout(repl.settings.connect_timeout)
        .tcp_nodelay(true);
    let channel = tokio::time::timeout(repl.settings.connect_timeout, shoal_cluster::net::channel_now(&endpoint))
        .await
        .map_err(|_| FetchError::Transport(format!("{source}: connect timed out")))?
        .map_err(|e| FetchError::Transport(format!("{source}: {e}")))?;
    Ok(ReplicationClient::new(channel)
        .max_decoding_message_size(shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES)
        .max_encoding_message_size(shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES))
}

/// The source to follow, if this member should follow one now.
fn source_of(repl: &Repl, view: &RoleView) -> Option<String> {
    match (&view.state, &view.primary) {
        (MemberState::Secondary | MemberState::Startup2 | MemberState::Rollback, Some(p)) if *p != repl.me => {
            Some(p.clone())
        }
        _ => None,
    }
}

/// Runs for the member's lifetime.
pub async fn run(repl: Arc<Repl>) {
    let mut roles = repl.subscribe_role();
    let mut pause = repl.settings.retry_pause_min;
    loop {
        let view = roles.borrow_and_update().clone();
        let Some(source) = source_of(&repl, &view) else {
            if roles.changed().await.is_err() {
                return;
            }
            continue;
        };
        let outcome = follow_once(&repl, &source, &view, &mut roles).await;
        match outcome {
            Ok(()) => pause = repl.settings.retry_pause_min,
            Err(FetchError::Refused { refusal, message }) if refusal == "Diverged" => {
                tracing::warn!(%source, %message, "diverged from the primary: rolling back");
                match rollback::run(&repl, &source).await {
                    Ok(()) => pause = repl.settings.retry_pause_min,
                    Err(e) => {
                        tracing::error!(%source, error = %e, "rollback failed");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(repl.settings.retry_pause_max);
                    }
                }
            }
            Err(FetchError::Refused { refusal, message }) if refusal == "TooStale" => {
                tracing::warn!(%source, %message, "too far behind the primary's oplog: resyncing");
                let store = Arc::clone(&repl.store);
                let _ = tokio::task::spawn_blocking(move || store.wipe()).await;
            }
            Err(e) => {
                tracing::debug!(%source, error = %e, "following the primary failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = roles.changed() => {}
                }
                pause = (pause * 2).min(repl.settings.retry_pause_max);
            }
        }
    }
}

/// One stream from `source`, after an initial sync if this member has no oplog. Returns `Ok`
/// when the member's role changed (the caller looks again).
async fn follow_once(
    repl: &Arc<Repl>,
    source: &str,
    view: &RoleView,
    roles: &mut tokio::sync::watch::Receiver<RoleView>,
) -> Result<(), FetchError> {
    if repl.store.position().optime.is_zero() {
        let min_valid = initial_sync::run(repl, source).await?;
        repl.lock().min_valid = Some(min_valid);
    }
    // Already past an initial sync's or rollback's `min_valid` (nothing was written meanwhile):
    // consistent now, not at the next batch.
    repl.applied(repl.store.position().optime);
    let mut client = connect(repl, source).await?;
    let (progress_tx, progress_rx) = mpsc::channel::<SyncRequest>(16);
    let last = repl.store.position().optime;
    let first = SyncRequest {
        member: repl.me.clone(),
        term: view.term,
        last: Some(to_shard(last)),
        applied: Some(to_shard(last)),
        durable: Some(to_shard(repl.lock().durable)),
    };
    progress_tx.send(first).await.map_err(|_| FetchError::Transport("progress channel closed".into()))?;
    // A source that accepts connections but does not answer (paused, hung) must not hold this
    // member: the stream has to start within the connect timeout.
    let started = tokio::time::timeout(repl.settings.connect_timeout, client.sync(ReceiverStream::new(progress_rx)));
    let mut inbound = started
        .await
        .map_err(|_| FetchError::Transport(format!("{source} did not answer the sync request")))?
        .map_err(|s| FetchError::Transport(s.message().to_owned()))?
        .into_inner();
    let reporter = tokio::spawn(report_progress(Arc::clone(repl), progress_tx));
    let _stop_reporter = AbortOnDrop(reporter);
    tracing::info!(%source, term = view.term, %last, "following the primary");
    loop {
        let next = tokio::select! {
            m = tokio::time::timeout(repl.settings.stream_idle_timeout, inbound.message()) => m,
            _ = roles.changed() => {
                if source_of(repl, &roles.borrow()).as_deref() != Some(source) || roles.borrow().term != view.term {
                    return Ok(());
                }
                continue;
            }
        };
        let batch = match next {
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => return Err(FetchError::Transport("the stream ended".into())),
            Ok(Err(s)) => return Err(FetchError::Transport(s.message().to_owned())),
            Err(_) => return Err(FetchError::Transport("the stream went silent".into())),
        };
        if !batch.refusal.is_empty() {
            return Err(FetchError::Refused { refusal: batch.refusal, message: batch.message });
        }
        if !batch.entries.is_empty() {
            let _gate = repl.apply_gate.lock().await;
            if repl.role().term != view.term {
                // A newer term: this member's optime is frozen from here on.
                return Ok(());
            }
            let store = Arc::clone(&repl.store);
            let entries = batch.entries;
            let position = tokio::task::spawn_blocking(move || store.apply(&entries))
                .await
                .map_err(|e| FetchError::Transport(e.to_string()))??;
            repl.applied(position.optime);
        }
        repl.advance_commit_point(from_shard(batch.commit_point.as_ref()));
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends (applied, durable) whenever either moves, at most every few milliseconds, and at least
/// every keepalive interval: an idle secondary's reports are how its primary knows it still
/// reaches a majority (`Repl::step_down_if_isolated`).
async fn report_progress(repl: Arc<Repl>, tx: mpsc::Sender<SyncRequest>) {
    let mut changes = repl.subscribe_progress();
    let mut sent = (OpTime::ZERO, OpTime::ZERO);
    let mut last_sent = tokio::time::Instant::now();
    loop {
        let now = (repl.store.position().optime, repl.lock().durable);
        if now != sent || last_sent.elapsed() >= repl.settings.keepalive_interval {
            let report =
                SyncRequest { applied: Some(to_shard(now.0)), durable: Some(to_shard(now.1)), ..Default::default() };
            if tx.send(report).await.is_err() {
                return;
            }
            sent = now;
            last_sent = tokio::time::Instant::now();
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                // Coalesce what is already pending (a burst of batches) into one report.
                tokio::task::yield_now().await;
            }
            _ = tokio::time::sleep_until(last_sent + repl.settings.keepalive_interval) => {}
        }
    }
}
