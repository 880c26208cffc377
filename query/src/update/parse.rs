//! Parsing operator-style update documents into sorted, conflict-free [`FieldUpdate`]s.
//!
//! Every check that depends only on the update (not on the document) happens here, once per
//! statement, so `apply` can run per document without re-validating.

use std::cmp::Ordering;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::{FieldPath, FieldUpdate, Op, PullCond, PushSort, PushSpec};
use crate::display;
use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::sort::SortSpec;

pub(super) fn operators(u: &Document) -> Result<Vec<FieldUpdate>> {
    // (spec order, update) so conflict messages can name the later path as MongoDB does.
    let mut updates: Vec<(usize, FieldUpdate)> = Vec::new();
    for (name, arg) in u {
        let fields = match arg {
            Bson::Document(d) => d,
            other => {
                if !is_known_operator(name) {
                    return Err(unknown_modifier(name));
                }
                return Err(QueryError::failed_to_parse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: \
                     {{$mod: {{<field>: ...}}}} not {{{name}: {}}}",
                    display::type_name(other),
                    display::value(other)
                )));
            }
        };
        for (field, value) in fields {
            let seq = updates.len();
            match name.as_str() {
                "$rename" => {
                    let (from, to) = rename(field, value)?;
                    updates.push((seq, FieldUpdate { path: from.clone(), op: Op::RenameFrom { to: to.clone() } }));
                    updates.push((seq + 1, FieldUpdate { path: to, op: Op::RenameTo { from } }));
                }
                _ => {
                    let path = parse_path(field)?;
                    let op = operator(name, field, value)?;
                    updates.push((seq, FieldUpdate { path, op }));
                }
            }
        }
    }
    updates.sort_by(|a, b| compare_paths(&a.1.path.parts, &b.1.path.parts));
    check_conflicts(&updates)?;
    Ok(updates.into_iter().map(|(_, u)| u).collect())
}

fn is_known_operator(name: &str) -> bool {
    matches!(
        name,
        "$set"
            | "$unset"
            | "$inc"
            | "$mul"
            | "$min"
            | "$max"
            | "$rename"
            | "$setOnInsert"
            | "$currentDate"
            | "$push"
            | "$addToSet"
            | "$pop"
            | "$pull"
            | "$pullAll"
    )
}

fn unknown_modifier(name: &str) -> QueryError {
    QueryError::failed_to_parse(format!(
        "Unknown modifier: {name}. Expected a valid update modifier or pipeline-style update \
         specified as an array"
    ))
}

fn operator(name: &str, field: &str, value: &Bson) -> Result<Op> {
    Ok(match name {
        "$set" => Op::Set(value.clone()),
        "$setOnInsert" => Op::SetOnInsert(value.clone()),
        "$unset" => Op::Unset,
        "$inc" | "$mul" => {
            if !is_number(value) {
                let verb = if name == "$inc" { "increment" } else { "multiply" };
                return Err(QueryError::type_mismatch(format!(
                    "Cannot {verb} with non-numeric argument: {{{}}}",
                    display::element(field, value)
                )));
            }
            if name == "$inc" { Op::Inc(value.clone()) } else { Op::Mul(value.clone()) }
        }
        "$min" => Op::Min(value.clone()),
        "$max" => Op::Max(value.clone()),
        "$currentDate" => current_date(field, value)?,
        "$push" => Op::Push(push(value)?),
        "$addToSet" => Op::AddToSet(add_to_set(value)?),
        "$pop" => pop(value)?,
        "$pull" => Op::Pull(pull(value)?),
        "$pullAll" => match value {
            Bson::Array(a) => Op::PullAll(a.clone()),
            other => {
                return Err(QueryError::bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    display::type_name(other)
                )));
            }
        },
        other => return Err(unknown_modifier(other)),
    })
}

pub(super) fn is_number(v: &Bson) -> bool {
    matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
}

/// The value of a numeric `Bson` as f64, for parse-time checks of small integral arguments.
fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Decimal128(_) => None,
        v => crate::order::number_as_f64(v),
    }
}

/// An integral numeric argument (`$slice`, `$position`), as MongoDB's `isSafeLongLong` accepts it.
fn as_integer(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(*f as i64),
        _ => None,
    }
}

