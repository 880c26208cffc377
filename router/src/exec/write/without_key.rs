//! MongoDB 7's write without shard key: a single-document write (update, delete,
//! findAndModify) whose filter does not pin one shard finds one matching `_id` on the targets
//! ([`one_match`]), then writes that document on its shard with `{$and: [filter, {_id: id}]}`.
//! A retryable one first asks every target whether it already ran ([`probe_template`]), so a
//! resend cannot pick a second document.
//!
//! Must not: write more than one document, or run an upsert (it needs the shard key).

use bson::{Bson, Document, RawDocumentBuf, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::call::{self, request};
use crate::retryable;
use crate::routing::{self, Placement};
use crate::state::RouterState;

/// `template` asking the shard whether the statement already ran there (answered from its
/// retryable-write record, never run; see the shard's `exec::retry::PROBE_FIELD`).
pub fn probe_template(template: &bson::RawDocument) -> RawDocumentBuf {
    let mut probe = template.to_owned();
    probe.append(bson::cstr!("$shoalRetryProbe"), true);
    probe
}

/// The shard and `_id` of one document matching `filter` among `targets`: with a `sort` (the
/// statement's, MongoDB 8.0's updateOne/replaceOne, or findAndModify's) the first in that order
/// across every target, each shard offering its own first; without one, the first shard's.
#[allow(clippy::too_many_arguments)]
pub async fn one_match(
    state: &RouterState,
    cmd: &Command,
    stmt: Option<&Document>,
    coll: &str,
    placement: &Placement,
    targets: &[String],
    filter: &Document,
) -> Result<Option<(String, Bson)>, CommandError> {
    let mut find =
        doc! { "find": coll, "filter": filter.clone(), "projection": { "_id": 1 }, "limit": 1, "singleBatch": true };
    // The filter may use the command's `let` variables (`$expr`) and the collation of the
    // statement (update, delete) or of the command (findAndModify).
    let body = Document::try_from(cmd.body.as_ref())?;
    let collation = match stmt {
        Some(s) => s.get("collation"),
        None => body.get("collation"),
    };
    for (field, value) in [("let", body.get("let")), ("collation", collation)] {
        if let Some(v) = value {
            find.insert(field, v.clone());
        }
    }
    let sort = match stmt {
        Some(s) => s.get_document("sort").ok(),
        None => body.get_document("sort").ok(),
    };
    if let Some(sort) = sort.filter(|s| !s.is_empty()) {
        let collation = match collation {
            Some(Bson::Document(c)) => shoal_query::collation::Collation::parse(c)?,
            _ => shoal_query::collation::Collation::default(),
        };
        let spec = shoal_query::sort::SortSpec::parse(sort)?.with_collation(collation);
        find.insert("sort", sort.clone());
        // Whole documents: the sort fields decide between shards.
        find.remove("projection");
        // Every target at once: each offers its first, the router keeps the first of those.
        let calls = targets.iter().map(|shard| {
            let find = &find;
            async move {
                let req = request::with_body(cmd, find)?;
                let reply = call::cursor(state, shard, routing::versioned(req, placement, shard), false).await?;
                let first = reply.documents.first().map(|d| Document::from_reader(&mut d.as_ref())).transpose()?;
                Ok::<_, CommandError>(first.map(|d| (shard.clone(), d)))
            }
        });
        let mut best: Option<(String, Document)> = None;
        for offered in futures::future::join_all(calls).await {
            if let Some((shard, d)) = offered?
                && best.as_ref().is_none_or(|(_, b)| spec.compare(&d, b) == std::cmp::Ordering::Less)
            {
                best = Some((shard, d));
            }
        }
        return Ok(best.and_then(|(shard, d)| d.get("_id").cloned().map(|id| (shard, id))));
    }
    for shard in targets {
        let req = request::with_body(cmd, &find)?;
        let reply = call::cursor(state, shard, routing::versioned(req, placement, shard), false).await?;
        if let Some(first) = reply.documents.first() {
            let d = Document::from_reader(&mut first.as_ref())?;
            if let Some(id) = d.get("_id") {
                return Ok(Some((shard.clone(), id.clone())));
            }
        }
    }
    Ok(None)
}

/// `filter` made to match no document (`{$and: [filter, {_id: {$in: []}}]}`): a write without
/// shard key that found no match still runs on one shard with it, so that shard checks the
/// statement as a whole and answers as for no match.
pub fn matching_nothing(filter: &Document) -> Document {
    doc! { "$and": [filter.clone(), { "_id": { "$in": [] } }] }
}

/// `body` run as it is on the first of `targets`.
async fn one_shard(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &[String],
    body: &Document,
) -> Result<RawDocumentBuf, CommandError> {
    let Some(shard) = targets.first() else {
        return Err(CommandError::new(ErrorCode::InternalError, "findAndModify: no shard to run on"));
    };
    let req = request::with_body(cmd, body)?;
    let reply = call::command(state, shard, routing::versioned(req, placement, shard)).await?;
    RawDocumentBuf::try_from(&reply).map_err(CommandError::from)
}

/// findAndModify whose query does not pin one shard: the write without shard key, as for
/// single-document updates (its `sort` chooses across shards, [`one_match`]).
pub async fn find_and_modify(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    placement: &Placement,
    targets: &[String],
) -> Result<RawDocumentBuf, CommandError> {
    let mut body = Document::try_from(cmd.body.as_ref())?;
    let query = match body.get("query") {
        Some(Bson::Document(q)) => q.clone(),
        None | Some(Bson::Null) => Document::new(),
        // A malformed query is the command's own error: one shard reports it as it would on an
        // unsharded collection (no stand-in filter may pick a document).
        Some(_) => return one_shard(state, cmd, placement, targets, &body).await,
    };
    if body.get_bool("upsert").unwrap_or(false) {
        return Err(CommandError::new(
            ErrorCode::ShardKeyNotFound,
            "Query for sharded findAndModify with upsert must contain the shard key",
        ));
    }
    if retryable::has_txn_number(&cmd.body) {
        // A resend must not pick a second document: first ask whether it ran somewhere.
        let probe = probe_template(&cmd.body);
        for shard in targets {
            let req = request::with_bytes(cmd, Bytes::copy_from_slice(probe.as_bytes()));
            match call::command(state, shard, routing::versioned(req, placement, shard)).await {
                Ok(reply) => return RawDocumentBuf::try_from(&reply).map_err(CommandError::from),
                Err(e) if e.is(ErrorCode::NoSuchTransaction) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let Some((shard, id)) = one_match(state, cmd, None, coll, placement, targets, &query).await? else {
        // Nothing matches: the command still runs on one shard, matching nothing, so the shard
        // checks the rest of it (update, remove, fields, sort) as on an unsharded collection.
        body.insert("query", matching_nothing(&query));
        return one_shard(state, cmd, placement, targets, &body).await;
    };
    body.insert("query", doc! { "$and": [query, { "_id": id }] });
    let req = request::with_body(cmd, &body)?;
    state.targeting.record([&shard]);
    let reply = call::command(state, &shard, routing::versioned(req, placement, &shard)).await?;
    RawDocumentBuf::try_from(&reply).map_err(CommandError::from)
}
