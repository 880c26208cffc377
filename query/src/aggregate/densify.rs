//! `$densify {field, partitionByFields, range: {step, unit, bounds}}`: adds documents so that
//! `field` takes every value of the grid `lo + k·step` in the range, per partition; generated
//! documents hold only `field` and the partition fields. Bounds: `"full"` (the smallest to the
//! greatest value of all documents, both included), `"partition"` (the same per partition) or
//! `[lo, hi]` (`hi` excluded). Dates step by `unit` (calendar months, quarters and years too).
//!
//! Invariants: holds its input within the pipeline's budget (292), and never generates more than
//! [`DENSIFY_GENERATED_DOCS_MAX`] documents (MongoDB's `internalQueryMaxAllowedDensifyDocs`,
//! 5897900). Documents whose field is null or missing pass through first in their partition.
//!
//! Must not: run on part of a partition (the split leaves it to the router).

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};
use shoal_proto::ErrorCode;

use super::operators::Num;
use super::window::TimeUnit;
use super::{Budget, DocStream, doc_size};
use crate::error::{QueryError, Result};
use crate::order::compare_values;

/// The most documents one `$densify` generates, as MongoDB's default limit.
pub const DENSIFY_GENERATED_DOCS_MAX: usize = 500_000;

#[derive(Debug, Clone, PartialEq)]
enum Bounds {
    Full,
    Partition,
    Explicit(Box<(Bson, Bson)>),
}

/// A partition: its key, its documents without a value, and those with one (with the value).
type Part = (Document, Vec<Document>, Vec<(Bson, Document)>);

pub(crate) struct Densify {
    field: Vec<String>,
    partition_by: Vec<Vec<String>>,
    step: Num,
    unit: Option<TimeUnit>,
    bounds: Bounds,
}

fn bad(message: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(message)
}

fn path(s: &str) -> Result<Vec<String>> {
    if s.starts_with('$') {
        return Err(bad(format!("Cannot densify field with a '$' prefix: {s}")));
    }
    super::expr::parse_field_path(s)
}

