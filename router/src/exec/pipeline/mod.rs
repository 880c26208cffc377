//! The router's part of a split pipeline, with the stages that read other collections run here
//! (`$lookup`; `$unionWith` in [`union_with`], `$graphLookup` in [`graph_lookup`]): the stages
//! between two of them run in `shoal_query::aggregate`, and each queries its foreign collection
//! through the router's own routing (targeted by shard key when the filter pins it), so sharded
//! foreign collections work. A final `$out`/`$merge` hands the results to [`output`].
//!
//! ```text
//!   merged shard output -> [stages] -> $lookup: distinct local values, batched
//!                                        -> find {foreignField: {$in: batch}} on the foreign ns
//!                                        -> attach matches as `as` -> [stages] -> …
//! ```
//!
//! Invariants: the foreign documents held for one `$lookup` stay within the aggregation memory
//! limit (292 beyond it) unless `allowDiskUse`, and within `call::MERGE_BYTES_MAX` always;
//! each foreign document is held once however many batches match it.
//!
//! Must not: run stages the shards can run (the split gave them those), or hold the foreign
//! documents past the limits above.

mod graph_lookup;
pub mod output;
mod union_with;

use std::collections::HashSet;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::aggregate::graph_lookup::GraphLookup;
use shoal_query::aggregate::lookup::{self, Lookup};
use shoal_query::aggregate::output::Output;
use shoal_query::aggregate::union_with::UnionWith;
use shoal_query::aggregate::{Pipeline, doc_size};

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::{call, target};
use crate::routing::Placement;
use crate::state::RouterState;

/// Stages only the router runs: they read or write other collections.
pub const ROUTER_STAGES: &[&str] = &["$lookup", "$unionWith", "$graphLookup", "$out", "$merge"];

fn is_router_stage(stage: &Bson) -> bool {
    matches!(stage, Bson::Document(d) if ROUTER_STAGES.iter().any(|n| d.contains_key(*n)))
}

/// Distinct local values sent in one foreign query's `$in`.
const LOOKUP_VALUES_PER_QUERY_MAX: usize = 1000;

/// Runs `stages` over `input` at the router.
pub async fn run_router_part(
    state: &RouterState,
    cmd: &Command,
    stages: &[Bson],
    input: Vec<Document>,
    allow_disk_use: bool,
    lets: Option<&Document>,
) -> Result<Vec<Document>, CommandError> {
    let mut docs = input;
    let mut rest = stages;
    while !rest.is_empty() {
        let at = rest.iter().position(is_router_stage).unwrap_or(rest.len());
        if at > 0 {
            docs = Pipeline::parse(&rest[..at])?
                .with_allow_disk_use(allow_disk_use)
                .with_let(lets)?
                .run(docs.into_iter())?;
        }
        match rest.get(at) {
            Some(Bson::Document(stage)) if stage.contains_key("$lookup") => {
                let spec = Lookup::parse(stage.get("$lookup").unwrap_or(&Bson::Null))?;
                docs = run_lookup(state, cmd, &spec, docs, allow_disk_use, lets).await?;
            }
            Some(Bson::Document(stage)) if stage.contains_key("$unionWith") => {
                let spec = UnionWith::parse(stage.get("$unionWith").unwrap_or(&Bson::Null))?;
                docs = union_with::run(state, cmd, &spec, docs, allow_disk_use, lets).await?;
            }
            Some(Bson::Document(stage)) if stage.contains_key("$graphLookup") => {
                let spec = GraphLookup::parse(stage.get("$graphLookup").unwrap_or(&Bson::Null))?;
                docs = graph_lookup::run(state, cmd, &spec, docs, allow_disk_use, lets).await?;
            }
            // The last stage (parsing checked): the results are written, the reply is empty.
            Some(Bson::Document(stage)) => {
                let name = if stage.contains_key("$out") { "$out" } else { "$merge" };
                if linearizable(cmd) {
                    // MongoDB's rule: a write stage cannot promise a linearizable read.
                    return Err(CommandError::new(
                        ErrorCode::InvalidOptions,
                        format!("{name} cannot be used with a 'linearizable' read concern level"),
                    ));
                }
                let out = match (stage.get("$out"), stage.get("$merge")) {
                    (Some(arg), _) => Output::parse_out(arg)?,
                    (_, Some(arg)) => Output::parse_merge(arg)?,
                    _ => return Err(CommandError::new(ErrorCode::InternalError, "unexpected router stage")),
                };
                output::write(state, cmd, &out, docs).await?;
                return Ok(Vec::new());
            }
            _ => {}
        }
        rest = &rest[(at + 1).min(rest.len())..];
    }
    Ok(docs)
}

