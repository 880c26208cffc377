//! `$unionWith` at the router: reads the other collection through the router's routing (the
//! sub-pipeline's leading `$match` narrows and targets the read), runs the sub-pipeline here
//! (so it may itself hold `$lookup`, `$unionWith` or `$graphLookup`) and appends its output.
//!
//! Invariant: the documents read stay within [`super::foreign_limit_bytes`] (292 past it unless
//! `allowDiskUse`).

use bson::Document;
use shoal_query::aggregate::doc_size;
use shoal_query::aggregate::union_with::UnionWith;

use crate::command::Command;
use crate::error::CommandError;
use crate::state::RouterState;

pub(super) async fn run(
    state: &RouterState,
    cmd: &Command,
    spec: &UnionWith,
    mut docs: Vec<Document>,
    allow_disk_use: bool,
    lets: Option<&Document>,
) -> Result<Vec<Document>, CommandError> {
    let foreign = match (&spec.coll, UnionWith::leading_documents(&spec.pipeline)) {
        (Some(coll), None) => {
            let read = super::fetch(state, cmd, coll, spec.read_filter()).await?;
            let held: usize = read.iter().map(doc_size).sum();
            if held > super::foreign_limit_bytes(allow_disk_use) {
                return Err(super::foreign_exceeded(
                    &format!("$unionWith: the documents read from '{coll}'"),
                    allow_disk_use,
                ));
            }
            read
        }
        // `$documents` replaces the input: there is nothing to read.
        _ => Vec::new(),
    };
    let more = Box::pin(super::run_router_part(state, cmd, &spec.pipeline, foreign, allow_disk_use, lets)).await?;
    docs.extend(more);
    Ok(docs)
}
