//! `$setWindowFields {partitionBy, sortBy, output}`: the stage's spec and its execution. The
//! functions computed over each window live in [`functions`].
//!
//! ```text
//!   input -> hold (memory-bounded) -> sort by (partitionBy, sortBy) -> per partition:
//!              per document: window bounds [lo, hi] (documents or range) -> function -> field
//! ```
//!
//! Invariants: the stage is blocking and holds its input plus the values it adds within the
//! pipeline's budget (292 without `allowDiskUse`); output comes grouped by partition, each in
//! `sortBy` order, as in MongoDB. Range windows need an ascending `sortBy` on one numeric (or,
//! with `unit`, date) field; their `"current"` bound is the current document's position.
//!
//! Must not: run on a shard over part of a partition. The split leaves this stage, and all that
//! follows it, to the router, which sees every partition whole.

mod functions;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::expr::{Expr, Scope};
use super::{Budget, DocStream, value_size};
use crate::error::{QueryError, Result};
use crate::order::compare_values;
use crate::sort::SortSpec;

pub(crate) use functions::Function;

pub(crate) struct SetWindowFields {
    partition_by: Option<Expr>,
    sort_by: Option<(SortSpec, Document)>,
    outputs: Vec<Output>,
}

struct Output {
    path: Vec<String>,
    function: Function,
    window: Window,
}

