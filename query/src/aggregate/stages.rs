//! The small stages: argument parsing for `$limit`, `$skip`, `$count`, `$unset`, and `$unwind`
//! and `$count` execution.
//!
//! Invariant: `$unwind` reads its path without traversing arrays (as MongoDB's
//! `Document::getNestedField` does), so `a.b` with `a` an array unwinds nothing.

use bson::{Bson, Document};

use super::DocStream;
use crate::display::{type_name, value};
use crate::error::{QueryError, Result};
use crate::projection::Projection;

/// A non-negative integral number, whatever its BSON numeric type.
fn as_u64(v: &Bson) -> Option<std::result::Result<u64, ()>> {
    match v {
        Bson::Int32(i) => Some(u64::try_from(*i).map_err(|_| ())),
        Bson::Int64(i) => Some(u64::try_from(*i).map_err(|_| ())),
        Bson::Double(f) if f.fract() == 0.0 && *f < 9.2e18 => Some(if *f < 0.0 { Err(()) } else { Ok(*f as u64) }),
        Bson::Double(_) => Some(Err(())),
        _ => None,
    }
}

pub(super) fn parse_limit(arg: &Bson) -> Result<u64> {
    match as_u64(arg) {
        // MongoDB: Location15957 and Location15958.
        None => Err(QueryError::failed_to_parse("the limit must be specified as a number")),
        Some(Ok(n)) if n > 0 => Ok(n),
        Some(_) => Err(QueryError::bad_value(format!(
            "invalid argument to $limit stage: the limit must be positive: $limit: {}",
            value(arg)
        ))),
    }
}

pub(super) fn parse_skip(arg: &Bson) -> Result<u64> {
    match as_u64(arg) {
        // MongoDB: Location15972 and Location5107200.
        None => Err(QueryError::failed_to_parse("argument to $skip stage must be a number")),
        Some(Ok(n)) => Ok(n),
        Some(Err(())) => Err(QueryError::bad_value(format!(
            "invalid argument to $skip stage: Expected a non-negative number in: $skip: {}",
            value(arg)
        ))),
    }
}

pub(super) fn parse_count(arg: &Bson) -> Result<String> {
    // MongoDB: Location40156, 40158 and 40160.
    match arg {
        Bson::String(s) if s.is_empty() => Err(QueryError::bad_value("the count field must be a non-empty string")),
        Bson::String(s) if s.starts_with('$') => {
            Err(QueryError::bad_value("the count field cannot be a $-prefixed path"))
        }
        Bson::String(s) if s.contains('.') => Err(QueryError::bad_value("the count field cannot contain '.'")),
        Bson::String(s) => Ok(s.clone()),
        _ => Err(QueryError::bad_value("the count field must be a non-empty string")),
    }
}

/// `$count`: one document `{field: n}`, or none at all for empty input (as in MongoDB).
pub(super) fn count(field: &str, input: DocStream<'_>) -> Result<Vec<Document>> {
    let mut n: i64 = 0;
    for r in input {
        r?;
        n += 1;
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let n = i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32);
    let mut out = Document::new();
    out.insert(field, n);
    Ok(vec![out])
}

/// `$documents: <expression>`: evaluated once, without a document, to an array of objects.
pub(super) fn parse_documents(arg: &Bson) -> Result<Vec<Document>> {
    let value = super::expr::Expr::parse(arg)?.eval(&Document::new())?;
    let Some(Bson::Array(items)) = value else {
        // MongoDB: Location5858203.
        return Err(QueryError::bad_value("error during $documents evaluation: an array is expected"));
    };
    items
        .into_iter()
        .map(|i| match i {
            Bson::Document(d) => Ok(d),
            other => Err(QueryError::type_mismatch(format!(
                "$documents: each element must be an object, found {}",
                type_name(&other)
            ))),
        })
        .collect()
}

pub(super) fn parse_unset(arg: &Bson) -> Result<Projection> {
    // MongoDB: Location31002 and Location31120.
    let paths = match arg {
        Bson::String(s) => vec![s.clone()],
        Bson::Array(items) => items
            .iter()
            .map(|i| match i {
                Bson::String(s) => Ok(s.clone()),
                _ => Err(QueryError::failed_to_parse(
                    "$unset specification must be a string or an array containing only string values",
                )),
            })
            .collect::<Result<_>>()?,
        _ => return Err(QueryError::failed_to_parse("$unset specification must be a string or an array")),
    };
    if paths.is_empty() {
        return Err(QueryError::failed_to_parse(
            "$unset specification must be a string or an array with at least one field",
        ));
    }
    Projection::exclusion_of(&paths)
}

pub(crate) struct Unwind {
    path: Vec<String>,
    index_field: Option<Vec<String>>,
    preserve: bool,
}

