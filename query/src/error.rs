//! The one error type of the query language: a MongoDB error code and a message.

use shoal_proto::ErrorCode;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    pub code: ErrorCode,
    pub message: String,
}

impl QueryError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
    pub fn bad_value(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadValue, message)
    }
    pub fn type_mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeMismatch, message)
    }
    pub fn failed_to_parse(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::FailedToParse, message)
    }
}

pub type Result<T, E = QueryError> = std::result::Result<T, E>;
