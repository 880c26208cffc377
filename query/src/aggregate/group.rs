//! `$group` and its accumulators (`$sum $avg $min $max $first $last $push $addToSet $count
//! $stdDevPop $stdDevSamp $mergeObjects`), whole or split in two for sharded pipelines:
//!
//! ```text
//!   shard A: docs -> $group (Partial) -> {_id, f: partial state} ─┐
//!   shard B: docs -> $group (Partial) -> {_id, f: partial state} ─┴─> router: $group (Merge) -> {_id, f: value}
//! ```
//!
//! A partial state is plain BSON: `$sum`/`$count` a number, `$avg` `{sum, count}`, `$min`/`$max`
//! the extreme or null, `$first`/`$last` the value, `$push`/`$addToSet` an array, `$stdDev*`
//! `{count, mean, m2}` (merged with Chan's formula), `$mergeObjects` a document. Merging the
//! partials of contiguous pieces of the input, in order, gives the unsplit result.
//!
//! Invariants: group keys are equal exactly when `order::values_equal` says so (`1` and `1.0`
//! share a group; the first key seen is the one output); groups come out in the order their
//! first document arrived; the estimated bytes held (keys plus accumulated values) never pass
//! the budget.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use super::expr::Expr;
use super::operators::Num;
use super::{DocStream, value_size};
use crate::error::{QueryError, Result};
use crate::order::compare_values;

/// A fixed charge per accumulator of each group, for the state beside any held values.
const ACCUMULATOR_STATE_BYTES: usize = 32;

pub(crate) struct Group {
    id: Expr,
    fields: Vec<(String, Accumulator, Expr)>,
    mode: GroupMode,
}

/// Which half of a split `$group` this is, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupMode {
    /// Documents in, final values out.
    Full,
    /// Documents in, partial states out (a shard's half).
    Partial,
    /// Partial states in (`{_id, field: state}`), final values out (the router's half).
    Merge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accumulator {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    Count,
    StdDevPop,
    StdDevSamp,
    MergeObjects,
}

/// A value ordered by MongoDB's comparison, so maps group `1` with `1.0`.
struct OrdBson(Bson);

impl PartialEq for OrdBson {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for OrdBson {}
impl PartialOrd for OrdBson {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdBson {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_values(&self.0, &other.0)
    }
}

enum State {
    Sum(Num),
    Avg {
        sum: Num,
        count: u64,
    },
    Min(Option<Bson>),
    Max(Option<Bson>),
    First(Option<Bson>),
    Last(Bson),
    Push(Vec<Bson>),
    AddToSet(Vec<Bson>, BTreeSet<OrdBson>),
    /// Welford's running mean and sum of squared deviations; `sample` picks the divisor.
    StdDev {
        count: u64,
        mean: f64,
        m2: f64,
        sample: bool,
    },
    MergeObjects(Document),
}

impl Group {
    pub(crate) fn parse(arg: &Bson) -> Result<Group> {
        Group::parse_as(arg, GroupMode::Full)
    }

    pub(crate) fn parse_as(arg: &Bson, mode: GroupMode) -> Result<Group> {
        let Bson::Document(spec) = arg else {
            // MongoDB: Location15947.
            return Err(QueryError::failed_to_parse("a group's fields must be specified in an object"));
        };
        let id = match spec.get("_id") {
            Some(v) => Expr::parse(v)?,
            None => {
                return Err(QueryError::new(ErrorCode::Location15955, "a group specification must include an _id"));
            }
        };
        let mut fields = Vec::new();
        for (name, v) in spec {
            if name == "_id" {
                continue;
            }
            if name.contains('.') {
                // MongoDB: Location40235.
                return Err(QueryError::bad_value(format!("The field name '{name}' cannot contain '.'")));
            }
            if name.starts_with('$') {
                // MongoDB: Location40236.
                return Err(QueryError::bad_value(format!("The field name '{name}' cannot be an operator name")));
            }
            let Bson::Document(acc) = v else {
                // MongoDB: Location40234.
                return Err(QueryError::bad_value(format!("The field '{name}' must be an accumulator object")));
            };
            let mut it = acc.iter();
            let (Some((op, arg)), None) = (it.next(), it.next()) else {
                // MongoDB: Location40238.
                return Err(QueryError::bad_value(format!("The field '{name}' must specify one accumulator")));
            };
            let kind = accumulator(op)?;
            let expr = if kind == Accumulator::Count {
                if !matches!(arg, Bson::Document(d) if d.is_empty()) {
                    return Err(QueryError::bad_value("$count takes no arguments, i.e. $count:{}"));
                }
                Expr::Literal(Bson::Int32(1))
            } else {
                if matches!(arg, Bson::Array(_)) {
                    // MongoDB: Location40237.
                    return Err(QueryError::bad_value(format!("The {op} accumulator is a unary operator")));
                }
                Expr::parse(arg)?
            };
            fields.push((name.clone(), kind, expr));
        }
        Ok(Group { id, fields, mode })
    }

