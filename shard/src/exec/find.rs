//! `find` and `getMore`: plan the access path, apply filter, sort, skip, limit and projection,
//! and return results batch by batch through a cursor.
//!
//! Unsorted finds (and finds whose sort the access path yields: `_id` order, or an index read
//! forwards or backwards) stream: each batch resumes the scan after the last key returned, so
//! memory stays bounded by one batch. Other sorts gather the matches first, bounded by
//! [`SORT_MEMORY_MAX_BYTES`] unless the sort is top-k (with a limit); with `allowDiskUse` ten
//! times that (no spilling yet), then ExceededMemoryLimit (146).

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;

use bson::{Document, RawDocumentBuf};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES;
use shoal_query::aggregate::ALLOW_DISK_USE_MEMORY_FACTOR;
use shoal_query::filter::Filter;
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;
use shoal_query::vars::LetVars;

use crate::cursors::{Cursor, CursorSource, ScanCursor};
use crate::error::{ExecError, ExecResult};
use crate::exec::scan::{for_each_match, resume_after};
use crate::exec::{Node, Request, args, plan};

/// MongoDB's default for a blocking sort (`internalQueryMaxBlockingSortMemoryUsageBytes`).
pub const SORT_MEMORY_MAX_BYTES: usize = 100 * 1024 * 1024;
/// Documents in a first batch when the client does not say (MongoDB's 101).
pub const FIRST_BATCH_DEFAULT_DOCS: usize = 101;
/// A batch never carries more than this many bytes of documents (one always fits).
pub const BATCH_MAX_BYTES: usize = MAX_BSON_OBJECT_SIZE_BYTES;

pub struct Batch {
    pub documents: Vec<Bytes>,
    /// 0 when the cursor is exhausted.
    pub cursor_id: i64,
}

/// A `find` command's arguments, every one checked as MongoDB checks them (the run path and
/// `explain` share this, so both refuse the same input).
pub(crate) struct FindArgs {
    pub(crate) filter_doc: Document,
    pub(crate) sort_doc: Document,
    pub(crate) projection_doc: Document,
    pub(crate) skip: u64,
    pub(crate) limit: Option<u64>,
    pub(crate) batch_size: Option<usize>,
    pub(crate) single_batch: bool,
    allow_disk_use: bool,
    collation: shoal_query::collation::Collation,
    pub(crate) filter: Filter,
    pub(crate) projection: Option<Projection>,
    pub(crate) sort: Option<SortSpec>,
}

pub(crate) fn parse(body: &Document) -> ExecResult<FindArgs> {
    let cmd = "FindCommandRequest";
    args::check_known_fields(
        body,
        cmd,
        &[
            "filter",
            "projection",
            "sort",
            "hint",
            "skip",
            "limit",
            "batchSize",
            "singleBatch",
            "max",
            "min",
            "returnKey",
            "showRecordId",
            "tailable",
            "oplogReplay",
            "noCursorTimeout",
            "awaitData",
            "allowPartialResults",
            "collation",
            "allowDiskUse",
            "let",
            "term",
            "readOnce",
            "allowSpeculativeMajorityRead",
            "includeQueryStatsMetrics",
            "ntoreturn",
        ],
    )?;
    let filter_doc = args::opt_document(body, cmd, "filter")?.cloned().unwrap_or_default();
    let sort_doc = args::opt_document(body, cmd, "sort")?.cloned().unwrap_or_default();
    let projection_doc = args::opt_document(body, cmd, "projection")?.cloned().unwrap_or_default();
    let skip = args::opt_non_negative(body, cmd, "skip")?.unwrap_or(0) as u64;
    let limit = args::opt_non_negative(body, cmd, "limit")?.filter(|l| *l > 0).map(|l| l as u64);
    let batch_size = args::opt_non_negative(body, cmd, "batchSize")?.map(|b| b as usize);
    let single_batch = args::opt_bool(body, cmd, "singleBatch")?.unwrap_or(false);
    let allow_disk_use = args::opt_bool(body, cmd, "allowDiskUse")?.unwrap_or(false);
    let collation = args::collation(body, cmd)?;
    args::check_hint(body, cmd)?;
    for unsupported in ["returnKey", "showRecordId", "tailable", "awaitData"] {
        if args::opt_bool(body, cmd, unsupported)?.unwrap_or(false) {
            return Err(ExecError::new(
                ErrorCode::NotImplemented,
                format!("find option '{unsupported}' is not supported yet"),
            ));
        }
    }
    for unsupported in ["min", "max"] {
        if body.contains_key(unsupported) {
            return Err(ExecError::new(
                ErrorCode::NotImplemented,
                format!("find option '{unsupported}' is not supported yet"),
            ));
        }
    }

    let vars = LetVars::from_command(body, cmd)?;
    let filter = Filter::parse(&filter_doc)?.with_vars(&vars).with_collation(collation)?;
    let projection = if projection_doc.is_empty() { None } else { Some(Projection::parse(&projection_doc)?) };
    let sort = if sort_doc.is_empty() { None } else { Some(SortSpec::parse(&sort_doc)?.with_collation(collation)) };
    Ok(FindArgs {
        filter_doc,
        sort_doc,
        projection_doc,
        skip,
        limit,
        batch_size,
        single_batch,
        allow_disk_use,
        collation,
        filter,
        projection,
        sort,
    })
}