impl Unwind {
    pub(super) fn parse(arg: &Bson) -> Result<Unwind> {
        let (path, index, preserve) = match arg {
            Bson::String(p) => (p.as_str(), None, false),
            Bson::Document(d) => {
                let (mut path, mut index, mut preserve) = (None, None, false);
                for (k, v) in d {
                    match (k.as_str(), v) {
                        ("path", Bson::String(p)) => path = Some(p.as_str()),
                        // MongoDB: Location28808.
                        ("path", other) => {
                            return Err(QueryError::failed_to_parse(format!(
                                "expected a string as the path for $unwind stage, got {}",
                                type_name(other)
                            )));
                        }
                        ("includeArrayIndex", Bson::String(s)) if !s.is_empty() => index = Some(s.as_str()),
                        // MongoDB: Location28810.
                        ("includeArrayIndex", _) => {
                            return Err(QueryError::failed_to_parse(
                                "expected a non-empty string for the includeArrayIndex  option to $unwind stage",
                            ));
                        }
                        ("preserveNullAndEmptyArrays", Bson::Boolean(b)) => preserve = *b,
                        // MongoDB: Location28809.
                        ("preserveNullAndEmptyArrays", _) => {
                            return Err(QueryError::failed_to_parse(
                                "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage",
                            ));
                        }
                        // MongoDB: Location28811.
                        (other, _) => {
                            return Err(QueryError::failed_to_parse(format!(
                                "unrecognized option to $unwind stage: {other}"
                            )));
                        }
                    }
                }
                // MongoDB: Location28812.
                let path = path.ok_or_else(|| QueryError::failed_to_parse("no path specified to $unwind stage"))?;
                (path, index, preserve)
            }
            // MongoDB: Location15981.
            other => {
                return Err(QueryError::failed_to_parse(format!(
                    "expected either a string or an object as specification for $unwind stage, got {}",
                    type_name(other)
                )));
            }
        };
        let Some(stripped) = path.strip_prefix('$') else {
            // MongoDB: Location28818.
            return Err(QueryError::failed_to_parse(format!(
                "path option to $unwind stage should be prefixed with a '$': {path}"
            )));
        };
        let index_field = match index {
            // MongoDB: Location28822.
            Some(i) if i.starts_with('$') => {
                return Err(QueryError::failed_to_parse(format!(
                    "includeArrayIndex option to $unwind stage should not be prefixed with a '$': {i}"
                )));
            }
            Some(i) => Some(super::expr::parse_field_path(i)?),
            None => None,
        };
        Ok(Unwind { path: super::expr::parse_field_path(stripped)?, index_field, preserve })
    }

    pub(super) fn apply(&self, doc: Document) -> Vec<Document> {
        let with_null_index = |mut d: Document| {
            if let Some(idx) = &self.index_field {
                set_nested(&mut d, idx, Bson::Null);
            }
            d
        };
        match get_nested(&doc, &self.path) {
            Some(Bson::Array(a)) if !a.is_empty() => a
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let mut d = doc.clone();
                    set_nested(&mut d, &self.path, e.clone());
                    if let Some(idx) = &self.index_field {
                        set_nested(&mut d, idx, Bson::Int64(i as i64));
                    }
                    d
                })
                .collect(),
            Some(Bson::Array(_)) if self.preserve => {
                // An empty array is dropped from the preserved document, as MongoDB does.
                let mut d = doc;
                remove_nested(&mut d, &self.path);
                vec![with_null_index(d)]
            }
            Some(Bson::Array(_)) => Vec::new(),
            None | Some(Bson::Null) if !self.preserve => Vec::new(),
            // A non-array value unwinds to itself; null and missing survive only when preserved.
            _ => vec![with_null_index(doc)],
        }
    }
}

fn get_nested<'d>(doc: &'d Document, parts: &[String]) -> Option<&'d Bson> {
    let (first, rest) = parts.split_first()?;
    let mut cur = doc.get(first)?;
    for p in rest {
        match cur {
            Bson::Document(d) => cur = d.get(p)?,
            _ => return None,
        }
    }
    Some(cur)
}

/// Sets a dotted field, replacing non-documents on the way with documents.
pub(super) fn set_nested(doc: &mut Document, parts: &[String], v: Bson) {
    let Some((last, init)) = parts.split_last() else {
        return;
    };
    let mut cur = doc;
    for p in init {
        let slot = cur.entry(p.clone()).or_insert_with(|| Bson::Document(Document::new()));
        if !matches!(slot, Bson::Document(_)) {
            *slot = Bson::Document(Document::new());
        }
        let Bson::Document(next) = slot else { return };
        cur = next;
    }
    cur.insert(last.clone(), v);
}

fn remove_nested(doc: &mut Document, parts: &[String]) {
    let Some((last, init)) = parts.split_last() else {
        return;
    };
    let mut cur = doc;
    for p in init {
        match cur.get_mut(p) {
            Some(Bson::Document(d)) => cur = d,
            _ => return,
        }
    }
    cur.remove(last);
}
