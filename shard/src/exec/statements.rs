//! The statements of a write command: from a kind-1 document sequence (pymongo, Java) or from the
//! array in the body (node), validated as complete BSON documents.

use bson::{Bson, Document, RawDocument};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::limits::MAX_WRITE_BATCH_SIZE;

use crate::error::{ExecError, ExecResult};
use crate::exec::Request;
use crate::exec::args::wrong_type;

/// One statement: its parsed form and, when it came from a sequence, its original bytes.
pub struct Statement {
    pub doc: Document,
    pub raw: Option<Bytes>,
}

pub fn statements(req: &Request<'_>, field: &str) -> ExecResult<Vec<Statement>> {
    let out: Vec<Statement> = if req.raw.sequence_id == field {
        req.raw
            .sequence
            .iter()
            .map(|b| {
                let doc = Document::from_reader(&mut &b[..])?;
                Ok(Statement { doc, raw: Some(b.clone()) })
            })
            .collect::<ExecResult<_>>()?
    } else {
        body_statements(&req.body, req.name(), field)?.into_iter().map(|doc| Statement { doc, raw: None }).collect()
    };
    check_batch_len(out.len())?;
    Ok(out)
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

/// Raw view of a statement when its bytes are at hand.
pub fn raw_view(s: &Statement) -> Option<&RawDocument> {
    s.raw.as_ref().and_then(|b| RawDocument::from_bytes(b).ok())
}
