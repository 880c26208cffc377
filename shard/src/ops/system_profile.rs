//! `<db>.system.profile` as clients see it: `find`, `aggregate` and `count` read the profiler's
//! ring of the database ([`super::profiler`]) in natural order (oldest first, as a capped
//! collection's), with filter, sort, skip, limit and projection applied by the query crate as for
//! any collection; writes are refused as MongoDB refuses them (InvalidNamespace 73).

use std::collections::VecDeque;

use bson::{Document, RawDocumentBuf};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;

use super::profiler::PROFILE_COLL;
use crate::cursors::{Cursor, CursorSource};
use crate::error::{ExecError, ExecResult};
use crate::exec::find::{Batch, FIRST_BATCH_DEFAULT_DOCS, FindArgs, next_batch};
use crate::exec::{Node, Request};

/// Whether a collection name is the profiler's.
pub fn is_profile(coll: &str) -> bool {
    coll == PROFILE_COLL
}

/// Refuses a write whose command (`body`, raw) names `system.profile`.
pub fn refuse_write(db: &str, body: &[u8]) -> ExecResult<()> {
    let named = bson::RawDocument::from_bytes(body)
        .ok()
        .and_then(|b| b.iter().next()?.ok())
        .is_some_and(|(_, v)| v.as_str().is_some_and(is_profile));
    if named {
        return Err(ExecError::new(ErrorCode::InvalidNamespace, format!("cannot write to '{db}.{PROFILE_COLL}'")));
    }
    Ok(())
}

fn matches(filter: &Filter, doc: &Document) -> ExecResult<bool> {
    Ok(if filter.can_fail() { filter.try_matches(doc)? } else { filter.matches(doc) })
}

/// `find` on `<db>.system.profile`, its arguments already checked by the find path.
pub(crate) fn find(node: &Node, req: &Request<'_>, ns: String, args: FindArgs) -> ExecResult<(Batch, String)> {
    let mut docs = Vec::new();
    for d in node.ops.profiler.documents(req.db) {
        if matches(&args.filter, &d)? {
            docs.push(d);
        }
    }
    if let Some(sort) = &args.sort {
        docs.sort_by(|a, b| sort.compare(a, b));
    }
    let skip = (args.skip as usize).min(docs.len());
    docs.drain(..skip);
    if let Some(l) = args.limit {
        docs.truncate(l as usize);
    }
    let mut out = VecDeque::with_capacity(docs.len());
    for d in docs {
        let d = match &args.projection {
            Some(p) => p.apply(&d)?,
            None => d,
        };
        out.push_back(Bytes::from(RawDocumentBuf::try_from(&d)?.into_bytes()));
    }
    let mut source = CursorSource::Buffered(out);
    let (documents, exhausted) = next_batch(node, &mut source, args.batch_size.unwrap_or(FIRST_BATCH_DEFAULT_DOCS))?;
    let cursor_id =
        if exhausted || args.single_batch { 0 } else { node.cursors.insert(Cursor::new(ns.clone(), source)) };
    Ok((Batch { documents, cursor_id }, ns))
}

/// `count` on `<db>.system.profile`.
pub fn count(node: &Node, db: &str, filter: &Filter, skip: u64, limit: Option<u64>) -> ExecResult<u64> {
    let mut n = 0u64;
    for d in node.ops.profiler.documents(db) {
        if matches(filter, &d)? {
            n += 1;
        }
    }
    let n = n.saturating_sub(skip);
    Ok(limit.map_or(n, |l| n.min(l)))
}
