//! A client command as the dispatcher sees it: the kind-0 body plus any kind-1 sequences, kept
//! apart so large `documents` arrays are never copied into a rebuilt body.

use bson::RawDocumentBuf;
use bytes::Bytes;

use crate::error::CommandError;

/// One kind-1 document sequence (OP_MSG), e.g. `documents` of an insert.
#[derive(Debug, Clone)]
pub struct DocSequence {
    pub identifier: String,
    /// Each entry is one complete BSON document, a zero-copy slice of the received frame.
    pub documents: Vec<Bytes>,
}

#[derive(Debug, Clone)]
pub struct Command {
    /// The command name: the first key of the body, as sent (e.g. `isMaster`).
    pub name: String,
    /// `$db` of OP_MSG, or the database part of OP_QUERY's `db.$cmd`.
    pub db: String,
    pub body: RawDocumentBuf,
    pub sequences: Vec<DocSequence>,
    /// The wire request id, used as the request id of tracing spans.
    pub request_id: i32,
}

impl Command {
    /// The string value of the command's first field (the collection, for CRUD commands).
    pub fn collection(&self) -> Result<&str, CommandError> {
        match self.body.iter().next() {
            Some(Ok((_, bson::raw::RawBsonRef::String(s)))) if !s.is_empty() => Ok(s),
            _ => Err(CommandError::new(
                shoal_proto::ErrorCode::InvalidNamespace,
                format!("collection name has invalid type or is empty for command {}", self.name),
            )),
        }
    }
}
