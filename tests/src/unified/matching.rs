//! The unified format's "Evaluating Matches": expected vs actual values with flexible numerics,
//! extra fields allowed only in root-level documents, and the special operators `$$exists`,
//! `$$type`, `$$unsetOrMatches`, `$$matchesEntity`, `$$lte`, `$$matchAsDocument`, `$$matchAsRoot`.
//! A mismatch is an `Err` naming the path where it was found.

use std::collections::HashMap;

use bson::{Bson, Document, spec::ElementType};

/// Values the test saved (`saveResultAsEntity`), for `$$matchesEntity`.
pub type Saved = HashMap<String, Bson>;

/// Matches `actual` against `expected`; `root` says whether a document may carry extra fields.
pub fn matches(expected: &Bson, actual: Option<&Bson>, root: bool, saved: &Saved, path: &str) -> Result<(), String> {
    if let Bson::Document(exp) = expected
        && let Some((op, arg)) = special(exp)
    {
        return operator(op, arg, actual, root, saved, path);
    }
    let Some(actual) = actual else { return Err(format!("{path}: expected {expected}, found nothing")) };
    match expected {
        Bson::Document(exp) => {
            let Bson::Document(act) = actual else {
                return Err(format!("{path}: expected document {exp}, got {actual}"));
            };
            for (k, v) in exp {
                let sub = format!("{path}.{k}");
                matches(v, act.get(k), false, saved, &sub)?;
            }
            if !root && let Some(extra) = act.keys().find(|k| !exp.contains_key(*k)) {
                return Err(format!("{path}: unexpected field {extra:?} in {act} (expected {exp})"));
            }
            Ok(())
        }
        Bson::Array(exp) => {
            let Bson::Array(act) = actual else { return Err(format!("{path}: expected array, got {actual}")) };
            if exp.len() != act.len() {
                return Err(format!("{path}: expected {} elements {expected}, got {} {actual}", exp.len(), act.len()));
            }
            for (i, (e, a)) in exp.iter().zip(act).enumerate() {
                matches(e, Some(a), false, saved, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ => match scalar_eq(expected, actual) {
            true => Ok(()),
            false => Err(format!("{path}: expected {expected:?}, got {actual:?}")),
        },
    }
}

/// Matches every element of an iterable result as a root-level document.
pub fn matches_root_list(expected: &Bson, actual: &[Bson], saved: &Saved, path: &str) -> Result<(), String> {
    let Bson::Array(exp) = expected else {
        return matches(expected, Some(&Bson::Array(actual.to_vec())), true, saved, path);
    };
    if exp.len() != actual.len() {
        return Err(format!("{path}: expected {} results {expected}, got {} {:?}", exp.len(), actual.len(), actual));
    }
    for (i, (e, a)) in exp.iter().zip(actual).enumerate() {
        matches(e, Some(a), true, saved, &format!("{path}[{i}]"))?;
    }
    Ok(())
}

fn special(doc: &Document) -> Option<(&str, &Bson)> {
    match doc.len() {
        1 => doc.iter().next().filter(|(k, _)| k.starts_with("$$")).map(|(k, v)| (k.as_str(), v)),
        _ => None,
    }
}

fn operator(op: &str, arg: &Bson, actual: Option<&Bson>, root: bool, saved: &Saved, path: &str) -> Result<(), String> {
    match op {
        "$$exists" => match (arg.as_bool().unwrap_or(true), actual.is_some()) {
            (true, true) | (false, false) => Ok(()),
            (want, _) => Err(format!("{path}: $$exists {want}, actual {actual:?}")),
        },
        "$$unsetOrMatches" => match actual {
            None => Ok(()),
            Some(_) => matches(arg, actual, root, saved, path),
        },
        "$$type" => {
            let Some(actual) = actual else { return Err(format!("{path}: $$type {arg}, found nothing")) };
            let names: Vec<&str> = match arg {
                Bson::String(s) => vec![s.as_str()],
                Bson::Array(a) => a.iter().filter_map(Bson::as_str).collect(),
                _ => return Err(format!("{path}: bad $$type argument {arg}")),
            };
            match names.contains(&type_name(actual)) || (names.contains(&"number") && is_number(actual)) {
                true => Ok(()),
                false => Err(format!("{path}: expected type {arg}, got {} ({actual})", type_name(actual))),
            }
        }
        "$$matchesEntity" => {
            let id = arg.as_str().unwrap_or_default();
            let Some(value) = saved.get(id) else { return Err(format!("{path}: no entity {id:?}")) };
            matches(value, actual, root, saved, path)
        }
        "$$lte" => match actual.and_then(as_f64).zip(as_f64(arg)) {
            Some((a, e)) if a <= e => Ok(()),
            _ => Err(format!("{path}: expected <= {arg}, got {actual:?}")),
        },
        "$$matchAsDocument" | "$$matchAsRoot" => {
            let parsed = match actual {
                Some(Bson::String(s)) if op == "$$matchAsDocument" => serde_json::from_str::<serde_json::Value>(s)
                    .ok()
                    .and_then(|v| Bson::try_from(v).ok())
                    .ok_or_else(|| format!("{path}: not a JSON document: {s}"))?,
                Some(other) => other.clone(),
                None => return Err(format!("{path}: {op}, found nothing")),
            };
            matches(arg, Some(&parsed), op == "$$matchAsRoot", saved, path)
        }
        other => Err(format!("{path}: special operator {other} not supported by the runner")),
    }
}

fn type_name(v: &Bson) -> &'static str {
    match v.element_type() {
        ElementType::Double => "double",
        ElementType::String => "string",
        ElementType::EmbeddedDocument => "object",
        ElementType::Array => "array",
        ElementType::Binary => "binData",
        ElementType::Undefined => "undefined",
        ElementType::ObjectId => "objectId",
        ElementType::Boolean => "bool",
        ElementType::DateTime => "date",
        ElementType::Null => "null",
        ElementType::RegularExpression => "regex",
        ElementType::DbPointer => "dbPointer",
        ElementType::JavaScriptCode => "javascript",
        ElementType::Symbol => "symbol",
        ElementType::JavaScriptCodeWithScope => "javascriptWithScope",
        ElementType::Int32 => "int",
        ElementType::Timestamp => "timestamp",
        ElementType::Int64 => "long",
        ElementType::Decimal128 => "decimal",
        ElementType::MinKey => "minKey",
        ElementType::MaxKey => "maxKey",
    }
}

fn is_number(v: &Bson) -> bool {
    matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
}

fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(f64::from(*i)),
        #[allow(clippy::cast_precision_loss, reason = "test values are small")]
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    }
}

