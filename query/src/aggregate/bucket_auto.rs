//! `$bucketAuto {groupBy, buckets, output, granularity}`: sorts by the `groupBy` value and cuts
//! the input into (at most) `buckets` runs of about equal size, as MongoDB's
//! `DocumentSourceBucketAuto` does: each bucket takes `round(n / buckets)` documents, then every
//! following document with the same value (a value never spans two buckets); the last bucket
//! takes what is left. A bucket's `_id.max` is the next one's `_id.min` (the last one's is its
//! own greatest value). `output` accumulators are computed by `$group`'s.
//!
//! Invariants: holds its input within the pipeline's budget (292); only the `granularity`
//! `POWERSOF2` series is supported besides none (the preferred-number series are refused).
//!
//! Must not: run on part of the input (the split leaves it to the router).

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use super::expr::{Expr, Scope};
use super::group::Group;
use super::{Budget, DocStream};
use crate::error::{QueryError, Result};
use crate::order::{compare_values, number_as_f64};

pub(crate) struct BucketAuto {
    group_by: Expr,
    buckets: usize,
    output: Group,
    powers_of_two: bool,
}

fn bad(message: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(message)
}

impl BucketAuto {
    pub(crate) fn parse(arg: &Bson) -> Result<BucketAuto> {
        let Bson::Document(spec) = arg else {
            // MongoDB: Location40240.
            return Err(bad("The argument to $bucketAuto must be an object"));
        };
        let (mut group_by, mut buckets, mut output, mut powers_of_two) = (None, None, None, false);
        for (k, v) in spec {
            match k.as_str() {
                "groupBy" => {
                    let expression = matches!(v, Bson::String(s) if s.starts_with('$'))
                        || matches!(v, Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')));
                    if !expression {
                        // MongoDB: Location40239.
                        return Err(bad(format!(
                            "The $bucketAuto 'groupBy' field must be defined as a $-prefixed path or an expression \
                             object, but found: {v}"
                        )));
                    }
                    group_by = Some(Expr::parse(v)?);
                }
                "buckets" => {
                    let n = match v {
                        Bson::Int32(n) => i64::from(*n),
                        Bson::Int64(n) if i32::try_from(*n).is_ok() => *n,
                        Bson::Double(f) if f.fract() == 0.0 && f.abs() <= f64::from(i32::MAX) => *f as i64,
                        // MongoDB: Location40241.
                        _ => {
                            return Err(bad(format!(
                                "The $bucketAuto 'buckets' field must be a numeric value, but found type: {}",
                                crate::display::type_name(v)
                            )));
                        }
                    };
                    if n <= 0 {
                        // MongoDB: Location40243.
                        return Err(QueryError::bad_value(format!(
                            "The $bucketAuto 'buckets' field must be greater than 0, but found: {n}"
                        )));
                    }
                    buckets = usize::try_from(n).ok();
                }
                "output" => match v {
                    Bson::Document(d) => output = Some(d.clone()),
                    // MongoDB: Location40244.
                    other => {
                        return Err(bad(format!(
                            "The $bucketAuto 'output' field must be an object, but found type: {}",
                            crate::display::type_name(other)
                        )));
                    }
                },
                "granularity" => match v {
                    Bson::String(s) if s == "POWERSOF2" => powers_of_two = true,
                    Bson::String(s)
                        if matches!(
                            s.as_str(),
                            "R5" | "R10"
                                | "R20"
                                | "R40"
                                | "R80"
                                | "1-2-5"
                                | "E6"
                                | "E12"
                                | "E24"
                                | "E48"
                                | "E96"
                                | "E192"
                        ) =>
                    {
                        return Err(QueryError::new(
                            ErrorCode::NotImplemented,
                            format!("$bucketAuto granularity '{s}' is not supported yet; only POWERSOF2 is"),
                        ));
                    }
                    other => return Err(bad(format!("Unknown rounding granularity '{other}'"))),
                },
                // MongoDB: Location40245.
                other => return Err(bad(format!("Unrecognized option to $bucketAuto: {other}."))),
            }
        }
        // MongoDB: Location40246.
        let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
            return Err(bad("$bucketAuto requires 'groupBy' and 'buckets' to be specified"));
        };
        let mut group = doc! { "_id": Bson::Null };
        match output {
            Some(fields) => group.extend(fields),
            None => {
                group.insert("count", doc! { "$sum": 1 });
            }
        }
        Ok(BucketAuto { group_by, buckets, output: Group::parse(&Bson::Document(group))?, powers_of_two })
    }

