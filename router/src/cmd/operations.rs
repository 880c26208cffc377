//! The operator's view of running operations through the router: `currentOp` and the
//! `$currentOp` stage, `killOp`, `killSessions` / `killAllSessions` and `top`, each fanned out
//! to every shard's primary as a mongos does.
//!
//! ```text
//!   {currentOp} / [{$currentOp}, ...]  --{currentOp: 1}-->  every shard  => inprog + {shard}, opid "shard:n"
//!   {killOp, op: "shard0:17"}          --{killOp, op: 17}--> shard0
//!   {killSessions: [...]}, {top}       --same-->            every shard  (top: summed per namespace)
//! ```
//!
//! Operation ids through the router are MongoDB's `"<shard>:<opid>"` strings. The router keeps no
//! registry of its own operations: `$currentOp` with `localOps: true` is refused, and `killOp`
//! of a bare number finds nothing to kill (what happens is reported, as MongoDB does).
//!
//! Must not: track operations (the shards do), or kill anything on a shard `op` does not name.

use bson::{Bson, Document, RawDocument, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;
use shoal_query::aggregate::Pipeline;

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::exec::reply;
use crate::routing::{Placement, every_shard};
use crate::state::{ConnContext, RouterState};

/// The stage's name, first in an `aggregate: 1` on `admin`.
pub const STAGE: &str = "$currentOp";

/// A command's document as `currentOp` and the slow-query log show it; a big one becomes
/// `{$truncated: <its start as JSON>}` as MongoDB's does (over 1 KiB... here 1000 bytes).
pub fn truncated_command(body: &RawDocument) -> Document {
    const MAX_BYTES: usize = 1000;
    let Ok(doc) = Document::try_from(body) else { return Document::new() };
    if body.as_bytes().len() <= MAX_BYTES {
        return doc;
    }
    let mut json = Bson::Document(doc.clone()).into_relaxed_extjson().to_string();
    let mut end = MAX_BYTES.min(json.len());
    while !json.is_char_boundary(end) {
        end -= 1;
    }
    json.truncate(end);
    let mut out = doc! { "$truncated": json };
    if let Some(c) = doc.get("comment") {
        out.insert("comment", c.clone());
    }
    out
}

/// What to list: every user's operations, or the caller's only.
struct Scope {
    /// `None`: every user's.
    user: Option<String>,
}

/// Arguments every command may carry, which are not part of `currentOp`'s filter.
fn is_generic_argument(key: &str) -> bool {
    key.starts_with('$') && key != "$all" && key != "$ownOps"
        || matches!(
            key,
            "lsid" | "txnNumber" | "comment" | "maxTimeMS" | "apiVersion" | "apiStrict" | "apiDeprecationErrors"
        )
}

/// `{currentOp: 1, $all?, $ownOps?, <filter fields>}`: `{inprog: [...]}`.
pub async fn current_op(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let mut filter = Document::new();
    let mut own_ops = false;
    for (key, value) in body.iter().skip(1) {
        match key.as_str() {
            "$all" => {}
            "$ownOps" => own_ops = value.as_bool().unwrap_or(false),
            k if is_generic_argument(k) => {}
            _ => {
                filter.insert(key.clone(), value.clone());
            }
        }
    }
    let ops = gather(state, cmd, &scope(state, conn, !own_ops)).await?;
    let ops = Pipeline::parse(&[Bson::Document(doc! { "$match": filter })])?.run(ops.into_iter())?;
    Ok(RawDocumentBuf::try_from(&doc! { "inprog": ops })?)
}

/// `aggregate: 1` on `admin` with `[{$currentOp: {allUsers?, idleConnections?, ...}}, ...]`; the
/// later stages run on the router.
pub async fn current_op_stage(
    state: &RouterState,
    conn: &ConnContext,
    cmd: &Command,
    spec: &Bson,
    rest: &[Bson],
) -> HandlerResult {
    if cmd.db != "admin" || cmd.collection().is_ok() {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("{STAGE} must be run against the 'admin' database with {{aggregate: 1}}"),
        ));
    }
    let Bson::Document(spec) = spec else {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            format!("{STAGE} options must be specified in an object"),
        ));
    };
    let mut all_users = false;
    for (key, value) in spec {
        let flag = || {
            value.as_bool().ok_or_else(|| {
                CommandError::new(
                    ErrorCode::FailedToParse,
                    format!("The '{key}' parameter of the {STAGE} stage must be a boolean value"),
                )
            })
        };
        match key.as_str() {
            "allUsers" => all_users = flag()?,
            "localOps" if flag()? => {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    "$currentOp with localOps: true: this router keeps no registry of its own operations; omit it to list the shards' operations",
                ));
            }
            "localOps" | "idleConnections" | "idleSessions" | "idleCursors" | "truncateOps" | "backtrace" => {
                flag()?;
            }
            "targetAllNodes" => {
                flag()?;
            }
            other => {
                return Err(CommandError::new(
                    ErrorCode::FailedToParse,
                    format!("Unrecognized option '{other}' in {STAGE} stage."),
                ));
            }
        }
    }
    let rest = Pipeline::parse(rest)?;
    let ops = gather(state, cmd, &scope(state, conn, all_users)).await?;
    reply::buffered(state, "admin.$cmd.aggregate", rest.run(ops.into_iter())?, usize::MAX)
}

