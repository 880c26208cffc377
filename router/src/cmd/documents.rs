//! `{aggregate: 1, pipeline: [{$documents: [...]}, …]}`: a database-level pipeline whose input is
//! the literal documents of its first stage. No shard holds anything it reads, so the router runs
//! it whole (stages reading collections, such as `$lookup` or `$unionWith`, included).
//!
//! Must not: accept `$documents` on a collection (MongoDB requires `aggregate: 1`).

use bson::{Bson, Document};
use shoal_proto::ErrorCode;
use shoal_query::aggregate::Pipeline;

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::{pipeline, reply};
use crate::state::RouterState;

/// The stage this module answers.
pub const STAGE: &str = "$documents";

/// The first batch when the client names no `batchSize`, as for other cursors.
const FIRST_BATCH_DEFAULT: usize = 101;

pub async fn run(state: &RouterState, cmd: &Command, stages: Vec<Bson>) -> HandlerResult {
    if cmd.collection().is_ok() {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            "$documents must be run against a database with {aggregate: 1}, not a collection",
        ));
    }
    let body = Document::try_from(cmd.body.as_ref())?;
    let batch = shoal_query::aggregate::cursor_option(&body)?
        .map_or(FIRST_BATCH_DEFAULT, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let allow_disk_use = shoal_query::args::flag(&body, "aggregate", "allowDiskUse")?.unwrap_or(false);
    let lets = body.get_document("let").ok().cloned();
    // Validates the whole pipeline (and `$documents` being first) before running any of it.
    Pipeline::parse(&stages)?.with_let(lets.as_ref())?;
    let docs = pipeline::run_router_part(state, cmd, &stages, Vec::new(), allow_disk_use, lets.as_ref()).await?;
    reply::buffered(state, &format!("{}.$cmd.aggregate", cmd.db), docs, batch)
}