/// Whether the command asks for read concern `linearizable`.
fn linearizable(cmd: &Command) -> bool {
    cmd.body
        .get_document("readConcern")
        .ok()
        .and_then(|rc| rc.get_str("level").ok())
        .is_some_and(|level| level == "linearizable")
}

async fn run_lookup(
    state: &RouterState,
    cmd: &Command,
    spec: &Lookup,
    docs: Vec<Document>,
    allow_disk_use: bool,
    lets: Option<&Document>,
) -> Result<Vec<Document>, CommandError> {
    let values = lookup::distinct(docs.iter().flat_map(|d| spec.local_values(d)));
    let mut sub = spec.sub_pipeline(lets)?;
    let limit_bytes = foreign_limit_bytes(allow_disk_use);
    let mut foreign: Vec<Document> = Vec::new();
    let mut seen_ids: HashSet<Vec<u8>> = HashSet::new();
    let mut held = 0usize;
    for batch in values.chunks(LOOKUP_VALUES_PER_QUERY_MAX) {
        for d in fetch(state, cmd, &spec.from, spec.candidates_filter(batch)).await? {
            let id = doc! { "_id": d.get("_id").cloned().unwrap_or(Bson::Null) }.to_vec()?;
            if !seen_ids.insert(id) {
                continue;
            }
            held = held.saturating_add(doc_size(&d));
            if held > limit_bytes {
                return Err(foreign_exceeded(
                    &format!("$lookup: the documents of '{}' matching the local values", spec.from),
                    allow_disk_use,
                ));
            }
            foreign.push(d);
        }
    }
    docs.into_iter().map(|d| spec.attach(d, &foreign, sub.as_mut()).map_err(CommandError::from)).collect()
}

/// How many bytes of foreign documents one stage may hold at the router.
fn foreign_limit_bytes(allow_disk_use: bool) -> usize {
    if allow_disk_use { call::MERGE_BYTES_MAX } else { shoal_query::aggregate::memory_limit_bytes() }
}

/// The error for `what` passing [`foreign_limit_bytes`] (292 unless `allowDiskUse`, as `$sort`).
fn foreign_exceeded(what: &str, allow_disk_use: bool) -> CommandError {
    let code = if allow_disk_use {
        ErrorCode::ExceededMemoryLimit
    } else {
        ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed
    };
    CommandError::new(
        code,
        format!(
            "{what} exceed the router's limit of {} bytes{}",
            foreign_limit_bytes(allow_disk_use),
            if allow_disk_use { "" } else { "; pass allowDiskUse:true to opt in" }
        ),
    )
}

/// Every document of `db.coll` matching `filter`, through the router's routing (a stale
/// placement is refreshed and retried, bounded).
async fn fetch(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    filter: Document,
) -> Result<Vec<Document>, CommandError> {
    let body = &doc! { "find": coll, "filter": filter.clone(), "$db": cmd.db.clone() };
    let filter = &filter;
    call::with_placement(state, &cmd.db, coll, false, |placement| async move {
        if matches!(placement, Placement::NoDatabase) {
            return Ok(Vec::new());
        }
        let targets = target::shards(&placement, filter);
        let streams = call::read::gather(state, cmd, &placement, &targets, body, false).await?;
        Ok(streams.into_iter().flatten().collect())
    })
    .await
}
