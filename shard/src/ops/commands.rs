//! The operator's commands on this member's operations, as the shard's command table runs them
//! (the router fans them out to every shard and merges):
//!
//! - `{currentOp: 1}` → `{inprog: [...]}`, every operation in progress but this one (other
//!   fields are the router's to filter on);
//! - `{killOp: 1, op: <int|long>}` → `{info: "attempting to kill op"}`, whether or not it runs;
//! - `{killSessions: [{id: <UUID>}, ...]}` → `{}`: kills the operations of those sessions, every
//!   operation in a session when empty;
//! - `{killAllSessions: [{user, db}, ...]}` → `{}`: the operations in sessions of those users,
//!   every operation in a session when empty;
//! - `{top: 1}` → [`super::top::Top::report`];
//! - `{profile: ...}` → [`super::profiler::Profiler::command`].
//!
//! Killed operations stop at their next deadline check (`exec::deadline`).

use std::time::Instant;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::exec::{Node, Request, deadline};
use crate::ops::report;

pub fn current_op(node: &Node, _req: &Request<'_>) -> ExecResult<Document> {
    let me = deadline::current_opid();
    let now = Instant::now();
    let inprog: Vec<Bson> = node
        .ops
        .snapshot()
        .iter()
        .filter(|op| Some(op.opid) != me)
        .map(|op| Bson::Document(report::current_op(&node.ops.host, op, now)))
        .collect();
    Ok(doc! { "inprog": inprog })
}

pub fn kill_op(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let opid = match req.body.get("op") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => *f as i64,
        Some(Bson::Double(f)) => return Err(ExecError::bad_value(format!("op must be an integer, not {f}"))),
        Some(other) => {
            return Err(ExecError::type_mismatch(format!(
                "BSON field 'op' is the wrong type '{}', expected types '[long, int]'",
                crate::exec::args::type_name(other)
            )));
        }
        None => return Err(ExecError::new(ErrorCode::NoSuchKey, "Missing expected field \"op\"")),
    };
    let found = node.ops.kill(opid);
    tracing::info!(opid, found, "going to kill op");
    Ok(doc! { "info": "attempting to kill op" })
}

/// The array a kill-sessions command carries.
fn sessions_arg<'a>(req: &'a Request<'_>, cmd: &str) -> ExecResult<Vec<&'a Document>> {
    let items = match req.body.get(cmd) {
        Some(Bson::Array(a)) => a,
        Some(other) => {
            return Err(ExecError::type_mismatch(format!(
                "BSON field '{cmd}' is the wrong type '{}', expected type 'array'",
                crate::exec::args::type_name(other)
            )));
        }
        None => return Err(ExecError::new(ErrorCode::NoSuchKey, format!("Missing expected field \"{cmd}\""))),
    };
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => Ok(d),
            other => Err(ExecError::type_mismatch(format!(
                "BSON field '{cmd}' holds a '{}', expected type 'object'",
                crate::exec::args::type_name(other)
            ))),
        })
        .collect()
}

pub fn kill_sessions(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let sessions = sessions_arg(req, "killSessions")?;
    let mut ids = Vec::with_capacity(sessions.len());
    for s in sessions {
        match s.get("id") {
            Some(id @ Bson::Binary(_)) => ids.push(id.clone()),
            Some(other) => {
                return Err(ExecError::type_mismatch(format!(
                    "BSON field 'killSessions.id' is the wrong type '{}', expected type 'binData'",
                    crate::exec::args::type_name(other)
                )));
            }
            None => {
                return Err(ExecError::new(
                    ErrorCode::Location40414,
                    "BSON field 'killSessions.id' is missing but a required field",
                ));
            }
        }
    }
    let killed = node.ops.kill_where(|op| {
        op.lsid().is_some_and(|lsid| ids.is_empty() || lsid.get("id").is_some_and(|id| ids.contains(id)))
    });
    tracing::info!(sessions = ids.len(), killed, "killSessions");
    Ok(Document::new())
}

pub fn kill_all_sessions(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let users = sessions_arg(req, "killAllSessions")?;
    let mut named = Vec::with_capacity(users.len());
    for u in users {
        match (u.get("user"), u.get("db")) {
            (Some(Bson::String(user)), Some(Bson::String(db))) => named.push(format!("{user}@{db}")),
            _ => {
                return Err(ExecError::type_mismatch("killAllSessions takes documents {user: <string>, db: <string>}"));
            }
        }
    }
    let killed = node.ops.kill_where(|op| {
        op.lsid().is_some() && (named.is_empty() || op.client.as_ref().is_some_and(|c| named.contains(&c.user)))
    });
    tracing::info!(users = named.len(), killed, "killAllSessions");
    Ok(Document::new())
}

pub fn top(node: &Node, _req: &Request<'_>) -> ExecResult<Document> {
    Ok(node.ops.top.report())
}

pub fn profile(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    node.ops.profiler.command(req.db, &req.body)
}