pub(super) fn parse_path(dotted: &str) -> Result<FieldPath> {
    if dotted.is_empty() {
        // MongoDB reports EmptyFieldName (56), which proto does not list yet.
        return Err(QueryError::bad_value("An empty update path is not valid."));
    }
    let parts: Vec<String> = dotted.split('.').map(str::to_string).collect();
    for part in &parts {
        if part.is_empty() {
            return Err(QueryError::bad_value(format!(
                "The update path '{dotted}' contains an empty field name, which is not allowed."
            )));
        }
        match super::positional::positional(part) {
            Some(super::positional::Positional::Filtered(id)) if !super::positional::valid_identifier(id) => {
                return Err(QueryError::bad_value(format!(
                    "The array filter identifier '{id}' in '{dotted}' must be an alphanumeric string beginning with \
                     a lowercase letter"
                )));
            }
            Some(_) => continue,
            None => {}
        }
        if part.starts_with('$') {
            return Err(QueryError::new(
                ErrorCode::DollarPrefixedFieldName,
                format!("The dollar ($) prefixed field '{part}' in '{dotted}' is not valid for storage."),
            ));
        }
    }
    if parts.iter().filter(|p| *p == "$").count() > 1 {
        return Err(QueryError::bad_value(format!("Too many positional (i.e. '$') elements found in path '{dotted}'")));
    }
    Ok(FieldPath { dotted: dotted.to_string(), parts })
}

fn rename(field: &str, value: &Bson) -> Result<(FieldPath, FieldPath)> {
    let Bson::String(to) = value else {
        return Err(QueryError::bad_value(format!(
            "The 'to' field for $rename must be a string: {}",
            display::element(field, value)
        )));
    };
    let dynamic = |p: &str| p.split('.').any(|c| c == "$" || (c.starts_with("$[") && c.ends_with(']')));
    if dynamic(field) {
        return Err(QueryError::bad_value(format!("The source field for $rename may not be dynamic: {field}")));
    }
    if dynamic(to) {
        return Err(QueryError::bad_value(format!("The destination field for $rename may not be dynamic: {to}")));
    }
    let from = parse_path(field)?;
    let to_path = parse_path(to)?;
    if from.parts == to_path.parts {
        return Err(QueryError::bad_value(format!(
            "The source and target field for $rename must differ: {}",
            display::element(field, value)
        )));
    }
    if is_prefix(&from.parts, &to_path.parts) || is_prefix(&to_path.parts, &from.parts) {
        return Err(QueryError::bad_value(format!(
            "The source and target field for $rename must not be on the same path: {}",
            display::element(field, value)
        )));
    }
    Ok((from, to_path))
}

fn current_date(field: &str, value: &Bson) -> Result<Op> {
    let bad_type = || {
        QueryError::bad_value(
            "The '$type' string field is required to be 'date' or 'timestamp': \
             {$currentDate: {field : {$type: 'date'}}}",
        )
    };
    match value {
        // MongoDB writes a date for `false` as well; only the presence of the field matters.
        Bson::Boolean(_) => Ok(Op::CurrentDate { timestamp: false }),
        Bson::Document(d) => {
            let mut timestamp = None;
            for (k, v) in d {
                if k != "$type" {
                    return Err(QueryError::bad_value(format!("Unrecognized $currentDate option: {k}")));
                }
                timestamp = match v {
                    Bson::String(s) if s == "date" => Some(false),
                    Bson::String(s) if s == "timestamp" => Some(true),
                    _ => return Err(bad_type()),
                };
            }
            timestamp.map(|timestamp| Op::CurrentDate { timestamp }).ok_or_else(bad_type)
        }
        other => Err(QueryError::bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type \
             expression ({{$type: 'timestamp/date'}}).",
            display::element(field, other)
        ))),
    }
}

fn push(value: &Bson) -> Result<PushSpec> {
    let mods = match value {
        Bson::Document(d) if d.contains_key("$each") => d,
        other => {
            return Ok(PushSpec { each: vec![other.clone()], slice: None, sort: None, position: None });
        }
    };
    let mut spec = PushSpec { each: Vec::new(), slice: None, sort: None, position: None };
    for (k, v) in mods {
        match k.as_str() {
            "$each" => match v {
                Bson::Array(a) => spec.each = a.clone(),
                other => {
                    return Err(QueryError::bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        display::type_name(other)
                    )));
                }
            },
            "$slice" => {
                spec.slice = Some(as_integer(v).ok_or_else(|| {
                    QueryError::bad_value(format!(
                        "The value for $slice must be an integer value but was given type: {}",
                        display::type_name(v)
                    ))
                })?)
            }
            "$position" => {
                spec.position = Some(as_integer(v).ok_or_else(|| {
                    QueryError::bad_value(format!(
                        "The value for $position must be an integer value, not of type: {}",
                        display::type_name(v)
                    ))
                })?)
            }
            "$sort" => spec.sort = Some(push_sort(v)?),
            other => {
                return Err(QueryError::bad_value(format!("Unrecognized clause in $push: {other}")));
            }
        }
    }
    Ok(spec)
}

