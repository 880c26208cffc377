//! OP_QUERY (opCode 2004) requests and OP_REPLY (opCode 1) replies: only what the first messages
//! of a connection need (pymongo <= 4.17, node, Java 3.6 send their handshake this way).
//!
//! ```text
//!  OP_QUERY: header | flags i32 | fullCollectionName cstring ("admin.$cmd") | numberToSkip i32
//!            | numberToReturn i32 (1 or -1) | query <doc> | [returnFieldsSelector <doc>]
//!  OP_REPLY: header(responseTo = request id) | responseFlags i32 (0) | cursorID i64 (0)
//!            | startingFrom i32 (0) | numberReturned i32 (1) | <doc>
//! ```
//!
//! Owns: parsing and validating OP_QUERY and unwrapping `{$query: cmd, $readPreference: ...}`
//! (which commands OP_QUERY may carry is a fact of the command table, `commands::Spec::op_query`).
//! Errors to an OP_QUERY command go back in an OP_REPLY with flags 0 and `ok: 0` in the
//! document, as MongoDB does for `$cmd` queries.

use bson::raw::RawBsonRef;
use bson::{RawDocument, RawDocumentBuf};
use bytes::{Buf, BufMut};

use super::bson_check::validate;
use super::error::{WireError, WireResult};
use super::frame::{Frame, HEADER_LEN, Header, op_code};
use super::op_msg::len_i32;

#[derive(Debug, Clone)]
pub struct OpQuery {
    pub flags: i32,
    pub full_collection_name: String,
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: RawDocumentBuf,
}

impl OpQuery {
    /// Parses and validates an OP_QUERY frame.
    pub fn parse(frame: &Frame) -> WireResult<OpQuery> {
        let mut rest = frame.payload();
        let flags = take_i32(&mut rest)?;
        let nul =
            rest.iter().position(|&b| b == 0).ok_or_else(|| malformed("fullCollectionName is not NUL-terminated"))?;
        let full_collection_name =
            std::str::from_utf8(&rest[..nul]).map_err(|_| malformed("fullCollectionName is not UTF-8"))?.to_owned();
        rest = &rest[nul + 1..];
        let number_to_skip = take_i32(&mut rest)?;
        let number_to_return = take_i32(&mut rest)?;
        let query = take_document(&mut rest)?.to_owned();
        if !rest.is_empty() {
            // The optional returnFieldsSelector: commands ignore it, but it must be well-formed
            // and nothing may follow it.
            take_document(&mut rest)?;
            if !rest.is_empty() {
                return Err(malformed("trailing bytes after the query"));
            }
        }
        Ok(OpQuery { flags, full_collection_name, number_to_skip, number_to_return, query })
    }

    /// The database of a command query (`<db>.$cmd`), after checking this is one.
    pub fn command_db(&self) -> WireResult<&str> {
        match self.full_collection_name.strip_suffix(".$cmd") {
            Some(db) if !db.is_empty() => {
                if self.number_to_return != 1 && self.number_to_return != -1 {
                    return Err(WireError::BadNumberToReturn(self.number_to_return));
                }
                Ok(db)
            }
            // A legacy find on a collection: removed in MongoDB 6.0.
            _ => Err(WireError::UnsupportedOpQuery(format!("find on {}", self.full_collection_name))),
        }
    }

    /// The command document: `query` itself, or its `$query` (or legacy `query`) member when the
    /// driver wrapped the command to attach `$readPreference`.
    pub fn command_body(&self) -> WireResult<&RawDocument> {
        let first = self.query.iter().next().transpose().map_err(|e| WireError::InvalidBson(e.to_string()))?;
        match first {
            Some((key, RawBsonRef::Document(inner))) if key.as_str() == "$query" || key.as_str() == "query" => {
                Ok(inner)
            }
            _ => Ok(&self.query),
        }
    }
}

fn malformed(what: &str) -> WireError {
    WireError::InvalidBson(format!("malformed OP_QUERY: {what}"))
}

fn take_i32(rest: &mut &[u8]) -> WireResult<i32> {
    if rest.len() < 4 {
        return Err(malformed("message is cut off"));
    }
    Ok(rest.get_i32_le())
}

fn take_document<'a>(rest: &mut &'a [u8]) -> WireResult<&'a RawDocument> {
    let claimed = rest.get(..4).map(|mut b| b.get_i32_le()).ok_or_else(|| malformed("document is cut off"))?;
    let len = usize::try_from(claimed)
        .ok()
        .filter(|&len| len >= 5 && len <= rest.len())
        .ok_or_else(|| malformed(&format!("document length {claimed} does not fit the {} bytes left", rest.len())))?;
    let (doc, tail) = rest.split_at(len);
    *rest = tail;
    validate(doc)
}

