//! Reading the documents an access path yields and keeping those the filter matches and, for a
//! versioned request on a sharded collection, this shard owns (orphans are skipped; see
//! `sharding::ownership`). Unversioned requests pass no ownership and pay nothing for it. Scans
//! stop with MaxTimeMSExpired once the operation's `maxTimeMS` passed (`deadline`).
//!
//! An index path reads entries interval by interval and fetches each entry's document. On a
//! multikey index a document has several entries and may meet the bounds through more than one;
//! it is returned only at the first of its in-bounds entries in scan order, which needs no memory
//! of what was returned (so a cursor resumes from the last entry key alone).
//!
//! Keys and documents examined are counted per thread ([`counters`]) for `explain`.

use std::ops::{Bound, ControlFlow};

use bson::Document;
use bytes::Bytes;
use shoal_query::filter::Filter;

use crate::error::ExecResult;
use crate::exec::deadline;
use crate::exec::plan::covered;
use crate::exec::plan::{AccessPath, IndexScan, Interval};
use crate::sharding::Ownership;
use crate::store::indexes::{entry_id, entry_values};
use crate::store::local_catalog::CollectionInfo;
use crate::store::{Store, WriteTxn};

/// Keys and documents examined by scans on this thread, counted up since the thread started
/// (plain thread-local adds: no atomic per document). A reader takes the difference of two
/// [`counters::read`]s: `explain` around its run, the current operation (`deadline`) since it
/// began, published to the operation every [`deadline::CHECK_EVERY`] documents.
pub mod counters {
    use std::cell::Cell;

    thread_local! {
        static KEYS: Cell<u64> = const { Cell::new(0) };
        static DOCS: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn key() {
        KEYS.with(|k| k.set(k.get() + 1));
    }

    pub(super) fn doc() {
        DOCS.with(|d| d.set(d.get() + 1));
    }

    /// (keys examined, documents examined) on this thread so far.
    pub fn read() -> (u64, u64) {
        (KEYS.with(Cell::get), DOCS.with(Cell::get))
    }

    /// (keys, documents) examined on this thread since `before` (a [`read`]).
    pub fn since(before: (u64, u64)) -> (u64, u64) {
        let (k, d) = read();
        (k.wrapping_sub(before.0), d.wrapping_sub(before.1))
    }
}

/// One stored document the filter matched.
pub struct Matched {
    /// Its storage key (collection id ‖ keystring(_id)), or for an index path the entry key.
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
/// path's bounds, until `f` breaks. `txn` (when writing) makes reads see staged writes.
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
                counters::doc();
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
                counters::doc();
                let doc = decode(&raw)?;
                if keep(&doc, filter, owned)? && f(Matched { key, raw, doc })?.is_break() {
                    break;
                }
            }
            Ok(())
        }
        AccessPath::Index(scan) => {
            for m in IndexMatches::new(store, txn, coll, scan, reverse) {
                let m = m?;
                if keep(&m.doc, filter, owned)? && f(m)?.is_break() {
                    break;
                }
            }
            Ok(())
        }
    }
}

/// The documents an index scan yields, each once (see the module header), before filtering.
pub struct IndexMatches<'a> {
    store: &'a Store,
    txn: Option<&'a WriteTxn<'a>>,
    coll: &'a CollectionInfo,
    scan: &'a IndexScan,
    reverse: bool,
    /// Index of the next interval to open.
    next: usize,
    current: Option<crate::storage::KvIter<'static>>,
    examined: u64,
}

impl<'a> IndexMatches<'a> {
    pub fn new(
        store: &'a Store,
        txn: Option<&'a WriteTxn<'a>>,
        coll: &'a CollectionInfo,
        scan: &'a IndexScan,
        reverse: bool,
    ) -> Self {
        Self { store, txn, coll, scan, reverse, next: 0, current: None, examined: 0 }
    }

    fn open_next(&mut self) -> bool {
        let n = self.scan.intervals.len();
        if self.next >= n {
            return false;
        }
        let i = if self.reverse { n - 1 - self.next } else { self.next };
        self.next += 1;
        let (lower, upper) = &self.scan.intervals[i];
        self.current = Some(self.store.index_scan(as_ref(lower), as_ref(upper), self.reverse));
        true
    }

    /// Whether `key` is the document's first in-bounds entry in scan order.
    fn first_in_bounds(&self, key: &[u8], id: &bson::Bson, doc: &Document) -> bool {
        let Ok((entries, _)) = self.scan.spec.entries(id, doc) else { return true };
        let in_bounds = entries.iter().map(|e| e.key.as_slice()).filter(|k| in_intervals(&self.scan.planned, k));
        let first = if self.reverse { in_bounds.max() } else { in_bounds.min() };
        first.is_none_or(|f| f == key)
    }

