//! One index as a candidate for a filter: the entry-key intervals the filter confines it to,
//! whether it may be used at all (sparse, partial), and whether it yields a requested sort.
//!
//! Intervals are built MongoDB's way: the leading fields pinned by equalities or `$in` multiply
//! into points (at most [`MAX_INTERVALS`]), the first field with a range closes the interval,
//! later fields are unbounded. On a multikey index one range of a field is used, never the
//! intersection of two (`{a: {$gt: 3, $lt: 5}}` matches `[1, 10]` through different elements).

use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};
use shoal_query::filter::{KeyRange, field_equalities, field_key_intervals, regex_key_prefix};
use shoal_query::index_keys::KeyKind;
use shoal_query::keystring;

use crate::exec::args;
use crate::exec::plan::{IndexScan, Interval};
use crate::storage::prefix_upper_bound;
use crate::store::indexes::IndexSpec;

/// Point combinations an index scan may expand to before the rest is left unbounded.
pub const MAX_INTERVALS: usize = 4096;

pub struct Candidate {
    pub scan: IndexScan,
    /// Leading fields pinned to points.
    pub points: usize,
    /// The field after them has a range.
    pub range: bool,
    /// Some bounded field excludes null (so documents missing it cannot match).
    pub excludes_null: bool,
    /// The filter implies the partial filter (true when the index has none).
    pub partial_ok: bool,
    /// `Some(reverse)`: reading in that direction yields the requested sort.
    pub sort_reverse: Option<bool>,
}

impl Candidate {
    pub fn usable(&self) -> bool {
        let bounded = self.points > 0 || self.range;
        let sparse_ok = !self.scan.spec.sparse || (bounded && self.excludes_null);
        let partial_ok = self.partial_ok;
        sparse_ok && partial_ok && (bounded || self.sort_reverse.is_some())
    }

    pub fn score(&self) -> usize {
        self.points * 4 + usize::from(self.range) * 2
    }
}