    pub(crate) fn run(
        &self,
        input: DocStream<'_>,
        budget: super::Budget,
        scope: Option<&super::expr::Scope<'_>>,
    ) -> Result<Vec<Document>> {
        let mut index: BTreeMap<OrdBson, usize> = BTreeMap::new();
        let mut groups: Vec<(Bson, Vec<State>)> = Vec::new();
        let mut bytes = 0usize;
        for r in input {
            let doc = r?;
            let key = match self.mode {
                GroupMode::Merge => doc.get("_id").cloned().unwrap_or(Bson::Null),
                _ => self.id.eval_in(&doc, scope)?.unwrap_or(Bson::Null),
            };
            let g = match index.get(&OrdBson(key.clone())) {
                Some(&g) => g,
                None => {
                    bytes = bytes.saturating_add(
                        value_size(&key).saturating_mul(2) + ACCUMULATOR_STATE_BYTES * self.fields.len(),
                    );
                    groups.push((key.clone(), self.fields.iter().map(|(_, k, _)| State::new(*k)).collect()));
                    index.insert(OrdBson(key), groups.len() - 1);
                    groups.len() - 1
                }
            };
            for ((name, _, expr), state) in self.fields.iter().zip(groups[g].1.iter_mut()) {
                let grew = match self.mode {
                    GroupMode::Merge => state.merge(doc.get(name))?,
                    _ => state.add(expr.eval_in(&doc, scope)?)?,
                };
                bytes = bytes.saturating_add(grew);
            }
            budget.check(bytes, "$group")?;
        }
        Ok(groups
            .into_iter()
            .map(|(key, states)| {
                let mut out = Document::new();
                out.insert("_id", key);
                for ((name, _, _), state) in self.fields.iter().zip(states) {
                    let value = if self.mode == GroupMode::Partial { state.partial() } else { state.finish() };
                    out.insert(name.clone(), value);
                }
                out
            })
            .collect())
    }
}

fn accumulator(op: &str) -> Result<Accumulator> {
    use Accumulator::*;
    Ok(match op {
        "$sum" => Sum,
        "$avg" => Avg,
        "$min" => Min,
        "$max" => Max,
        "$first" => First,
        "$last" => Last,
        "$push" => Push,
        "$addToSet" => AddToSet,
        "$count" => Count,
        "$stdDevPop" => StdDevPop,
        "$stdDevSamp" => StdDevSamp,
        "$mergeObjects" => MergeObjects,
        "$accumulator" => {
            // docs/query-language.md, "JavaScript": refused until the sandboxed engine is in.
            return Err(QueryError::new(
                ErrorCode::NotImplemented,
                "$accumulator (server-side JavaScript) is not supported yet",
            ));
        }
        other => {
            return Err(QueryError::new(ErrorCode::Location15952, format!("unknown group operator '{other}'")));
        }
    })
}

impl State {
    fn new(kind: Accumulator) -> State {
        match kind {
            Accumulator::Sum | Accumulator::Count => State::Sum(Num::I32(0)),
            Accumulator::Avg => State::Avg { sum: Num::I32(0), count: 0 },
            Accumulator::Min => State::Min(None),
            Accumulator::Max => State::Max(None),
            Accumulator::First => State::First(None),
            Accumulator::Last => State::Last(Bson::Null),
            Accumulator::Push => State::Push(Vec::new()),
            Accumulator::AddToSet => State::AddToSet(Vec::new(), BTreeSet::new()),
            Accumulator::StdDevPop => State::StdDev { count: 0, mean: 0.0, m2: 0.0, sample: false },
            Accumulator::StdDevSamp => State::StdDev { count: 0, mean: 0.0, m2: 0.0, sample: true },
            Accumulator::MergeObjects => State::MergeObjects(Document::new()),
        }
    }

