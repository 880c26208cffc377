//! `$graphLookup` at the router: for each input document, the breadth-first search of
//! `shoal_query::aggregate::graph_lookup` asks for its rounds and each round is one routed `find`
//! on `from` (targeted when `connectToField` is the shard key), so sharded `from` collections work.
//!
//! Invariant: the documents one search reaches stay within [`super::foreign_limit_bytes`] (292
//! past it unless `allowDiskUse`); a search ends once no new value is left to ask for.

use bson::Document;
use shoal_query::aggregate::graph_lookup::GraphLookup;
use shoal_query::vars::LetVars;

use crate::command::Command;
use crate::error::CommandError;
use crate::state::RouterState;

pub(super) async fn run(
    state: &RouterState,
    cmd: &Command,
    spec: &GraphLookup,
    docs: Vec<Document>,
    allow_disk_use: bool,
    lets: Option<&Document>,
) -> Result<Vec<Document>, CommandError> {
    let vars = LetVars::parse(lets)?;
    let limit = super::foreign_limit_bytes(allow_disk_use);
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        let mut search = spec.search(&d, vars.as_slice())?;
        let mut held = 0usize;
        while let Some(filter) = search.next_query() {
            let found = super::fetch(state, cmd, &spec.from, filter).await?;
            held = held.saturating_add(search.feed(found));
            if held > limit {
                return Err(super::foreign_exceeded(
                    &format!("$graphLookup: the documents of '{}' reached from one document", spec.from),
                    allow_disk_use,
                ));
            }
        }
        out.push(search.finish(d));
    }
    Ok(out)
}
