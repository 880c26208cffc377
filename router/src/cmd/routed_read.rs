//! Reads that span several shards: `find` merged in sort order with skip/limit applied after the
//! merge, streamed through a `MergeCursor` over the shards' cursors; `count` summed, `distinct`
//! unioned, `aggregate` with its leading per-document stages run on the shards and the rest on
//! the router (its input gathered whole, bounded by `shard_call::MERGE_BYTES_MAX`, and handed out
//! through a buffered router cursor).
//!
//! Must not: handle single-shard reads (`crud.rs` passes those through without copying).

use std::collections::{BTreeSet, VecDeque};

use bson::{Bson, Document, RawDocumentBuf, doc};
use bytes::Bytes;
use shoal_proto::shard::CommandRequest;
use shoal_query::aggregate::Pipeline;
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;

use crate::cmd::forward::{self, BatchField};
use crate::cmd::{shard_call, shard_read};
use crate::command::Command;
use crate::error::CommandError;
use crate::merge;
use crate::merge_cursor::{MergeCursor, Source};
use crate::routing::{self, Placement};
use crate::state::RouterState;

/// Default first batch size, as MongoDB's.
const FIRST_BATCH_DEFAULT: usize = 101;

/// Stages that transform each document alone, so they may run on the shards before a merge.
const PER_DOCUMENT_STAGES: &[&str] =
    &["$match", "$project", "$addFields", "$set", "$unset", "$unwind", "$replaceRoot", "$replaceWith"];

fn request_with(cmd: &Command, body: &Document) -> Result<CommandRequest, CommandError> {
    let mut buf = Vec::new();
    body.to_writer(&mut buf)?;
    Ok(CommandRequest {
        request_id: cmd.request_id.to_string(),
        db: cmd.db.clone(),
        body: Bytes::from(buf),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
    })
}

fn number(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) => *d as i64,
        _ => 0,
    }
}

/// Runs `body` as find/aggregate on every shard in `targets` and returns each shard's documents.
async fn gather(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &BTreeSet<String>,
    body: &Document,
    aggregate: bool,
) -> Result<Vec<Vec<Document>>, CommandError> {
    state.targeting.record(targets.iter());
    let rid = cmd.request_id.to_string();
    let calls = targets.iter().map(|shard| {
        let rid = rid.clone();
        async move {
            let req = routing::versioned(request_with(cmd, body)?, placement, shard);
            let (first, served) = shard_read::read_cursor(state, shard, req, aggregate).await?;
            let raw = shard_call::drain(state, shard, &rid, first, served.as_deref()).await?;
            raw.iter().map(|b| Document::from_reader(&mut b.as_ref()).map_err(CommandError::from)).collect()
        }
    });
    futures::future::join_all(calls).await.into_iter().collect()
}

/// The client's first batch of `docs`; the rest stays in a buffered router cursor.
fn reply_with(
    state: &RouterState,
    ns: &str,
    docs: Vec<Document>,
    batch: usize,
) -> Result<RawDocumentBuf, CommandError> {
    let mut encoded = VecDeque::with_capacity(docs.len());
    for d in &docs {
        let mut buf = Vec::new();
        d.to_writer(&mut buf)?;
        encoded.push_back(Bytes::from(buf));
    }
    let first: Vec<Bytes> = encoded.drain(..batch.min(encoded.len())).collect();
    if encoded.is_empty() {
        return forward::cursor_reply(BatchField::First, &first, 0, ns);
    }
    match state.cursors.register_buffered(ns.to_owned(), encoded) {
        Ok(id) => forward::cursor_reply(BatchField::First, &first, id, ns),
        Err(rest) => {
            let all: Vec<Bytes> = first.into_iter().chain(rest).collect();
            forward::cursor_reply(BatchField::First, &all, 0, ns)
        }
    }
}

