//! Shoal's process-boundary contracts.
//!
//! Owns the `.proto` files and their generated tonic/prost code, and the types every process
//! agrees on: MongoDB error codes ([`ErrorCode`]), namespaces ([`Namespace`]), size limits, and the
//! catalog's values ([`catalog`]: shards, databases, chunks, bounds, versions, settings), the
//! readiness line servers print ([`ready`]) and the address-to-URI rule of every gRPC client
//! ([`endpoint`]), and the shard members' heartbeat period ([`heartbeat`]). It must not contain
//! behaviour beyond the values' own rules: no I/O, no query logic. Everything here is shared by `router`, `shard` and `configsvr`, so a change here is a
//! protocol change.

#![forbid(unsafe_code)]

pub mod catalog;
pub mod endpoint;
pub mod error_code;
pub mod heartbeat;
pub mod limits;
pub mod namespace;
pub mod ready;

pub use error_code::ErrorCode;
pub use namespace::{Namespace, NamespaceError};

/// Generated code for `proto/shard.proto`.
pub mod shard {
    tonic::include_proto!("shoal.shard.v1");
}

/// Generated code for `proto/config.proto`: the config servers' Raft and client services.
pub mod config {
    tonic::include_proto!("shoal.config.v1");
}

impl shard::CommandError {
    pub fn new(code: ErrorCode, errmsg: impl Into<String>) -> Self {
        Self { code: code.code(), code_name: code.name().to_owned(), errmsg: errmsg.into() }
    }

    /// Whether this error carries `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.code()
    }
}