    fn step(&mut self, key: Bytes, value: Bytes) -> ExecResult<Option<Matched>> {
        counters::key();
        if self.scan.covered {
            let doc = covered::document_of(&self.scan.spec.pattern.fields, entry_values(&value)?);
            return Ok(Some(Matched { key, raw: Bytes::new(), doc }));
        }
        let id = entry_id(&value)?;
        let raw = match self.txn {
            Some(t) => t.get(self.coll, &id)?,
            None => self.store.get(self.coll, &id)?,
        };
        // Deleted since the entry was read.
        let Some(raw) = raw else { return Ok(None) };
        counters::doc();
        let doc = decode(&raw)?;
        if self.scan.spec.multikey && !self.first_in_bounds(&key, &id, &doc) {
            return Ok(None);
        }
        Ok(Some(Matched { key, raw, doc }))
    }
}

impl Iterator for IndexMatches<'_> {
    type Item = ExecResult<Matched>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(it) = self.current.as_mut() else {
                if !self.open_next() {
                    return None;
                }
                continue;
            };
            let Some(kv) = it.next() else {
                self.current = None;
                continue;
            };
            self.examined += 1;
            if self.examined.is_multiple_of(deadline::CHECK_EVERY)
                && let Err(e) = deadline::check()
            {
                return Some(Err(e));
            }
            let (key, value) = match kv {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e.into())),
            };
            match self.step(key, value) {
                Ok(Some(m)) => return Some(Ok(m)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Whether an entry key lies in one of the intervals.
fn in_intervals(intervals: &[Interval], key: &[u8]) -> bool {
    intervals.iter().any(|(lo, hi)| {
        let above = match lo {
            Bound::Included(l) => key >= l.as_slice(),
            Bound::Excluded(l) => key > l.as_slice(),
            Bound::Unbounded => true,
        };
        let below = match hi {
            Bound::Included(h) => key <= h.as_slice(),
            Bound::Excluded(h) => key < h.as_slice(),
            Bound::Unbounded => true,
        };
        above && below
    })
}

impl IndexScan {
    /// Whether an entry key lies in one of the scan's intervals.
    pub fn contains(&self, key: &[u8]) -> bool {
        in_intervals(&self.intervals, key)
    }

    /// The scan that continues after entry `last` in the given direction.
    fn after(&self, last: &[u8], reverse: bool) -> IndexScan {
        let mut intervals = Vec::with_capacity(self.intervals.len());
        for (lo, hi) in &self.intervals {
            if reverse {
                let below_last = match lo {
                    Bound::Included(l) | Bound::Excluded(l) => l.as_slice() < last,
                    Bound::Unbounded => true,
                };
                if !below_last {
                    continue;
                }
                let hi = match hi {
                    Bound::Included(h) | Bound::Excluded(h) if h.as_slice() < last => hi.clone(),
                    _ => Bound::Excluded(last.to_vec()),
                };
                intervals.push((lo.clone(), hi));
            } else {
                let above_last = match hi {
                    Bound::Included(h) | Bound::Excluded(h) => h.as_slice() > last,
                    Bound::Unbounded => true,
                };
                if !above_last {
                    continue;
                }
                let lo = match lo {
                    Bound::Included(l) | Bound::Excluded(l) if l.as_slice() > last => lo.clone(),
                    _ => Bound::Excluded(last.to_vec()),
                };
                intervals.push((lo, hi.clone()));
            }
        }
        IndexScan {
            spec: self.spec.clone(),
            intervals,
            planned: self.planned.clone(),
            shown: self.shown.clone(),
            covered: self.covered,
        }
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
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
        AccessPath::Index(scan) => Some(AccessPath::Index(Box::new(scan.after(last_key, reverse)))),
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
    reverse: bool,
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
                .scan(coll, lower.clone(), upper.clone(), reverse)
                .enumerate()
                .map_while(move |(examined, kv)| {
                    if (examined as u64).is_multiple_of(deadline::CHECK_EVERY)
                        && let Err(e) = deadline::check()
                    {
                        return fail(e);
                    }
                    counters::doc();
                    match kv {
                        Ok((_, raw)) => decode(&raw).map_or_else(fail, Some),
                        Err(e) => fail(e.into()),
                    }
                })
                .map_while(kept)
                .flatten(),
        ),
        AccessPath::Index(scan) => Box::new(
            IndexMatches::new(store, None, coll, scan, reverse)
                .map_while(move |m| m.map_or_else(fail, |m| Some(m.doc)))
                .map_while(kept)
                .flatten(),
        ),
    }
}
