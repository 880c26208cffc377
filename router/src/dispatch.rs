//! Runs one client command through its entry in the command table (`commands`) and shapes the
//! reply: `ok: 1` appended on success, `{ok: 0, errmsg, code, codeName}` on failure. Unknown
//! commands get CommandNotFound (59); admin-only commands on another database Unauthorized (13);
//! with authorization enabled, every command first passes `auth::check` and the cursors it uses
//! must be the user's own.

use bson::RawDocumentBuf;
use shoal_proto::ErrorCode;
use tracing::Instrument;

use crate::command::Command;
use crate::commands::Spec;
use crate::error::CommandError;
use crate::retryable;
use crate::state::{ConnContext, RouterState};

pub type HandlerResult = Result<RawDocumentBuf, CommandError>;

/// Runs `cmd` and returns the complete reply body.
pub async fn dispatch(state: &RouterState, conn: &ConnContext, cmd: &Command) -> RawDocumentBuf {
    let started = std::time::Instant::now();
    state.counters.ops.count(cmd);
    let span =
        tracing::debug_span!("command", request_id = cmd.request_id, conn = conn.id, name = %cmd.name, db = %cmd.db);
    let result = match retryable::refuse_transactions(cmd).and_then(|()| max_time(cmd)) {
        Ok(None) => route(state, conn, cmd).instrument(span).await,
        // The shards stop their part at the same limit (they read maxTimeMS from the body too).
        Ok(Some(limit)) => match tokio::time::timeout(limit, route(state, conn, cmd).instrument(span)).await {
            Ok(result) => result,
            Err(_) => Err(CommandError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")),
        },
        Err(e) => Err(e),
    };
    let elapsed = started.elapsed();
    let failed = result.as_ref().err().map(|e| e.code_name.as_str());
    let commands = &state.counters.commands;
    commands.finished(commands.of(cmd.spec.map(|s| s.name)), elapsed, failed);
    let reply_len = result.as_ref().map_or(0, |r| r.as_bytes().len());
    crate::cmd::profile::log_if_slow(state, conn, cmd, elapsed, reply_len, result.as_ref().err());
    let mut reply = match result {
        Ok(mut body) => {
            body.append(bson::cstr!("ok"), 1.0);
            body
        }
        Err(e) => {
            tracing::debug!(request_id = cmd.request_id, code = e.code, errmsg = %e.errmsg, "command failed");
            error_reply(&e)
        }
    };
    retryable::label(cmd, &mut reply);
    reply
}

/// The command's `maxTimeMS` (absent or 0: none), validated as MongoDB does. Untimed commands
/// (`getMore`, whose `maxTimeMS` is its await time on tailable cursors) and unknown ones have none.
fn max_time(cmd: &Command) -> Result<Option<std::time::Duration>, CommandError> {
    if cmd.spec.is_none_or(|s| !s.timed) {
        return Ok(None);
    }
    let ms = match cmd.body.get("maxTimeMS")? {
        None | Some(bson::RawBsonRef::Null) => return Ok(None),
        Some(bson::RawBsonRef::Int32(n)) => i64::from(n),
        Some(bson::RawBsonRef::Int64(n)) => n,
        Some(bson::RawBsonRef::Double(f)) if f.fract() == 0.0 && f.abs() <= f64::from(i32::MAX) => f as i64,
        Some(_) => return Err(CommandError::bad_value("maxTimeMS must be a non-negative integer")),
    };
    if !(0..=i64::from(i32::MAX)).contains(&ms) {
        return Err(CommandError::bad_value(format!("{ms} value for maxTimeMS is out of range [0, {}]", i32::MAX)));
    }
    Ok((ms > 0).then(|| std::time::Duration::from_millis(ms as u64)))
}

/// `{ok: 0, errmsg, code, codeName}` as raw BSON.
pub fn error_reply(e: &CommandError) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    out.append(bson::cstr!("ok"), 0.0);
    out.append(bson::cstr!("errmsg"), e.errmsg.as_str());
    out.append(bson::cstr!("code"), e.code);
    out.append(bson::cstr!("codeName"), e.code_name.as_str());
    // A shard's extra fields (a duplicate key's keyPattern/keyValue), as MongoDB puts them.
    for (key, value) in e.info.iter().flat_map(|info| info.iter()) {
        if let (Ok(key), Ok(value)) =
            (bson::raw::CString::try_from(key.as_str()), bson::RawBson::try_from(value.clone()))
        {
            out.append(key, value);
        }
    }
    out
}

async fn route(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    // `$external` (users authenticated outside, e.g. X.509) is the one name MongoDB allows a `$`.
    if cmd.db != "$external"
        && let Err(e) = shoal_proto::namespace::validate_db(&cmd.db)
    {
        return Err(CommandError::new(ErrorCode::InvalidNamespace, e.to_string()));
    }
    let Some(spec) = cmd.spec else {
        return Err(CommandError::new(ErrorCode::CommandNotFound, format!("no such command: '{}'", cmd.name)));
    };
    if spec.admin_only && cmd.db != "admin" {
        return Err(CommandError::new(
            ErrorCode::Unauthorized,
            format!("{} may only be run against the admin database.", spec.name),
        ));
    }
    crate::auth::check::authorize(state, conn, cmd, spec).await?;
    if spec.audited && state.audit.is_enabled() {
        let result = run(state, conn, cmd, spec).await;
        let code = result.as_ref().map_or_else(|e| e.code, |_| 0);
        let user = conn.session().user().cloned();
        let client = crate::audit::Client { local: conn.local, remote: conn.peer, user: user.as_ref() };
        state.audit.record(spec.name, &client, crate::audit::command_param(&cmd.db, &cmd.body), code);
        return result;
    }
    run(state, conn, cmd, spec).await
}

/// The handler, with cursor ownership when authorization is on.
async fn run(state: &RouterState, conn: &ConnContext, cmd: &Command, spec: &'static Spec) -> HandlerResult {
    if !state.settings.authorization {
        return (spec.handler)(state, conn, cmd).await;
    }
    let user = conn.session().user().cloned();
    let cursors = crate::auth::cursors::named_ids(spec.name, &cmd.body);
    state.cursor_owners.check(&cursors, user.as_ref())?;
    let reply = (spec.handler)(state, conn, cmd).await?;
    state.cursor_owners.record(&reply, user.as_ref(), &state.cursors);
    Ok(reply)
}
