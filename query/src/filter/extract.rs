//! What the planner and upserts read off a filter without evaluating it: the `_id` a filter pins
//! (point lookup), the key range it confines `_id` to (range scan), and the equalities that seed
//! an upsert's new document.
//!
//! Invariants: these are conservative. [`id_equality`] and [`id_range`] only narrow where the
//! filter certainly confines `_id` (top level or inside `$and`), and a range may contain keys
//! the filter rejects; callers still apply the whole filter to what they fetch.

use std::ops::Bound;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::parse::is_operator_document;
use crate::error::QueryError;
use crate::keystring::encode;
use crate::order::canonical_type;

/// The `_id` a filter pins by plain equality (`{_id: v}`, `{_id: {$eq: v}}`, also inside
/// `$and`), for point lookups.
pub fn id_equality(filter: &Document) -> Option<&Bson> {
    conjuncts(filter).find_map(|(key, value)| {
        if key != "_id" {
            return None;
        }
        match value {
            Bson::RegularExpression(_) => None,
            Bson::Document(d) if is_operator_document(d) => match d.get("$eq") {
                Some(v) if d.len() == 1 => Some(v),
                _ => None,
            },
            v => Some(v),
        }
    })
}

/// The values a filter pins `field` to by plain equality, `$eq` or an `$in` of plain values (at
/// top level or inside `$and`): every matching document's `field` is one of them. `None` when
/// the filter does not pin it that way (regexes, arrays and operator documents in `$in` too).
pub fn field_equalities<'f>(filter: &'f Document, field: &str) -> Option<Vec<&'f Bson>> {
    let plain = |v: &Bson| {
        !matches!(v, Bson::RegularExpression(_) | Bson::Array(_) | Bson::Undefined)
            && !matches!(v, Bson::Document(d) if is_operator_document(d))
    };
    let mut best: Option<Vec<&'f Bson>> = None;
    for (key, value) in conjuncts(filter) {
        if key != field {
            continue;
        }
        let values = match value {
            Bson::Document(d) if is_operator_document(d) => match (d.len(), d.get("$eq"), d.get("$in")) {
                (1, Some(v), _) if plain(v) => vec![v],
                (1, _, Some(Bson::Array(items))) if items.iter().all(plain) => items.iter().collect(),
                _ => continue,
            },
            v if plain(v) => vec![v],
            _ => continue,
        };
        // Any one conjunct's set contains every match; keep the smallest.
        if best.as_ref().is_none_or(|b| values.len() < b.len()) {
            best = Some(values);
        }
    }
    best
}

/// A range of key-encoded `_id` values (see [`crate::keystring`]) that contains the key of
/// every document the filter can match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub lower: Bound<Vec<u8>>,
    pub upper: Bound<Vec<u8>>,
}

impl KeyRange {
    /// True when no key can lie in the range (bounds crossed or touching exclusively).
    pub fn is_empty(&self) -> bool {
        let (lo, lo_inclusive) = match &self.lower {
            Bound::Unbounded => return false,
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
        };
        let (hi, hi_inclusive) = match &self.upper {
            Bound::Unbounded => return false,
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
        };
        lo > hi || (lo == hi && !(lo_inclusive && hi_inclusive))
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        let above = match &self.lower {
            Bound::Unbounded => true,
            Bound::Included(k) => key >= k.as_slice(),
            Bound::Excluded(k) => key > k.as_slice(),
        };
        let below = match &self.upper {
            Bound::Unbounded => true,
            Bound::Included(k) => key <= k.as_slice(),
            Bound::Excluded(k) => key < k.as_slice(),
        };
        above && below
    }

    pub fn intersect(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        self.lower = tighter(std::mem::replace(&mut self.lower, Bound::Unbounded), lower, true);
        self.upper = tighter(std::mem::replace(&mut self.upper, Bound::Unbounded), upper, false);
    }
}

fn tighter(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>, lower: bool) -> Bound<Vec<u8>> {
    let key = |x: &Bound<Vec<u8>>| match x {
        Bound::Included(k) | Bound::Excluded(k) => Some(k.clone()),
        Bound::Unbounded => None,
    };
    match (key(&a), key(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(ka), Some(kb)) if ka == kb => {
            // Equal keys: an exclusive bound is the tighter one.
            if matches!(a, Bound::Excluded(_)) { a } else { b }
        }
        (Some(ka), Some(kb)) => {
            if (ka > kb) == lower {
                a
            } else {
                b
            }
        }
    }
}

/// The key range `_id` is confined to by `$eq`/`$gt`/`$gte`/`$lt`/`$lte`/equality at top level
/// or inside `$and`; `None` when the filter does not constrain `_id` that way. A comparison
/// only matches values of its own type bracket, so a one-sided bound is closed off at the edge
/// of the bracket (`{_id: {$gt: 5}}` gives `(5, end of numbers)`).
pub fn id_range(filter: &Document) -> Option<KeyRange> {
    field_range(filter, "_id")
}

