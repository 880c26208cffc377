//! `explain` of `find`, `count` and `aggregate`: the router's targeting only. The winning plan's
//! stage is `SINGLE_SHARD` or `SHARD_MERGE` with the targeted shard ids; per-shard plans are not
//! collected (each shard entry says so) rather than invented.
//!
//! Must not: run the explained command.

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::routing::{self, Placement};
use crate::state::{ConnContext, RouterState};

pub async fn explain(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let Some(Bson::Document(inner)) = body.get("explain") else {
        return Err(CommandError::type_mismatch("explain takes the command to explain as a document"));
    };
    let Some((name, Bson::String(coll))) = inner.iter().next() else {
        return Err(CommandError::new(ErrorCode::InvalidNamespace, "explain: the command names no collection"));
    };
    let filter = match name.as_str() {
        "find" => inner.get_document("filter").cloned().unwrap_or_default(),
        "count" | "distinct" => inner.get_document("query").cloned().unwrap_or_default(),
        "aggregate" => match inner.get_array("pipeline").ok().and_then(|p| p.first()) {
            Some(Bson::Document(d)) => d.get_document("$match").cloned().unwrap_or_default(),
            _ => Document::new(),
        },
        other => {
            return Err(CommandError::new(
                ErrorCode::CommandNotFound,
                format!("explain of '{other}' is not supported (find, count, distinct, aggregate are)"),
            ));
        }
    };
    let placement = routing::placement(state, &cmd.db, coll, false).await?;
    let targets: Vec<String> = placement.targets(&filter).into_iter().collect();
    let stage = if targets.len() > 1 { "SHARD_MERGE" } else { "SINGLE_SHARD" };
    let shards: Vec<Document> = targets
        .iter()
        .map(|s| doc! { "shardName": s, "winningPlan": { "stage": "NOT_COLLECTED" }, "note": "per-shard plans are not collected by this router" })
        .collect();
    let sharded = matches!(placement, Placement::Sharded(_));
    let reply = doc! {
        "queryPlanner": {
            "mongosPlannerVersion": 1,
            "namespace": format!("{}.{coll}", cmd.db),
            "sharded": sharded,
            "winningPlan": { "stage": stage, "shards": shards },
        },
    };
    RawDocumentBuf::try_from(&reply).map_err(CommandError::from)
}
