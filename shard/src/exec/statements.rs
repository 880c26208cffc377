//! The statements of a write command: from a kind-1 document sequence (pymongo, Java) or from the
//! array in the body (node). `update` and `delete` take them parsed; `insert` takes them as they
//! came ([`Incoming`]) so a sequence's bytes are checked and stored without being parsed.

use bson::{Bson, Document};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::limits::MAX_WRITE_BATCH_SIZE;

use crate::error::{ExecError, ExecResult};
use crate::exec::Request;
use crate::exec::args::wrong_type;

/// One statement as it came: a sequence's bytes, not yet parsed or checked, or a document of the
/// body's array.
pub enum Incoming {
    Raw(Bytes),
    Parsed(Document),
}

/// The statements in the field `field`, as they came (a batch of 1 to 100,000).
pub fn incoming(req: &Request<'_>, field: &str) -> ExecResult<Vec<Incoming>> {
    let out: Vec<Incoming> = if req.raw.sequence_id == field {
        req.raw.sequence.iter().map(|b| Incoming::Raw(b.clone())).collect()
    } else {
        body_statements(&req.body, req.name(), field)?.into_iter().map(Incoming::Parsed).collect()
    };
    check_batch_len(out.len())?;
    Ok(out)
}

/// The statements in the field `field`, parsed.
pub fn statements(req: &Request<'_>, field: &str) -> ExecResult<Vec<Document>> {
    incoming(req, field)?
        .into_iter()
        .map(|s| match s {
            Incoming::Raw(b) => Ok(Document::from_reader(&mut &b[..])?),
            Incoming::Parsed(doc) => Ok(doc),
        })
        .collect()
}

/// The statements a write command carries in its body (`documents`, `updates`, `deletes`): a
/// required array of documents (Location40414, TypeMismatch). `explain` checks with it too.
pub fn body_statements(body: &Document, cmd: &str, field: &str) -> ExecResult<Vec<Document>> {
    match body.get(field) {
        Some(Bson::Array(items)) => items
            .iter()
            .map(|item| match item {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(wrong_type(cmd, field, other, "object")),
            })
            .collect(),
        Some(other) => Err(wrong_type(cmd, field, other, "array")),
        None => Err(ExecError::new(
            ErrorCode::Location40414,
            format!("BSON field '{cmd}.{field}' is missing but a required field"),
        )),
    }
}

/// A write batch holds 1 to 100,000 statements (InvalidLength).
pub fn check_batch_len(n: usize) -> ExecResult<()> {
    if n == 0 || n > MAX_WRITE_BATCH_SIZE {
        return Err(ExecError::new(
            ErrorCode::InvalidLength,
            format!("Write batch sizes must be between 1 and 100000. Got {n} operations."),
        ));
    }
    Ok(())
}
