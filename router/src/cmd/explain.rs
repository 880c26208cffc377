//! `explain` of `find`, `count`, `distinct`, `aggregate` and the write commands: the router's
//! targeting (`SINGLE_SHARD`, or `SHARD_MERGE` over several shards) with each targeted shard's
//! own plan and, for `executionStats`/`allPlansExecution`, its execution counts and per-stage
//! times, summed at the top as MongoDB's `mongos` reports them: `executionTimeMillis` is the
//! router's own wall time for the whole fan-out, `totalChildMillis` the shards' times added up,
//! and each shard's entry keeps its `executionTimeMillis` and stage tree.
//!
//! Must not: run the explained command's writes (shards only plan those).

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::commands;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::exec::target;
use crate::routing::{self, Placement, STALE_ATTEMPTS_MAX};
use crate::state::{ConnContext, RouterState};

/// The filter the explained command targets shards by.
fn targeting_filter(name: &str, inner: &Document) -> Document {
    let first_stmt = |field: &str| -> Document {
        inner
            .get_array(field)
            .ok()
            .and_then(|a| a.first())
            .and_then(|s| s.as_document())
            .and_then(|s| s.get_document("q").ok())
            .cloned()
            .unwrap_or_default()
    };
    match name {
        "find" => inner.get_document("filter").cloned().unwrap_or_default(),
        "count" | "distinct" | "findAndModify" => inner.get_document("query").cloned().unwrap_or_default(),
        "update" => first_stmt("updates"),
        "delete" => first_stmt("deletes"),
        "aggregate" => match inner.get_array("pipeline").ok().and_then(|p| p.first()) {
            Some(Bson::Document(d)) => d.get_document("$match").cloned().unwrap_or_default(),
            _ => Document::new(),
        },
        _ => Document::new(),
    }
}

/// The explained command's canonical name, when the table says `explain` takes it.
fn explained(name: &str) -> Result<&'static str, CommandError> {
    match commands::lookup(name) {
        Some(spec) if spec.explainable => Ok(spec.name),
        _ => {
            let explainable: Vec<&str> = commands::COMMANDS.iter().filter(|s| s.explainable).map(|s| s.name).collect();
            Err(CommandError::new(
                ErrorCode::CommandNotFound,
                format!("explain of '{name}' is not supported ({} are)", explainable.join(", ")),
            ))
        }
    }
}

fn num(d: &Document, field: &str) -> i64 {
    crate::cmd::ddl::num(d.get(field))
}

pub async fn explain(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let Some(Bson::Document(inner)) = body.get("explain") else {
        return Err(CommandError::type_mismatch("explain takes the command to explain as a document"));
    };
    let Some((name, Bson::String(coll))) = inner.iter().next() else {
        return Err(CommandError::new(ErrorCode::InvalidNamespace, "explain: the command names no collection"));
    };
    let name = explained(name)?;
    let filter = targeting_filter(name, inner);
    let started = std::time::Instant::now();
    let mut attempt = 0;
    let (placement, targets, replies) = loop {
        let placement = routing::placement(state, &cmd.db, coll, false).await?;
        let targets: Vec<String> = target::shards(&placement, &filter).into_iter().collect();
        let replies = broadcast(state, cmd, &placement, &targets).await;
        let stale = replies.iter().find_map(|r| r.as_ref().err().filter(|e| routing::is_stale(e)));
        if let Some(e) = stale
            && attempt + 1 < STALE_ATTEMPTS_MAX
        {
            routing::on_stale(state, &cmd.db, coll, &placement, e, attempt).await;
            attempt += 1;
            continue;
        }
        break (placement, targets, replies);
    };
    let stage = if targets.len() > 1 { "SHARD_MERGE" } else { "SINGLE_SHARD" };
    let (mut plans, mut executions) = (Vec::new(), Vec::new());
    let (mut returned, mut keys, mut docs, mut child_millis) = (0i64, 0i64, 0i64, 0i64);
    let mut executed = true;
    for (shard, reply) in targets.iter().zip(replies) {
        let reply = reply.map_err(|e| CommandError { errmsg: format!("{} (on shard {shard})", e.errmsg), ..e })?;
        let mut planner = reply.get_document("queryPlanner").cloned().unwrap_or_default();
        planner.insert("shardName", shard.clone());
        plans.push(planner);
        match reply.get_document("executionStats") {
            Ok(stats) => {
                returned += num(stats, "nReturned");
                keys += num(stats, "totalKeysExamined");
                docs += num(stats, "totalDocsExamined");
                child_millis += num(stats, "executionTimeMillis");
                let mut s = stats.clone();
                s.insert("shardName", shard.clone());
                executions.push(s);
            }
            Err(_) => executed = false,
        }
    }
    if name == "find"
        && let Some(limit) = inner.get("limit").map(|l| crate::cmd::ddl::num(Some(l))).filter(|l| *l > 0)
    {
        returned = returned.min(limit);
    }
    let millis = started.elapsed().as_millis() as i64;
    let mut reply = doc! {
        "queryPlanner": {
            "mongosPlannerVersion": 1,
            "namespace": format!("{}.{coll}", cmd.db),
            "sharded": matches!(placement, Placement::Sharded(_)),
            "winningPlan": { "stage": stage, "shards": plans },
        },
    };
    if executed && !executions.is_empty() {
        reply.insert(
            "executionStats",
            doc! {
                "nReturned": returned,
                "executionTimeMillis": millis,
                "totalKeysExamined": keys,
                "totalDocsExamined": docs,
                "executionStages": {
                    "stage": stage,
                    "nReturned": returned,
                    "executionTimeMillis": millis,
                    "totalKeysExamined": keys,
                    "totalDocsExamined": docs,
                    "totalChildMillis": child_millis,
                    "shards": executions,
                },
            },
        );
    }
    RawDocumentBuf::try_from(&reply).map_err(CommandError::from)
}
