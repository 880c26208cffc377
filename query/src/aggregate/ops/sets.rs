//! Set operators over arrays: `$setUnion $setIntersection $setDifference $setEquals
//! $setIsSubset`. Elements are equal as `$eq` says (1 and 1.0 are one element); duplicates are
//! dropped, and results come out in MongoDB's value order (MongoDB leaves the order
//! unspecified; a sorted one is deterministic).
//!
//! Rules, as MongoDB's: union, intersection and difference of a null or missing operand are
//! null; `$setEquals` and `$setIsSubset` require arrays.

use bson::Bson;

use super::{Args, nullish, type_error};
use crate::aggregate::operators::{Operator, type_of};
use crate::error::Result;
use crate::order::{compare_values, values_equal};

/// Sorted by `compare_values` and without duplicates, so membership is a binary search and a
/// set operation costs O(n log n) however large the arrays.
fn canonical(items: impl IntoIterator<Item = Bson>) -> Vec<Bson> {
    let mut out: Vec<Bson> = items.into_iter().collect();
    out.sort_by(compare_values);
    out.dedup_by(|a, b| values_equal(a, b));
    out
}

fn contains(set: &[Bson], v: &Bson) -> bool {
    set.binary_search_by(|e| compare_values(e, v)).is_ok()
}

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    let name = op.name();
    let mut sets = Vec::with_capacity(args.len());
    for (i, v) in args.all()?.into_iter().enumerate() {
        match v {
            Some(Bson::Array(a)) => sets.push(canonical(a)),
            v if nullish(&v) && matches!(op, SetUnion | SetIntersection | SetDifference) => {
                return Ok(Some(Bson::Null));
            }
            // MongoDB: Location17043 / 17047 / 17048 / 17049 / 17044 / 17046 / 17042.
            v => {
                let which = if i == 0 { "First" } else { "Second" };
                return Err(type_error(match op {
                    SetEquals => {
                        format!("All operands of $setEquals must be arrays. One argument is of type: {}", type_of(&v))
                    }
                    SetUnion | SetIntersection => {
                        format!("All operands of {name} must be arrays. One argument is of type: {}", type_of(&v))
                    }
                    _ => {
                        format!("both operands of {name} must be arrays. {which} argument is of type: {}", type_of(&v))
                    }
                }));
            }
        }
    }
    let mut sets = sets.into_iter();
    Ok(Some(match op {
        SetUnion => Bson::Array(canonical(sets.flatten())),
        SetIntersection => {
            let Some(first) = sets.next() else { return Ok(Some(Bson::Array(Vec::new()))) };
            let rest: Vec<Vec<Bson>> = sets.collect();
            Bson::Array(first.into_iter().filter(|v| rest.iter().all(|s| contains(s, v))).collect())
        }
        SetDifference => {
            let (a, b) = (sets.next().unwrap_or_default(), sets.next().unwrap_or_default());
            Bson::Array(a.into_iter().filter(|v| !contains(&b, v)).collect())
        }
        SetEquals => {
            let first = sets.next().unwrap_or_default();
            Bson::Boolean(sets.all(|s| s.len() == first.len() && s.iter().all(|v| contains(&first, v))))
        }
        SetIsSubset => {
            let (a, b) = (sets.next().unwrap_or_default(), sets.next().unwrap_or_default());
            Bson::Boolean(a.iter().all(|v| contains(&b, v)))
        }
        other => return Err(type_error(format!("{} is not a set operator", other.name()))),
    }))
}