fn push_sort(v: &Bson) -> Result<PushSort> {
    match v {
        Bson::Document(d) => {
            if d.is_empty() {
                return Err(QueryError::bad_value("The $sort pattern is empty when it should be a set of fields."));
            }
            if d.values().any(|dir| !matches!(as_f64(dir), Some(x) if x == 1.0 || x == -1.0)) {
                return Err(QueryError::bad_value("The $sort element value must be either 1 or -1"));
            }
            if d.keys().any(|k| k.is_empty() || k.starts_with('$') || k.split('.').any(str::is_empty)) {
                return Err(QueryError::bad_value("The $sort field is a dotted field but has an empty part"));
            }
            Ok(PushSort::Pattern(SortSpec::parse(d)?))
        }
        other => match as_f64(other) {
            Some(1.0) => Ok(PushSort::Whole { descending: false }),
            Some(-1.0) => Ok(PushSort::Whole { descending: true }),
            _ => Err(QueryError::bad_value(
                "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to \
                 sort embedded fields",
            )),
        },
    }
}

fn add_to_set(value: &Bson) -> Result<Vec<Bson>> {
    let Bson::Document(d) = value else {
        return Ok(vec![value.clone()]);
    };
    if d.keys().next().map(String::as_str) != Some("$each") {
        return Ok(vec![value.clone()]);
    }
    if d.len() > 1 {
        return Err(QueryError::bad_value(format!(
            "Found unexpected fields after $each in $addToSet: {}",
            display::document(d)
        )));
    }
    match d.get("$each") {
        Some(Bson::Array(a)) => Ok(a.clone()),
        Some(other) => Err(QueryError::bad_value(format!(
            "The argument to $each in $addToSet must be an array but it was of type {}",
            display::type_name(other)
        ))),
        None => Ok(Vec::new()),
    }
}

fn pop(value: &Bson) -> Result<Op> {
    match as_f64(value) {
        Some(1.0) => Ok(Op::Pop { first: false }),
        Some(-1.0) => Ok(Op::Pop { first: true }),
        _ => Err(QueryError::failed_to_parse(format!("$pop expects 1 or -1, found: {}", display::value(value)))),
    }
}

fn pull(value: &Bson) -> Result<PullCond> {
    match value {
        Bson::Document(d) => {
            let operator_object = d.keys().next().is_some_and(|k| k.starts_with('$'));
            if operator_object {
                Ok(PullCond::Wrapped(Filter::parse(&bson::doc! { "v": value.clone() })?))
            } else {
                Ok(PullCond::Object(Filter::parse(d)?))
            }
        }
        Bson::RegularExpression(_) => Ok(PullCond::Wrapped(Filter::parse(&bson::doc! { "v": value.clone() })?)),
        other => Ok(PullCond::Equal(other.clone())),
    }
}

fn is_prefix(prefix: &[String], path: &[String]) -> bool {
    prefix.len() <= path.len() && prefix.iter().zip(path).all(|(a, b)| a == b)
}

/// MongoDB 5.0's field order: numeric names numerically, then the rest lexicographically.
fn compare_paths(a: &[String], b: &[String]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let ord = compare_components(x, y);
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

fn compare_components(x: &str, y: &str) -> Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match (numeric(x), numeric(y)) {
        (true, true) => {
            let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        }
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.cmp(y),
    }
}

/// In sorted order, if some path is a prefix of another, it is a prefix of its successor, so
/// checking neighbours finds every conflict.
fn check_conflicts(sorted: &[(usize, FieldUpdate)]) -> Result<()> {
    for pair in sorted.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if is_prefix(&a.1.path.parts, &b.1.path.parts) {
            let later = if a.0 > b.0 { &a.1.path } else { &b.1.path };
            return Err(QueryError::new(
                ErrorCode::ConflictingUpdateOperators,
                format!("Updating the path '{}' would create a conflict at '{}'", later.dotted, a.1.path.dotted),
            ));
        }
    }
    Ok(())
}
