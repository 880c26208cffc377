//! The MongoDB wire protocol as the router speaks it: framing, OP_MSG, the OP_QUERY handshake,
//! and reply encoding. Pure byte handling: no sockets here (see [`crate::server`]).
//!
//! ```text
//!  socket bytes ──► MessageCodec ──► Frame{header, Bytes} ──► parse_request ──► Request
//!                   (frame.rs:       (whole message, one     (op_msg.rs /       │ into_command
//!                    length bounds)   allocation)             op_query.rs,      ▼
//!                                                             bson_check.rs)  Command ──► dispatch
//!                                                                                          │
//!  socket bytes ◄── ReplyKind::encode(request_id', responseTo = request_id, body) ◄────────┘
//!                   OP_MSG request  → OP_MSG reply (flags 0, one kind-0 section, no checksum)
//!                   OP_QUERY request → OP_REPLY (flags 0, cursor 0, numberReturned 1)
//!                   OP_MSG with moreToCome → no reply at all
//! ```
//!
//! Errors are values of [`WireError`]; each is either connection-fatal (framing lost, unknown
//! required flag, bad checksum, unserved opcode: log and close) or replyable (bad BSON or section
//! rules inside an intact frame: `{ok: 0, code, errmsg}` and keep the connection).
//!
//! Decisions: the OP_MSG checksum is verified when present (software crc32c, [`crc32c`]);
//! compression is never advertised, so OP_COMPRESSED closes the connection like any unserved
//! opcode; a message is at most 48,000,000 bytes and a document at most 16 MiB + 16 KiB.

pub mod bson_check;
pub mod crc32c;
pub mod error;
pub mod frame;
pub mod op_msg;
pub mod op_query;
pub mod request;

pub use error::{WireError, WireResult};
pub use frame::{Frame, Header, MessageCodec, op_code};
pub use op_msg::{OpMsg, fold_sequences};
pub use op_query::OpQuery;
pub use request::{ReplyKind, Request, parse_request};