/// An OP_REPLY carrying one document: flags 0, cursor 0, startingFrom 0, numberReturned 1.
pub fn encode_reply(request_id: i32, response_to: i32, doc: &RawDocument) -> Vec<u8> {
    let total = HEADER_LEN + 4 + 8 + 4 + 4 + doc.as_bytes().len();
    let mut out = Vec::with_capacity(total);
    Header { message_length: len_i32(total), request_id, response_to, op_code: op_code::OP_REPLY }.write(&mut out);
    out.put_i32_le(0);
    out.put_i64_le(0);
    out.put_i32_le(0);
    out.put_i32_le(1);
    out.put_slice(doc.as_bytes());
    out
}

/// An OP_QUERY request, for tests and tools.
pub fn encode_request(
    request_id: i32,
    full_collection_name: &str,
    number_to_return: i32,
    query: &RawDocument,
) -> Vec<u8> {
    let total = HEADER_LEN + 4 + full_collection_name.len() + 1 + 4 + 4 + query.as_bytes().len();
    let mut out = Vec::with_capacity(total);
    Header { message_length: len_i32(total), request_id, response_to: 0, op_code: op_code::OP_QUERY }.write(&mut out);
    out.put_i32_le(0);
    out.put_slice(full_collection_name.as_bytes());
    out.put_u8(0);
    out.put_i32_le(0);
    out.put_i32_le(number_to_return);
    out.put_slice(query.as_bytes());
    out
}

/// What a driver reads back from an OP_REPLY (used by tests and tools).
#[derive(Debug)]
pub struct ReplyView {
    pub header: Header,
    pub response_flags: i32,
    pub cursor_id: i64,
    pub starting_from: i32,
    pub number_returned: i32,
    pub document: RawDocumentBuf,
}

/// Parses an OP_REPLY holding exactly one document.
pub fn parse_reply(frame: &Frame) -> WireResult<ReplyView> {
    let mut rest = frame.payload();
    if rest.len() < 20 {
        return Err(malformed("OP_REPLY is cut off"));
    }
    let response_flags = rest.get_i32_le();
    let cursor_id = rest.get_i64_le();
    let starting_from = rest.get_i32_le();
    let number_returned = rest.get_i32_le();
    let document = take_document(&mut rest)?.to_owned();
    if !rest.is_empty() {
        return Err(malformed("trailing bytes after the reply document"));
    }
    Ok(ReplyView { header: frame.header, response_flags, cursor_id, starting_from, number_returned, document })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;
    use bytes::Bytes;

    fn frame(bytes: Vec<u8>) -> Frame {
        Frame::from_bytes(Bytes::from(bytes)).expect("well-framed")
    }

    #[test]
    fn handshake_round_trip() {
        let cmd = rawdoc! { "isMaster": 1, "client": { "driver": { "name": "x", "version": "1" } } };
        let q = OpQuery::parse(&frame(encode_request(9, "admin.$cmd", -1, &cmd))).expect("parses");
        assert_eq!(q.command_db().expect("a command"), "admin");
        assert_eq!(q.command_body().expect("body").as_bytes(), cmd.as_bytes());
        assert_eq!(q.number_to_return, -1);
    }

    #[test]
    fn dollar_query_is_unwrapped() {
        let wrapped = rawdoc! { "$query": { "ismaster": 1 }, "$readPreference": { "mode": "primary" } };
        let q = OpQuery::parse(&frame(encode_request(1, "admin.$cmd", 1, &wrapped))).expect("parses");
        assert_eq!(q.command_body().expect("body").as_bytes(), rawdoc! { "ismaster": 1 }.as_bytes());
    }

    #[test]
    fn non_command_namespaces_and_bad_number_to_return_are_refused() {
        let cmd = rawdoc! { "ismaster": 1 };
        let q = OpQuery::parse(&frame(encode_request(1, "test.coll", 1, &cmd))).expect("parses");
        assert_eq!(q.command_db().expect_err("legacy find").to_command_error().code, 352);
        let q = OpQuery::parse(&frame(encode_request(1, "admin.$cmd", 5, &cmd))).expect("parses");
        assert_eq!(q.command_db().expect_err("n=5").to_command_error().code, 16979);
    }

    #[test]
    fn reply_round_trip() {
        let doc = rawdoc! { "ismaster": true, "ok": 1.0 };
        let reply = parse_reply(&frame(encode_reply(3, 9, &doc))).expect("parses");
        assert_eq!(reply.header.response_to, 9);
        assert_eq!(reply.header.op_code, op_code::OP_REPLY);
        assert_eq!((reply.response_flags, reply.cursor_id, reply.starting_from, reply.number_returned), (0, 0, 0, 1));
        assert_eq!(reply.document, doc);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = encode_request(1, "admin.$cmd", -1, &rawdoc! { "ismaster": 1 });
        for cut in HEADER_LEN..full.len() {
            let mut bytes = full[..cut].to_vec();
            bytes[..4].copy_from_slice(&(cut as i32).to_le_bytes());
            assert!(OpQuery::parse(&frame(bytes)).is_err(), "cut at {cut}");
        }
    }
}
