//! Cutting a byte stream into whole messages: the 16-byte header and [`MessageCodec`].
//!
//! Owns: the header layout, the `messageLength` bounds, and the read buffer of a connection.
//!
//! Invariants: a [`Frame`] holds exactly `messageLength` bytes, header included, as one `Bytes`
//! (later slices of it, e.g. the documents of a kind-1 sequence, share its allocation). A length
//! outside `[HEADER_LEN, MAX_MESSAGE_SIZE_BYTES]` is an error that ends the stream: no later byte
//! can be trusted to start a message. The decoder reserves buffer space only as far as
//! [`RESERVE_AHEAD_MAX_BYTES`] beyond what has arrived, so a client that merely *claims* a 48 MB
//! message costs us no more than it sends.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use shoal_proto::limits::MAX_MESSAGE_SIZE_BYTES;
use tokio_util::codec::Decoder;

use super::error::WireError;

pub const HEADER_LEN: usize = 16;

/// How far ahead of the received bytes the decoder reserves room for a frame it has begun.
pub const RESERVE_AHEAD_MAX_BYTES: usize = 1024 * 1024;

/// Wire opcodes (MongoDB `opCode`s) this router knows by name.
pub mod op_code {
    pub const OP_REPLY: i32 = 1;
    pub const OP_QUERY: i32 = 2004;
    pub const OP_COMPRESSED: i32 = 2012;
    pub const OP_MSG: i32 = 2013;
}

/// The standard message header; all fields are little-endian `int32` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub message_length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl Header {
    /// Reads a header from the first 16 bytes of `bytes`, if there are that many.
    pub fn parse(bytes: &[u8]) -> Option<Header> {
        let mut b = bytes.get(..HEADER_LEN)?;
        Some(Header {
            message_length: b.get_i32_le(),
            request_id: b.get_i32_le(),
            response_to: b.get_i32_le(),
            op_code: b.get_i32_le(),
        })
    }

    pub fn write(&self, out: &mut impl BufMut) {
        out.put_i32_le(self.message_length);
        out.put_i32_le(self.request_id);
        out.put_i32_le(self.response_to);
        out.put_i32_le(self.op_code);
    }
}

/// One complete received message.
#[derive(Debug, Clone)]
pub struct Frame {
    pub header: Header,
    /// The whole message, header included.
    pub bytes: Bytes,
}

impl Frame {
    /// Wraps a complete message; `None` if `bytes` is not exactly one header-described message.
    pub fn from_bytes(bytes: Bytes) -> Option<Frame> {
        let header = Header::parse(&bytes)?;
        (usize::try_from(header.message_length).ok() == Some(bytes.len())).then_some(Frame { header, bytes })
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..]
    }
}

/// Decodes [`Frame`]s for `tokio_util::codec::FramedRead`. At end of stream, leftover bytes of
/// a partial frame become an I/O error (the default `decode_eof`), which is how a truncated
/// message is reported.
#[derive(Debug, Clone)]
pub struct MessageCodec {
    max_message_bytes: usize,
}

impl Default for MessageCodec {
    fn default() -> Self {
        Self { max_message_bytes: MAX_MESSAGE_SIZE_BYTES }
    }
}

impl Decoder for MessageCodec {
    type Item = Frame;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        let Some(len_bytes) = src.get(..4) else {
            return Ok(None);
        };
        let claimed = i32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let len = match usize::try_from(claimed) {
            Ok(len) if (HEADER_LEN..=self.max_message_bytes).contains(&len) => len,
            _ => return Err(WireError::MessageLength(i64::from(claimed))),
        };
        if src.len() < len {
            src.reserve((len - src.len()).min(RESERVE_AHEAD_MAX_BYTES));
            return Ok(None);
        }
        let bytes = src.split_to(len).freeze();
        let header = Header::parse(&bytes).ok_or(WireError::MessageLength(i64::from(claimed)))?;
        Ok(Some(Frame { header, bytes }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: i32, op: i32, extra: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Header { message_length: len, request_id: 7, response_to: 0, op_code: op }.write(&mut out);
        out.extend_from_slice(extra);
        out
    }

    #[test]
    fn waits_for_a_whole_frame_then_splits_exactly_one() {
        let mut codec = MessageCodec::default();
        let mut buf = BytesMut::new();
        let first = message(20, op_code::OP_MSG, &[1, 2, 3, 4]);
        let second = message(16, op_code::OP_QUERY, &[]);
        for (i, byte) in first.iter().enumerate() {
            assert!(codec.decode(&mut buf).expect("no error").is_none(), "frame complete after {i} bytes");
            buf.put_u8(*byte);
        }
        buf.extend_from_slice(&second);
        let frame = codec.decode(&mut buf).expect("ok").expect("a frame");
        assert_eq!(frame.header.request_id, 7);
        assert_eq!(frame.payload(), &[1, 2, 3, 4]);
        let frame = codec.decode(&mut buf).expect("ok").expect("a frame");
        assert_eq!(frame.header.op_code, op_code::OP_QUERY);
        assert!(buf.is_empty());
    }

    #[test]
    fn out_of_range_lengths_are_fatal() {
        let mut codec = MessageCodec::default();
        for len in [-1, 0, 15, 48_000_001, i32::MAX, i32::MIN] {
            let mut buf = BytesMut::from(&message(len, op_code::OP_MSG, &[])[..]);
            let err = codec.decode(&mut buf).expect_err("length out of range");
            assert!(err.is_fatal(), "{err}");
        }
        let mut buf = BytesMut::from(&message(48_000_000, op_code::OP_MSG, &[])[..]);
        assert!(codec.decode(&mut buf).expect("max is allowed").is_none());
        assert!(buf.capacity() < 2 * RESERVE_AHEAD_MAX_BYTES, "no 48 MB reservation up front");
    }

    #[test]
    fn truncated_stream_is_an_error_at_eof() {
        let mut codec = MessageCodec::default();
        let mut buf = BytesMut::from(&message(40, op_code::OP_MSG, &[0; 10])[..]);
        assert!(codec.decode_eof(&mut buf).is_err());
    }

    #[test]
    fn frame_from_bytes_checks_the_length() {
        assert!(Frame::from_bytes(Bytes::from(message(16, 1, &[]))).is_some());
        assert!(Frame::from_bytes(Bytes::from(message(17, 1, &[]))).is_none());
        assert!(Frame::from_bytes(Bytes::from_static(b"short")).is_none());
    }
}