fn scope(state: &RouterState, conn: &ConnContext, all_users: bool) -> Scope {
    let user = conn.session().user().map(|u| format!("{}@{}", u.user, u.db));
    Scope { user: if all_users || !state.settings.authorization { None } else { user } }
}

/// Every shard's operations, each naming its shard, with the router's opid form.
async fn gather(state: &RouterState, cmd: &Command, scope: &Scope) -> Result<Vec<Document>, CommandError> {
    let ask =
        Command::internal(RawDocumentBuf::try_from(&doc! { "currentOp": 1, "$db": "admin" })?, "admin", cmd.request_id);
    let shards = every_shard(state).await?;
    let mut ops = Vec::new();
    for (shard, reply) in shards.iter().zip(broadcast(state, &ask, &Placement::NoDatabase, &shards).await) {
        for op in reply?.get_array("inprog").cloned().unwrap_or_default() {
            let Bson::Document(op) = op else { continue };
            if let Some(user) = &scope.user
                && !runs_as(&op, user)
            {
                continue;
            }
            ops.push(on_shard(shard, op));
        }
    }
    Ok(ops)
}

/// Whether `op` runs as `user` (`name@db`).
fn runs_as(op: &Document, user: &str) -> bool {
    op.get_array("effectiveUsers").is_ok_and(|users| {
        users.iter().any(|u| {
            matches!(u, Bson::Document(u) if u.get_str("user").ok().zip(u.get_str("db").ok()).is_some_and(|(n, d)| format!("{n}@{d}") == user))
        })
    })
}

/// A shard's op as a mongos lists it: `shard` added, `opid` as `"<shard>:<opid>"`.
fn on_shard(shard: &str, mut op: Document) -> Document {
    let opid = match op.get("opid") {
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        Some(Bson::Int64(n)) => Some(*n),
        _ => None,
    };
    if let Some(n) = opid {
        op.insert("opid", format!("{shard}:{n}"));
    }
    op.insert("shard", shard);
    op
}

/// `{killOp: 1, op: "<shard>:<opid>"}`.
pub async fn kill_op(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let op = match cmd.body.get("op")? {
        None => return Err(CommandError::bad_value("Did not provide \"op\" field")),
        Some(bson::RawBsonRef::String(s)) => s.to_owned(),
        Some(bson::RawBsonRef::Int32(_) | bson::RawBsonRef::Int64(_) | bson::RawBsonRef::Double(_)) => {
            // A bare number names an operation of this router, which tracks none.
            return Ok(RawDocumentBuf::try_from(&doc! { "info": "attempting to kill op" })?);
        }
        Some(_) => {
            return Err(CommandError::type_mismatch("\"op\" must be a string of the form <shard>:<opid>, or a number"));
        }
    };
    let (shard, opid) = parse_opid(&op)?;
    let ask = Command::internal(
        RawDocumentBuf::try_from(&doc! { "killOp": 1, "op": opid, "$db": "admin" })?,
        "admin",
        cmd.request_id,
    );
    let shards = every_shard(state).await?;
    if !shards.iter().any(|s| s == shard) {
        return Err(CommandError::new(ErrorCode::ShardNotFound, format!("shard {shard} does not exist")));
    }
    for reply in broadcast(state, &ask, &Placement::NoDatabase, &[shard.to_owned()]).await {
        reply?;
    }
    Ok(RawDocumentBuf::try_from(&doc! { "shard": shard, "shardid": opid })?)
}

/// `"<shard>:<opid>"` split at its last colon (the shard is empty for a router started with
/// `--shard` and no config servers, whose one shard has no name).
fn parse_opid(op: &str) -> Result<(&str, i32), CommandError> {
    let bad = || CommandError::bad_value(format!("Invalid op ID format: '{op}'; expected <shard>:<opid>"));
    let (shard, n) = op.rsplit_once(':').ok_or_else(bad)?;
    let n: i32 = n.parse().map_err(|_| bad())?;
    Ok((shard, n))
}

