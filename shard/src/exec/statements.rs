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
    let cmd = req.name().to_owned();
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
        match req.body.get(field) {
            Some(Bson::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Bson::Document(d) => Ok(Statement { doc: d.clone(), raw: None }),
                    other => Err(wrong_type(&cmd, field, other, "object")),
                })
                .collect::<ExecResult<_>>()?,
            Some(other) => return Err(wrong_type(&cmd, field, other, "array")),
            None => {
                return Err(ExecError::new(
                    ErrorCode::Location40414,
                    format!("BSON field '{cmd}.{field}' is missing but a required field"),
                ));
            }
        }
    };
    if out.is_empty() {
        return Err(ExecError::new(
            ErrorCode::InvalidLength,
            "Write batch sizes must be between 1 and 100000. Got 0 operations.",
        ));
    }
    if out.len() > MAX_WRITE_BATCH_SIZE {
        return Err(ExecError::new(
            ErrorCode::InvalidLength,
            format!("Write batch sizes must be between 1 and 100000. Got {} operations.", out.len()),
        ));
    }
    Ok(out)
}

/// Raw view of a statement when its bytes are at hand.
pub fn raw_view(s: &Statement) -> Option<&RawDocument> {
    s.raw.as_ref().and_then(|b| RawDocument::from_bytes(b).ok())
}
