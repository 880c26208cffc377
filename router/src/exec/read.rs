//! Reads that span several shards: `find` merged in sort order with skip/limit applied after the
//! merge, streamed through a `MergeCursor` over the shards' cursors; `count` summed, `distinct`
//! unioned, `aggregate` split (`shoal_query::aggregate::split`) into what the shards run and what
//! the router runs over their merged output (streamed when only a skip/limit is left, otherwise
//! gathered whole within the aggregation memory limit and handed out through a buffered cursor).
//!
//! Must not: handle single-shard reads (`crud.rs` passes those through without copying).

use std::collections::{BTreeSet, VecDeque};

use bson::{Bson, Document, RawDocumentBuf, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;
use shoal_query::aggregate::{Pipeline, split};
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::call::{self, member};
use crate::exec::merge::cursor::{MergeCursor, Source};
use crate::exec::merge::sorted;
use crate::exec::pipeline;
use crate::exec::reply::{self, BatchField};
use crate::routing::{self, Placement};
use crate::state::RouterState;

/// Default first batch size, as MongoDB's.
const FIRST_BATCH_DEFAULT: usize = 101;

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
pub(crate) async fn gather(
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
            let (first, served) = member::read_cursor(state, shard, req, aggregate).await?;
            let raw = call::drain(state, shard, &rid, first, served.as_deref()).await?;
            raw.iter().map(|b| Document::from_reader(&mut b.as_ref()).map_err(CommandError::from)).collect()
        }
    });
    futures::future::join_all(calls).await.into_iter().collect()
}