    /// Folds in one document's value; returns the bytes newly held.
    fn add(&mut self, v: Option<Bson>) -> Result<usize> {
        match self {
            // Non-numeric values (arrays included) are ignored by $sum and $avg.
            State::Sum(sum) => {
                if let Some(n) = v.as_ref().and_then(Num::of) {
                    *sum = sum.add(n?);
                }
                Ok(0)
            }
            State::Avg { sum, count } => {
                if let Some(n) = v.as_ref().and_then(Num::of) {
                    *sum = sum.add(n?);
                    *count += 1;
                }
                Ok(0)
            }
            State::Min(cur) => Ok(extreme(cur, v, Ordering::Less)),
            State::Max(cur) => Ok(extreme(cur, v, Ordering::Greater)),
            State::First(cur) => {
                if cur.is_none() {
                    let v = v.unwrap_or(Bson::Null);
                    let size = value_size(&v);
                    *cur = Some(v);
                    return Ok(size);
                }
                Ok(0)
            }
            State::Last(cur) => {
                let v = v.unwrap_or(Bson::Null);
                let grew = value_size(&v).saturating_sub(value_size(cur));
                *cur = v;
                Ok(grew)
            }
            State::Push(items) => Ok(v.map_or(0, |v| {
                let size = value_size(&v);
                items.push(v);
                size
            })),
            State::AddToSet(items, seen) => Ok(match v {
                Some(v) if !seen.contains(&OrdBson(v.clone())) => {
                    let size = value_size(&v).saturating_mul(2);
                    seen.insert(OrdBson(v.clone()));
                    items.push(v);
                    size
                }
                _ => 0,
            }),
            // Non-numeric values are ignored, as by $avg.
            State::StdDev { count, mean, m2, .. } => {
                if let Some(n) = v.as_ref().and_then(Num::of) {
                    let x = n?.as_f64();
                    *count += 1;
                    let delta = x - *mean;
                    *mean += delta / *count as f64;
                    *m2 += delta * (x - *mean);
                }
                Ok(0)
            }
            State::MergeObjects(out) => match v {
                None | Some(Bson::Null | Bson::Undefined) => Ok(0),
                Some(Bson::Document(d)) => {
                    let size = super::doc_size(&d);
                    for (k, v) in d {
                        out.insert(k, v);
                    }
                    Ok(size)
                }
                // MongoDB: Location40400.
                Some(other) => Err(QueryError::type_mismatch(format!(
                    "$mergeObjects requires object inputs, but input {other} is of type {}",
                    crate::display::type_name(&other)
                ))),
            },
        }
    }

    /// The state as BSON a [`State::merge`] elsewhere folds in.
    fn partial(self) -> Bson {
        match self {
            State::Sum(n) => n.into(),
            State::Avg { sum, count } => Bson::Document(doc! { "sum": Bson::from(sum), "count": count_bson(count) }),
            State::Min(v) | State::Max(v) | State::First(v) => v.unwrap_or(Bson::Null),
            State::Last(v) => v,
            State::Push(items) | State::AddToSet(items, _) => Bson::Array(items),
            State::StdDev { count, mean, m2, .. } => {
                Bson::Document(doc! { "count": count_bson(count), "mean": mean, "m2": m2 })
            }
            State::MergeObjects(d) => Bson::Document(d),
        }
    }

