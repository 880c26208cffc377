//! A client command as the dispatcher sees it: the kind-0 body plus any kind-1 sequences, kept
//! apart so large `documents` arrays are never copied into a rebuilt body.

use bson::RawDocumentBuf;
use bytes::Bytes;

use crate::commands::{self, Spec};
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
    /// The command name: canonical for a known command (`findAndModify` for `findandmodify`),
    /// else the body's first key as sent.
    pub name: String,
    /// The command's entry in the table; `None` for a command the router does not know.
    pub spec: Option<&'static Spec>,
    /// `$db` of OP_MSG, or the database part of OP_QUERY's `db.$cmd`.
    pub db: String,
    pub body: RawDocumentBuf,
    pub sequences: Vec<DocSequence>,
    /// The wire request id, used as the request id of tracing spans.
    pub request_id: i32,
    /// The client it runs for, passed to shards (`CommandRequest.client`); `None` for the
    /// router's own commands.
    pub client: Option<std::sync::Arc<shoal_proto::shard::ClientInfo>>,
}

impl Command {
    /// A command named by `sent` (the body's first key), its name made canonical.
    /// An alias's body is rewritten with the canonical name as its first key, so handlers and
    /// shards see one spelling (a copy only for the rare aliased request).
    pub fn new(sent: &str, db: String, body: RawDocumentBuf, sequences: Vec<DocSequence>, request_id: i32) -> Self {
        let spec = commands::lookup(sent);
        let body = match spec {
            Some(s) if s.name != sent => renamed_first_key(&body, s.name).unwrap_or(body),
            _ => body,
        };
        let name = spec.map_or_else(|| sent.to_owned(), |s| s.name.to_owned());
        Command { name, spec, db, body, sequences, request_id, client: None }
    }

    /// A command the router builds itself from `body` (its first key names it).
    pub fn internal(body: RawDocumentBuf, db: &str, request_id: i32) -> Self {
        let sent = body.iter().next().and_then(|e| e.ok()).map(|(k, _)| k.as_str().to_owned()).unwrap_or_default();
        Command::new(&sent, db.to_owned(), body, Vec::new(), request_id)
    }

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

/// `body` with its first key replaced by `name`; `None` if the body does not parse (the handler
/// then reports the bad BSON as it would have).
fn renamed_first_key(body: &RawDocumentBuf, name: &'static str) -> Option<RawDocumentBuf> {
    let key: &bson::raw::CStr = name.try_into().ok()?;
    let mut out = RawDocumentBuf::new();
    for (i, element) in body.iter().enumerate() {
        let (k, v) = element.ok()?;
        if i == 0 {
            out.append(key, v);
        } else {
            out.append(k, v);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alias_is_made_canonical_in_name_and_body() {
        let body = bson::rawdoc! { "findandmodify": "c", "query": {"_id": 1}, "remove": true };
        let cmd = Command::internal(body, "db", 1);
        assert_eq!(cmd.name, "findAndModify");
        assert_eq!(cmd.body, bson::rawdoc! { "findAndModify": "c", "query": {"_id": 1}, "remove": true });
        assert!(cmd.spec.is_some_and(|s| s.retryable));
        let unknown = Command::internal(bson::rawdoc! { "noSuchThing": 1 }, "db", 1);
        assert_eq!((unknown.name.as_str(), unknown.spec.is_none()), ("noSuchThing", true));
    }
}