/// A window bound: an offset from the current document (documents) or value (range).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bound {
    Unbounded,
    Current,
    Offset(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Window {
    Documents(Bound, Bound),
    /// `unit`: what one unit of the offsets is, for date `sortBy` values.
    Range(Bound, Bound, Option<TimeUnit>),
}

fn unknown(field: &str) -> QueryError {
    QueryError::new(ErrorCode::Location40415, format!("BSON field '$setWindowFields.{field}' is an unknown field."))
}

impl SetWindowFields {
    pub(crate) fn parse(arg: &Bson) -> Result<SetWindowFields> {
        let Bson::Document(spec) = arg else {
            return Err(QueryError::failed_to_parse("the $setWindowFields stage specification must be an object"));
        };
        let (mut partition_by, mut sort_by, mut output) = (None, None, None);
        for (k, v) in spec {
            match k.as_str() {
                "partitionBy" => partition_by = Some(Expr::parse(v)?),
                "sortBy" => match v {
                    Bson::Document(d) if !d.is_empty() => sort_by = Some((SortSpec::parse(d)?, d.clone())),
                    _ => {
                        return Err(QueryError::type_mismatch(
                            "BSON field '$setWindowFields.sortBy' must be a non-empty object",
                        ));
                    }
                },
                "output" => match v {
                    Bson::Document(d) => output = Some(d),
                    other => {
                        return Err(QueryError::type_mismatch(format!(
                            "BSON field '$setWindowFields.output' is the wrong type '{}', expected type 'object'",
                            crate::display::type_name(other)
                        )));
                    }
                },
                other => return Err(unknown(other)),
            }
        }
        let Some(output) = output else {
            return Err(QueryError::new(
                ErrorCode::Location40414,
                "BSON field '$setWindowFields.output' is missing but a required field",
            ));
        };
        let sort_fields = sort_by.as_ref().map_or(0, |(_, d)| d.len());
        let mut outputs = Vec::new();
        for (name, v) in output {
            let path = super::expr::parse_field_path(name)?;
            let Bson::Document(f) = v else {
                return Err(QueryError::failed_to_parse(format!(
                    "The field '{name}' must be an object, got {}",
                    crate::display::type_name(v)
                )));
            };
            let (function, window) = Function::parse(f, sort_fields)?;
            let descending = sort_by.as_ref().and_then(|(s, _)| s.keys().first()).is_some_and(|k| k.descending);
            if matches!(window, Window::Range(..)) && descending {
                // MongoDB: Location5339902.
                return Err(QueryError::bad_value("Range-based bounds require an ascending sortBy"));
            }
            outputs.push(Output { path, function, window });
        }
        Ok(SetWindowFields { partition_by, sort_by, outputs })
    }

    /// Runs the stage over all of `input`.
    pub(crate) fn run(&self, input: DocStream<'_>, budget: Budget, scope: Option<&Scope<'_>>) -> Result<Vec<Document>> {
        let docs = super::composite::hold(input, budget, "$setWindowFields")?;
        let mut held: usize = docs.iter().map(super::doc_size).sum();
        let mut keyed = Vec::with_capacity(docs.len());
        for d in docs {
            let key = match &self.partition_by {
                Some(e) => match e.eval_in(&d, scope)? {
                    Some(Bson::Array(_)) => {
                        return Err(QueryError::type_mismatch(
                            "An expression used to partition cannot evaluate to value of type array",
                        ));
                    }
                    v => v.unwrap_or(Bson::Null),
                },
                None => Bson::Null,
            };
            keyed.push((key, d));
        }
        keyed.sort_by(|(ka, a), (kb, b)| {
            compare_values(ka, kb)
                .then_with(|| self.sort_by.as_ref().map_or(std::cmp::Ordering::Equal, |(s, _)| s.compare(a, b)))
        });
        let mut out = Vec::with_capacity(keyed.len());
        let mut rest = keyed.into_iter().peekable();
        while let Some((key, first)) = rest.next() {
            let mut partition = vec![first];
            while let Some((_, d)) = rest.next_if(|(k, _)| compare_values(k, &key).is_eq()) {
                partition.push(d);
            }
            self.fill_partition(&mut partition, scope, budget, &mut held)?;
            out.extend(partition);
        }
        Ok(out)
    }

    fn fill_partition(
        &self,
        docs: &mut [Document],
        scope: Option<&Scope<'_>>,
        budget: Budget,
        held: &mut usize,
    ) -> Result<()> {
        let sort_values = self.sort_values(docs);
        let mut results = Vec::with_capacity(self.outputs.len());
        for o in &self.outputs {
            let inputs = o.function.inputs(docs, scope)?;
            let ctx = functions::Partition { inputs: &inputs, sort_values: &sort_values, docs };
            let values = o.function.compute(&ctx, |i| bounds(&o.window, i, &ctx))?;
            for v in &values {
                *held = held.saturating_add(value_size(v));
            }
            budget.check(*held, "$setWindowFields")?;
            results.push(values);
        }
        for (o, values) in self.outputs.iter().zip(results) {
            for (d, v) in docs.iter_mut().zip(values) {
                super::stages::set_nested(d, &o.path, v);
            }
        }
        Ok(())
    }

    /// The value of the single `sortBy` field per document (range windows, `$integral`…).
    fn sort_values(&self, docs: &[Document]) -> Vec<Option<Bson>> {
        match &self.sort_by {
            Some((_, d)) if d.len() == 1 => {
                let path: Vec<String> =
                    d.keys().next().map(|k| k.split('.').map(str::to_owned).collect()).unwrap_or_default();
                docs.iter().map(|doc| super::expr::lookup(doc, &path)).collect()
            }
            _ => vec![None; docs.len()],
        }
    }
}

/// The inclusive index range of document `i`'s window, `None` when empty.
fn bounds(window: &Window, i: usize, ctx: &functions::Partition<'_>) -> Result<Option<(usize, usize)>> {
    let n = ctx.docs.len();
    match window {
        Window::Documents(lo, hi) => {
            let at = |b: &Bound, unbounded: i64| -> i64 {
                match b {
                    Bound::Unbounded => unbounded,
                    Bound::Current => i as i64,
                    Bound::Offset(o) => (i as i64).saturating_add(*o as i64),
                }
            };
            let lo = at(lo, 0).max(0);
            let hi = at(hi, n as i64 - 1).min(n as i64 - 1);
            Ok((lo <= hi).then_some((lo as usize, hi as usize)))
        }
        Window::Range(lo, hi, unit) => {
            let key = |j: usize| range_key(ctx.sort_values[j].as_ref(), *unit);
            let here = key(i)?;
            let edge = |off: f64| -> Result<f64> {
                match unit {
                    None => Ok(here + off),
                    Some(u) => Ok(u.add(here as i64, off as i64)? as f64),
                }
            };
            // "current" is the current document's position, not its value (ties excluded).
            let first = match lo {
                Bound::Unbounded => 0,
                Bound::Current => i,
                Bound::Offset(o) => {
                    let e = edge(*o)?;
                    first_where(n, |j| Ok(key(j)? >= e))?
                }
            };
            let end = match hi {
                Bound::Unbounded => n,
                Bound::Current => i + 1,
                Bound::Offset(o) => {
                    let e = edge(*o)?;
                    first_where(n, |j| Ok(key(j)? > e))?
                }
            };
            Ok((first < end).then(|| (first, end - 1)))
        }
    }
}

/// The first index in `0..n` where `pred` holds (it is monotone over a sorted partition).
fn first_where(n: usize, pred: impl Fn(usize) -> Result<bool>) -> Result<usize> {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

/// A `sortBy` value as a number on the range axis: a number without `unit`, a date (in ms) with.
fn range_key(v: Option<&Bson>, unit: Option<TimeUnit>) -> Result<f64> {
    match (v, unit) {
        (Some(Bson::DateTime(d)), Some(_)) => Ok(d.timestamp_millis() as f64),
        (Some(v), None) if crate::order::number_as_f64(v).is_some() => {
            Ok(crate::order::number_as_f64(v).unwrap_or(0.0))
        }
        (v, Some(_)) => Err(QueryError::new(
            ErrorCode::BadValue,
            format!(
                "Invalid range: Expected the sortBy field to be a Date, but it was {}",
                v.map_or("missing", crate::display::type_name)
            ),
        )),
        (v, None) => Err(QueryError::new(
            ErrorCode::BadValue,
            format!(
                "Invalid range: Expected the sortBy field to be a number, but it was {}",
                v.map_or("missing", crate::display::type_name)
            ),
        )),
    }
}

/// A time unit of range windows and `$densify`: fixed (in ms) or calendar months.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    Millis(i64),
    Months(i64),
}

impl TimeUnit {
    /// `unit` as a range window or `$densify` takes it (months, quarters and years too).
    pub(crate) fn parse(v: &Bson) -> Result<TimeUnit> {
        Ok(match v {
            Bson::String(s) if s == "month" => TimeUnit::Months(1),
            Bson::String(s) if s == "quarter" => TimeUnit::Months(3),
            Bson::String(s) if s == "year" => TimeUnit::Months(12),
            other => TimeUnit::Millis(unit_millis(other)?),
        })
    }

    /// `ms` plus `n` units, as `$dateAdd` in UTC (a month's day is clamped to its end).
    pub(crate) fn add(self, ms: i64, n: i64) -> Result<i64> {
        let overflow = || QueryError::bad_value("date arithmetic out of range");
        match self {
            TimeUnit::Millis(u) => u.checked_mul(n).and_then(|d| ms.checked_add(d)).ok_or_else(overflow),
            TimeUnit::Months(m) => {
                use chrono::Months;
                let months = m.checked_mul(n).ok_or_else(overflow)?;
                let t = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms).ok_or_else(overflow)?;
                let k = Months::new(u32::try_from(months.unsigned_abs()).map_err(|_| overflow())?);
                let r = if months >= 0 { t.checked_add_months(k) } else { t.checked_sub_months(k) };
                Ok(r.ok_or_else(overflow)?.timestamp_millis())
            }
        }
    }
}

/// A fixed-length `unit` (`$derivative`, `$integral`) in milliseconds. Months and years have
/// no fixed length, so they are refused here, as MongoDB refuses them for these functions.
pub(crate) fn unit_millis(v: &Bson) -> Result<i64> {
    Ok(match v {
        Bson::String(s) => match s.as_str() {
            "millisecond" => 1,
            "second" => 1_000,
            "minute" => 60_000,
            "hour" => 3_600_000,
            "day" => 86_400_000,
            "week" => 604_800_000,
            "month" | "quarter" | "year" => {
                return Err(QueryError::new(
                    ErrorCode::NotImplemented,
                    format!("unit '{s}' has no fixed length; use week or smaller"),
                ));
            }
            other => return Err(QueryError::failed_to_parse(format!("unknown time unit value: {other}"))),
        },
        other => {
            return Err(QueryError::failed_to_parse(format!(
                "'unit' must be a string, got {}",
                crate::display::type_name(other)
            )));
        }
    })
}

#[cfg(test)]
mod tests;