/// `find` over several shards.
pub async fn find(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    placement: &Placement,
    targets: &BTreeSet<String>,
) -> Result<RawDocumentBuf, CommandError> {
    let mut body = Document::try_from(cmd.body.as_ref())?;
    let sort = match body.get("sort") {
        Some(Bson::Document(s)) => SortSpec::parse(s)?,
        _ => SortSpec::parse(&Document::new())?,
    }
    .with_collation(shoal_query::collation::Collation::from_command(&body, "find")?);
    let skip = usize::try_from(number(body.get("skip"))).unwrap_or(0);
    let raw_limit = number(body.get("limit"));
    let single_batch = raw_limit < 0 || body.get_bool("singleBatch").unwrap_or(false);
    let limit = usize::try_from(raw_limit.unsigned_abs()).ok().filter(|l| *l > 0);
    let batch = match number(body.get("batchSize")) {
        n if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        _ if body.contains_key("batchSize") => 0,
        _ => FIRST_BATCH_DEFAULT,
    };
    body.remove("skip");
    body.remove("batchSize");
    body.remove("singleBatch");
    if let Some(l) = limit {
        body.insert("limit", i64::try_from(l.saturating_add(skip)).unwrap_or(i64::MAX));
    }
    // The projection may drop sort fields: apply it after the merge.
    let projection = match (sort.is_empty(), body.get("projection")) {
        (false, Some(Bson::Document(p))) if !p.is_empty() => {
            let p = Projection::parse(p)?;
            body.remove("projection");
            Some(p)
        }
        _ => None,
    };
    // Each shard's first batch opens its cursor; the rest is pulled as the client asks.
    state.targeting.record(targets.iter());
    let calls = targets.iter().map(|shard| {
        let body = &body;
        async move {
            let req = routing::versioned(request_with(cmd, body)?, placement, shard);
            let (reply, member) = shard_read::read_cursor(state, shard, req, false).await?;
            let mut buffered = VecDeque::with_capacity(reply.documents.len());
            for d in &reply.documents {
                buffered.push_back(Document::from_reader(&mut d.as_ref())?);
            }
            Ok::<Source, CommandError>(Source { shard: shard.clone(), member, cursor_id: reply.cursor_id, buffered })
        }
    });
    let mut sources = Vec::new();
    let mut failure = None;
    for r in futures::future::join_all(calls).await {
        match r {
            Ok(s) => sources.push(s),
            Err(e) => failure = Some(e),
        }
    }
    let ns = format!("{}.{coll}", cmd.db);
    let mut cursor =
        MergeCursor { ns: ns.clone(), request_id: cmd.request_id.to_string(), sort, projection, skip, limit, sources };
    if let Some(e) = failure {
        cursor.kill(state).await;
        return Err(e);
    }
    // `batchSize: 0` asks for an empty first batch; a single batch takes everything.
    let first = match if batch == 0 && !single_batch {
        Ok(Vec::new())
    } else {
        cursor.next_batch(state, if single_batch { 0 } else { batch }).await
    } {
        Ok(docs) => docs,
        Err(e) => {
            cursor.kill(state).await;
            return Err(e);
        }
    };
    let id = if cursor.has_more() && !single_batch {
        state.cursors.register_merging(ns.clone(), cursor)
    } else {
        cursor.kill(state).await;
        0
    };
    forward::cursor_reply(BatchField::First, &encode_all(&first)?, id, &ns)
}

/// Documents as the BSON bytes a cursor reply carries.
pub fn encode_all(docs: &[Document]) -> Result<Vec<Bytes>, CommandError> {
    docs.iter().map(|d| Ok(Bytes::from(d.to_vec()?))).collect()
}

