//! From a received [`Frame`] to a [`Command`] and back to reply bytes: the protocol-level rules
//! that sit between the codec and the dispatcher.
//!
//! Owns: which opcodes are served, where the command name and database come from (`$db` for
//! OP_MSG, `<db>.$cmd` for OP_QUERY), the OP_QUERY allow-list check, and the choice of reply
//! opcode (a reply always uses the request's protocol).

use bson::RawDocument;
use bytes::Bytes;

use super::error::{WireError, WireResult};
use super::frame::{Frame, op_code};
use super::op_msg::{self, OpMsg};
use super::op_query::{self, OpQuery};
use crate::command::Command;

/// A parsed request of a protocol we serve.
#[derive(Debug, Clone)]
pub enum Request {
    Msg(OpMsg),
    Query(OpQuery),
}

/// The protocol to answer in, known from the header alone so that even a request we could not
/// parse gets a reply the client can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    OpMsg,
    OpReply,
}

impl ReplyKind {
    /// `None` for opcodes we do not answer at all (the connection is closed instead).
    pub fn for_op_code(op: i32) -> Option<ReplyKind> {
        match op {
            op_code::OP_MSG => Some(ReplyKind::OpMsg),
            op_code::OP_QUERY => Some(ReplyKind::OpReply),
            _ => None,
        }
    }

    pub fn encode(self, request_id: i32, response_to: i32, body: &RawDocument) -> Bytes {
        Bytes::from(match self {
            ReplyKind::OpMsg => op_msg::encode_reply(request_id, response_to, body),
            ReplyKind::OpReply => op_query::encode_reply(request_id, response_to, body),
        })
    }
}

/// Parses a frame of any served opcode. OP_COMPRESSED is refused like any unknown opcode: we
/// never advertise `compression` in hello, so a client that sends it is not speaking our dialect.
pub fn parse_request(frame: &Frame) -> WireResult<Request> {
    match frame.header.op_code {
        op_code::OP_MSG => OpMsg::parse(frame).map(Request::Msg),
        op_code::OP_QUERY => OpQuery::parse(frame).map(Request::Query),
        other => Err(WireError::UnsupportedOpCode(other)),
    }
}

impl Request {
    /// True when the client expects no reply (OP_MSG moreToCome).
    pub fn more_to_come(&self) -> bool {
        matches!(self, Request::Msg(m) if m.more_to_come())
    }

    /// Builds the dispatcher's view of the request. `request_id` is the header's.
    pub fn into_command(self, request_id: i32) -> WireResult<Command> {
        match self {
            Request::Msg(msg) => {
                let db = match msg.body.get("$db").map_err(|e| WireError::InvalidBson(e.to_string()))? {
                    None => return Err(WireError::MissingDb),
                    Some(bson::raw::RawBsonRef::String(db)) if !db.is_empty() => db.to_owned(),
                    Some(_) => return Err(WireError::BadDb),
                };
                let name = first_key(&msg.body)?;
                Ok(Command::new(&name, db, msg.body, msg.sequences, request_id))
            }
            Request::Query(query) => {
                let db = query.command_db()?.to_owned();
                let body = query.command_body()?.to_owned();
                let name = first_key(&body)?;
                let cmd = Command::new(&name, db, body, Vec::new(), request_id);
                if !cmd.spec.is_some_and(|s| s.op_query) {
                    return Err(WireError::UnsupportedOpQuery(name));
                }
                Ok(cmd)
            }
        }
    }
}

/// The command name: the body's first key. An empty body yields `""`, which the dispatcher
/// answers with CommandNotFound, as MongoDB does.
fn first_key(body: &RawDocument) -> WireResult<String> {
    match body.iter_elements().next() {
        None => Ok(String::new()),
        Some(Ok(element)) => Ok(element.key().as_str().to_owned()),
        Some(Err(e)) => Err(WireError::InvalidBson(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn frame(bytes: Vec<u8>) -> Frame {
        Frame::from_bytes(Bytes::from(bytes)).expect("well-framed")
    }

    #[test]
    fn op_msg_becomes_a_command() {
        let body = rawdoc! { "insert": "c", "ordered": true, "$db": "test" };
        let d1 = rawdoc! { "_id": 1 };
        let bytes = op_msg::encode_request(42, 0, &body, &[("documents", vec![&d1])]);
        let cmd = parse_request(&frame(bytes)).expect("parses").into_command(42).expect("command");
        assert_eq!((cmd.name.as_str(), cmd.db.as_str(), cmd.request_id), ("insert", "test", 42));
        assert_eq!(cmd.sequences.len(), 1);
        assert_eq!(cmd.sequences[0].identifier, "documents");
    }

    #[test]
    fn op_msg_without_db_is_refused() {
        let bytes = op_msg::encode_request(1, 0, &rawdoc! { "ping": 1 }, &[]);
        let err = parse_request(&frame(bytes)).expect("parses").into_command(1).expect_err("no $db");
        assert!(matches!(err, WireError::MissingDb));
        let bytes = op_msg::encode_request(1, 0, &rawdoc! { "ping": 1, "$db": 5 }, &[]);
        let err = parse_request(&frame(bytes)).expect("parses").into_command(1).expect_err("bad $db");
        assert!(matches!(err, WireError::BadDb));
    }

    #[test]
    fn op_query_allows_only_handshake_commands() {
        for (name, allowed) in [("isMaster", true), ("getlasterror", true), ("buildinfo", true), ("find", false)] {
            let mut body = bson::RawDocumentBuf::new();
            body.append(<&bson::raw::CStr>::try_from(name).expect("valid key"), 1);
            let bytes = op_query::encode_request(1, "admin.$cmd", -1, &body);
            let result = parse_request(&frame(bytes)).expect("parses").into_command(1);
            match result {
                Ok(cmd) => assert!(allowed && cmd.db == "admin" && cmd.name.eq_ignore_ascii_case(name)),
                Err(e) => assert!(!allowed && e.to_command_error().code == 352, "{name}: {e}"),
            }
        }
    }

    #[test]
    fn compressed_and_legacy_opcodes_are_fatal() {
        for op in [op_code::OP_COMPRESSED, 2002, 2005, 1, 99] {
            let mut bytes = vec![0u8; 16];
            bytes[..4].copy_from_slice(&16i32.to_le_bytes());
            bytes[12..16].copy_from_slice(&op.to_le_bytes());
            let err = parse_request(&frame(bytes)).expect_err("not served");
            assert!(err.is_fatal());
            assert_eq!(ReplyKind::for_op_code(op), None);
        }
    }
}