pub fn run(node: &Node, req: &Request<'_>) -> ExecResult<(Batch, String)> {
    let body = &req.body;
    let coll_name = args::collection_name(body, "find")?;
    let ns = args::namespace(req.db, &coll_name)?;
    let parsed = parse(body)?;
    if crate::ops::system_profile::is_profile(&coll_name) {
        return crate::ops::system_profile::find(node, req, ns.to_string(), parsed);
    }
    let FindArgs {
        filter_doc,
        sort_doc,
        projection_doc,
        skip,
        limit,
        batch_size,
        single_batch,
        allow_disk_use,
        collation,
        filter,
        projection,
        sort,
    } = parsed;
    let ns_string = ns.to_string();

    let Some(coll) = node.store.collection(&ns_string) else {
        return Ok((Batch { documents: Vec::new(), cursor_id: 0 }, ns_string));
    };
    let plan_doc = args::planning_filter(&filter_doc, collation);
    let mut chosen = plan::plan(&coll, &plan_doc, Some(&sort_doc), body.get("hint"))?;
    if let plan::AccessPath::Index(scan) = &mut chosen.path {
        scan.covered = plan::covered::covers(scan, &filter_doc, &projection_doc, &sort_doc, req.owned());
    }
    // Index and `_id` order is binary: under another collation a sort is done in memory.
    chosen.sorted &= collation.is_simple() || sort_doc.is_empty();
    let path = chosen.path;
    let filter = if plan::path_implies_filter(&path, &plan_doc) { None } else { Some(filter) };
    let first_batch = batch_size.unwrap_or(FIRST_BATCH_DEFAULT_DOCS);

    let source = match chosen.sorted.then_some(chosen.reverse) {
        Some(reverse) => CursorSource::Scan(Box::new(ScanCursor {
            coll: Arc::clone(&coll),
            path,
            reverse,
            filter,
            projection,
            skip,
            remaining: limit,
            ownership: req.ownership.clone(),
        })),
        None => {
            let spec = sort.as_ref().ok_or_else(|| ExecError::new(ErrorCode::InternalError, "sort expected"))?;
            let scan = Scan { path: &path, filter: filter.as_ref(), owned: req.owned() };
            let (docs, _) = sorted_matches(node, &coll, scan, spec, skip, limit, allow_disk_use)?;
            let mut out = VecDeque::with_capacity(docs.len());
            for d in docs {
                out.push_back(encode(projection.as_ref(), d)?);
            }
            CursorSource::Buffered(out)
        }
    };
    let mut cursor = Cursor::new(ns_string.clone(), source).pinned_since(req.read_pin_seq);
    let (documents, exhausted) = next_batch(node, &mut cursor.source, first_batch)?;
    let cursor_id = if exhausted || single_batch { 0 } else { node.cursors.insert(cursor) };
    Ok((Batch { documents, cursor_id }, ns_string))
}

/// What a sorted find scans.
pub(crate) struct Scan<'a> {
    pub(crate) path: &'a plan::AccessPath,
    pub(crate) filter: Option<&'a Filter>,
    pub(crate) owned: Option<&'a crate::sharding::Ownership>,
}

/// What a sort did besides its result, for `explain`'s SORT stage.
#[derive(Default)]
pub(crate) struct SortStats {
    /// Documents the scan gave the sort.
    pub(crate) input: u64,
    /// Time spent sorting (top-k trims included), apart from the scan feeding it.
    pub(crate) sorting: std::time::Duration,
}

