//! What can be wrong with a received message, and what the connection does about it.
//!
//! Owns: [`WireError`] and its one mapping to a MongoDB error ([`WireError::to_command_error`]).
//!
//! Invariant: every variant is either *connection-fatal* (the frame boundary or the sender's
//! intent can no longer be trusted: we log and close, as MongoDB does for its
//! `ConnectionFatalMessageParseError` category) or *replyable* (the frame was read whole, only its
//! contents are bad: we answer `{ok: 0, code, errmsg}` and keep reading). [`WireError::is_fatal`]
//! is the only place that decides which.

use shoal_proto::ErrorCode;

use crate::error::CommandError;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed in the middle of a frame.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// `messageLength` outside `[16, 48_000_000]`: we cannot find the next frame.
    #[error("message length {0} is outside the allowed range [16, {max}]", max = shoal_proto::limits::MAX_MESSAGE_SIZE_BYTES)]
    MessageLength(i64),
    /// An opcode we do not serve (legacy opcodes removed in MongoDB 6.0, OP_COMPRESSED which we
    /// never negotiate, or garbage).
    #[error("unsupported opCode {0} (compression is never negotiated; legacy opcodes were removed in MongoDB 6.0)")]
    UnsupportedOpCode(i32),
    /// A required (low 16) OP_MSG flag bit we do not know: its meaning may change how the message
    /// must be handled (e.g. whether a reply is expected), so MongoDB closes.
    #[error("message contains illegal flags value: 0b{0:032b}")]
    IllegalOpMsgFlag(u32),
    #[error("too many document sequences in OP_MSG: more than {0}")]
    TooManyDocumentSequences(usize),
    /// The crc32c trailer disagrees with the contents: the header may be corrupt too.
    #[error("OP_MSG checksum does not match contents: got {got:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { got: u32, computed: u32 },

    /// A document (or a length prefix inside the frame) is malformed.
    #[error("{0}")]
    InvalidBson(String),
    #[error("BSON object of {size} bytes is larger than the limit of {max} bytes")]
    ObjectTooLarge { size: usize, max: usize },
    #[error("BSON object exceeds the maximum nesting depth of {0}")]
    TooDeep(usize),
    #[error("Multiple body sections in message")]
    MultipleBodies,
    #[error("OP_MSG messages must have a body")]
    MissingBody,
    #[error("Unknown section kind {0}")]
    UnknownSectionKind(u8),
    #[error("Duplicate document sequence: {0}")]
    DuplicateSequence(String),
    #[error("Duplicate field between body and document sequence {0}")]
    DuplicateField(String),
    #[error("OP_MSG requests require a $db argument")]
    MissingDb,
    #[error("$db must be a non-empty string")]
    BadDb,
    #[error("bad numberToReturn ({0}) for $cmd query ns - can only be 1 or -1")]
    BadNumberToReturn(i32),
    #[error(
        "OP_QUERY is no longer supported for '{0}'. The client driver may require an upgrade. \
         For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"
    )]
    UnsupportedOpQuery(String),
}

impl WireError {
    /// True when the connection must be closed instead of answered (see the module invariant).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            WireError::Io(_)
                | WireError::MessageLength(_)
                | WireError::UnsupportedOpCode(_)
                | WireError::IllegalOpMsgFlag(_)
                | WireError::TooManyDocumentSequences(_)
                | WireError::ChecksumMismatch { .. }
        )
    }

    /// The error reply a client sees. Codes are MongoDB's; the numbered ones without a name in
    /// `error_codes.yml` are uassert locations, which MongoDB reports as `Location<code>`.
    pub fn to_command_error(&self) -> CommandError {
        let msg = self.to_string();
        match self {
            WireError::Io(_) | WireError::MessageLength(_) => CommandError::new(ErrorCode::InternalError, msg),
            WireError::UnsupportedOpCode(_) | WireError::UnsupportedOpQuery(_) => {
                CommandError::new(ErrorCode::UnsupportedOpQueryCommand, msg)
            }
            WireError::IllegalOpMsgFlag(_) => CommandError::new(ErrorCode::IllegalOpMsgFlag, msg),
            WireError::TooManyDocumentSequences(_) => CommandError::new(ErrorCode::TooManyDocumentSequences, msg),
            WireError::ChecksumMismatch { .. } => CommandError::new(ErrorCode::ChecksumMismatch, msg),
            WireError::InvalidBson(_) => CommandError::new(ErrorCode::InvalidBSON, msg),
            WireError::ObjectTooLarge { .. } => CommandError::new(ErrorCode::BSONObjectTooLarge, msg),
            WireError::TooDeep(_) => CommandError::new(ErrorCode::Overflow, msg),
            WireError::MultipleBodies => location(40430, msg),
            WireError::DuplicateSequence(_) => location(40431, msg),
            WireError::UnknownSectionKind(_) => location(40432, msg),
            WireError::DuplicateField(_) => location(40433, msg),
            WireError::MissingBody => location(40587, msg),
            WireError::MissingDb => location(40571, msg),
            WireError::BadDb => CommandError::new(ErrorCode::TypeMismatch, msg),
            WireError::BadNumberToReturn(_) => location(16979, msg),
        }
    }
}

/// MongoDB's reply for a uassert without a named code: `code: N, codeName: "LocationN"`.
fn location(code: i32, errmsg: String) -> CommandError {
    CommandError::with_code(code, format!("Location{code}"), errmsg)
}

pub type WireResult<T> = Result<T, WireError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_and_replyable_are_told_apart() {
        assert!(WireError::IllegalOpMsgFlag(4).is_fatal());
        assert!(WireError::ChecksumMismatch { got: 1, computed: 2 }.is_fatal());
        assert!(WireError::MessageLength(3).is_fatal());
        assert!(!WireError::InvalidBson("x".into()).is_fatal());
        assert!(!WireError::DuplicateSequence("documents".into()).is_fatal());
    }

    #[test]
    fn codes_are_mongodbs() {
        assert_eq!(WireError::InvalidBson("x".into()).to_command_error().code, 22);
        assert_eq!(WireError::IllegalOpMsgFlag(4).to_command_error().code, 223);
        let e = WireError::MissingDb.to_command_error();
        assert_eq!((e.code, e.code_name.as_str()), (40571, "Location40571"));
        assert_eq!(WireError::UnsupportedOpQuery("find".into()).to_command_error().code, 352);
    }
}
