//! Access paths for a filter, and the choice among them.
//!
//! Documents are clustered by `_id` (their keys are the order-preserving encoding of `_id`), so
//! an `_id` equality is a point read and an `_id` range a range scan. A secondary index gives an
//! index scan over the intervals its fields are confined to ([`bounds`]). The full filter is
//! always applied to what a path returns, so paths only need to return a superset.
//!
//! The choice is rule-based (no trial runs): an `_id` point wins; otherwise the index whose
//! leading fields are pinned by the most equalities, then one with a range on the next field,
//! then one that yields the requested sort order (no in-memory sort), then the shorter index;
//! with no bounds at all an index is only used to avoid a sort. Sparse indexes are used only
//! when the bounds exclude null (documents lacking the fields are not in them), partial indexes
//! only when the filter implies their `partialFilterExpression`. `hint` forces a path. Hidden
//! indexes are never chosen nor hinted.

mod bounds;
pub mod covered;
pub mod explain;

use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

use crate::error::{ExecError, ExecResult};
use crate::exec::args;
use crate::store::indexes::IndexSpec;
use crate::store::keys;
use crate::store::local_catalog::CollectionInfo;

#[derive(Debug, Clone, PartialEq)]
pub enum AccessPath {
    /// The one document whose `_id` equals this value, if any.
    Point(Bson),
    /// Document keys within these bounds (already prefixed by the collection id).
    Range { lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>> },
    /// Entries of a secondary index within intervals.
    Index(Box<IndexScan>),
}

/// A range of entry keys.
pub type Interval = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A scan of one index over disjoint entry-key intervals in ascending key order.
#[derive(Debug, Clone)]
pub struct IndexScan {
    pub spec: Arc<IndexSpec>,
    pub intervals: Vec<Interval>,
    /// The intervals as planned, before a cursor resumed past some of them: a multikey
    /// document is returned at its first entry within these.
    pub planned: Arc<Vec<Interval>>,
    /// The bounds per field, readable (explain's `indexBounds`).
    pub shown: Document,
    /// Documents are rebuilt from the entries instead of read ([`covered`]).
    pub covered: bool,
}

impl PartialEq for IndexScan {
    fn eq(&self, other: &Self) -> bool {
        self.spec.ident == other.spec.ident && self.intervals == other.intervals
    }
}

impl AccessPath {
    pub fn full() -> Self {
        AccessPath::Range { lower: Bound::Unbounded, upper: Bound::Unbounded }
    }
}

/// The chosen path and what it promises.
#[derive(Debug, Clone)]
pub struct Plan {
    pub path: AccessPath,
    /// Read the path in descending key order.
    pub reverse: bool,
    /// The path yields documents in the requested sort order (no sort needed).
    pub sorted: bool,
    /// Other indexes that could have been used (explain's `rejectedPlans`).
    pub rejected: Vec<Arc<IndexSpec>>,
}

/// The `_id` path: a point, a range or the whole collection.
fn id_path(coll: &CollectionInfo, filter: &Document) -> AccessPath {
    if let Some(id) = shoal_query::filter::id_equality(filter) {
        return AccessPath::Point(id.clone());
    }
    match shoal_query::filter::id_range(filter) {
        Some(range) => {
            let prefixed = |b: Bound<Vec<u8>>| match b {
                Bound::Included(k) => Bound::Included([&keys::collection_prefix(coll.id)[..], &k].concat()),
                Bound::Excluded(k) => Bound::Excluded([&keys::collection_prefix(coll.id)[..], &k].concat()),
                Bound::Unbounded => Bound::Unbounded,
            };
            AccessPath::Range { lower: prefixed(range.lower), upper: prefixed(range.upper) }
        }
        None => AccessPath::full(),
    }
}

/// `Some(reverse)` when `sort` is exactly `_id` ascending/descending (storage order).
pub fn id_order(sort: &Document) -> Option<bool> {
    if sort.len() != 1 {
        return None;
    }
    match sort.get("_id").and_then(args::as_f64) {
        Some(1.0) => Some(false),
        Some(-1.0) => Some(true),
        _ => None,
    }
}

fn hint_error() -> ExecError {
    ExecError::bad_value(
        "error processing query: planner returned error :: caused by :: hint provided does not correspond to an \
         existing index",
    )
}

/// Chooses how to read `filter` on `coll`, in `sort` order when an index gives it, following
/// `hint` when given (BadValue when it names no index). The choice is the current operation's
/// `planSummary` (see `deadline::planned`).
pub fn plan(
    coll: &CollectionInfo,
    filter: &Document,
    sort: Option<&Document>,
    hint: Option<&Bson>,
) -> ExecResult<Plan> {
    let chosen = choose(coll, filter, sort, hint)?;
    crate::exec::deadline::planned(&chosen);
    Ok(chosen)
}