/// `count` over several shards: per-shard counts with skip folded into the limit, then the
/// client's skip and limit applied to the sum.
pub async fn count(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &BTreeSet<String>,
) -> Result<RawDocumentBuf, CommandError> {
    let mut body = Document::try_from(cmd.body.as_ref())?;
    let skip = number(body.get("skip")).max(0);
    let limit = number(body.get("limit")).abs();
    body.remove("skip");
    if limit > 0 {
        body.insert("limit", limit + skip);
    }
    state.targeting.record(targets.iter());
    let calls = targets.iter().map(|shard| {
        let body = &body;
        async move {
            let req = routing::versioned(request_with(cmd, body)?, placement, shard);
            shard_read::command(state, shard, req).await
        }
    });
    let mut total = 0i64;
    for reply in futures::future::join_all(calls).await {
        total += number(reply?.get("n"));
    }
    let mut n = (total - skip).max(0);
    if limit > 0 {
        n = n.min(limit);
    }
    let mut out = RawDocumentBuf::new();
    forward::append_count(&mut out, bson::cstr!("n"), n);
    Ok(out)
}

/// `distinct` over several shards: the union, deduplicated and sorted.
pub async fn distinct(
    state: &RouterState,
    cmd: &Command,
    placement: &Placement,
    targets: &BTreeSet<String>,
) -> Result<RawDocumentBuf, CommandError> {
    let body = Document::try_from(cmd.body.as_ref())?;
    state.targeting.record(targets.iter());
    let calls = targets.iter().map(|shard| {
        let body = &body;
        async move {
            let req = routing::versioned(request_with(cmd, body)?, placement, shard);
            shard_read::command(state, shard, req).await
        }
    });
    let mut answers = Vec::new();
    for reply in futures::future::join_all(calls).await {
        match reply?.get("values") {
            Some(Bson::Array(a)) => answers.push(a.clone()),
            _ => answers.push(Vec::new()),
        }
    }
    let collation = shoal_query::collation::Collation::from_command(&body, "distinct")?;
    let values = merge::union_values_collated(answers, collation);
    let out = doc! { "values": values };
    Ok(RawDocumentBuf::try_from(&out)?)
}

/// `aggregate` over several shards.
pub async fn aggregate(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    placement: &Placement,
    targets: &BTreeSet<String>,
) -> Result<RawDocumentBuf, CommandError> {
    let mut body = Document::try_from(cmd.body.as_ref())?;
    let stages = match body.get("pipeline") {
        Some(Bson::Array(a)) => a.clone(),
        _ => return Err(CommandError::type_mismatch("'pipeline' option must be specified as an array")),
    };
    let split = stages
        .iter()
        .position(|s| !matches!(s, Bson::Document(d) if d.keys().next().is_some_and(|k| PER_DOCUMENT_STAGES.contains(&k.as_str()))))
        .unwrap_or(stages.len());
    let (shard_part, router_part) = stages.split_at(split);
    let batch = match body.get_document("cursor").ok().map(|c| number(c.get("batchSize"))) {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(_) if body.get_document("cursor").is_ok_and(|c| c.contains_key("batchSize")) => 0,
        _ => FIRST_BATCH_DEFAULT,
    };
    // `$sort` then `$limit` right after the shard part: each shard's top-k is enough for the
    // router's (which still sorts and limits the union).
    let mut pushed = shard_part.to_vec();
    let stage_name = |b: &Bson| match b {
        Bson::Document(d) => d.keys().next().cloned(),
        _ => None,
    };
    if router_part.len() >= 2
        && stage_name(&router_part[0]).as_deref() == Some("$sort")
        && stage_name(&router_part[1]).as_deref() == Some("$limit")
    {
        pushed.extend_from_slice(&router_part[..2]);
    }
    body.insert("pipeline", pushed);
    body.insert("cursor", doc! {});
    let streams = gather(state, cmd, placement, targets, &body, true).await?;
    let merged: Vec<Document> = streams.into_iter().flatten().collect();
    let docs = if router_part.is_empty() {
        merged
    } else {
        let allow_disk = body.get_bool("allowDiskUse").unwrap_or(false);
        Pipeline::parse(router_part)?
            .with_allow_disk_use(allow_disk)
            .with_let(body.get_document("let").ok())?
            .run(merged.into_iter())?
    };
    let ns = format!("{}.{coll}", cmd.db);
    reply_with(state, &ns, docs, batch)
}