fn shown_value(v: &Bson) -> String {
    match v {
        Bson::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

fn shown_bound(b: &Bound<Vec<u8>>, lower: bool) -> String {
    match b {
        Bound::Unbounded => if lower { "[MinKey" } else { "MaxKey]" }.to_owned(),
        Bound::Included(k) | Bound::Excluded(k) => {
            let v = keystring::decode(k).map(|v| shown_value(&v)).unwrap_or_else(|_| "?".into());
            match (b, lower) {
                (Bound::Included(_), true) => format!("[{v}"),
                (Bound::Excluded(_), true) => format!("({v}"),
                (Bound::Included(_), false) => format!("{v}]"),
                _ => format!("{v})"),
            }
        }
    }
}

/// A regex prefix bound's bytes as a complete string encoding (for display).
fn tail_value(b: &Bound<Vec<u8>>, kind: KeyKind) -> Vec<u8> {
    let mut key = match b {
        Bound::Included(k) | Bound::Excluded(k) => k.clone(),
        Bound::Unbounded => Vec::new(),
    };
    if kind == KeyKind::Descending {
        keystring::invert(&mut key);
    }
    key.push(0);
    key
}

fn invert(b: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(mut k) => {
            keystring::invert(&mut k);
            Bound::Included(k)
        }
        Bound::Excluded(mut k) => {
            keystring::invert(&mut k);
            Bound::Excluded(k)
        }
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Entry-key bounds of every key starting with `prefix` whose next segment lies in `seg`.
fn full_bounds(prefix: &[u8], seg: &Interval) -> Option<Interval> {
    let join = |s: &[u8]| [prefix, s].concat();
    let lower = match &seg.0 {
        Bound::Included(a) => Bound::Included(join(a)),
        Bound::Excluded(a) => Bound::Included(prefix_upper_bound(&join(a))?),
        Bound::Unbounded => Bound::Included(prefix.to_vec()),
    };
    let upper = match &seg.1 {
        Bound::Included(b) => prefix_upper_bound(&join(b)).map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Excluded(b) => Bound::Excluded(join(b)),
        Bound::Unbounded => prefix_upper_bound(prefix).map_or(Bound::Unbounded, Bound::Excluded),
    };
    let empty = match (&lower, &upper) {
        (Bound::Included(l), Bound::Excluded(u)) => l >= u,
        _ => false,
    };
    (!empty).then_some((lower, upper))
}

pub fn candidate(spec: &Arc<IndexSpec>, filter: &Document, sort: Option<&Document>) -> Candidate {
    let null = keystring::encode(&Bson::Null);
    let mut prefixes: Vec<Vec<u8>> = vec![spec.ident.to_be_bytes().to_vec()];
    let mut shown = Document::new();
    let mut tail: Interval = (Bound::Unbounded, Bound::Unbounded);
    let (mut points, mut range, mut excludes_null, mut stopped) = (0usize, false, false, false);
    let mut single_points = 0usize;
    let mut nothing = false;
    for (i, (path, kind)) in spec.pattern.fields.iter().enumerate() {
        let full = || Bson::Array(vec![Bson::String("[MinKey, MaxKey]".into())]);
        if stopped {
            shown.insert(path.clone(), full());
            continue;
        }
        if let Some(values) = field_equalities(filter, path)
            && prefixes.len() * values.len().max(1) <= MAX_INTERVALS
        {
            let mut segs: Vec<Vec<u8>> = values
                .iter()
                .map(|v| {
                    let v =
                        if *kind == KeyKind::Hashed { Bson::Int64(shoal_query::hash::hash64(v)) } else { (*v).clone() };
                    let mut seg = Vec::new();
                    spec.pattern.encode_field(i, &v, &mut seg);
                    seg
                })
                .collect();
            segs.sort();
            segs.dedup();
            if !values.iter().any(|v| matches!(v, Bson::Null)) {
                excludes_null = true;
            }
            if segs.len() == 1 && single_points == points {
                single_points += 1;
            }
            prefixes = prefixes.iter().flat_map(|p| segs.iter().map(move |s| [p.as_slice(), s].concat())).collect();
            prefixes.sort();
            let listed: Vec<Bson> =
                values.iter().map(|v| Bson::String(format!("[{0}, {0}]", shown_value(v)))).collect();
            shown.insert(path.clone(), listed);
            points += 1;
            continue;
        }
        stopped = true;
        if *kind == KeyKind::Hashed {
            shown.insert(path.clone(), full());
            continue;
        }
        let intervals = field_key_intervals(filter, path);
        let Some(first) = intervals.first().cloned() else {
            match regex_key_prefix(filter, path) {
                Some(mut key) => {
                    // Every key with this prefix, in the field's direction.
                    if *kind == KeyKind::Descending {
                        keystring::invert(&mut key);
                    }
                    let upper = prefix_upper_bound(&key).map_or(Bound::Unbounded, Bound::Excluded);
                    tail = (Bound::Included(key), upper);
                    range = true;
                    excludes_null = true;
                    let shown_prefix = shown_bound(&Bound::Included(tail_value(&tail.0, *kind)), true);
                    shown.insert(path.clone(), vec![Bson::String(format!("{shown_prefix}, …) by regex prefix"))]);
                }
                None => {
                    shown.insert(path.clone(), full());
                }
            }
            continue;
        };
        let iv: KeyRange = if spec.multikey {
            first
        } else {
            intervals.into_iter().fold(first, |mut acc, r| {
                acc.intersect(r.lower, r.upper);
                acc
            })
        };
        if iv.is_empty() {
            nothing = true;
        }
        if !iv.contains(&null) {
            excludes_null = true;
        }
        shown.insert(
            path.clone(),
            vec![Bson::String(format!("{}, {}", shown_bound(&iv.lower, true), shown_bound(&iv.upper, false)))],
        );
        range = true;
        tail = if *kind == KeyKind::Descending { (invert(iv.upper), invert(iv.lower)) } else { (iv.lower, iv.upper) };
    }
    let intervals = if nothing { Vec::new() } else { prefixes.iter().filter_map(|p| full_bounds(p, &tail)).collect() };
    let partial_ok = spec.partial.as_ref().is_none_or(|(p, _)| implies(filter, p));
    let sort_reverse = sort.and_then(|s| sort_order(spec, s, single_points));
    Candidate {
        scan: IndexScan {
            spec: Arc::clone(spec),
            planned: Arc::new(intervals.clone()),
            intervals,
            shown,
            covered: false,
        },
        points,
        range,
        excludes_null,
        partial_ok,
        sort_reverse,
    }
}

/// `Some(reverse)` when reading the index (in that direction) yields `sort` order: after the
/// leading fields pinned to one value, the sort's fields are the index's next fields, all in
/// the index's directions or all reversed. Multikey and hashed fields never give an order.
fn sort_order(spec: &IndexSpec, sort: &Document, single_points: usize) -> Option<bool> {
    if spec.multikey || sort.is_empty() {
        return None;
    }
    let fields = &spec.pattern.fields;
    let mut start = 0;
    while start < single_points && !sort.contains_key(&fields[start].0) {
        start += 1;
    }
    let mut reverse = None;
    for (j, (path, dir)) in sort.iter().enumerate() {
        let (ipath, kind) = fields.get(start + j)?;
        if ipath != path || *kind == KeyKind::Hashed {
            return None;
        }
        let ascending = match args::as_f64(dir) {
            Some(1.0) => true,
            Some(-1.0) => false,
            _ => return None,
        };
        let this = ascending != (*kind == KeyKind::Ascending);
        if *reverse.get_or_insert(this) != this {
            return None;
        }
    }
    reverse
}

/// Whether every document `filter` matches also matches the partial filter `partial`: each of
/// its conjuncts appears in the filter, or bounds the filter puts on that field lie within it
/// (`{a: {$gt: 10}}` implies `{a: {$gt: 5}}`; any non-null bound implies `{a: {$exists: true}}`).
fn implies(filter: &Document, partial: &Document) -> bool {
    let query_conjuncts = flatten(filter);
    flatten(partial).into_iter().all(|(k, v)| {
        if query_conjuncts.iter().any(|(qk, qv)| *qk == k && *qv == v) {
            return true;
        }
        let query_iv = field_key_intervals(filter, k).into_iter().reduce(|mut a, r| {
            a.intersect(r.lower, r.upper);
            a
        });
        let Some(query_iv) = query_iv else { return false };
        if matches!(v, Bson::Document(d) if d.len() == 1 && matches!(d.get("$exists"), Some(Bson::Boolean(true)))) {
            return !query_iv.contains(&keystring::encode(&Bson::Null))
                && !query_iv.contains(&keystring::encode(&Bson::Undefined));
        }
        let mut single = Document::new();
        single.insert(k, v.clone());
        let partial_ivs = field_key_intervals(&single, k);
        !partial_ivs.is_empty() && partial_ivs.iter().all(|p| within(&query_iv, p))
    })
}

fn flatten(filter: &Document) -> Vec<(&str, &Bson)> {
    let mut out = Vec::new();
    for (k, v) in filter {
        match (k.as_str(), v) {
            ("$and", Bson::Array(items)) => {
                for item in items {
                    if let Bson::Document(d) = item {
                        out.extend(flatten(d));
                    }
                }
            }
            _ => out.push((k.as_str(), v)),
        }
    }
    out
}

/// `inner ⊆ outer`.
fn within(inner: &KeyRange, outer: &KeyRange) -> bool {
    let lower_ok = match (&outer.lower, &inner.lower) {
        (Bound::Unbounded, _) => true,
        (_, Bound::Unbounded) => false,
        (Bound::Included(o), Bound::Included(i) | Bound::Excluded(i)) => i >= o,
        (Bound::Excluded(o), Bound::Included(i)) => i > o,
        (Bound::Excluded(o), Bound::Excluded(i)) => i >= o,
    };
    let upper_ok = match (&outer.upper, &inner.upper) {
        (Bound::Unbounded, _) => true,
        (_, Bound::Unbounded) => false,
        (Bound::Included(o), Bound::Included(i) | Bound::Excluded(i)) => i <= o,
        (Bound::Excluded(o), Bound::Included(i)) => i < o,
        (Bound::Excluded(o), Bound::Excluded(i)) => i <= o,
    };
    lower_ok && upper_ok
}
