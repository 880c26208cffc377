//! Call, the third step of a read: sends it to the shards its [`Route`] names and collects their
//! [`Answers`] for the merge. One shard gets the client's bytes as they are (read preference
//! honoured, see [`member`]); several get what the read's [`Plan`] says they run, all at once.
//!
//! Must not: combine answers (`exec::merge` does), retry after StaleConfig (the caller's
//! `with_placement` does), or shape replies.

use std::collections::{BTreeSet, VecDeque};

use bson::{Document, RawDocumentBuf};
use shoal_proto::catalog::ShardId;
use shoal_proto::shard::CursorReply;
use shoal_query::collation::Collation;

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::call::member::{self, Served};
use crate::exec::call::{self, request};
use crate::exec::merge::cursor::{self, Source};
use crate::exec::parse::{Merge, Plan, Read, ReadKind, RouterPart};
use crate::exec::target::Route;
use crate::exec::write;
use crate::routing::{self, Placement};
use crate::state::RouterState;

/// What the shards answered, with what the merge needs to combine it.
pub enum Answers {
    /// No shard was asked.
    Nothing,
    /// One shard's cursor, its documents still the shard's bytes.
    ShardCursor { shard: ShardId, reply: CursorReply, served: Served },
    /// One shard's one-document answer and its `writeConcernError`.
    Document(Document, Option<CommandError>),
    /// Several shards' open cursors, to merge as the client asks for batches.
    Cursors { sources: Vec<Source>, merge: Merge },
    /// Several shards' whole output, for the router's part of a pipeline.
    Streams { streams: Vec<Vec<Document>>, rest: RouterPart },
    /// Each shard's count (skip and limit still to apply to the sum).
    Counts { replies: Vec<Document>, skip: i64, limit: i64 },
    /// Each shard's distinct values.
    Values { replies: Vec<Document>, collation: Collation },
    /// Already the client's reply (findAndModify without shard key).
    Reply(RawDocumentBuf),
}

/// Calls the shards `route` names for `read`, with the versions of `placement`.
pub async fn read(
    state: &RouterState,
    read: &Read<'_>,
    placement: &Placement,
    route: Route,
) -> Result<Answers, CommandError> {
    let targets = match route {
        Route::Nowhere => return Ok(Answers::Nothing),
        Route::One(shard) => return one(state, read.cmd, read.kind, placement, shard).await,
        Route::Many(targets) => targets,
    };
    let cmd = read.cmd;
    Ok(match read.plan()? {
        Plan::Find { body, merge } => {
            Answers::Cursors { sources: open(state, cmd, placement, &targets, &body, false).await?, merge }
        }
        Plan::AggregateStreamed { body, merge } => {
            Answers::Cursors { sources: open(state, cmd, placement, &targets, &body, true).await?, merge }
        }
        Plan::AggregateGathered { body, rest } => {
            Answers::Streams { streams: gather(state, cmd, placement, &targets, &body, true).await?, rest }
        }
        Plan::Count { body, skip, limit } => {
            Answers::Counts { replies: each(state, cmd, placement, &targets, &body).await?, skip, limit }
        }
        Plan::Distinct { body, collation } => {
            Answers::Values { replies: each(state, cmd, placement, &targets, &body).await?, collation }
        }
        Plan::FindAndModify => {
            let targets: Vec<ShardId> = targets.into_iter().collect();
            Answers::Reply(write::without_key::find_and_modify(state, cmd, read.coll, placement, &targets).await?)
        }
    })
}

/// The one-shard path: the client's bytes forwarded as they are.
pub async fn one(
    state: &RouterState,
    cmd: &Command,
    kind: ReadKind,
    placement: &Placement,
    shard: ShardId,
) -> Result<Answers, CommandError> {
    let aggregate = match kind {
        ReadKind::Find => false,
        ReadKind::Aggregate => true,
        ReadKind::Count | ReadKind::Distinct => {
            let (doc, wce) = one_document(state, cmd, placement, shard).await?;
            return Ok(Answers::Document(doc, wce));
        }
        ReadKind::FindAndModify => {
            state.targeting.record([&shard]);
            let req = routing::versioned(request::forwarded(cmd)?, placement, &shard);
            let (doc, wce) = call::command_with_wc(state, &shard, req, false).await?;
            return Ok(Answers::Document(doc, wce));
        }
    };
    state.targeting.record([&shard]);
    let req = routing::versioned(request::forwarded(cmd)?, placement, &shard);
    let (reply, served) = member::read_cursor(state, &shard, req, aggregate).await?;
    Ok(Answers::ShardCursor { shard, reply, served })
}

/// A read whose reply is one document (`count`, `distinct`, database-level commands), the
/// client's bytes forwarded to `shard` as they are: the reply and its `writeConcernError`.
pub async fn one_document(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    shard: ShardId,
) -> Result<(Document, Option<CommandError>), CommandError> {
    state.targeting.record([&shard]);
    let req = routing::versioned(request::forwarded(cmd)?, placement, &shard);
    member::command_with_wc(state, &shard, req).await
}

/// Opens `body` (find or aggregate) as a cursor on every target: each shard's first batch
/// opens its stream. If one fails, those already open are killed.
async fn open(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &BTreeSet<ShardId>,
    body: &Document,
    aggregate: bool,
) -> Result<Vec<Source>, CommandError> {
    state.targeting.record(targets.iter());
    let calls = targets.iter().map(|shard| async move {
        let req = routing::versioned(request::with_body(cmd, body)?, placement, shard);
        let (reply, member) = member::read_cursor(state, shard, req, aggregate).await?;
        let mut buffered = VecDeque::with_capacity(reply.documents.len());
        for d in &reply.documents {
            buffered.push_back(Document::from_reader(&mut d.as_ref())?);
        }
        Ok::<Source, CommandError>(Source { shard: shard.clone(), member, cursor_id: reply.cursor_id, buffered })
    });
    let mut sources = Vec::new();
    let mut failure = None;
    for r in futures::future::join_all(calls).await {
        match r {
            Ok(s) => sources.push(s),
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) => {
            cursor::kill_all(state, &cmd.request_id.to_string(), &mut sources).await;
            Err(e)
        }
        None => Ok(sources),
    }
}

/// Runs `body` as find/aggregate on every shard in `targets` and returns each shard's documents.
pub async fn gather(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &BTreeSet<ShardId>,
    body: &Document,
    aggregate: bool,
) -> Result<Vec<Vec<Document>>, CommandError> {
    state.targeting.record(targets.iter());
    let rid = cmd.request_id.to_string();
    let calls = targets.iter().map(|shard| {
        let rid = rid.clone();
        async move {
            let req = routing::versioned(request::with_body(cmd, body)?, placement, shard);
            let (first, served) = member::read_cursor(state, shard, req, aggregate).await?;
            let raw = call::drain(state, shard, &rid, first, served.as_deref()).await?;
            raw.iter().map(|b| Document::from_reader(&mut b.as_ref()).map_err(CommandError::from)).collect()
        }
    });
    futures::future::join_all(calls).await.into_iter().collect()
}

/// Runs `body` (a one-document read) on every shard in `targets`: their replies, in order.
async fn each(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &BTreeSet<ShardId>,
    body: &Document,
) -> Result<Vec<Document>, CommandError> {
    state.targeting.record(targets.iter());
    let calls = targets.iter().map(|shard| async move {
        let req = routing::versioned(request::with_body(cmd, body)?, placement, shard);
        member::command(state, shard, req).await
    });
    futures::future::join_all(calls).await.into_iter().collect()
}