impl Densify {
    pub(crate) fn parse(arg: &Bson) -> Result<Densify> {
        let Bson::Document(spec) = arg else { return Err(bad("The $densify stage specification must be an object")) };
        let (mut field, mut partition_by, mut range) = (None, Vec::new(), None);
        for (k, v) in spec {
            match (k.as_str(), v) {
                ("field", Bson::String(s)) => field = Some(path(s)?),
                ("partitionByFields", Bson::Array(a)) => {
                    for p in a {
                        let Bson::String(p) = p else {
                            return Err(bad("partitionByFields must be an array of strings"));
                        };
                        partition_by.push(path(p)?);
                    }
                }
                ("range", Bson::Document(r)) => range = Some(r),
                ("field" | "partitionByFields" | "range", other) => {
                    return Err(QueryError::type_mismatch(format!(
                        "BSON field '$densify.{k}' is the wrong type '{}'",
                        crate::display::type_name(other)
                    )));
                }
                (other, _) => {
                    return Err(QueryError::new(
                        ErrorCode::Location40415,
                        format!("BSON field '$densify.{other}' is an unknown field."),
                    ));
                }
            }
        }
        let missing = |f: &str| {
            QueryError::new(
                ErrorCode::Location40414,
                format!("BSON field '$densify.{f}' is missing but a required field"),
            )
        };
        let field = field.ok_or_else(|| missing("field"))?;
        let range = range.ok_or_else(|| missing("range"))?;
        if partition_by.iter().any(|p| p.starts_with(&field) || field.starts_with(p)) {
            return Err(bad("The field to densify must not be a prefix of, or prefixed by, a partition field"));
        }
        let (mut step, mut unit, mut bounds) = (None, None, None);
        for (k, v) in range {
            match k.as_str() {
                "step" => step = Some(v),
                "unit" => unit = Some(TimeUnit::parse(v)?),
                "bounds" => bounds = Some(v),
                other => {
                    return Err(QueryError::new(
                        ErrorCode::Location40415,
                        format!("BSON field '$densify.range.{other}' is an unknown field."),
                    ));
                }
            }
        }
        let step = match step.map(|s| (s, Num::of(s))) {
            Some((_, Some(Ok(n)))) if n.as_f64() > 0.0 => n,
            Some((_, Some(Err(e)))) => return Err(e),
            Some(_) => {
                return Err(bad("The step parameter in a range statement must be a strictly positive numeric value"));
            }
            None => return Err(missing("range.step")),
        };
        if unit.is_some() && !matches!(step, Num::I32(_) | Num::I64(_)) && step.as_f64().fract() != 0.0 {
            return Err(bad(
                "The step parameter in a range statement must be a whole number when densifying a date range",
            ));
        }
        let bounds = match bounds {
            Some(Bson::String(s)) if s == "full" => Bounds::Full,
            Some(Bson::String(s)) if s == "partition" => Bounds::Partition,
            Some(Bson::Array(a)) if a.len() == 2 => {
                let ok = |v: &Bson| match unit {
                    Some(_) => matches!(v, Bson::DateTime(_)),
                    None => matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)),
                };
                if !ok(&a[0]) || !ok(&a[1]) || a[0].element_type() != a[1].element_type() && unit.is_some() {
                    return Err(bad(if unit.is_some() {
                        "A bounding array must contain dates when 'unit' is specified"
                    } else {
                        "A bounding array must contain numbers when 'unit' is not specified"
                    }));
                }
                if compare_values(&a[0], &a[1]) == Ordering::Greater {
                    return Err(bad("A bounding array in a range statement must be sorted"));
                }
                Bounds::Explicit(Box::new((a[0].clone(), a[1].clone())))
            }
            Some(_) => {
                return Err(bad("Bounds must be 'full', 'partition', or an array of two values of the same type"));
            }
            None => return Err(missing("range.bounds")),
        };
        Ok(Densify { field, partition_by, step, unit, bounds })
    }

    pub(crate) fn run(&self, input: DocStream<'_>, budget: Budget) -> Result<Vec<Document>> {
        let docs = super::composite::hold(input, budget, "$densify")?;
        let mut held: usize = docs.iter().map(doc_size).sum();
        let mut parts: Vec<Part> = Vec::new();
        let mut keyed: Vec<(Document, Document)> = docs.into_iter().map(|d| (self.partition_key(&d), d)).collect();
        keyed.sort_by(|a, b| crate::order::compare_documents(&a.0, &b.0));
        for (key, d) in keyed {
            if parts.last().is_none_or(|p| crate::order::compare_documents(&p.0, &key) != Ordering::Equal) {
                parts.push((key, Vec::new(), Vec::new()));
            }
            let Some(part) = parts.last_mut() else { continue };
            match super::expr::lookup(&d, &self.field) {
                None | Some(Bson::Null | Bson::Undefined) => part.1.push(d),
                Some(v) => {
                    self.check_type(&v)?;
                    part.2.push((v, d));
                }
            }
        }
        for p in &mut parts {
            p.2.sort_by(|a, b| compare_values(&a.0, &b.0));
        }
        let global = |first: bool| -> Option<Bson> {
            let edge = parts.iter().filter_map(|p| if first { p.2.first() } else { p.2.last() }).map(|(v, _)| v);
            if first { edge.min_by(|a, b| compare_values(a, b)) } else { edge.max_by(|a, b| compare_values(a, b)) }
                .cloned()
        };
        let full = (global(true), global(false));
        let mut generated = 0usize;
        let mut out = Vec::new();
        for (key, nulls, values) in parts {
            out.extend(nulls);
            let (lo, hi, inclusive) = match &self.bounds {
                Bounds::Full => (full.0.clone(), full.1.clone(), true),
                Bounds::Partition => (values.first().map(|v| v.0.clone()), values.last().map(|v| v.0.clone()), true),
                Bounds::Explicit(b) => (Some(b.0.clone()), Some(b.1.clone()), false),
            };
            let (Some(lo), Some(hi)) = (lo, hi) else {
                out.extend(values.into_iter().map(|(_, d)| d));
                continue;
            };
            let mut k: u64 = 0;
            let mut current = lo.clone();
            let in_range =
                |c: &Bson| if inclusive { compare_values(c, &hi).is_le() } else { compare_values(c, &hi).is_lt() };
            let mut emit = |current: &Bson, out: &mut Vec<Document>| -> Result<()> {
                generated += 1;
                if generated > DENSIFY_GENERATED_DOCS_MAX {
                    return Err(QueryError::new(
                        ErrorCode::BadValue,
                        format!("$densify exceeded the maximum of {DENSIFY_GENERATED_DOCS_MAX} generated documents"),
                    ));
                }
                let mut d = key.clone();
                super::stages::set_nested(&mut d, &self.field, current.clone());
                held = held.saturating_add(doc_size(&d));
                budget.check(held, "$densify")?;
                out.push(d);
                Ok(())
            };
            for (v, d) in values {
                while compare_values(&current, &v).is_lt() && in_range(&current) {
                    emit(&current, &mut out)?;
                    k += 1;
                    current = self.at(&lo, k)?;
                }
                if compare_values(&current, &v).is_eq() {
                    k += 1;
                    current = self.at(&lo, k)?;
                }
                out.push(d);
            }
            while in_range(&current) {
                emit(&current, &mut out)?;
                k += 1;
                current = self.at(&lo, k)?;
            }
        }
        Ok(out)
    }

    /// The partition fields of `d`, as nested documents (missing ones left out).
    fn partition_key(&self, d: &Document) -> Document {
        let mut key = Document::new();
        for p in &self.partition_by {
            if let Some(v) = super::expr::lookup(d, p) {
                super::stages::set_nested(&mut key, p, v);
            }
        }
        key
    }

    fn check_type(&self, v: &Bson) -> Result<()> {
        let ok = match self.unit {
            Some(_) => matches!(v, Bson::DateTime(_)),
            None => matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)),
        };
        if ok {
            return Ok(());
        }
        // MongoDB: Location5733201 / 6053600.
        Err(QueryError::type_mismatch(format!(
            "Densify field type must be {}, got {}",
            if self.unit.is_some() { "a date when a unit is specified" } else { "numeric" },
            crate::display::type_name(v)
        )))
    }

    /// `lo + k·step`.
    fn at(&self, lo: &Bson, k: u64) -> Result<Bson> {
        let k = i64::try_from(k).unwrap_or(i64::MAX);
        match (self.unit, lo) {
            (Some(unit), Bson::DateTime(d)) => {
                let steps = (self.step.as_i64()).saturating_mul(k);
                let ms = d.timestamp_millis();
                Ok(Bson::DateTime(DateTime::from_millis(unit.add(ms, steps)?)))
            }
            (None, v) => match Num::of(v) {
                Some(n) => Ok(n?.add(self.step.mul(i32::try_from(k).map_or(Num::I64(k), Num::I32))).into()),
                None => Err(QueryError::type_mismatch("Densify field type must be numeric")),
            },
            (Some(_), _) => Err(QueryError::type_mismatch("Densify field type must be a date when a unit is given")),
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{Bson, bson, doc};

    use crate::aggregate::Pipeline;
    use shoal_proto::ErrorCode;

    fn run(stage: Bson, docs: Vec<bson::Document>) -> crate::error::Result<Vec<bson::Document>> {
        Pipeline::parse(&[stage])?.run(docs.into_iter())
    }

    #[test]
    fn full_and_partition_bounds_as_in_the_manual() {
        let docs = vec![
            doc! {"altitude": 600, "variety": "A"},
            doc! {"altitude": 800, "variety": "A"},
            doc! {"altitude": 900, "variety": "A"},
            doc! {"altitude": 600, "variety": "G"},
            doc! {"altitude": 1200, "variety": "G"},
        ];
        let alt = |out: &[bson::Document], v: &str| -> Vec<i32> {
            out.iter()
                .filter(|d| d.get_str("variety").ok() == Some(v))
                .map(|d| d.get_i32("altitude").unwrap())
                .collect()
        };
        let full = run(
            bson!({"$densify": {"field": "altitude", "partitionByFields": ["variety"], "range": {"bounds": "full", "step": 200}}}),
            docs.clone(),
        )
        .unwrap();
        assert_eq!(alt(&full, "A"), vec![600, 800, 900, 1000, 1200]);
        assert_eq!(alt(&full, "G"), vec![600, 800, 1000, 1200]);
        let part = run(
            bson!({"$densify": {"field": "altitude", "partitionByFields": ["variety"], "range": {"bounds": "partition", "step": 200}}}),
            docs,
        )
        .unwrap();
        assert_eq!(alt(&part, "A"), vec![600, 800, 900]);
        assert_eq!(part.len(), 7);
    }

    #[test]
    fn explicit_bounds_exclude_the_upper_one_and_keep_outsiders() {
        let docs = vec![doc! {"x": -5}, doc! {"x": 3}, doc! {"x": 20}];
        let out = run(bson!({"$densify": {"field": "x", "range": {"bounds": [0, 6], "step": 2}}}), docs).unwrap();
        let xs: Vec<Bson> = out.iter().map(|d| d.get("x").cloned().unwrap()).collect();
        assert_eq!(xs, vec![bson!(-5), bson!(0), bson!(2), bson!(3), bson!(4), bson!(20)]);
    }

    #[test]
    fn dates_step_by_unit() {
        let day = 86_400_000i64;
        let docs = vec![doc! {"t": bson::DateTime::from_millis(0)}, doc! {"t": bson::DateTime::from_millis(3 * day)}];
        let out = run(bson!({"$densify": {"field": "t", "range": {"bounds": "full", "step": 1, "unit": "day"}}}), docs)
            .unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(out[1], doc! {"t": bson::DateTime::from_millis(day)});
    }

    #[test]
    fn bad_specs_are_refused() {
        for spec in [
            bson!({"$densify": {"range": {"step": 1, "bounds": "full"}}}),
            bson!({"$densify": {"field": "x"}}),
            bson!({"$densify": {"field": "x", "range": {"step": 0, "bounds": "full"}}}),
            bson!({"$densify": {"field": "x", "range": {"step": 1, "bounds": "all"}}}),
            bson!({"$densify": {"field": "x", "range": {"step": 1, "bounds": [5, 1]}}}),
            bson!({"$densify": {"field": "x", "range": {"step": 1, "bounds": "full", "unit": "parsec"}}}),
            bson!({"$densify": {"field": "x", "partitionByFields": ["x"], "range": {"step": 1, "bounds": "full"}}}),
        ] {
            assert!(Pipeline::parse(std::slice::from_ref(&spec)).is_err(), "{spec}");
        }
        let err =
            run(bson!({"$densify": {"field": "x", "range": {"step": 1, "bounds": "full"}}}), vec![doc! {"x": "a"}])
                .unwrap_err();
        assert_eq!(err.code, ErrorCode::TypeMismatch);
    }
}
