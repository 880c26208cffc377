//! The shard's one error type for command execution, carrying the MongoDB code it maps to.
//! Mapped to the wire (`shard::CommandError`) once, in [`crate::service`].

use shoal_proto::{ErrorCode, StaleConfig};
use shoal_query::QueryError;

use crate::storage::StorageError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ExecError {
    pub code: ErrorCode,
    pub message: String,
    /// The versions of a StaleConfig from the shard-version check, sent along for the router.
    pub stale_config: Option<Box<StaleConfig>>,
    /// Further fields of the error document (a duplicate key's `keyPattern`, `keyValue`).
    pub info: Option<Box<bson::Document>>,
}

impl ExecError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), stale_config: None, info: None }
    }
    pub fn stale_config(stale: StaleConfig) -> Self {
        let message = stale.to_string();
        Self { stale_config: Some(Box::new(stale)), ..Self::new(ErrorCode::StaleConfig, message) }
    }
    pub fn bad_value(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadValue, message)
    }
    pub fn type_mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeMismatch, message)
    }
    pub fn to_wire(&self) -> shoal_proto::shard::CommandError {
        match &self.stale_config {
            Some(stale) => shoal_proto::shard::CommandError::stale_config(stale),
            None => shoal_proto::shard::CommandError {
                info: self.info.as_deref().and_then(|d| d.to_vec().ok()).map(Into::into).unwrap_or_default(),
                ..shoal_proto::shard::CommandError::new(self.code, self.message.clone())
            },
        }
    }
}

impl From<QueryError> for ExecError {
    fn from(e: QueryError) -> Self {
        Self::new(e.code, e.message)
    }
}

impl From<StorageError> for ExecError {
    fn from(e: StorageError) -> Self {
        if let StorageError::NotWritable { reason } = &e {
            return Self::new(ErrorCode::NotWritablePrimary, format!("not primary: {reason}"));
        }
        if let StorageError::Rejected { code, message, info } = e {
            return Self { info: info.map(Box::new), ..Self::new(code, message) };
        }
        // Storage failures are logged where they are handled: here, at the command boundary.
        tracing::error!(error = %e, "storage failure");
        Self::new(ErrorCode::InternalError, e.to_string())
    }
}

impl From<bson::error::Error> for ExecError {
    fn from(e: bson::error::Error) -> Self {
        Self::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
    }
}

pub type ExecResult<T> = Result<T, ExecError>;