    /// Folds in another piece's partial state (`None`: the field was missing, as when a shard's
    /// partial came from an older spec — treated as an empty piece). Returns the bytes newly held.
    fn merge(&mut self, partial: Option<&Bson>) -> Result<usize> {
        let Some(p) = partial else { return Ok(0) };
        match self {
            State::Sum(sum) => {
                if let Some(n) = Num::of(p) {
                    *sum = sum.add(n?);
                }
                Ok(0)
            }
            State::Avg { sum, count } => {
                let (s, c) = match p {
                    Bson::Document(d) => (d.get("sum"), d.get("count")),
                    _ => return Err(bad_partial("$avg", p)),
                };
                if let Some(n) = s.and_then(Num::of) {
                    *sum = sum.add(n?);
                }
                *count += count_of(c).ok_or_else(|| bad_partial("$avg", p))?;
                Ok(0)
            }
            State::Min(cur) => Ok(extreme(cur, Some(p.clone()), Ordering::Less)),
            State::Max(cur) => Ok(extreme(cur, Some(p.clone()), Ordering::Greater)),
            State::First(_) | State::Last(_) | State::MergeObjects(_) => self.add(Some(p.clone())),
            State::Push(items) => match p {
                Bson::Array(more) => {
                    let size = more.iter().map(value_size).sum();
                    items.extend(more.iter().cloned());
                    Ok(size)
                }
                _ => Err(bad_partial("$push", p)),
            },
            State::AddToSet(..) => match p {
                Bson::Array(more) => {
                    let mut grew = 0usize;
                    for v in more {
                        grew = grew.saturating_add(self.add(Some(v.clone()))?);
                    }
                    Ok(grew)
                }
                _ => Err(bad_partial("$addToSet", p)),
            },
            State::StdDev { count, mean, m2, .. } => {
                let Bson::Document(d) = p else { return Err(bad_partial("$stdDev", p)) };
                let nb = count_of(d.get("count")).ok_or_else(|| bad_partial("$stdDev", p))?;
                let (Some(Bson::Double(mb)), Some(Bson::Double(m2b))) = (d.get("mean"), d.get("m2")) else {
                    return Err(bad_partial("$stdDev", p));
                };
                if nb == 0 {
                    return Ok(0);
                }
                // Chan, Golub and LeVeque's pairwise update of Welford's state.
                let na = *count as f64;
                let n = *count + nb;
                let delta = mb - *mean;
                *mean += delta * nb as f64 / n as f64;
                *m2 += m2b + delta * delta * na * nb as f64 / n as f64;
                *count = n;
                Ok(0)
            }
        }
    }

    fn finish(self) -> Bson {
        match self {
            State::Sum(n) => n.into(),
            State::Avg { count: 0, .. } => Bson::Null,
            State::Avg { sum, count } => Bson::Double(sum.as_f64() / count as f64),
            State::Min(v) | State::Max(v) | State::First(v) => v.unwrap_or(Bson::Null),
            State::Last(v) => v,
            State::Push(items) | State::AddToSet(items, _) => Bson::Array(items),
            State::StdDev { count: 0, .. } | State::StdDev { count: 1, sample: true, .. } => Bson::Null,
            State::StdDev { count, m2, sample, .. } => {
                let divisor = if sample { count - 1 } else { count };
                Bson::Double((m2 / divisor as f64).sqrt())
            }
            State::MergeObjects(d) => Bson::Document(d),
        }
    }
}

fn count_bson(n: u64) -> Bson {
    i64::try_from(n).map_or(Bson::Int64(i64::MAX), Bson::Int64)
}

fn count_of(v: Option<&Bson>) -> Option<u64> {
    match v {
        Some(Bson::Int64(n)) => u64::try_from(*n).ok(),
        Some(Bson::Int32(n)) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// A shard sent a partial state of the wrong shape: a bug or a version mismatch, not user input.
fn bad_partial(acc: &str, got: &Bson) -> QueryError {
    QueryError::new(ErrorCode::InternalError, format!("malformed partial {acc} state from a shard: {got}"))
}

/// `$min`/`$max`: keeps `v` if it is `want` of the current value; null and missing are skipped.
fn extreme(cur: &mut Option<Bson>, v: Option<Bson>, want: Ordering) -> usize {
    let v = match v {
        None | Some(Bson::Null | Bson::Undefined) => return 0,
        Some(v) => v,
    };
    match cur {
        Some(c) if compare_values(&v, c) != want => 0,
        Some(c) => {
            let grew = value_size(&v).saturating_sub(value_size(c));
            *c = v;
            grew
        }
        None => {
            let size = value_size(&v);
            *cur = Some(v);
            size
        }
    }
}
