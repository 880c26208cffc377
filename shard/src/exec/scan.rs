//! Reading the documents an access path yields and keeping those the filter matches and, for a
//! versioned request on a sharded collection, this shard owns (orphans are skipped; see
//! `sharding::ownership`). Unversioned requests pass no ownership and pay nothing for it. Scans
//! stop with MaxTimeMSExpired once the operation's `maxTimeMS` passed (`deadline`).

use std::ops::{Bound, ControlFlow};

use bson::Document;
use bytes::Bytes;
use shoal_query::filter::Filter;

use crate::error::ExecResult;
use crate::exec::deadline;
use crate::exec::plan::AccessPath;
use crate::sharding::Ownership;
use crate::store::catalog::CollectionInfo;
use crate::store::{Store, WriteTxn};

/// One stored document the filter matched.
pub struct Matched {
    /// Its storage key (collection id ‖ keystring(_id)).
    pub key: Bytes,
    /// The stored bytes, a view of what the engine returned.
    pub raw: Bytes,
    pub doc: Document,
}

pub fn decode(raw: &[u8]) -> ExecResult<Document> {
    Ok(Document::from_reader(&mut &raw[..])?)
}

/// Whether `doc` passes the filter and the ownership filter, or the error an `$expr` raised.
/// A filter that can fail runs after the ownership check, so an orphan cannot fail a query it
/// would not be part of.
fn keep(doc: &Document, filter: Option<&Filter>, owned: Option<&Ownership>) -> ExecResult<bool> {
    let owns = |d: &Document| owned.is_none_or(|o| o.owns_document(d));
    match filter {
        None => Ok(owns(doc)),
        Some(fl) if fl.can_fail() => Ok(owns(doc) && fl.try_matches(doc)?),
        Some(fl) => Ok(fl.matches(doc) && owns(doc)),
    }
}

/// Calls `f` with each matching document in key order (reverse: descending) starting within the
/// path's bounds, until `f` breaks. `txn` (when writing) makes point reads see staged writes.
/// `owned`: skip documents this shard does not own.
#[allow(clippy::too_many_arguments)]
pub fn for_each_match(
    store: &Store,
    txn: Option<&WriteTxn<'_>>,
    coll: &CollectionInfo,
    path: &AccessPath,
    filter: Option<&Filter>,
    owned: Option<&Ownership>,
    reverse: bool,
    mut f: impl FnMut(Matched) -> ExecResult<ControlFlow<()>>,
) -> ExecResult<()> {
    match path {
        AccessPath::Point(id) => {
            let raw = match txn {
                Some(t) => t.get(coll, id)?,
                None => store.get(coll, id)?,
            };
            if let Some(raw) = raw {
                let doc = decode(&raw)?;
                if keep(&doc, filter, owned)? {
                    let key = Bytes::from(crate::store::keys::document_key(coll.id, id));
                    let _ = f(Matched { key, raw, doc })?;
                }
            }
            Ok(())
        }
        AccessPath::Range { lower, upper } => {
            for (examined, kv) in store.scan(coll, lower.clone(), upper.clone(), reverse).enumerate() {
                if (examined as u64).is_multiple_of(deadline::CHECK_EVERY) {
                    deadline::check()?;
                }
                let (key, raw) = kv?;
                let doc = decode(&raw)?;
                if keep(&doc, filter, owned)? && f(Matched { key, raw, doc })?.is_break() {
                    break;
                }
            }
            Ok(())
        }
    }
}

/// The path that continues a scan after `last_key` in the given direction; `None` when nothing
/// can follow (a point read yields at most one document).
pub fn resume_after(path: &AccessPath, last_key: &[u8], reverse: bool) -> Option<AccessPath> {
    match path {
        AccessPath::Range { lower, upper } if reverse => {
            Some(AccessPath::Range { lower: lower.clone(), upper: Bound::Excluded(last_key.to_vec()) })
        }
        AccessPath::Range { upper, .. } => {
            Some(AccessPath::Range { lower: Bound::Excluded(last_key.to_vec()), upper: upper.clone() })
        }
        AccessPath::Point(_) => None,
    }
}

/// The matching documents as an iterator (for pipelines that pull). A storage, decoding or
/// filter evaluation error ends the iteration and is left in `failure` for the caller to report.
pub fn iter_matches<'a>(
    store: &'a Store,
    coll: &'a CollectionInfo,
    path: &'a AccessPath,
    filter: Option<&'a Filter>,
    owned: Option<&'a Ownership>,
    failure: &'a std::cell::RefCell<Option<crate::error::ExecError>>,
) -> Box<dyn Iterator<Item = Document> + 'a> {
    let fail = move |e: crate::error::ExecError| {
        failure.borrow_mut().get_or_insert(e);
        None
    };
    // `Some(None)`: skipped; `None`: the error that ends the iteration.
    let kept = move |d: Document| match keep(&d, filter, owned) {
        Ok(true) => Some(Some(d)),
        Ok(false) => Some(None),
        Err(e) => {
            failure.borrow_mut().get_or_insert(e);
            None
        }
    };
    match path {
        AccessPath::Point(id) => {
            let doc = match store.get(coll, id) {
                Ok(Some(raw)) => decode(&raw).map_or_else(fail, Some),
                Ok(None) => None,
                Err(e) => fail(e.into()),
            };
            Box::new(doc.into_iter().map_while(kept).flatten())
        }
        AccessPath::Range { lower, upper } => Box::new(
            store
                .scan(coll, lower.clone(), upper.clone(), false)
                .enumerate()
                .map_while(move |(examined, kv)| {
                    if (examined as u64).is_multiple_of(deadline::CHECK_EVERY)
                        && let Err(e) = deadline::check()
                    {
                        return fail(e);
                    }
                    match kv {
                        Ok((_, raw)) => decode(&raw).map_or_else(fail, Some),
                        Err(e) => fail(e.into()),
                    }
                })
                .map_while(kept)
                .flatten(),
        ),
    }
}
