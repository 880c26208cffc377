//! The rules every stored document obeys, on a parsed document (updates, the body's statements)
//! and on raw bytes (a sequence's inserts, checked without parsing). One owner of the rules: a
//! valid `_id` (no array, regex or undefined, and no `$`-prefixed field inside it but a DBRef's),
//! at most [`STORED_NESTING_DEPTH_MAX`] levels, at most 16 MiB. Other field names may start with
//! `$` or hold `.`, as MongoDB 5.0+ stores them (replacement updates refuse top-level `$` names in
//! the update language, before anything reaches here). It must not decide where `_id` goes or
//! store anything.

use bson::raw::{RawBsonRef, RawDocument, RawIter};
use bson::spec::ElementType;
use bson::{Bson, Document};
use shoal_proto::ErrorCode;
use shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES;

use crate::error::{ExecError, ExecResult};

/// Deepest nesting of a stored document (the document itself is level 1), MongoDB's limit for
/// user documents (`BSONDepth::getMaxDepthForUserStorage`: 200 less 20 kept for the system).
pub const STORED_NESTING_DEPTH_MAX: usize = 180;

pub fn check_size(len: usize) -> ExecResult<()> {
    if len > MAX_BSON_OBJECT_SIZE_BYTES {
        return Err(ExecError::new(
            ErrorCode::BSONObjectTooLarge,
            format!("object to insert too large. size in bytes: {len}, max size: {MAX_BSON_OBJECT_SIZE_BYTES}"),
        ));
    }
    Ok(())
}

/// The stored-document rules on a parsed document.
pub fn validate_document(doc: &Document) -> ExecResult<()> {
    if let Some(id) = doc.get("_id") {
        validate_id(id)?;
        if let Some(k) = dollar_key_in_id(id) {
            return Err(dollar_in_id(k));
        }
    }
    if exceeds_depth(doc.values(), 1) {
        return Err(too_deep());
    }
    Ok(())
}

/// The first `$`-prefixed field name (not a DBRef's) anywhere inside an `_id` value.
fn dollar_key_in_id(id: &Bson) -> Option<&str> {
    let mut pending = vec![id];
    while let Some(v) = pending.pop() {
        match v {
            Bson::Document(d) => {
                if let Some(k) = d.keys().find(|k| is_dollar(k)) {
                    return Some(k);
                }
                pending.extend(d.values());
            }
            Bson::Array(a) => pending.extend(a.iter()),
            _ => {}
        }
    }
    None
}

/// A `$`-prefixed name other than a DBRef's `$ref`, `$id` and `$db`.
fn is_dollar(key: &str) -> bool {
    key.starts_with('$') && !matches!(key, "$ref" | "$id" | "$db")
}

/// The stored-document rules on raw bytes, walking every element of every level once (which
/// also checks the bytes are well-formed BSON, as parsing them would: lengths, terminators, UTF-8),
/// without allocating per field. Iterative, so a hostile document cannot overflow the stack. The
/// errors rank as [`validate_document`]'s after a parse: malformed bytes, `_id`, nesting.
pub fn validate_raw(doc: &RawDocument) -> ExecResult<()> {
    let mut id_error = None;
    let mut deep = false;
    // Each level's elements, and whether the level is inside `_id`.
    let mut levels: Vec<(RawIter<'_>, bool)> = vec![(doc.iter_elements(), false)];
    while let Some((iter, in_id)) = levels.last_mut() {
        let in_id = *in_id;
        let Some(element) = iter.next() else {
            levels.pop();
            continue;
        };
        let element = element?;
        let value = element.value()?;
        let key = element.key().as_str();
        let top = levels.len() == 1;
        if top && key == "_id" {
            id_error = id_error.or(validate_id_type(element.element_type()).err());
        } else if in_id && is_dollar(key) && id_error.is_none() {
            id_error = Some(dollar_in_id(key));
        }
        let inner = match value {
            RawBsonRef::Document(d) => d.iter_elements(),
            RawBsonRef::Array(a) => a.iter_elements(),
            _ => continue,
        };
        if levels.len() + 1 > STORED_NESTING_DEPTH_MAX {
            // Too deep: not descended (its bytes were bounds-checked as one element).
            deep = true;
            continue;
        }
        levels.push((inner, in_id || (top && key == "_id")));
    }
    match (id_error, deep) {
        (Some(e), _) => Err(e),
        (None, true) => Err(too_deep()),
        (None, false) => Ok(()),
    }
}

/// Whether values at nesting `level` reach below the storage limit. Iterative over levels so a
/// hostile document cannot overflow the stack (the wire layer already caps depth at 200).
fn exceeds_depth<'a>(values: impl Iterator<Item = &'a Bson>, level: usize) -> bool {
    let mut frontier: Vec<&Bson> = values.collect();
    let mut level = level;
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for v in frontier {
            match v {
                Bson::Document(d) => next.extend(d.values()),
                Bson::Array(a) => next.extend(a.iter()),
                _ => continue,
            }
            if level + 1 > STORED_NESTING_DEPTH_MAX {
                return true;
            }
        }
        frontier = next;
        level += 1;
    }
    false
}

/// `_id` may be any type but an array, a regex or undefined (InvalidIdField).
pub fn validate_id(id: &Bson) -> ExecResult<()> {
    validate_id_type(id.element_type())
}

fn validate_id_type(t: ElementType) -> ExecResult<()> {
    match t {
        ElementType::Array => Err(bad_id("array")),
        ElementType::RegularExpression => Err(bad_id("regex")),
        ElementType::Undefined => Err(bad_id("undefined")),
        _ => Ok(()),
    }
}

fn bad_id(kind: &str) -> ExecError {
    ExecError::new(ErrorCode::InvalidIdField, format!("The '_id' value cannot be of type {kind}"))
}

fn too_deep() -> ExecError {
    ExecError::new(
        ErrorCode::Overflow,
        format!("cannot insert document because it exceeds {STORED_NESTING_DEPTH_MAX} levels of nesting"),
    )
}

fn dollar_in_id(key: &str) -> ExecError {
    ExecError::new(
        ErrorCode::DollarPrefixedFieldName,
        format!("_id fields may not contain '$'-prefixed fields: {key} is not valid for storage."),
    )
}
