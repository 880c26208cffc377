//! One gRPC call to one shard by id, its transport and top-level errors mapped to
//! [`CommandError`]s (StaleConfig included, for the caller's retry loop), and draining a shard
//! cursor for a merge.
//!
//! A request that certainly did not run because the shard's member is not (or no longer) the
//! primary — it answered NotWritablePrimary, or could not be reached at all — is sent again to
//! the group's primary once the catalog names one, for up to [`FAILOVER_WAIT_MAX`]. Reads are
//! also retried after a connection that broke mid-call. Nothing else is retried here.
//!
//! Reads carry the client's `$readPreference` (parsed again here from the forwarded body, so
//! every read path honours it): a mode other than `primary` asks `routing::members` for a member
//! and sends the request there with `secondary_ok`; the member that served a cursor is returned
//! ([`Served`]) so its `getMore`s and `killCursors` go to the same member. A failed member is
//! dropped from the cached view and another is chosen, within the same bounded wait.
//!
//! Must not: choose shards, or resend a write that may have run (retryable writes are the
//! driver's, deduplicated by the shard).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::{CommandRequest, CursorReply, GetMoreRequest, KillCursorsRequest, WriteReply};

use crate::error::CommandError;
use crate::routing;
use crate::routing::read_pref::{Choice, Mode, ReadPreference};
use crate::shard_client::ShardPool;
use crate::state::RouterState;

/// The member a cursor lives on: `None` for the primary (reached through the shard's channels,
/// which follow the catalog), else its `host:port`.
pub type Served = Option<String>;

/// Bytes a merged (scatter) result may hold on the router.
pub const MERGE_BYTES_MAX: usize = 256 << 20;

#[derive(Debug, Clone, Copy)]
pub enum WriteKind {
    Insert,
    Update,
    Delete,
}

/// How long a request waits for its shard's replica group to have a reachable primary.
pub const FAILOVER_WAIT_MAX: Duration = Duration::from_secs(20);
/// Pause between attempts while waiting, doubling up to [`FAILOVER_PAUSE_MAX`].
const FAILOVER_PAUSE_MIN: Duration = Duration::from_millis(50);
const FAILOVER_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Errors after which the request did not run on the shard: another member may take it.
fn not_run(e: &CommandError) -> bool {
    [
        ErrorCode::NotWritablePrimary,
        ErrorCode::NotPrimaryNoSecondaryOk,
        ErrorCode::NotPrimaryOrSecondary,
        ErrorCode::HostUnreachable,
    ]
    .iter()
    .any(|c| c.code() == e.code)
}

/// Errors a read may be retried after (it changes nothing, so running it twice is harmless).
fn read_retryable(e: &CommandError) -> bool {
    not_run(e)
        || [ErrorCode::SocketException, ErrorCode::InterruptedDueToReplStateChange, ErrorCode::PrimarySteppedDown]
            .iter()
            .any(|c| c.code() == e.code)
}

/// Runs `call` on `shard`'s current primary, again on the next one after a failover.
async fn on_primary<T, F, Fut>(state: &RouterState, shard: &str, read: bool, mut call: F) -> Result<T, CommandError>
where
    F: FnMut(Arc<crate::shard_client::ShardPool>) -> Fut,
    Fut: Future<Output = Result<T, CommandError>>,
{
    let started = Instant::now();
    let mut pause = FAILOVER_PAUSE_MIN;
    loop {
        let pool = routing::pool(state, shard).await?;
        let e = match call(pool).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let retry = if read { read_retryable(&e) } else { not_run(&e) };
        if !retry || started.elapsed() + pause > FAILOVER_WAIT_MAX || !state.catalog.is_configured() {
            return Err(e);
        }
        tracing::debug!(%shard, code = e.code, error = %e.errmsg, "shard primary unavailable; waiting for the next");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(FAILOVER_PAUSE_MAX);
        // Point the shard's channels at whatever primary the catalog names now.
        if let Err(err) = routing::read_catalog(state).await {
            tracing::debug!(error = %err, "catalog read while waiting for a primary failed");
        }
    }
}

