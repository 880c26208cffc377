//! OP_MSG (opCode 2013): parsing requests, encoding replies, folding document sequences.
//!
//! Owns: the section layout and its validation rules (MongoDB `rpc/op_msg.cpp`).
//!
//! ```text
//!  header | flagBits u32 | section+ | [crc32c u32 if flagBits & checksumPresent]
//!  section = 0x00 <document>                               kind 0: the body, exactly once
//!          | 0x01 <size i32> <identifier cstring> <doc>*   kind 1: a document sequence
//! ```
//!
//! Invariants of a parsed [`OpMsg`]: exactly one body; every document (body and sequences) passed
//! [`validate`]; sequence identifiers are unique and none is also a top-level body field; each
//! sequence document is a zero-copy slice of the received frame; the checksum, if present, matched.
//! Replies are always flags 0, one kind-0 section, no checksum (pymongo and node reject anything
//! else), so we never stream exhaust replies even when a request allows it.

use bson::{RawArrayBuf, RawDocument, RawDocumentBuf};
use bytes::{Buf, BufMut, Bytes};

use super::bson_check::validate;
use super::crc32c::crc32c;
use super::error::{WireError, WireResult};
use super::frame::{Frame, HEADER_LEN, Header, op_code};
use crate::command::DocSequence;

/// OP_MSG `flagBits`.
pub mod flags {
    pub const CHECKSUM_PRESENT: u32 = 1 << 0;
    pub const MORE_TO_COME: u32 = 1 << 1;
    pub const EXHAUST_ALLOWED: u32 = 1 << 16;
    /// The low 16 bits are "required": an unknown one set is an error. The high 16 are optional.
    pub(super) const REQUIRED_MASK: u32 = 0xFFFF;
    pub(super) const KNOWN_REQUIRED: u32 = CHECKSUM_PRESENT | MORE_TO_COME;
}

/// Most kind-1 sections one message may carry. Drivers send at most two (`ops` and `nsInfo` of
/// bulkWrite); the bound keeps the duplicate-identifier check and per-message work small.
pub const DOC_SEQUENCES_MAX: usize = 16;

const FLAGS_LEN: usize = 4;
const CHECKSUM_LEN: usize = 4;

#[derive(Debug, Clone)]
pub struct OpMsg {
    pub flags: u32,
    pub body: RawDocumentBuf,
    pub sequences: Vec<DocSequence>,
}

impl OpMsg {
    /// The sender expects no reply (w:0 writes).
    pub fn more_to_come(&self) -> bool {
        self.flags & flags::MORE_TO_COME != 0
    }

    pub fn exhaust_allowed(&self) -> bool {
        self.flags & flags::EXHAUST_ALLOWED != 0
    }

    /// Parses and validates an OP_MSG frame (see the module invariants).
    pub fn parse(frame: &Frame) -> WireResult<OpMsg> {
        let msg_flags = peek_flags(frame).ok_or_else(|| truncated("OP_MSG has no flagBits"))?;
        if msg_flags & flags::REQUIRED_MASK & !flags::KNOWN_REQUIRED != 0 {
            return Err(WireError::IllegalOpMsgFlag(msg_flags));
        }
        let bytes = &frame.bytes;
        let mut end = bytes.len();
        if msg_flags & flags::CHECKSUM_PRESENT != 0 {
            // Checked before the sections: a corrupt message must not be answered as if its
            // contents (request id, moreToCome) were what the client sent.
            end = end
                .checked_sub(CHECKSUM_LEN)
                .filter(|&e| e >= HEADER_LEN + FLAGS_LEN)
                .ok_or_else(|| truncated("OP_MSG too short for its checksum"))?;
            let got = (&bytes[end..]).get_u32_le();
            let computed = crc32c(&bytes[..end]);
            if got != computed {
                return Err(WireError::ChecksumMismatch { got, computed });
            }
        }

        let mut body: Option<RawDocumentBuf> = None;
        let mut sequences: Vec<DocSequence> = Vec::new();
        let mut pos = HEADER_LEN + FLAGS_LEN;
        while pos < end {
            let kind = bytes[pos];
            pos += 1;
            match kind {
                0 => {
                    if body.is_some() {
                        return Err(WireError::MultipleBodies);
                    }
                    let len = document_len(&bytes[pos..end])?;
                    body = Some(validate(&bytes[pos..pos + len])?.to_owned());
                    pos += len;
                }
                1 => {
                    if sequences.len() >= DOC_SEQUENCES_MAX {
                        return Err(WireError::TooManyDocumentSequences(DOC_SEQUENCES_MAX));
                    }
                    let size = section_len(&bytes[pos..end])?;
                    sequences.push(parse_sequence(bytes, pos, pos + size, &sequences)?);
                    pos += size;
                }
                other => return Err(WireError::UnknownSectionKind(other)),
            }
        }
        let body = body.ok_or(WireError::MissingBody)?;
        for seq in &sequences {
            if body.get(&seq.identifier).map_err(|e| WireError::InvalidBson(e.to_string()))?.is_some() {
                return Err(WireError::DuplicateField(seq.identifier.clone()));
            }
        }
        Ok(OpMsg { flags: msg_flags, body, sequences })
    }
}

/// The flagBits of an OP_MSG frame, without parsing anything else. Lets the caller honour
/// moreToCome even when the rest of the message is malformed.
pub fn peek_flags(frame: &Frame) -> Option<u32> {
    if frame.header.op_code != op_code::OP_MSG {
        return None;
    }
    frame.payload().get(..FLAGS_LEN).map(|mut b| b.get_u32_le())
}

