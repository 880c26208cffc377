//! `insert`: documents get an `_id` (an ObjectId, first, when missing), are checked against the
//! `_id` index and stored with their oplog entries. Ordered inserts stop at the first error. A
//! document from a sequence with its `_id` first is checked and stored without being parsed.

use bson::{Bson, Document, RawDocument, RawDocumentBuf, doc, oid::ObjectId};
use bytes::Bytes;
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::exec::retry::{self, Outcome, Retryable};
use crate::exec::statements::{Incoming, incoming};
use crate::exec::stored_doc::{check_size, validate_document, validate_raw};
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
    let stmts = incoming(req, "documents")?;
    let retry = Retryable::parse(&req.body, stmts.len())?;
    let ns_name = ns.to_string();
    let (outcome, seq) = node.store.write(|txn| {
        let began = match retry::begin(retry.as_ref(), txn)? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let (coll, _) = txn.ensure_collection(&ns, Document::new())?;
        let mut out = WriteOutcome::default();
        for (i, stmt) in stmts.iter().enumerate() {
            if let Some(r) = &began {
                if r.executed(txn, i)?.is_some() {
                    out.n += 1;
                    continue;
                }
                txn.hold_together(true);
            }
            if let Some(o) = req.owned().filter(|_| crate::sharding::load::recording())
                && let Some(doc) = parsed(stmt)
            {
                o.note_key_of(&doc);
            }
            let mut result = insert_one(txn, &coll, stmt).map(|()| out.n += 1);
            if let (Ok(()), Some(r)) = (&result, &began) {
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

fn insert_one(txn: &mut WriteTxn<'_>, coll: &CollectionInfo, stmt: &Incoming) -> Result<(), StatementError> {
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

/// The `_id` and the bytes to store. A sequence's document whose `_id` comes first is checked on
/// its bytes and stored as it came; any other is parsed and written again with `_id` first.
fn prepare(stmt: &Incoming) -> ExecResult<(Bson, Bytes)> {
    let parsed;
    let doc = match stmt {
        Incoming::Raw(bytes) => {
            let raw = RawDocument::from_bytes(bytes)?;
            validate_raw(raw)?;
            if let Some(first) = raw.iter_elements().next().transpose()?
                && first.key().as_str() == "_id"
            {
                check_size(bytes.len())?;
                return Ok((Bson::try_from(first.value()?)?, bytes.clone()));
            }
            parsed = Document::try_from(raw)?;
            &parsed
        }
        Incoming::Parsed(doc) => {
            validate_document(doc)?;
            doc
        }
    };
    let (id, with_id) = with_id_first(doc);
    let bytes = RawDocumentBuf::try_from(&with_id)?.into_bytes();
    check_size(bytes.len())?;
    Ok((id, Bytes::from(bytes)))
}

/// The statement as a parsed document, for what needs one (the load sampler's shard key).
fn parsed(stmt: &Incoming) -> Option<std::borrow::Cow<'_, Document>> {
    match stmt {
        Incoming::Raw(bytes) => Document::from_reader(&mut &bytes[..]).ok().map(std::borrow::Cow::Owned),
        Incoming::Parsed(doc) => Some(std::borrow::Cow::Borrowed(doc)),
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