    pub(crate) fn run(&self, input: DocStream<'_>, budget: Budget, scope: Option<&Scope<'_>>) -> Result<Vec<Document>> {
        let docs = super::composite::hold(input, budget, "$bucketAuto")?;
        let mut keyed = Vec::with_capacity(docs.len());
        for d in docs {
            let key = self.group_by.eval_in(&d, scope)?.unwrap_or(Bson::Null);
            if self.powers_of_two && !number_as_f64(&key).is_some_and(|f| f >= 0.0) {
                // MongoDB: Location40258 / 40260.
                return Err(QueryError::bad_value(format!(
                    "$bucketAuto can specify a 'granularity' with numeric boundaries only, but found a value \
                     with type: {}",
                    crate::display::type_name(&key)
                )));
            }
            keyed.push((key, d));
        }
        keyed.sort_by(|a, b| compare_values(&a.0, &b.0));
        let n = keyed.len();
        let approx = ((n as f64 / self.buckets as f64).round() as usize).max(1);
        let mut cuts: Vec<(Bson, Bson, Vec<Document>)> = Vec::new();
        let mut it = keyed.into_iter().peekable();
        for b in 0..self.buckets {
            let Some((first, d)) = it.next() else { break };
            let (mut min, mut max, mut members) = (first.clone(), first, vec![d]);
            if b + 1 == self.buckets {
                for (k, d) in it.by_ref() {
                    max = k;
                    members.push(d);
                }
            } else {
                while members.len() < approx {
                    let Some((k, d)) = it.next() else { break };
                    max = k;
                    members.push(d);
                }
                let boundary = if self.powers_of_two { round_up_pow2(&max) } else { max.clone() };
                while let Some((k, _)) = it.peek() {
                    let absorb = if self.powers_of_two {
                        compare_values(k, &boundary).is_lt()
                    } else {
                        compare_values(k, &max).is_eq()
                    };
                    if !absorb {
                        break;
                    }
                    if let Some((k, d)) = it.next() {
                        max = k;
                        members.push(d);
                    }
                }
            }
            if self.powers_of_two {
                min = round_down_pow2(&min);
            }
            cuts.push((min, max, members));
        }
        let bounds: Vec<(Bson, Bson)> = (0..cuts.len())
            .map(|i| {
                let max = match cuts.get(i + 1) {
                    Some(next) => next.0.clone(),
                    None if self.powers_of_two => round_up_pow2(&cuts[i].1),
                    None => cuts[i].1.clone(),
                };
                (cuts[i].0.clone(), max)
            })
            .collect();
        let mut out = Vec::with_capacity(cuts.len());
        for ((min, max), (_, _, members)) in bounds.into_iter().zip(cuts) {
            let grouped = self.output.run(Box::new(members.into_iter().map(Ok)), budget, scope)?;
            let mut d = grouped.into_iter().next().unwrap_or_default();
            d.insert("_id", doc! { "min": min, "max": max });
            out.push(d);
        }
        Ok(out)
    }
}

/// The smallest power of two strictly greater than `v` (0 rounds up to 1... as MongoDB's
/// POWERSOF2 rounder: a power of two rounds up to the next one).
fn round_up_pow2(v: &Bson) -> Bson {
    let f = number_as_f64(v).unwrap_or(0.0);
    let mut p = 1.0f64;
    if f < 1.0 {
        while p / 2.0 > f && p > f64::MIN_POSITIVE {
            p /= 2.0;
        }
        if p <= f {
            p *= 2.0;
        }
    } else {
        while p <= f && p.is_finite() {
            p *= 2.0;
        }
    }
    pow2_value(v, p)
}