fn truncated(what: &str) -> WireError {
    WireError::InvalidBson(format!("malformed OP_MSG: {what}"))
}

/// Reads a length prefix and checks the value fits in `rest`. Returns it as a usize.
fn length_prefix(rest: &[u8], min: usize, what: &str) -> WireResult<usize> {
    let Some(mut prefix) = rest.get(..4) else {
        return Err(truncated(&format!("{what} length prefix is cut off")));
    };
    let claimed = prefix.get_i32_le();
    match usize::try_from(claimed) {
        Ok(len) if len >= min && len <= rest.len() => Ok(len),
        _ => Err(truncated(&format!("{what} length {claimed} does not fit the {} bytes left", rest.len()))),
    }
}

fn document_len(rest: &[u8]) -> WireResult<usize> {
    length_prefix(rest, 5, "document")
}

/// A kind-1 section's size counts its own 4 bytes and at least the identifier's NUL.
fn section_len(rest: &[u8]) -> WireResult<usize> {
    length_prefix(rest, 5, "document sequence")
}

/// Parses the kind-1 section at `bytes[start..end]` (starting with its size).
fn parse_sequence(bytes: &Bytes, start: usize, end: usize, seen: &[DocSequence]) -> WireResult<DocSequence> {
    let ident_start = start + 4;
    let nul = bytes[ident_start..end]
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| truncated("document sequence identifier is not NUL-terminated"))?;
    let identifier = std::str::from_utf8(&bytes[ident_start..ident_start + nul])
        .map_err(|_| WireError::InvalidBson("document sequence identifier is not UTF-8".into()))?
        .to_owned();
    if seen.iter().any(|s| s.identifier == identifier) {
        return Err(WireError::DuplicateSequence(identifier));
    }
    let mut documents = Vec::new();
    let mut pos = ident_start + nul + 1;
    while pos < end {
        let len = document_len(&bytes[pos..end])?;
        validate(&bytes[pos..pos + len])?;
        documents.push(bytes.slice(pos..pos + len));
        pos += len;
    }
    Ok(DocSequence { identifier, documents })
}

/// The body with each sequence appended as an array field named by its identifier: the command
/// as a driver that sends arrays inline (node) would have written it. Copies; use it only where a
/// single document is really needed.
pub fn fold_sequences(body: &RawDocument, sequences: &[DocSequence]) -> WireResult<RawDocumentBuf> {
    let mut out = body.to_owned();
    for seq in sequences {
        if body.get(&seq.identifier).map_err(|e| WireError::InvalidBson(e.to_string()))?.is_some() {
            return Err(WireError::DuplicateField(seq.identifier.clone()));
        }
        let key: &bson::raw::CStr = seq
            .identifier
            .as_str()
            .try_into()
            .map_err(|_| WireError::InvalidBson(format!("bad sequence identifier {:?}", seq.identifier)))?;
        let mut array = RawArrayBuf::new();
        for doc in &seq.documents {
            array.push(RawDocument::from_bytes(doc).map_err(|e| WireError::InvalidBson(e.to_string()))?);
        }
        out.append(key, array);
    }
    Ok(out)
}

/// An OP_MSG reply: flags 0, one kind-0 section, no checksum.
pub fn encode_reply(request_id: i32, response_to: i32, body: &RawDocument) -> Vec<u8> {
    encode(request_id, response_to, 0, body, &[])
}

/// An OP_MSG request, for tests and tools. With `CHECKSUM_PRESENT` in `msg_flags` the crc32c
/// trailer is appended. Sequences are written before the body, as pymongo does.
pub fn encode_request(
    request_id: i32,
    msg_flags: u32,
    body: &RawDocument,
    sequences: &[(&str, Vec<&RawDocument>)],
) -> Vec<u8> {
    encode(request_id, 0, msg_flags, body, sequences)
}

fn encode(
    request_id: i32,
    response_to: i32,
    msg_flags: u32,
    body: &RawDocument,
    sequences: &[(&str, Vec<&RawDocument>)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + FLAGS_LEN + 1 + body.as_bytes().len());
    Header { message_length: 0, request_id, response_to, op_code: op_code::OP_MSG }.write(&mut out);
    out.put_u32_le(msg_flags);
    for (identifier, docs) in sequences {
        out.put_u8(1);
        let size_at = out.len();
        out.put_i32_le(0);
        out.put_slice(identifier.as_bytes());
        out.put_u8(0);
        for doc in docs {
            out.put_slice(doc.as_bytes());
        }
        let size = len_i32(out.len() - size_at);
        out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    }
    out.put_u8(0);
    out.put_slice(body.as_bytes());
    let checksum = msg_flags & flags::CHECKSUM_PRESENT != 0;
    let total = out.len() + if checksum { CHECKSUM_LEN } else { 0 };
    out[..4].copy_from_slice(&len_i32(total).to_le_bytes());
    if checksum {
        let crc = crc32c(&out);
        out.put_u32_le(crc);
    }
    out
}

/// Message lengths are `int32` on the wire. Replies are bounded far below `i32::MAX` by the size
/// check in the server, so saturating only matters for a caller that ignored it.
pub(super) fn len_i32(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

#[cfg(test)]
#[path = "op_msg_tests.rs"]
mod tests;
