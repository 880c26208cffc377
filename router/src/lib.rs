//! The router (`mongos`): MongoDB wire protocol in, gRPC to shards out.
//!
//! Owns: the wire-protocol server ([`wire`], [`server`]), the table of commands ([`commands`]),
//! command parsing and dispatch ([`dispatch`], [`cmd`]), the mapping of every failure to a MongoDB error reply ([`error`]),
//! router-owned cursors ([`cursors`], [`merge_cursor`]), the gRPC channels to shards
//! ([`shard_client`]) and routing by the catalog's chunks ([`routing`], [`merge`]).
//!
//! Must not: link the `shard` crate or touch storage; it shares only `proto` and `query` with the
//! shards. Every network call it makes has a timeout.
//!
//! ```text
//!  driver --OP_MSG/OP_QUERY--> server --Command--> dispatch --> cmd::<family>
//!                                                                   | gRPC (bytes BSON)
//!                                                                   v
//!                                                             shard_client --> shard
//! ```

#![forbid(unsafe_code)]

pub mod balancer;
pub mod catalog;
pub mod cmd;
pub mod command;
pub mod commands;
pub mod cursors;
pub mod dispatch;
pub mod error;
pub mod merge;
pub mod merge_cursor;
pub mod routing;
pub mod server;
pub mod settings;
pub mod shard_client;
pub mod state;
pub mod wire;

pub use error::CommandError;
pub use server::run;
pub use settings::RouterSettings;