/// The greatest power of two strictly less than `v` (0 stays 0).
fn round_down_pow2(v: &Bson) -> Bson {
    let f = number_as_f64(v).unwrap_or(0.0);
    if f <= 0.0 {
        return pow2_value(v, 0.0);
    }
    let mut p = 1.0f64;
    if f > 1.0 {
        while p * 2.0 < f {
            p *= 2.0;
        }
    } else {
        while p >= f && p > f64::MIN_POSITIVE {
            p /= 2.0;
        }
    }
    pow2_value(v, p)
}

/// Integers stay integers where the power fits, as in MongoDB.
fn pow2_value(like: &Bson, p: f64) -> Bson {
    match like {
        Bson::Int32(_) if p <= f64::from(i32::MAX) && p.fract() == 0.0 => Bson::Int32(p as i32),
        Bson::Int32(_) | Bson::Int64(_) if p < 9.2e18 && p.fract() == 0.0 => Bson::Int64(p as i64),
        _ => Bson::Double(p),
    }
}

#[cfg(test)]
mod tests {
    use bson::{Bson, bson};

    use super::*;
    use crate::aggregate::Pipeline;

    fn run(stage: Bson, docs: Vec<Document>) -> Result<Vec<Document>> {
        Pipeline::parse(&[stage])?.run(docs.into_iter())
    }

    #[test]
    fn buckets_are_about_equal_and_chain_their_bounds() {
        let docs = (1..=10).map(|i| doc! { "x": i }).collect();
        let out = run(bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 3}}), docs).unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 1, "max": 4}, "count": 3},
                doc! {"_id": {"min": 4, "max": 7}, "count": 3},
                doc! {"_id": {"min": 7, "max": 10}, "count": 4},
            ]
        );
    }

    #[test]
    fn equal_values_stay_in_one_bucket_and_output_replaces_count() {
        let docs = [1, 1, 1, 2, 3].iter().map(|i| doc! { "x": *i }).collect();
        let out = run(bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 2, "output": {"s": {"$sum": "$x"}}}}), docs)
            .unwrap();
        assert_eq!(out, vec![doc! {"_id": {"min": 1, "max": 2}, "s": 3}, doc! {"_id": {"min": 2, "max": 3}, "s": 5}]);
    }

    #[test]
    fn more_buckets_than_documents_gives_one_each() {
        let docs = (1..=2).map(|i| doc! { "x": i }).collect();
        let out = run(bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 5}}), docs).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], doc! {"_id": {"min": 2, "max": 2}, "count": 1});
    }

    #[test]
    fn powers_of_two_round_the_bounds() {
        let docs = [3, 5, 9, 17].iter().map(|i| doc! { "x": *i }).collect();
        let out =
            run(bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 2, "granularity": "POWERSOF2"}}), docs).unwrap();
        assert_eq!(out[0].get_document("_id").unwrap(), &doc! {"min": 2, "max": 8});
        assert_eq!(out[1].get_document("_id").unwrap(), &doc! {"min": 8, "max": 32});
    }

    #[test]
    fn bad_specs_are_refused() {
        for (spec, code) in [
            (bson!({"$bucketAuto": 1}), ErrorCode::FailedToParse),
            (bson!({"$bucketAuto": {"groupBy": "x", "buckets": 2}}), ErrorCode::FailedToParse),
            (bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 0}}), ErrorCode::BadValue),
            (bson!({"$bucketAuto": {"groupBy": "$x"}}), ErrorCode::FailedToParse),
            (bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 2, "foo": 1}}), ErrorCode::FailedToParse),
            (bson!({"$bucketAuto": {"groupBy": "$x", "buckets": 2, "granularity": "R5"}}), ErrorCode::NotImplemented),
        ] {
            assert_eq!(Pipeline::parse(std::slice::from_ref(&spec)).unwrap_err().code, code, "{spec}");
        }
    }
}
