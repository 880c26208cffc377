//! Typed access to command arguments with MongoDB's error codes and messages for wrong types.

use bson::{Bson, Document};
use shoal_proto::{ErrorCode, Namespace};
use shoal_query::collation::Collation;

use crate::error::{ExecError, ExecResult};

/// `BSON field '<cmd>.<field>' is the wrong type '<t>', expected type '<want>'` (TypeMismatch):
/// [`shoal_query::args::wrong_type`] as a shard error.
pub fn wrong_type(cmd: &str, field: &str, got: &Bson, want: &str) -> ExecError {
    shoal_query::args::wrong_type(cmd, field, got, want).into()
}

pub use shoal_query::display::type_name;

pub fn opt_document<'a>(body: &'a Document, cmd: &str, field: &str) -> ExecResult<Option<&'a Document>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(other) => Err(wrong_type(cmd, field, other, "object")),
    }
}

pub fn opt_bool(body: &Document, cmd: &str, field: &str) -> ExecResult<Option<bool>> {
    Ok(shoal_query::args::flag(body, cmd, field)?)
}

/// A non-negative integer argument (skip, limit, batchSize): [`shoal_query::args::non_negative`],
/// the rule the router checks too.
pub fn opt_non_negative(body: &Document, cmd: &str, field: &str) -> ExecResult<Option<i64>> {
    Ok(shoal_query::args::non_negative(body, cmd, field)?)
}

/// A numeric argument's value (int32, int64 or double; decimals are not accepted here).
pub fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Decimal128(_) => None,
        v => shoal_query::order::number_as_f64(v),
    }
}

/// The collection name of a command whose first field names it.
pub fn collection_name(body: &Document, cmd: &str) -> ExecResult<String> {
    match body.iter().next() {
        Some((_, Bson::String(s))) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ExecError::new(
            ErrorCode::InvalidNamespace,
            format!("collection name has invalid type or is empty for command {cmd}"),
        )),
    }
}

pub fn namespace(db: &str, coll: &str) -> ExecResult<Namespace> {
    Namespace::new(db, coll).map_err(|e| ExecError::new(ErrorCode::InvalidNamespace, e.to_string()))
}

/// The `collation` of a command (or of one write statement), with MongoDB's codes for bad ones
/// (see `shoal_query::collation`).
pub fn collation(body: &Document, cmd: &str) -> ExecResult<Collation> {
    Ok(Collation::from_command(body, cmd)?)
}

/// The filter the access path is planned from: under a non-simple collation none, so the scan is
/// a full one. `_id` (and every index) keys strings in binary order, so a point read or range
/// on a string under a case-insensitive collation would miss equal strings.
pub fn planning_filter(filter: &Document, collation: Collation) -> std::borrow::Cow<'_, Document> {
    if collation.is_simple() { std::borrow::Cow::Borrowed(filter) } else { std::borrow::Cow::Owned(Document::new()) }
}

/// For commands that do not implement collations yet (`aggregate`): a valid non-simple
/// collation is refused rather than answered in binary order.
pub fn check_collation(body: &Document, cmd: &str) -> ExecResult<()> {
    if collation(body, cmd)?.is_simple() {
        return Ok(());
    }
    Err(ExecError::new(
        ErrorCode::NotImplemented,
        format!("{cmd} supports only the simple collation ({{locale: \"simple\"}}) in Shoal"),
    ))
}

/// Checks a `hint`'s type (an index name or key pattern); the planner resolves it against the
/// collection's indexes (`plan::plan`) and refuses one naming no index (BadValue), never ignores it.
pub fn check_hint(body: &Document, cmd: &str) -> ExecResult<()> {
    match body.get("hint") {
        None | Some(Bson::Null | Bson::String(_) | Bson::Document(_)) => Ok(()),
        Some(other) => Err(wrong_type(cmd, "hint", other, "object")),
    }
}

/// Arguments every command may carry (MongoDB's generic arguments), besides `$`-prefixed ones.
const GENERIC_ARGUMENTS: &[&str] = &[
    "lsid",
    "txnNumber",
    "autocommit",
    "startTransaction",
    "readConcern",
    "writeConcern",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "comment",
    "clientOperationKey",
    "databaseVersion",
    "shardVersion",
    "mayBypassWriteBlocking",
    "tracking_info",
    "usesDefaultMaxTimeMS",
    "rawData",
    "encryptionInformation",
    "help",
];

/// Refuses fields a command does not define, as MongoDB's IDL parsers do (40415), so a
/// misspelled option is an error rather than silently ignored.
pub fn check_known_fields(body: &Document, struct_name: &str, known: &[&str]) -> ExecResult<()> {
    for key in body.keys().skip(1) {
        if key.starts_with('$') || known.contains(&key.as_str()) || GENERIC_ARGUMENTS.contains(&key.as_str()) {
            continue;
        }
        return Err(ExecError::new(
            ErrorCode::Location40415,
            format!("BSON field '{struct_name}.{key}' is an unknown field."),
        ));
    }
    Ok(())
}
