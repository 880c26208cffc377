//! Call, the third step: requests to shards, and their answers as [`CommandError`]s or replies.
//!
//! Owns: the StaleConfig retry around a step that depends on the placement
//! ([`with_placement`]), a read's calls to the shards its route names ([`read`]), the requests
//! sent ([`request`]), reads off the primary by read preference ([`member`]), the channels to a
//! shard with their timeouts ([`channels`]), and here one gRPC call to one shard's primary by
//! id, its transport and top-level errors mapped to [`CommandError`]s (StaleConfig included, for
//! the retry), and draining a shard cursor for a merge.
//!
//! A request that certainly did not run because the shard's member is not (or no longer) the
//! primary — it answered NotWritablePrimary, or could not be reached at all — is sent again to
//! the group's primary once the catalog names one, for up to [`FAILOVER_WAIT_MAX`]. Reads are
//! also retried after a connection that broke mid-call. Nothing else is retried here.
//!
//! Must not: choose shards, or resend a write that may have run (retryable writes are the
//! driver's, deduplicated by the shard).

pub mod broadcast;
pub mod channels;
pub mod donor;
pub mod exchange;
pub mod member;
pub mod read;
pub mod request;
mod stale;

pub use broadcast::broadcast;
pub use read::read;
pub use stale::with_placement;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::{CommandRequest, CursorReply, GetMoreRequest, KillCursorsRequest, WriteReply};

use crate::error::CommandError;
use crate::routing;
use crate::state::RouterState;

/// Bytes a merged (scatter) result may hold on the router.
pub const MERGE_BYTES_MAX: usize = 256 << 20;

#[derive(Debug, Clone, Copy)]
pub enum WriteKind {
    Insert,
    Update,
    Delete,
}

impl WriteKind {
    /// The array (or kind-1 sequence) that holds the write's statements.
    pub fn items_field(self) -> &'static str {
        match self {
            WriteKind::Insert => "documents",
            WriteKind::Update => "updates",
            WriteKind::Delete => "deletes",
        }
    }
}

/// How long a request waits for its shard's replica group to have a reachable primary.
pub const FAILOVER_WAIT_MAX: Duration = Duration::from_secs(20);
/// Pause between attempts while waiting, doubling up to [`FAILOVER_PAUSE_MAX`].
pub const FAILOVER_PAUSE_MIN: Duration = Duration::from_millis(50);
pub const FAILOVER_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Errors after which the request did not run on the shard: another member may take it.
fn not_run(e: &CommandError) -> bool {
    [
        ErrorCode::NotWritablePrimary,
        ErrorCode::NotPrimaryNoSecondaryOk,
        ErrorCode::NotPrimaryOrSecondary,
        ErrorCode::HostUnreachable,
    ]
    .iter()
    .any(|&c| e.is(c))
}

/// Errors a request that may run twice (a read, a retryable write) is resent after.
pub fn resendable_after(e: &CommandError) -> bool {
    not_run(e)
        || [ErrorCode::SocketException, ErrorCode::InterruptedDueToReplStateChange, ErrorCode::PrimarySteppedDown]
            .iter()
            .any(|&c| e.is(c))
}

/// How often a request in flight checks whether its member is still the named primary.
const REPLACED_POLL: Duration = Duration::from_millis(100);

/// Returns once the catalog names another primary of `shard` than `called` (never if `called`
/// is unknown). A request still waiting on a replaced primary (paused, partitioned) is abandoned
/// instead of waiting out the RPC timeout: that member's lease lapsed before the new primary was
/// named, so it can no longer commit the request, and an acknowledgment it owes could only be of
/// something a majority never had (rolled back later).
async fn replaced(state: &RouterState, shard: &str, called: Option<&str>) {
    let Some(called) = called else { return std::future::pending().await };
    loop {
        tokio::time::sleep(REPLACED_POLL).await;
        if state.shards.primary(shard).is_some_and(|now| now != called) {
            return;
        }
    }
}

/// Runs `call` on `shard`'s current primary, again on the next one after a failover.
async fn on_primary<T, F, Fut>(
    state: &RouterState,
    shard: &str,
    may_run_twice: bool,
    call: F,
) -> Result<T, CommandError>
where
    F: FnMut(Arc<crate::exec::call::channels::ShardPool>) -> Fut,
    Fut: Future<Output = Result<T, CommandError>>,
{
    on_primary_watching(state, shard, may_run_twice, true, call).await
}

/// [`on_primary`]; `abandon_if_replaced: false` keeps waiting for the reply of a member the
/// catalog no longer names primary (a step-down it was asked for).
async fn on_primary_watching<T, F, Fut>(
    state: &RouterState,
    shard: &str,
    may_run_twice: bool,
    abandon_if_replaced: bool,
    mut call: F,
) -> Result<T, CommandError>
where
    F: FnMut(Arc<crate::exec::call::channels::ShardPool>) -> Fut,
    Fut: Future<Output = Result<T, CommandError>>,
{
    let started = Instant::now();
    let mut pause = FAILOVER_PAUSE_MIN;
    loop {
        let pool = routing::pool(state, shard).await?;
        let called = state.shards.primary(shard).filter(|_| abandon_if_replaced);
        let attempt = Instant::now();
        let e = tokio::select! {
            r = call(pool) => {
                state.counters.routing.shard_call(shard, attempt.elapsed());
                match r {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                }
            }
            () = replaced(state, shard, called.as_deref()) => CommandError::new(
                ErrorCode::InterruptedDueToReplStateChange,
                format!("{shard}'s primary {} was replaced while the request ran there", called.as_deref().unwrap_or("?")),
            ),
        };
        let retry = if may_run_twice { resendable_after(&e) } else { not_run(&e) };
        if !retry || started.elapsed() + pause > FAILOVER_WAIT_MAX || !state.catalog.is_configured() {
            return Err(e);
        }
        tracing::debug!(%shard, code = e.code, error = %e.errmsg, "shard primary unavailable; waiting for the next");
        state.counters.routing.failover_wait(shard);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(FAILOVER_PAUSE_MAX);
        // Point the shard's channels at whatever primary the catalog names now (any config
        // server's applied catalog: the config service may be electing a leader meanwhile).
        match routing::refresh_shards_applied(state).await {
            Ok(_) => tracing::debug!(%shard, primary = ?state.shards.primary(shard), "shards read while waiting"),
            Err(err) => tracing::debug!(error = %err, "shards read while waiting for a primary failed"),
        }
    }
}

