//! Errors of the config service, and their one mapping to the wire ([`ConfigError`] with a MongoDB
//! code) at the gRPC edge.
//!
//! | error | code | client should |
//! |---|---|---|
//! | `NotLeader` | NotWritablePrimary 10107 | retry at `leader_addr` (or another server) |
//! | `LeaderUnreachable` | NotWritablePrimary 10107 | retry elsewhere, later |
//! | `NoQuorum` | ExceededTimeLimit 262 | report; a write's outcome is unknown |
//! | `LeaderChanged` | InterruptedDueToReplStateChange 11602 | report; outcome unknown |
//! | `NotInitialized` | NotYetInitialized 94 | wait for `--init` / retry |
//! | `MembershipInProgress` | ConflictingOperationInProgress 117 | retry later |
//! | `BadRequest` | BadValue 2 / FailedToParse 9 | fix the request |
//! | `ShuttingDown` | ShutdownInProgress 91 | retry elsewhere |
//! | `Catalog` | the catalog error's own code (e.g. ShardNotFound 70) | fix the request |
//! | `NotAMember` | NoSuchKey 4 | the member is not listed in its shard's catalog record |

use shoal_proto::ErrorCode;
use shoal_proto::config::ConfigError;

use crate::NodeId;
use crate::catalog::CatalogError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ServiceError {
    #[error("not the leader{}", leader_hint(.leader))]
    NotLeader { leader: Option<(NodeId, String)> },
    #[error("the leader, node {} at {}, is unreachable from this server (leader down or no quorum)", .leader.0, .leader.1)]
    LeaderUnreachable { leader: (NodeId, String) },
    #[error("no quorum: {what} did not complete within {waited_ms} ms")]
    NoQuorum { what: &'static str, waited_ms: u64, leader: Option<(NodeId, String)> },
    #[error("leadership changed while the write was in flight; its outcome is unknown")]
    LeaderChanged { leader: Option<(NodeId, String)> },
    #[error("the config cluster is not initialized (start one server with --init)")]
    NotInitialized,
    #[error("a membership change is in progress: {0}")]
    MembershipInProgress(String),
    #[error("invalid membership change: {0}")]
    BadMembership(String),
    #[error("cannot parse request: {0}")]
    Parse(String),
    #[error("config server is shutting down: {0}")]
    ShuttingDown(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("'{member}' is not a member of shard '{shard}' in the catalog")]
    NotAMember { shard: String, member: String },
}

fn leader_hint(leader: &Option<(NodeId, String)>) -> String {
    match leader {
        Some((id, addr)) => format!("; the leader is node {id} at {addr}"),
        None => "; no leader is known (election in progress or quorum lost)".to_owned(),
    }
}

impl ServiceError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ServiceError::NotLeader { .. } | ServiceError::LeaderUnreachable { .. } => ErrorCode::NotWritablePrimary,
            ServiceError::NoQuorum { .. } => ErrorCode::ExceededTimeLimit,
            ServiceError::LeaderChanged { .. } => ErrorCode::InterruptedDueToReplStateChange,
            ServiceError::NotInitialized => ErrorCode::NotYetInitialized,
            ServiceError::MembershipInProgress(_) => ErrorCode::ConflictingOperationInProgress,
            ServiceError::BadMembership(_) => ErrorCode::BadValue,
            ServiceError::Parse(_) => ErrorCode::FailedToParse,
            ServiceError::ShuttingDown(_) => ErrorCode::ShutdownInProgress,
            ServiceError::Internal(_) => ErrorCode::InternalError,
            ServiceError::Catalog(e) => e.code(),
            ServiceError::NotAMember { .. } => ErrorCode::NoSuchKey,
        }
    }

    fn leader(&self) -> Option<&(NodeId, String)> {
        match self {
            ServiceError::NotLeader { leader }
            | ServiceError::NoQuorum { leader, .. }
            | ServiceError::LeaderChanged { leader } => leader.as_ref(),
            ServiceError::LeaderUnreachable { leader } => Some(leader),
            _ => None,
        }
    }

    pub fn to_proto(&self) -> ConfigError {
        let code = self.code();
        let (leader_id, leader_addr) = self.leader().cloned().unwrap_or_default();
        ConfigError {
            code: code.code(),
            code_name: code.name().to_owned(),
            errmsg: self.to_string(),
            leader_id,
            leader_addr,
        }
    }
}

/// Errors that stop a config server from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("raft: {0}")]
    Raft(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A metric could not be registered (a name registered twice: a bug, not input).
    #[error("metrics: {0}")]
    Metrics(String),
}
