//! `aggregate` on one collection: the leading `$match` chooses the access path and filters the
//! scan; the rest of the pipeline runs in `shoal_query::aggregate` over the streamed documents
//! (stages that must hold documents bound their own memory). Results are returned through a
//! buffered cursor.

use std::cell::RefCell;
use std::collections::VecDeque;

use bson::{Bson, Document, RawDocumentBuf};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_query::aggregate::Pipeline;
use shoal_query::filter::Filter;

use crate::cursors::{Cursor, CursorSource};
use crate::error::{ExecError, ExecResult};
use crate::exec::find::{Batch, next_batch};
use crate::exec::{Node, Request, args, plan};

/// Results an aggregation may hold for its cursor, as MongoDB bounds a blocking stage (100 MiB).
pub const RESULTS_MAX_BYTES: usize = 100 * 1024 * 1024;
/// With `allowDiskUse` — but results are not spilled to disk yet, so a larger bound still holds.
pub const RESULTS_MAX_BYTES_DISK_USE: usize = 1024 * 1024 * 1024;

/// Encodes the pipeline's output for a buffered cursor, refusing (292) once it passes `limit`
/// bytes instead of growing without bound.
fn buffer_results(
    results: impl Iterator<Item = Result<Document, shoal_query::QueryError>>,
    limit: usize,
) -> ExecResult<VecDeque<Bytes>> {
    let mut queue = VecDeque::new();
    let mut bytes = 0usize;
    for d in results {
        let encoded = Bytes::from(RawDocumentBuf::try_from(&d?)?.into_bytes());
        bytes += encoded.len();
        if bytes > limit {
            return Err(ExecError::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!("aggregation results exceed {limit} bytes held for the cursor; add a $limit or a $group"),
            ));
        }
        queue.push_back(encoded);
    }
    Ok(queue)
}

/// The fields an `aggregate` may carry (run and `explain` check against the same list).
pub(crate) const FIELDS: &[&str] = &[
    "pipeline",
    "explain",
    "allowDiskUse",
    "cursor",
    "maxTimeMS",
    "bypassDocumentValidation",
    "hint",
    "needsMerge",
    "fromMongos",
    "collation",
    "let",
    "exchange",
    "isMapReduceCommand",
    "collectionUUID",
    "passthroughToShard",
    "includeQueryStatsMetrics",
];

/// An `aggregate`'s options besides its pipeline, checked as MongoDB checks them (run and
/// `explain` share it): the cursor's batch size and `allowDiskUse`.
pub(crate) fn options(body: &Document) -> ExecResult<(Option<usize>, bool)> {
    let batch_size = shoal_query::aggregate::cursor_option(body)?.map(|b| b as usize);
    args::check_collation(body, "aggregate")?;
    args::check_hint(body, "aggregate")?;
    let allow_disk_use = args::opt_bool(body, "aggregate", "allowDiskUse")?.unwrap_or(false);
    Ok((batch_size, allow_disk_use))
}

pub fn run(node: &Node, req: &Request<'_>) -> ExecResult<(Batch, String)> {
    let body = &req.body;
    args::check_known_fields(body, "aggregate", FIELDS)?;
    let coll_name = match body.get("aggregate") {
        Some(Bson::String(s)) if !s.is_empty() => s.clone(),
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(1.0)) => {
            return Err(ExecError::new(
                ErrorCode::NotImplemented,
                "database-level aggregation ({aggregate: 1}) is not supported yet",
            ));
        }
        _ => {
            return Err(ExecError::new(
                ErrorCode::InvalidNamespace,
                "collection name has invalid type or is empty for command aggregate",
            ));
        }
    };
    let ns = args::namespace(req.db, &coll_name)?;
    let stages = match body.get("pipeline") {
        Some(Bson::Array(a)) => a.clone(),
        Some(other) => return Err(args::wrong_type("aggregate", "pipeline", other, "array")),
        None => {
            return Err(ExecError::new(
                ErrorCode::Location40414,
                "BSON field 'aggregate.pipeline' is missing but a required field",
            ));
        }
    };
    if body.contains_key("explain") {
        return Err(ExecError::new(ErrorCode::NotImplemented, "explain is not supported yet"));
    }
    let (batch_size, allow_disk_use) = options(body)?;
    let vars = shoal_query::vars::LetVars::from_command(body, "aggregate")?;
    let pipeline = Pipeline::parse(&stages)?.with_allow_disk_use(allow_disk_use).with_vars(&vars);
    let ns_string = ns.to_string();

    let limit = if allow_disk_use { RESULTS_MAX_BYTES_DISK_USE } else { RESULTS_MAX_BYTES };
    let collection = node.store.collection(&ns_string);
    let queue = match collection {
        // The profiler's ring, oldest first.
        _ if crate::ops::system_profile::is_profile(&coll_name) => {
            buffer_results(pipeline.stream(node.ops.profiler.documents(req.db).into_iter()), limit)?
        }
        Some(coll) => {
            let leading = pipeline.leading_match().cloned().unwrap_or_default();
            let sort = pipeline.leading_sort();
            let chosen = plan::plan(&coll, &leading, sort.as_ref().map(|(s, _)| s), body.get("hint"))?;
            let scan_filter = if leading.is_empty() { None } else { Some(Filter::parse(&leading)?.with_vars(&vars)) };
            let failure: RefCell<Option<ExecError>> = RefCell::new(None);
            let owned = req.owned();
            // An index (or `_id` order) that yields the leading `$sort`'s order replaces it.
            let (reverse, start) = match &sort {
                Some((_, after)) if chosen.sorted => (chosen.reverse, *after),
                _ => (false, 0),
            };
            let docs = crate::exec::scan::iter_matches(
                &node.store,
                &coll,
                &chosen.path,
                scan_filter.as_ref(),
                owned,
                reverse,
                &failure,
            );
            let out = buffer_results(pipeline.stream_from_stage(start, docs), limit);
            if let Some(e) = failure.into_inner() {
                return Err(e);
            }
            out?
        }
        None => buffer_results(pipeline.stream(std::iter::empty::<Document>()), limit)?,
    };
    let mut source = CursorSource::Buffered(queue);
    let (documents, exhausted) =
        next_batch(node, &mut source, batch_size.unwrap_or(crate::exec::find::FIRST_BATCH_DEFAULT_DOCS))?;
    let cursor_id = if exhausted {
        0
    } else {
        node.cursors.insert(Cursor::new(ns_string.clone(), source).pinned_since(req.read_pin_seq))
    };
    Ok((Batch { documents, cursor_id }, ns_string))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn buffered_results_are_bounded() {
        let docs = (0..10).map(|i| Ok(doc! { "i": i }));
        assert_eq!(buffer_results(docs, 1 << 20).map(|q| q.len()).ok(), Some(10));
        let docs = (0..10).map(|i| Ok(doc! { "i": i }));
        let err = buffer_results(docs, 40).err().map(|e| e.code);
        assert_eq!(err, Some(ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed));
    }
}