/// Equality for non-container values, with 32-bit, 64-bit and double numbers equal when their
/// values are.
pub fn scalar_eq(expected: &Bson, actual: &Bson) -> bool {
    if let (Some(e), Some(a)) = (as_i64(expected), as_i64(actual)) {
        return e == a;
    }
    if let (Some(e), Some(a)) = (as_f64(expected), as_f64(actual)) {
        return e == a;
    }
    expected == actual
}

#[cfg(test)]
mod tests {
    use bson::{Bson, doc};

    use super::*;

    #[test]
    fn root_allows_extra_fields_nested_does_not() {
        let saved = Saved::new();
        let exp = Bson::Document(doc! { "x": { "y": 1 } });
        assert!(matches(&exp, Some(&Bson::Document(doc! { "x": { "y": 1_i64 }, "z": 1 })), true, &saved, "").is_ok());
        assert!(matches(&exp, Some(&Bson::Document(doc! { "x": { "y": 1, "z": 1 } })), true, &saved, "").is_err());
        let unset = Bson::Document(doc! { "a": { "$$unsetOrMatches": 2 }, "b": { "$$exists": false } });
        assert!(matches(&unset, Some(&Bson::Document(doc! {})), true, &saved, "").is_ok());
        assert!(matches(&unset, Some(&Bson::Document(doc! { "a": 2.0 })), true, &saved, "").is_ok());
        assert!(matches(&unset, Some(&Bson::Document(doc! { "a": 3, "b": 1 })), true, &saved, "").is_err());
    }
}
