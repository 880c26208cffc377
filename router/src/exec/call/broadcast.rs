//! A command sent unchanged to several shards at once (DDL, listings, statistics, explain), each
//! reply kept for the handler to combine.
//!
//! Must not: choose the shards or retry after StaleConfig (the handler does).

use bson::Document;

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::call::{self, request};
use crate::exec::reply;
use crate::routing::{self, Placement};
use crate::state::RouterState;

/// `cmd` sent unchanged to each of `shards`, replies in shard order (a shard's
/// `writeConcernError` inside its reply).
pub async fn broadcast(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    shards: &[String],
) -> Vec<Result<Document, CommandError>> {
    state.targeting.record(shards.iter());
    let calls = shards.iter().map(|shard| async move {
        let req = routing::versioned(request::forwarded(cmd)?, placement, shard);
        let (mut doc, wce) = call::command_with_wc(state, shard, req, false).await?;
        if let Some(e) = wce {
            let wire = e.to_wire();
            doc.insert("writeConcernError", Document::try_from(reply::write_concern_error(&wire).as_ref())?);
        }
        Ok(doc)
    });
    futures::future::join_all(calls).await
}
