//! `insert`: documents get an `_id` (an ObjectId, first, when missing), are checked against the
//! `_id` index and stored with their oplog entries. Ordered inserts stop at the first error.

use bson::{Bson, Document, RawDocumentBuf, doc, oid::ObjectId};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::limits::MAX_BSON_OBJECT_SIZE_BYTES;

use crate::error::{ExecError, ExecResult};
use crate::exec::retry::{Outcome, Retryable};
use crate::exec::statements::{Statement, statements};
use crate::exec::{Node, Request, StatementError, WriteOutcome, args, record};
use crate::store::WriteTxn;
use crate::store::local_catalog::CollectionInfo;

pub fn run(node: &Node, req: &Request<'_>) -> ExecResult<(WriteOutcome, u64)> {
    args::check_known_fields(
        &req.body,
        "insert",
        &[
            "documents",
            "ordered",
            "bypassDocumentValidation",
            "stmtIds",
            "stmtId",
            "isTimeseriesNamespace",
            "collectionUUID",
        ],
    )?;
    let coll_name = args::collection_name(&req.body, "insert")?;
    let ns = args::namespace(req.db, &coll_name)?;
    let ordered = args::opt_bool(&req.body, "insert", "ordered")?.unwrap_or(true);
    let stmts = statements(req, "documents")?;
    let retry = Retryable::parse(&req.body, stmts.len())?;
    let ns_name = ns.to_string();
    let (outcome, seq) = node.store.write(|txn| {
        if let Some(r) = &retry
            && let Err(e) = r.begin(txn)?
        {
            return Ok(Err(e));
        }
        let (coll, _) = txn.ensure_collection(&ns, Document::new())?;
        let mut out = WriteOutcome::default();
        for (i, stmt) in stmts.iter().enumerate() {
            if let Some(r) = &retry {
                if r.executed(txn, i)?.is_some() {
                    out.n += 1;
                    continue;
                }
                txn.hold_together(true);
            }
            if let Some(o) = req.owned().filter(|_| crate::sharding::load::recording()) {
                o.note_key_of(&stmt.doc);
            }
            let mut result = insert_one(txn, &coll, stmt).map(|()| out.n += 1);
            if let (Ok(()), Some(r)) = (&result, &retry) {
                result = r.record(txn, i, &ns_name, &Outcome::Inserted).map_err(StatementError::Storage);
            }
            txn.hold_together(false);
            if record(&mut out, i, result, ordered)?.is_break() {
                break;
            }
        }
        Ok(Ok(out))
    })?;
    Ok((outcome?, seq))
}

fn insert_one(txn: &mut WriteTxn<'_>, coll: &CollectionInfo, stmt: &Statement) -> Result<(), StatementError> {
    let (id, bytes) = prepare(stmt)?;
    insert_prepared(txn, coll, &id, bytes)
}

/// Stores a document whose `_id` is known and first; DuplicateKey if the `_id` is taken.
pub fn insert_prepared(
    txn: &mut WriteTxn<'_>,
    coll: &CollectionInfo,
    id: &Bson,
    bytes: Bytes,
) -> Result<(), StatementError> {
    if txn.get(coll, id).map_err(StatementError::Storage)?.is_some() {
        return Err(duplicate_key(coll, id));
    }
    let raw = bson::RawDocument::from_bytes(&bytes).map_err(|e| StatementError::Exec(e.into(), None))?;
    txn.insert(coll, id, raw).map_err(StatementError::Storage)
}

pub fn duplicate_key(coll: &CollectionInfo, id: &Bson) -> StatementError {
    let msg =
        format!("E11000 duplicate key error collection: {} index: _id_ dup key: {{ _id: {id} }}", coll.full_name());
    StatementError::Exec(
        ExecError::new(ErrorCode::DuplicateKey, msg),
        Some(Box::new(doc! { "keyPattern": { "_id": 1 }, "keyValue": { "_id": id.clone() } })),
    )
}

/// The `_id` and the bytes to store: the statement's own bytes when `_id` is already first.
fn prepare(stmt: &Statement) -> ExecResult<(Bson, Bytes)> {
    let doc = &stmt.doc;
    validate_document(doc)?;
    match (doc.iter().next(), &stmt.raw) {
        (Some((k, id)), Some(raw)) if k == "_id" => {
            check_size(raw.len())?;
            Ok((id.clone(), raw.clone()))
        }
        _ => {
            let (id, with_id) = with_id_first(doc);
            let bytes = RawDocumentBuf::try_from(&with_id)?.into_bytes();
            check_size(bytes.len())?;
            Ok((id, Bytes::from(bytes)))
        }
    }
}

/// `doc` with its `_id` first, generating an ObjectId when it has none.
pub fn with_id_first(doc: &Document) -> (Bson, Document) {
    let id = doc.get("_id").cloned().unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    let mut out = Document::new();
    out.insert("_id", id.clone());
    for (k, v) in doc {
        if k != "_id" {
            out.insert(k.clone(), v.clone());
        }
    }
    (id, out)
}

pub fn check_size(len: usize) -> ExecResult<()> {
    if len > MAX_BSON_OBJECT_SIZE_BYTES {
        return Err(ExecError::new(
            ErrorCode::BSONObjectTooLarge,
            format!("object to insert too large. size in bytes: {len}, max size: {MAX_BSON_OBJECT_SIZE_BYTES}"),
        ));
    }
    Ok(())
}

/// Deepest nesting of a stored document (the document itself is level 1), MongoDB's limit for
/// user documents (`BSONDepth::getMaxDepthForUserStorage`: 200 less 20 kept for the system).
pub const STORED_NESTING_DEPTH_MAX: usize = 180;

/// Rules every stored document obeys: a valid `_id`, no `$`-prefixed top-level field, at most
/// [`STORED_NESTING_DEPTH_MAX`] levels.
pub fn validate_document(doc: &Document) -> ExecResult<()> {
    if let Some(id) = doc.get("_id") {
        validate_id(id)?;
    }
    if exceeds_depth(doc.values(), 1) {
        return Err(ExecError::new(
            ErrorCode::Overflow,
            format!("cannot insert document because it exceeds {STORED_NESTING_DEPTH_MAX} levels of nesting"),
        ));
    }
    if let Some(k) = doc.keys().find(|k| k.starts_with('$')) {
        return Err(ExecError::bad_value(format!("Document can't have $ prefixed field names: {k}")));
    }
    Ok(())
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

pub fn validate_id(id: &Bson) -> ExecResult<()> {
    let kind = match id {
        Bson::Array(_) => "array",
        Bson::RegularExpression(_) => "regex",
        Bson::Undefined => "undefined",
        _ => return Ok(()),
    };
    Err(ExecError::new(ErrorCode::InvalidIdField, format!("The '_id' value cannot be of type {kind}")))
}