fn choose(coll: &CollectionInfo, filter: &Document, sort: Option<&Document>, hint: Option<&Bson>) -> ExecResult<Plan> {
    let sort = sort.filter(|s| !s.is_empty());
    let id_plan = |coll: &CollectionInfo, rejected: Vec<Arc<IndexSpec>>| {
        let path = id_path(coll, filter);
        let order = match sort {
            None => Some(false),
            Some(s) => id_order(s),
        };
        let sorted = order.is_some() || matches!(path, AccessPath::Point(_));
        Plan { path, reverse: order.unwrap_or(false), sorted, rejected }
    };
    match hint {
        None | Some(Bson::Null) => {}
        Some(Bson::String(name)) if name.is_empty() => {}
        Some(Bson::Document(key)) if key.is_empty() => {}
        Some(Bson::String(name)) if name == "_id_" => return Ok(id_plan(coll, Vec::new())),
        Some(Bson::Document(key)) if key.len() == 1 && key.get("_id").and_then(args::as_f64) == Some(1.0) => {
            return Ok(id_plan(coll, Vec::new()));
        }
        Some(Bson::Document(key)) if key.len() == 1 && key.contains_key("$natural") => {
            let reverse = match key.get("$natural").and_then(args::as_f64) {
                Some(1.0) => false,
                Some(-1.0) => true,
                _ => return Err(ExecError::bad_value("$natural hint must be 1 or -1")),
            };
            let sorted = sort.is_none_or(|s| id_order(s) == Some(reverse));
            return Ok(Plan { path: AccessPath::full(), reverse, sorted, rejected: Vec::new() });
        }
        Some(h @ (Bson::String(_) | Bson::Document(_))) => {
            // A hidden index is not offered to a hint either (MongoDB's BadValue, as for none).
            let spec = coll
                .ready_indexes()
                .filter(|s| !s.hidden)
                .find(|s| match h {
                    Bson::String(n) => &s.name == n,
                    Bson::Document(k) => &s.key == k,
                    _ => false,
                })
                .ok_or_else(hint_error)?;
            let c = bounds::candidate(spec, filter, sort);
            if spec.partial.is_some() && !c.partial_ok {
                return Err(hint_error());
            }
            let sorted = sort.is_none() || c.sort_reverse.is_some();
            return Ok(Plan {
                path: AccessPath::Index(Box::new(c.scan)),
                reverse: c.sort_reverse.unwrap_or(false),
                sorted,
                rejected: Vec::new(),
            });
        }
        Some(other) => return Err(args::wrong_type("hint", "hint", other, "string or object")),
    }
    let base = id_plan(coll, Vec::new());
    if matches!(base.path, AccessPath::Point(_)) {
        return Ok(base);
    }
    let candidates: Vec<bounds::Candidate> = coll
        .ready_indexes()
        .filter(|s| !s.hidden)
        .map(|s| bounds::candidate(s, filter, sort))
        .filter(|c| c.usable())
        .collect();
    let id_score = match (&base.path, sort) {
        (AccessPath::Range { lower: Bound::Unbounded, upper: Bound::Unbounded }, _) => 0,
        _ => 2,
    };
    let best = candidates
        .iter()
        .enumerate()
        .max_by_key(|(_, c)| (c.score(), c.sort_reverse.is_some(), std::cmp::Reverse(c.scan.spec.pattern.fields.len())))
        .map(|(i, c)| (i, c.score(), c.sort_reverse.is_some()));
    let use_index = match best {
        Some((_, score, gives_sort)) => {
            score > id_score
                || (score == id_score && score > 0 && gives_sort && !base.sorted)
                || (score == 0 && id_score == 0 && gives_sort && !base.sorted)
        }
        None => false,
    };
    let mut rejected: Vec<Arc<IndexSpec>> =
        candidates.iter().filter(|c| c.score() > 0).map(|c| Arc::clone(&c.scan.spec)).collect();
    if !use_index {
        return Ok(id_plan(coll, rejected));
    }
    let Some((i, _, _)) = best else { return Ok(base) };
    let chosen = candidates.into_iter().nth(i).ok_or_else(hint_error)?;
    rejected.retain(|s| s.ident != chosen.scan.spec.ident);
    let sorted = sort.is_none() || chosen.sort_reverse.is_some();
    Ok(Plan {
        reverse: chosen.sort_reverse.unwrap_or(false),
        sorted,
        path: AccessPath::Index(Box::new(chosen.scan)),
        rejected,
    })
}

/// True when matching `filter` is implied by the access path alone (`{_id: v}` read by point).
pub fn path_implies_filter(path: &AccessPath, filter: &Document) -> bool {
    matches!(path, AccessPath::Point(_))
        && filter.len() == 1
        && matches!(filter.get("_id"), Some(v) if !matches!(v, Bson::Document(_) | Bson::Array(_) | Bson::RegularExpression(_)))
}

#[cfg(test)]
mod tests;
