//! The array operators: `$push` (with `$each`, `$position`, `$sort`, `$slice`), `$addToSet`,
//! `$pop`, `$pull` and `$pullAll`.
//!
//! Each takes the current value of the field (`None` when missing) and returns the new value, or
//! `None` for "leave the field alone". Element equality is MongoDB's comparison equality
//! (`1 == 1.0`), not binary identity.

use bson::{Bson, doc};

use super::{PullCond, PushSort, PushSpec};
use crate::display;
use crate::error::{QueryError, Result};
use crate::order::{compare_values, values_equal};

pub(super) fn push(old: Option<&Bson>, spec: &PushSpec, field: &str, id_doc: &str) -> Result<Option<Bson>> {
    let mut arr = match old {
        None => Vec::new(),
        Some(Bson::Array(a)) => a.clone(),
        Some(other) => {
            return Err(QueryError::bad_value(format!(
                "The field '{field}' must be an array but is of type {} in document {id_doc}",
                display::type_name(other)
            )));
        }
    };
    let len = arr.len();
    let at = match spec.position {
        None => len,
        Some(p) if p >= 0 => usize::try_from(p).unwrap_or(usize::MAX).min(len),
        Some(p) => len.saturating_sub(usize::try_from(p.unsigned_abs()).unwrap_or(usize::MAX)),
    };
    arr.splice(at..at, spec.each.iter().cloned());
    match &spec.sort {
        None => {}
        Some(PushSort::Whole { descending }) => {
            arr.sort_by(|a, b| {
                let ord = compare_values(a, b);
                if *descending { ord.reverse() } else { ord }
            });
        }
        // Documents compare by the pattern; anything else by the BSON order. Documents form one
        // contiguous class of that order, so the mix is still a total order.
        Some(PushSort::Pattern(pattern)) => arr.sort_by(|a, b| match (a, b) {
            (Bson::Document(x), Bson::Document(y)) => pattern.compare(x, y),
            _ => compare_values(a, b),
        }),
    }
    if let Some(n) = spec.slice {
        let keep = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
        if n >= 0 {
            arr.truncate(keep);
        } else if arr.len() > keep {
            arr.drain(..arr.len() - keep);
        }
    }
    Ok(Some(Bson::Array(arr)))
}

pub(super) fn add_to_set(old: Option<&Bson>, values: &[Bson], field: &str) -> Result<Option<Bson>> {
    let mut arr = match old {
        None => Vec::new(),
        Some(Bson::Array(a)) => a.clone(),
        Some(other) => {
            return Err(QueryError::bad_value(format!(
                "Cannot apply $addToSet to non-array field. Field named '{field}' has non-array type {}",
                display::type_name(other)
            )));
        }
    };
    for v in values {
        if !arr.iter().any(|e| values_equal(e, v)) {
            arr.push(v.clone());
        }
    }
    Ok(Some(Bson::Array(arr)))
}

pub(super) fn pop(old: Option<&Bson>, first: bool, dotted: &str) -> Result<Option<Bson>> {
    match old {
        None => Ok(None),
        Some(Bson::Array(a)) if a.is_empty() => Ok(None),
        Some(Bson::Array(a)) => {
            let mut a = a.clone();
            if first {
                a.remove(0);
            } else {
                a.pop();
            }
            Ok(Some(Bson::Array(a)))
        }
        Some(other) => Err(QueryError::type_mismatch(format!(
            "Path '{dotted}' contains an element of non-array type '{}'",
            display::type_name(other)
        ))),
    }
}

pub(super) fn pull(old: Option<&Bson>, cond: &PullCond) -> Result<Option<Bson>> {
    match old {
        None => Ok(None),
        Some(Bson::Array(a)) => {
            let kept: Vec<Bson> = a.iter().filter(|e| !pull_matches(cond, e)).cloned().collect();
            Ok((kept.len() != a.len()).then_some(Bson::Array(kept)))
        }
        Some(_) => Err(QueryError::bad_value("Cannot apply $pull to a non-array value")),
    }
}

fn pull_matches(cond: &PullCond, e: &Bson) -> bool {
    match cond {
        PullCond::Equal(v) => values_equal(e, v),
        PullCond::Object(filter) => matches!(e, Bson::Document(d) if filter.matches(d)),
        PullCond::Wrapped(filter) => filter.matches(&doc! { "v": e.clone() }),
    }
}

pub(super) fn pull_all(old: Option<&Bson>, values: &[Bson]) -> Result<Option<Bson>> {
    match old {
        None => Ok(None),
        Some(Bson::Array(a)) => {
            let kept: Vec<Bson> = a.iter().filter(|e| !values.iter().any(|v| values_equal(e, v))).cloned().collect();
            Ok((kept.len() != a.len()).then_some(Bson::Array(kept)))
        }
        Some(_) => Err(QueryError::bad_value("Cannot apply $pullAll to a non-array value")),
    }
}