/// The client's first batch of `docs`; the rest stays in a buffered router cursor.
pub(crate) fn reply_with(
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
        return reply::cursor_reply(BatchField::First, &first, 0, ns);
    }
    match state.cursors.register_buffered(ns.to_owned(), encoded) {
        Ok(id) => reply::cursor_reply(BatchField::First, &first, id, ns),
        Err(rest) => {
            let all: Vec<Bytes> = first.into_iter().chain(rest).collect();
            reply::cursor_reply(BatchField::First, &all, 0, ns)
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
    let ns = format!("{}.{coll}", cmd.db);
    let merge = Merge { sort, projection, skip, limit, batch, single_batch };
    serve_merged(state, cmd, &ns, placement, targets, &body, false, merge).await
}

/// How a [`MergeCursor`] combines the shards' streams and hands out the result.
struct Merge {
    sort: SortSpec,
    projection: Option<Projection>,
    skip: usize,
    limit: Option<usize>,
    /// The client's first batch size (0: an empty first batch).
    batch: usize,
    single_batch: bool,
}

/// Opens `body` (find or aggregate) as a cursor on every target and serves the client a router
/// cursor merging them: each shard's first batch opens its cursor; the rest is pulled as the
/// client asks.
#[allow(clippy::too_many_arguments)]
async fn serve_merged(
    state: &RouterState,
    cmd: &Command,
    ns: &str,
    placement: &Placement,
    targets: &BTreeSet<String>,
    body: &Document,
    aggregate: bool,
    merge: Merge,
) -> Result<RawDocumentBuf, CommandError> {
    let Merge { sort, projection, skip, limit, batch, single_batch } = merge;
    state.targeting.record(targets.iter());
    let calls = targets.iter().map(|shard| async move {
        let req = routing::versioned(request_with(cmd, body)?, placement, shard);
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
    let mut cursor = MergeCursor {
        ns: ns.to_owned(),
        request_id: cmd.request_id.to_string(),
        sort,
        projection,
        skip,
        limit,
        sources,
    };
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
        state.cursors.register_merging(ns.to_owned(), cursor)
    } else {
        cursor.kill(state).await;
        0
    };
    reply::cursor_reply(BatchField::First, &encode_all(&first)?, id, ns)
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
            member::command(state, shard, req).await
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
    reply::append_count(&mut out, bson::cstr!("n"), n);
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
            member::command(state, shard, req).await
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
    let values = sorted::union_values_collated(answers, collation);
    let out = doc! { "values": values };
    Ok(RawDocumentBuf::try_from(&out)?)
}

/// `aggregate` over several shards, split by `shoal_query::aggregate::split`: the shards run
/// the per-document prefix and the first blocking stage's shard half; when nothing but a skip or
/// limit is left the router streams the shards' cursors through a [`MergeCursor`], otherwise it
/// gathers their output (bounded) and runs the rest itself.
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
    let allow_disk_use = body.get_bool("allowDiskUse").unwrap_or(false);
    let lets = body.get_document("let").ok().cloned();
    // Validates the whole pipeline before any shard sees a piece of it.
    Pipeline::parse(&stages)?.with_let(lets.as_ref())?;
    let split = split::split(&stages)?;
    let batch = match body.get_document("cursor").ok().map(|c| number(c.get("batchSize"))) {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(_) if body.get_document("cursor").is_ok_and(|c| c.contains_key("batchSize")) => 0,
        _ => FIRST_BATCH_DEFAULT,
    };
    body.insert("pipeline", split.shard.clone());
    body.insert("cursor", doc! {});
    let ns = format!("{}.{coll}", cmd.db);
    let sort = SortSpec::parse(split.merge_sort.as_ref().unwrap_or(&Document::new()))?;
    if let Some((skip, limit)) = skip_limit_only(&split.router) {
        let merge = Merge { sort, projection: None, skip, limit, batch, single_batch: false };
        return serve_merged(state, cmd, &ns, placement, targets, &body, true, merge).await;
    }
    let streams = gather(state, cmd, placement, targets, &body, true).await?;
    let held: usize = streams.iter().flatten().map(shoal_query::aggregate::doc_size).sum();
    let limit_bytes = shoal_query::aggregate::memory_limit_bytes();
    if !allow_disk_use && held > limit_bytes {
        return Err(CommandError::new(
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
            format!(
                "the shards' output for the router's part of the pipeline ({held} bytes) exceeds the memory \
                 limit of {limit_bytes} bytes; pass allowDiskUse:true to opt in"
            ),
        ));
    }
    let merged = sorted::merge_sorted(streams, &sort, 0, None);
    let docs = pipeline::run_router_part(state, cmd, &split.router, merged, allow_disk_use, lets.as_ref()).await?;
    reply_with(state, &ns, docs, batch)
}

/// `Some((skip, limit))` when `stages` are at most a `$skip` and a `$limit` (either order
/// collapses to one skip and one limit), which a [`MergeCursor`] applies while streaming.
fn skip_limit_only(stages: &[Bson]) -> Option<(usize, Option<usize>)> {
    let mut skip = 0usize;
    let mut limit: Option<usize> = None;
    for stage in stages {
        let Bson::Document(d) = stage else { return None };
        let (Some((name, v)), 1) = (d.iter().next(), d.len()) else { return None };
        let n = usize::try_from(number(Some(v))).ok()?;
        match name.as_str() {
            // A skip after a limit eats into it.
            "$skip" => {
                skip = skip.saturating_add(n);
                limit = limit.map(|l| l.saturating_sub(n));
            }
            "$limit" => limit = Some(limit.map_or(n, |l| l.min(n))),
            _ => return None,
        }
    }
    Some((skip, limit))
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use super::*;

    fn stages(v: Bson) -> Vec<Bson> {
        match v {
            Bson::Array(a) => a,
            _ => Vec::new(),
        }
    }

    #[test]
    fn skip_and_limit_collapse_for_the_merge_cursor() {
        assert_eq!(skip_limit_only(&[]), Some((0, None)));
        assert_eq!(skip_limit_only(&stages(bson!([{"$skip": 2}, {"$limit": 3}]))), Some((2, Some(3))));
        // A skip after a limit eats into it.
        assert_eq!(skip_limit_only(&stages(bson!([{"$limit": 5}, {"$skip": 2}]))), Some((2, Some(3))));
        assert_eq!(skip_limit_only(&stages(bson!([{"$limit": 5}, {"$limit": 2.0}]))), Some((0, Some(2))));
        assert_eq!(skip_limit_only(&stages(bson!([{"$limit": 5}, {"$match": {}}]))), None);
        assert_eq!(skip_limit_only(&stages(bson!([{"$skip": -1}]))), None);
    }
}