/// The read preference of a forwarded read. Aggregations that write (`$out`, `$merge`) run on
/// the primary whatever the client asked.
fn read_preference(req: &CommandRequest, aggregate: bool) -> Result<ReadPreference, CommandError> {
    let body = bson::RawDocument::from_bytes(&req.body)?;
    let pref = ReadPreference::from_body(body)?;
    if aggregate && pref.mode != Mode::Primary {
        let writes = body.get_array("pipeline").ok().is_some_and(|stages| {
            stages.into_iter().filter_map(|s| s.ok()?.as_document()?.iter().next()?.ok()).any(|(k, _)| {
                let k: &str = k.as_ref();
                k == "$out" || k == "$merge"
            })
        });
        if writes {
            return Ok(ReadPreference::default());
        }
    }
    Ok(pref)
}

/// Runs the read `call` on a member of `shard` chosen by `pref` (`secondary_ok` set unless the
/// mode is `primary`), choosing again after a member failed it.
async fn on_member<T, F, Fut>(
    state: &RouterState,
    shard: &str,
    pref: &ReadPreference,
    mut call: F,
) -> Result<(T, Served), CommandError>
where
    F: FnMut(Arc<ShardPool>, bool) -> Fut,
    Fut: Future<Output = Result<T, CommandError>>,
{
    if pref.mode == Mode::Primary {
        return on_primary(state, shard, true, |pool| call(pool, false)).await.map(|v| (v, None));
    }
    // A client's `maxTimeMS` also bounds the wait for a member that fits (as mongos does).
    let limit = pref.max_time.map_or(FAILOVER_WAIT_MAX, |t| t.min(FAILOVER_WAIT_MAX));
    let started = Instant::now();
    let mut pause = FAILOVER_PAUSE_MIN;
    loop {
        let (result, served) = match state.members.choose(state, shard, pref).await {
            Choice::Primary => match routing::pool(state, shard).await {
                Ok(pool) => {
                    (watched(state, shard, state.shards.primary(shard).as_deref(), call(pool, true)).await, None)
                }
                Err(e) => (Err(e), None),
            },
            Choice::Member(addr) => match state.members.pool(&addr) {
                Ok(pool) => (watched(state, shard, Some(&addr), call(pool, true)).await, Some(addr)),
                Err(e) => (Err(e), Some(addr)),
            },
            Choice::NoneEligible => {
                let e = CommandError::new(
                    ErrorCode::FailedToSatisfyReadPreference,
                    format!(
                        "Could not find host matching read preference {{ mode: \"{}\" }} for set {shard}",
                        pref.mode.name()
                    ),
                );
                (Err(e), None)
            }
        };
        let e = match result {
            Ok(v) => return Ok((v, served)),
            Err(e) => e,
        };
        let retry = read_retryable(&e) || e.code == ErrorCode::FailedToSatisfyReadPreference.code();
        if !retry || started.elapsed() + pause > limit {
            return Err(e);
        }
        tracing::debug!(%shard, member = ?served, code = e.code, error = %e.errmsg, "read member unavailable; choosing again");
        state.members.invalidate(shard);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(FAILOVER_PAUSE_MAX);
        if served.is_none()
            && state.catalog.is_configured()
            && let Err(err) = routing::read_catalog(state).await
        {
            tracing::debug!(error = %err, "catalog read while choosing a read member failed");
        }
    }
}

/// `read` on member `addr` of `shard`, abandoned (HostUnreachable: retried elsewhere) if the
/// member goes silent meanwhile.
async fn watched<T>(
    state: &RouterState,
    shard: &str,
    addr: Option<&str>,
    read: impl Future<Output = Result<T, CommandError>>,
) -> Result<T, CommandError> {
    let Some(addr) = addr else { return read.await };
    tokio::select! {
        r = read => r,
        () = state.members.until_silent(state, shard, addr) => Err(CommandError::new(
            ErrorCode::HostUnreachable,
            format!("member {addr} of {shard} stopped heartbeating during the read"),
        )),
    }
}