/// [`id_range`] for any (dotted) field, e.g. the first field of a range shard key.
pub fn field_range(filter: &Document, field: &str) -> Option<KeyRange> {
    let mut range = KeyRange { lower: Bound::Unbounded, upper: Bound::Unbounded };
    let mut constrained = false;
    for (key, value) in conjuncts(filter) {
        if key != field {
            continue;
        }
        match value {
            Bson::RegularExpression(_) => {}
            Bson::Document(d) if is_operator_document(d) => {
                for (op, arg) in d {
                    if let Some((lo, hi)) = comparison_range(op, arg) {
                        range.intersect(lo, hi);
                        constrained = true;
                    }
                }
            }
            v => {
                let k = encode(v);
                range.intersect(Bound::Included(k.clone()), Bound::Included(k));
                constrained = true;
            }
        }
    }
    constrained.then_some(range)
}

/// A lower and an upper bound on keys.
type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

fn comparison_range(op: &str, arg: &Bson) -> Option<Bounds> {
    if matches!(arg, Bson::RegularExpression(_) | Bson::Undefined) {
        return None;
    }
    let (bracket_lo, bracket_hi) = bracket(arg);
    let k = encode(arg);
    Some(match op {
        "$eq" => (Bound::Included(k.clone()), Bound::Included(k)),
        "$gt" => (Bound::Excluded(k), bracket_hi),
        "$gte" => (Bound::Included(k), bracket_hi),
        "$lt" => (bracket_lo, Bound::Excluded(k)),
        "$lte" => (bracket_lo, Bound::Included(k)),
        _ => return None,
    })
}

/// The key range of `v`'s canonical type bracket; MinKey and MaxKey bounds compare with
/// every type, so theirs is everything.
fn bracket(v: &Bson) -> Bounds {
    if matches!(v, Bson::MinKey | Bson::MaxKey) {
        return (Bound::Unbounded, Bound::Unbounded);
    }
    // Every member of a bracket begins with a type byte between these two values; find them
    // from the extremes of the bracket, whose encodings are single bytes or start with them.
    let (lo, hi) = match canonical_type(v) {
        crate::order::NUMBER_TYPE => (Bson::Double(f64::NAN), Bson::Double(f64::INFINITY)),
        _ if matches!(v, Bson::Boolean(_)) => (Bson::Boolean(false), Bson::Boolean(true)),
        _ => (v.clone(), v.clone()),
    };
    let first = |b: &Bson| encode(b)[0];
    (Bound::Included(vec![first(&lo)]), Bound::Excluded(vec![first(&hi) + 1]))
}

/// The equalities of a filter as a document, to seed the document an upsert inserts:
/// `{a: 1, "b.c": 2, $and: [{d: 3}]}` gives `{a: 1, b: {c: 2}, d: 3}`. Operators other than
/// `$eq` (and a one-element `$in`) and regexes contribute nothing. Two equalities on the same
/// path, or on a path and its prefix, fail with `NotSingleValueField` as in MongoDB.
pub fn equality_fields(filter: &Document) -> Result<Document, QueryError> {
    let mut out = Document::new();
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in conjuncts(filter) {
        if key.starts_with('$') {
            continue;
        }
        let v = match value {
            Bson::RegularExpression(_) => continue,
            Bson::Document(d) if is_operator_document(d) => match (d.get("$eq"), d.get("$in")) {
                (Some(v), _) => v,
                (None, Some(Bson::Array(items)))
                    if items.len() == 1 && !matches!(items[0], Bson::RegularExpression(_)) =>
                {
                    &items[0]
                }
                _ => continue,
            },
            v => v,
        };
        for prior in &seen {
            let clash = prior == &key
                || key.strip_prefix(prior).is_some_and(|r| r.starts_with('.'))
                || prior.strip_prefix(key).is_some_and(|r| r.starts_with('.'));
            if clash {
                let message = if prior == &key {
                    format!("cannot infer query fields to set, path '{key}' is matched twice")
                } else {
                    format!("cannot infer query fields to set, both paths '{prior}' and '{key}' are matched")
                };
                return Err(QueryError::new(ErrorCode::NotSingleValueField, message));
            }
        }
        seen.push(key);
        set_path(&mut out, key, v.clone());
    }
    Ok(out)
}

/// Writes `value` at a dotted path, creating documents along the way. The paths written are
/// checked for prefix clashes beforehand, so an intermediate is always a document.
fn set_path(doc: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((head, rest)) => {
            let child = doc.entry(head.to_owned()).or_insert_with(|| Bson::Document(Document::new()));
            if let Bson::Document(d) = child {
                set_path(d, rest, value);
            }
        }
    }
}

/// The `(key, value)` pairs a document must satisfy together: its own fields and, recursively,
/// those of its `$and` clauses and single-clause `$or`s.
pub(super) fn conjuncts(filter: &Document) -> impl Iterator<Item = (&str, &Bson)> {
    let mut out = Vec::new();
    collect_conjuncts(filter, &mut out, 0);
    out.into_iter()
}

fn collect_conjuncts<'a>(filter: &'a Document, out: &mut Vec<(&'a str, &'a Bson)>, depth: usize) {
    if depth > super::parse::MAX_DEPTH {
        return;
    }
    for (key, value) in filter {
        match (key.as_str(), value) {
            ("$and", Bson::Array(items)) => {
                for item in items {
                    if let Bson::Document(d) = item {
                        collect_conjuncts(d, out, depth + 1);
                    }
                }
            }
            ("$or", Bson::Array(items)) if items.len() == 1 => {
                if let Some(Bson::Document(d)) = items.first() {
                    collect_conjuncts(d, out, depth + 1);
                }
            }
            _ => out.push((key.as_str(), value)),
        }
    }
}
