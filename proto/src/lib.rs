//! Shoal's process-boundary contracts.
//!
//! Owns the `.proto` files and their generated tonic/prost code, and the types every process
//! agrees on: MongoDB error codes ([`ErrorCode`]), namespaces ([`Namespace`]), size limits, and the
//! catalog's values ([`catalog`]: shards, databases, chunks, bounds, versions, settings), the
//! readiness line servers print ([`ready`]) and the address-to-URI rule of every gRPC client
//! ([`endpoint`]), the shard members' heartbeat period ([`heartbeat`]), and the versions a
//! StaleConfig error carries ([`stale_config`]). It must not contain
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
pub mod stale_config;

pub use error_code::ErrorCode;
pub use namespace::{Namespace, NamespaceError};
pub use stale_config::StaleConfig;

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
        Self {
            code: code.code(),
            code_name: code.name().to_owned(),
            errmsg: errmsg.into(),
            stale_config: None,
            info: Default::default(),
        }
    }

    /// StaleConfig (13388) with its versions, for the router to refresh from.
    pub fn stale_config(stale: &StaleConfig) -> Self {
        Self { stale_config: Some(stale.to_wire()), ..Self::new(ErrorCode::StaleConfig, stale.to_string()) }
    }

    /// Whether this error carries `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.code()
    }
}