/// The channels to the member a cursor lives on.
pub async fn cursor_pool(
    state: &RouterState,
    shard: &str,
    served: Option<&str>,
) -> Result<Arc<ShardPool>, CommandError> {
    match served {
        Some(addr) => state.members.pool(addr),
        None => routing::pool(state, shard).await,
    }
}

pub async fn write(
    state: &RouterState,
    shard: &str,
    kind: WriteKind,
    req: CommandRequest,
) -> Result<WriteReply, CommandError> {
    on_primary(state, shard, false, |pool| {
        let req = req.clone();
        async move {
            let mut client = pool.client();
            let reply = match kind {
                WriteKind::Insert => client.insert(req).await,
                WriteKind::Update => client.update(req).await,
                WriteKind::Delete => client.delete(req).await,
            }
            .map_err(|s| pool.status_error(&s))?
            .into_inner();
            match reply.error {
                Some(e) => Err(e.into()),
                None => Ok(reply),
            }
        }
    })
    .await
}

/// A command whose reply is one document (with the shard's `writeConcernError`, if any). A
/// `read` honours the request's read preference.
pub async fn command_with_wc(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    read: bool,
) -> Result<(bson::Document, Option<CommandError>), CommandError> {
    let pref = if read { read_preference(&req, false)? } else { ReadPreference::default() };
    let call = |pool: Arc<ShardPool>, secondary_ok: bool| {
        let mut req = req.clone();
        req.secondary_ok = secondary_ok;
        async move {
            let reply = pool.client().command(req).await.map_err(|s| pool.status_error(&s))?.into_inner();
            if let Some(e) = reply.error {
                return Err(e.into());
            }
            let doc = bson::Document::from_reader(&mut reply.body.as_ref())?;
            Ok((doc, reply.write_concern_error.map(Into::into)))
        }
    };
    if read {
        on_member(state, shard, &pref, call).await.map(|(v, _)| v)
    } else {
        on_primary(state, shard, false, |pool| call(pool, false)).await
    }
}

/// A read command whose reply is one document (`count`, `distinct`), on the member the read
/// preference picks.
pub async fn read_command(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
) -> Result<bson::Document, CommandError> {
    command_with_wc(state, shard, req, true).await.map(|(doc, _)| doc)
}

/// A command whose reply is one document.
pub async fn command(state: &RouterState, shard: &str, req: CommandRequest) -> Result<bson::Document, CommandError> {
    command_with_wc(state, shard, req, false).await.map(|(doc, _)| doc)
}

/// `find` (`aggregate: false`) or `aggregate` on the primary (a write's own reads).
pub async fn cursor(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    aggregate: bool,
) -> Result<CursorReply, CommandError> {
    on_primary(state, shard, true, |pool| open_cursor(pool, req.clone(), aggregate)).await
}

/// `find` or `aggregate` on the member the request's read preference picks; the member that
/// holds the cursor comes back with the reply.
pub async fn read_cursor(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    aggregate: bool,
) -> Result<(CursorReply, Served), CommandError> {
    let pref = read_preference(&req, aggregate)?;
    on_member(state, shard, &pref, |pool, secondary_ok| {
        let mut req = req.clone();
        req.secondary_ok = secondary_ok;
        open_cursor(pool, req, aggregate)
    })
    .await
}

async fn open_cursor(pool: Arc<ShardPool>, req: CommandRequest, aggregate: bool) -> Result<CursorReply, CommandError> {
    let mut client = pool.client();
    let reply = if aggregate { client.aggregate(req).await } else { client.find(req).await }
        .map_err(|s| pool.status_error(&s))?
        .into_inner();
    match reply.error {
        Some(e) => Err(e.into()),
        None => Ok(reply),
    }
}

/// Every document of a shard cursor, starting with its first batch.
pub async fn drain(
    state: &RouterState,
    shard: &str,
    request_id: &str,
    first: CursorReply,
    served: Option<&str>,
) -> Result<Vec<Bytes>, CommandError> {
    let pool = cursor_pool(state, shard, served).await?;
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
        let req = GetMoreRequest { request_id: request_id.to_owned(), cursor_id, batch_size: 0, ns: first.ns.clone() };
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