pub(crate) fn sorted_matches(
    node: &Node,
    coll: &crate::store::local_catalog::CollectionInfo,
    scan: Scan<'_>,
    spec: &SortSpec,
    skip: u64,
    limit: Option<u64>,
    allow_disk_use: bool,
) -> ExecResult<(Vec<Document>, SortStats)> {
    let keep = limit.map(|l| (skip + l) as usize);
    let mut docs: Vec<Document> = Vec::new();
    let mut bytes = 0usize;
    let mut stats = SortStats::default();
    for_each_match(&node.store, None, coll, scan.path, scan.filter, scan.owned, false, |m| {
        bytes += m.raw.len();
        stats.input += 1;
        docs.push(m.doc);
        if let Some(k) = keep {
            // Top-k: keep at most 2k candidates, so memory follows the limit, not the collection.
            if docs.len() >= 2 * k.max(1) {
                let started = std::time::Instant::now();
                docs.sort_by(|a, b| spec.compare(a, b));
                docs.truncate(k);
                stats.sorting += started.elapsed();
                bytes = docs.iter().map(doc_size).sum();
            }
        } else if bytes > SORT_MEMORY_MAX_BYTES && !allow_disk_use {
            return Err(ExecError::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!(
                    "Executor error during find command :: caused by :: Sort exceeded memory limit of {SORT_MEMORY_MAX_BYTES} bytes, but did not opt in to external sorting."
                ),
            ));
        } else if bytes > SORT_MEMORY_MAX_BYTES * ALLOW_DISK_USE_MEMORY_FACTOR {
            // No spilling yet: with allowDiskUse the sort may hold more, but never unbounded.
            return Err(ExecError::new(
                ErrorCode::ExceededMemoryLimit,
                format!(
                    "Executor error during find command :: caused by :: Sort exceeded memory limit of {} bytes \
                     even with allowDiskUse (Shoal does not spill sorts to disk yet)",
                    SORT_MEMORY_MAX_BYTES * ALLOW_DISK_USE_MEMORY_FACTOR
                ),
            ));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let started = std::time::Instant::now();
    docs.sort_by(|a, b| spec.compare(a, b));
    stats.sorting += started.elapsed();
    let skip = (skip as usize).min(docs.len());
    docs.drain(..skip);
    if let Some(l) = limit {
        docs.truncate(l as usize);
    }
    Ok((docs, stats))
}

fn doc_size(d: &Document) -> usize {
    // An estimate is enough for a memory bound; encoding to measure would double the work.
    d.iter().map(|(k, _)| k.len() + 16).sum()
}

fn encode(projection: Option<&Projection>, doc: Document) -> ExecResult<Bytes> {
    let doc = match projection {
        Some(p) => p.apply(&doc)?,
        None => doc,
    };
    Ok(Bytes::from(RawDocumentBuf::try_from(&doc)?.into_bytes()))
}

/// Produces up to `max_docs` documents (and at most [`BATCH_MAX_BYTES`], one always) from the
/// cursor; returns them and whether the cursor is exhausted.
pub fn next_batch(node: &Node, source: &mut CursorSource, max_docs: usize) -> ExecResult<(Vec<Bytes>, bool)> {
    let max_docs = if max_docs == 0 { usize::MAX } else { max_docs };
    let mut out = Vec::new();
    let mut bytes = 0usize;
    match source {
        CursorSource::Buffered(queue) => {
            while let Some(front) = queue.front() {
                if out.len() >= max_docs || (!out.is_empty() && bytes + front.len() > BATCH_MAX_BYTES) {
                    break;
                }
                bytes += front.len();
                out.extend(queue.pop_front());
            }
            Ok((out, queue.is_empty()))
        }
        CursorSource::Scan(scan) => {
            if scan.remaining == Some(0) {
                return Ok((out, true));
            }
            let mut last_key: Option<Bytes> = None;
            let mut full = false;
            let ScanCursor { coll, path, reverse, filter, projection, skip, remaining, ownership } = &mut **scan;
            let owned = ownership.as_deref();
            for_each_match(&node.store, None, coll, path, filter.as_ref(), owned, *reverse, |m| {
                if out.len() >= max_docs || (!out.is_empty() && bytes + m.raw.len() > BATCH_MAX_BYTES) {
                    full = true;
                    return Ok(ControlFlow::Break(()));
                }
                last_key = Some(m.key.clone());
                if *skip > 0 {
                    *skip -= 1;
                    return Ok(ControlFlow::Continue(()));
                }
                let encoded = match projection {
                    Some(p) => encode(Some(p), m.doc)?,
                    None => m.raw,
                };
                bytes += encoded.len();
                out.push(encoded);
                if let Some(r) = remaining {
                    *r -= 1;
                    if *r == 0 {
                        return Ok(ControlFlow::Break(()));
                    }
                }
                Ok(ControlFlow::Continue(()))
            })?;
            let exhausted = !full || *remaining == Some(0);
            if !exhausted {
                match last_key.and_then(|k| resume_after(path, &k, *reverse)) {
                    Some(next) => *path = next,
                    None => return Ok((out, true)),
                }
            }
            Ok((out, exhausted))
        }
    }
}

pub fn get_more(node: &Node, cursor_id: i64, batch_size: usize, ns: &str) -> ExecResult<(Batch, String)> {
    let Some(mut cursor) = node.cursors.take(cursor_id) else {
        return Err(ExecError::new(ErrorCode::CursorNotFound, format!("cursor id {cursor_id} not found")));
    };
    if !ns.is_empty() && cursor.ns != ns {
        let msg =
            format!("Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}", cursor.ns);
        node.cursors.put_back(cursor_id, cursor);
        return Err(ExecError::new(ErrorCode::Unauthorized, msg));
    }
    // On error the cursor is dropped: MongoDB kills a cursor whose getMore failed.
    let (documents, exhausted) = next_batch(node, &mut cursor.source, batch_size)?;
    let ns = cursor.ns.clone();
    let id = if exhausted {
        0
    } else {
        node.cursors.put_back(cursor_id, cursor);
        cursor_id
    };
    Ok((Batch { documents, cursor_id: id }, ns))
}