/// Whether `req` may run twice without harm: the shard deduplicates writes with a `txnNumber`.
fn idempotent(req: &CommandRequest) -> bool {
    bson::RawDocument::from_bytes(&req.body).is_ok_and(crate::retryable::has_txn_number)
}

pub async fn write(
    state: &RouterState,
    shard: &str,
    kind: WriteKind,
    req: CommandRequest,
) -> Result<WriteReply, CommandError> {
    on_primary(state, shard, idempotent(&req), |pool| {
        let req = req.clone();
        async move {
            let reply = pool.write(kind, req).await?;
            match reply.error {
                Some(e) => Err(e.into()),
                None => Ok(reply),
            }
        }
    })
    .await
}

/// One `find` (`aggregate: false`) or `aggregate` call on `pool`'s member: its first batch.
pub async fn open_cursor(
    pool: Arc<crate::exec::call::channels::ShardPool>,
    req: CommandRequest,
    aggregate: bool,
) -> Result<CursorReply, CommandError> {
    let reply = pool.open_cursor(req, aggregate).await?;
    match reply.error {
        Some(e) => Err(e.into()),
        None => Ok(reply),
    }
}

/// One `Command` call on `pool`'s member: the reply document and its `writeConcernError`.
pub async fn one_command(
    pool: Arc<crate::exec::call::channels::ShardPool>,
    req: CommandRequest,
) -> Result<(bson::Document, Option<CommandError>), CommandError> {
    let reply = pool.client().command(req).await.map_err(|s| pool.status_error(&s))?.into_inner();
    if let Some(e) = reply.error {
        return Err(e.into());
    }
    let doc = bson::Document::from_reader(&mut reply.body.as_ref())?;
    Ok((doc, reply.write_concern_error.map(Into::into)))
}

/// A command whose reply is one document (with the shard's `writeConcernError`, if any).
pub async fn command_with_wc(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    read: bool,
) -> Result<(bson::Document, Option<CommandError>), CommandError> {
    let read = read || idempotent(&req);
    on_primary(state, shard, read, |pool| one_command(pool, req.clone())).await
}

/// A command whose reply is one document.
pub async fn command(state: &RouterState, shard: &str, req: CommandRequest) -> Result<bson::Document, CommandError> {
    command_with_wc(state, shard, req, false).await.map(|(doc, _)| doc)
}

/// `replSetStepDown` on `shard`'s primary. It answers once the catalog names the next primary,
/// so the call is not abandoned when the router sees that (any other call would be).
pub async fn step_down(state: &RouterState, shard: &str, req: CommandRequest) -> Result<bson::Document, CommandError> {
    on_primary_watching(state, shard, false, false, |pool| one_command(pool, req.clone())).await.map(|(doc, _)| doc)
}

/// `find` (`aggregate: false`) or `aggregate`.
pub async fn cursor(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    aggregate: bool,
) -> Result<CursorReply, CommandError> {
    on_primary(state, shard, true, |pool| open_cursor(pool, req.clone(), aggregate)).await
}

/// Every document of a shard cursor, starting with its first batch.
pub async fn drain(
    state: &RouterState,
    shard: &str,
    request_id: &str,
    first: CursorReply,
    served: Option<&str>,
) -> Result<Vec<Bytes>, CommandError> {
    let pool = crate::exec::call::member::cursor_pool(state, shard, served).await?;
    let mut docs = first.documents;
    let mut bytes: usize = docs.iter().map(Bytes::len).sum();
    let mut cursor_id = first.cursor_id;
    while cursor_id != 0 {
        if bytes > MERGE_BYTES_MAX {
            let req = KillCursorsRequest { request_id: request_id.to_owned(), cursor_ids: vec![cursor_id] };
            let _ = pool.client().kill_cursors(req).await;
            return Err(CommandError::new(
                shoal_proto::ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!("a multi-shard result exceeds the router's merge limit of {MERGE_BYTES_MAX} bytes"),
            ));
        }
        let req = GetMoreRequest {
            request_id: request_id.to_owned(),
            cursor_id,
            batch_size: 0,
            ns: first.ns.clone(),
            client: None,
        };
        let reply = pool.client().get_more(req).await.map_err(|s| pool.status_error(&s))?.into_inner();
        if let Some(e) = reply.error {
            return Err(e.into());
        }
        bytes += reply.documents.iter().map(Bytes::len).sum::<usize>();
        docs.extend(reply.documents);
        cursor_id = reply.cursor_id;
    }
    Ok(docs)
}