/// `killSessions` / `killAllSessions`: every shard kills the sessions' operations.
pub async fn kill_sessions(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    match cmd.body.iter().next().transpose()? {
        Some((_, bson::RawBsonRef::Array(_))) => {}
        _ => return Err(CommandError::type_mismatch(format!("BSON field '{}' must be an array", cmd.name))),
    }
    let shards = every_shard(state).await?;
    for reply in broadcast(state, cmd, &Placement::NoDatabase, &shards).await {
        reply?;
    }
    Ok(RawDocumentBuf::new())
}

/// `top`: every shard's per-collection times and counts, summed per namespace.
pub async fn top(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let shards = every_shard(state).await?;
    let mut totals = doc! { "note": "all times in microseconds" };
    for reply in broadcast(state, cmd, &Placement::NoDatabase, &shards).await {
        let reply = reply?;
        let Ok(shard_totals) = reply.get_document("totals") else { continue };
        for (ns, usage) in shard_totals {
            if let Bson::Document(usage) = usage {
                add_usage(&mut totals, ns, usage);
            }
        }
    }
    Ok(RawDocumentBuf::try_from(&doc! { "totals": totals })?)
}

/// Adds one shard's `{<kind>: {time, count}}` for `ns` into `totals`.
fn add_usage(totals: &mut Document, ns: &str, usage: &Document) {
    if !totals.contains_key(ns) {
        totals.insert(ns, Document::new());
    }
    let Ok(sum) = totals.get_document_mut(ns) else { return };
    for (kind, counts) in usage {
        let Bson::Document(counts) = counts else { continue };
        let entry = sum.entry(kind.clone()).or_insert_with(|| Bson::Document(doc! { "time": 0_i64, "count": 0_i64 }));
        if let Bson::Document(entry) = entry {
            for field in ["time", "count"] {
                let add = crate::cmd::ddl::num(counts.get(field));
                let have = crate::cmd::ddl::num(entry.get(field));
                entry.insert(field, have.saturating_add(add));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opids_name_their_shard() {
        assert_eq!(parse_opid("shard0:17").expect("ok"), ("shard0", 17));
        assert_eq!(parse_opid("rs:a:3").expect("ok"), ("rs:a", 3));
        assert_eq!(parse_opid("17").expect_err("no shard").code, 2);
        assert_eq!(parse_opid(":17").expect("the unnamed legacy shard"), ("", 17));
        assert_eq!(parse_opid("s0:x").expect_err("number").code, 2);
        let op = on_shard("s0", doc! { "opid": 9, "op": "query" });
        assert_eq!(op.get_str("opid").ok(), Some("s0:9"));
        assert_eq!(op.get_str("shard").ok(), Some("s0"));
    }

    #[test]
    fn top_sums_per_namespace_and_kind() {
        let mut totals = doc! { "note": "all times in microseconds" };
        add_usage(&mut totals, "app.c", &doc! { "total": { "time": 5_i64, "count": 1_i64 } });
        add_usage(
            &mut totals,
            "app.c",
            &doc! { "total": { "time": 7, "count": 2 }, "insert": { "time": 1, "count": 1 } },
        );
        let c = totals.get_document("app.c").expect("ns");
        assert_eq!(c.get_document("total").expect("total"), &doc! { "time": 12_i64, "count": 3_i64 });
        assert_eq!(c.get_document("insert").expect("insert"), &doc! { "time": 1_i64, "count": 1_i64 });
    }

    #[test]
    fn big_commands_are_truncated_with_their_comment() {
        let big =
            RawDocumentBuf::try_from(&doc! { "find": "c", "filter": { "s": "x".repeat(3000) }, "comment": "mine" })
                .expect("doc");
        let t = truncated_command(&big);
        assert!(t.get_str("$truncated").is_ok_and(|s| s.len() <= 1000), "{t}");
        assert_eq!(t.get_str("comment").ok(), Some("mine"));
        let small = RawDocumentBuf::try_from(&doc! { "find": "c" }).expect("doc");
        assert_eq!(truncated_command(&small), doc! { "find": "c" });
    }

    #[test]
    fn users_are_matched_by_name_and_database() {
        let op = doc! { "effectiveUsers": [{ "user": "ann", "db": "admin" }] };
        assert!(runs_as(&op, "ann@admin"));
        assert!(!runs_as(&op, "ann@app"));
        assert!(!runs_as(&doc! {}, "ann@admin"));
    }
}
