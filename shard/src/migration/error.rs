//! The migration's typed errors, and the one place they become MongoDB errors
//! ([`MigrationError::to_exec`], called where a reply is built).
//!
//! Must not: hold I/O types (a `JoinError`, a `tonic::Status`, a storage handle): the runtime
//! turns them into text where they happen, so the pure machines can carry and compare errors.

use shoal_proto::ErrorCode;

use crate::error::ExecError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MigrationError {
    #[error("another migration is in progress on this shard: {0}")]
    Busy(String),
    /// A refusal with its own MongoDB code (stale chunk, unknown shard, storage failure).
    #[error("{0}")]
    Refused(ExecError),
    /// The other shard failed or refused; the migration was aborted.
    #[error("{peer}: {message}")]
    Peer { peer: String, message: String },
    /// A blocking task of the runtime panicked or was cancelled.
    #[error("task failed: {0}")]
    Task(String),
    /// Bounded retries of a catalog read ran out.
    #[error("config servers unreachable: {0}")]
    CatalogUnreachable(String),
    #[error("catch-up did not converge in {passes} passes: writes outpace the migration")]
    NotConverged { passes: usize },
    /// In-flight writes held the critical section's entry past its bound.
    #[error("writes to {ns} did not finish within {ms} ms")]
    SectionTimeout { ns: String, ms: u64 },
    /// A restarted recipient asked for the migration's fate before the commit point.
    #[error("{recipient}: the recipient restarted during the migration and vetoed its commit")]
    Vetoed { recipient: String },
    #[error("migration {0} is not running")]
    NotRunning(String),
    /// The catalog write's answer was lost and the catalog shows it did not take effect.
    #[error("{what} commit failed: {cause}")]
    CommitFailed { what: &'static str, cause: String },
    /// Neither the catalog write's answer nor the catalog's state could be learnt.
    #[error("{what} commit outcome unknown: {cause}; {verify}")]
    CommitUnknown { what: &'static str, cause: String, verify: String },
    /// Recovery: the donor may still commit, so a recipient must ask again later.
    #[error("{donor}: the donor is still committing or settling this migration")]
    FatePending { donor: String },
}

impl MigrationError {
    pub fn refused(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Refused(ExecError::new(code, message))
    }

    /// The MongoDB error a router answers (the codes routers and drivers have always seen:
    /// 117 to retry, 96 with the cause for a failed migration).
    pub fn to_exec(&self) -> ExecError {
        let code = match self {
            MigrationError::Refused(e) => return e.clone(),
            MigrationError::Busy(_) => ErrorCode::ConflictingOperationInProgress,
            MigrationError::Task(_) | MigrationError::NotRunning(_) => ErrorCode::InternalError,
            MigrationError::CatalogUnreachable(_) => ErrorCode::HostUnreachable,
            MigrationError::SectionTimeout { .. } => ErrorCode::ExceededTimeLimit,
            MigrationError::Peer { .. }
            | MigrationError::NotConverged { .. }
            | MigrationError::Vetoed { .. }
            | MigrationError::CommitFailed { .. }
            | MigrationError::CommitUnknown { .. }
            | MigrationError::FatePending { .. } => ErrorCode::OperationFailed,
        };
        ExecError::new(code, self.to_string())
    }
}

impl From<ExecError> for MigrationError {
    fn from(e: ExecError) -> Self {
        Self::Refused(e)
    }
}

impl From<crate::storage::StorageError> for MigrationError {
    fn from(e: crate::storage::StorageError) -> Self {
        Self::Refused(e.into())
    }
}

impl From<tokio::task::JoinError> for MigrationError {
    fn from(e: tokio::task::JoinError) -> Self {
        Self::Task(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_keeps_the_code_callers_have_always_seen() {
        let code = |e: MigrationError| e.to_exec().code;
        assert_eq!(code(MigrationError::Busy("x".into())), ErrorCode::ConflictingOperationInProgress);
        assert_eq!(code(MigrationError::refused(ErrorCode::StaleConfig, "x")), ErrorCode::StaleConfig);
        assert_eq!(code(MigrationError::Peer { peer: "s1".into(), message: "x".into() }), ErrorCode::OperationFailed);
        assert_eq!(code(MigrationError::Task("x".into())), ErrorCode::InternalError);
        assert_eq!(code(MigrationError::CatalogUnreachable("x".into())), ErrorCode::HostUnreachable);
        assert_eq!(code(MigrationError::NotConverged { passes: 50 }), ErrorCode::OperationFailed);
        assert_eq!(code(MigrationError::SectionTimeout { ns: "d.c".into(), ms: 1 }), ErrorCode::ExceededTimeLimit);
        assert_eq!(code(MigrationError::Vetoed { recipient: "s1".into() }), ErrorCode::OperationFailed);
        let unknown = MigrationError::CommitUnknown { what: "migration", cause: "a".into(), verify: "b".into() };
        assert_eq!(unknown.to_exec().message, "migration commit outcome unknown: a; b");
        assert_eq!(code(unknown), ErrorCode::OperationFailed);
    }
}
