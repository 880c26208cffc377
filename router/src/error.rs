//! Every failure the router reports, mapped once to MongoDB's `{ok: 0, errmsg, code, codeName}`.

use bson::{Document, doc};
use shoal_proto::ErrorCode;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {errmsg}")]
pub struct CommandError {
    pub code: i32,
    pub code_name: String,
    pub errmsg: String,
}

impl CommandError {
    /// Whether this error carries `code` (router code branches on codes through this, never on
    /// bare numbers).
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.code()
    }

    pub fn new(code: ErrorCode, errmsg: impl Into<String>) -> Self {
        Self { code: code.code(), code_name: code.name().to_owned(), errmsg: errmsg.into() }
    }

    pub fn bad_value(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadValue, errmsg)
    }

    pub fn type_mismatch(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeMismatch, errmsg)
    }

    /// The reply document a driver sees.
    pub fn to_reply(&self) -> Document {
        doc! { "ok": 0.0, "errmsg": &self.errmsg, "code": self.code, "codeName": &self.code_name }
    }
}

impl From<shoal_proto::shard::CommandError> for CommandError {
    fn from(e: shoal_proto::shard::CommandError) -> Self {
        Self { code: e.code, code_name: e.code_name, errmsg: e.errmsg }
    }
}

impl From<shoal_query::QueryError> for CommandError {
    fn from(e: shoal_query::QueryError) -> Self {
        Self::new(e.code, e.message)
    }
}

impl From<bson::error::Error> for CommandError {
    fn from(e: bson::error::Error) -> Self {
        Self::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
    }
}
