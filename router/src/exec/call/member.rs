//! Reads sent where the client's `$readPreference` says: the mode is parsed again here from the
//! forwarded body (so every read path honours it); `primary` goes through `exec::call`'s primary
//! loop as before, any other mode asks `routing::members` for a member and sends the request there
//! with `secondary_ok`. The member that served a cursor comes back ([`Served`]) so its `getMore`s
//! and `killCursors` go to the same member. A member that fails a read (or stops heartbeating
//! while it runs) is dropped from the cached view and another is chosen, within the same bounded
//! wait as a failover (or the command's `maxTimeMS`).
//!
//! Must not: send writes (`findAndModify`, aggregations with `$out`/`$merge` go to the primary),
//! or choose shards.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use shoal_proto::ErrorCode;
use shoal_proto::shard::{CommandRequest, CursorReply};

use crate::error::CommandError;
use crate::exec::call::channels::ShardPool;
use crate::exec::call::{self, FAILOVER_WAIT_MAX};
use crate::routing;
use crate::routing::read_pref::{Choice, Mode, ReadPreference};
use crate::state::RouterState;

/// The member a cursor lives on: `None` for the primary (reached through the shard's channels,
/// which follow the catalog), else its `host:port`.
pub type Served = Option<String>;

/// Errors after which a read is sent again (to another member, or the same one later): it changes
/// nothing, so running it twice is harmless.
fn retryable(e: &CommandError) -> bool {
    call::resendable_after(e) || e.is(ErrorCode::FailedToSatisfyReadPreference)
}

/// A read command whose reply is one document (`count`, `distinct`, database-level reads), with
/// the shard's `writeConcernError` slot kept for the caller's shape.
pub async fn command_with_wc(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
) -> Result<(bson::Document, Option<CommandError>), CommandError> {
    let pref = read_preference(&req, false)?;
    if pref.mode == Mode::Primary {
        return call::command_with_wc(state, shard, req, true).await;
    }
    let call = |pool: Arc<ShardPool>| {
        let mut req = req.clone();
        req.secondary_ok = true;
        call::one_command(pool, req)
    };
    on_member(state, shard, &pref, call).await.map(|(v, _)| v)
}

/// A read command whose reply is one document, on the member the read preference picks.
pub async fn command(state: &RouterState, shard: &str, req: CommandRequest) -> Result<bson::Document, CommandError> {
    command_with_wc(state, shard, req).await.map(|(doc, _)| doc)
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

/// Runs the read `call` on a member of `shard` chosen by `pref` (not `primary`: those go through
/// `exec::call`), with `secondary_ok`, choosing again after a member failed it.
async fn on_member<T, F, Fut>(
    state: &RouterState,
    shard: &str,
    pref: &ReadPreference,
    mut call: F,
) -> Result<(T, Served), CommandError>
where
    F: FnMut(Arc<ShardPool>) -> Fut,
    Fut: Future<Output = Result<T, CommandError>>,
{
    // A client's `maxTimeMS` also bounds the wait for a member that fits (as mongos does).
    let limit = pref.max_time.map_or(FAILOVER_WAIT_MAX, |t| t.min(FAILOVER_WAIT_MAX));
    let started = Instant::now();
    let mut pause = call::FAILOVER_PAUSE_MIN;
    loop {
        let (result, served) = match state.members.choose(state, shard, pref).await {
            Choice::Primary => match routing::pool(state, shard).await {
                Ok(pool) => (watched(state, shard, state.shards.primary(shard).as_deref(), call(pool)).await, None),
                Err(e) => (Err(e), None),
            },
            Choice::Member(addr) => match state.members.pool(&addr) {
                Ok(pool) => (watched(state, shard, Some(&addr), call(pool)).await, Some(addr)),
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
        if !retryable(&e) || started.elapsed() + pause > limit {
            return Err(e);
        }
        tracing::debug!(%shard, member = ?served, code = e.code, error = %e.errmsg, "read member unavailable; choosing again");
        state.members.invalidate(shard);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(call::FAILOVER_PAUSE_MAX);
        if served.is_none()
            && state.catalog.is_configured()
            && let Err(err) = routing::refresh_shards(state).await
        {
            tracing::debug!(error = %err, "shards read while choosing a read member failed");
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

/// `find` or `aggregate` on the member the request's read preference picks; the member that
/// holds the cursor comes back with the reply.
pub async fn read_cursor(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    aggregate: bool,
) -> Result<(CursorReply, Served), CommandError> {
    let pref = read_preference(&req, aggregate)?;
    if pref.mode == Mode::Primary {
        return call::cursor(state, shard, req, aggregate).await.map(|reply| (reply, None));
    }
    on_member(state, shard, &pref, |pool| {
        let mut req = req.clone();
        req.secondary_ok = true;
        call::open_cursor(pool, req, aggregate)
    })
    .await
}
