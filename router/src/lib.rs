//! The router (`mongos`): MongoDB wire protocol in, gRPC to shards out.
//!
//! Owns: the wire-protocol server ([`wire`], [`server`]), the table of commands ([`commands`]),
//! command parsing and dispatch ([`dispatch`]), the command handlers ([`cmd`]), the path from a
//! handler to the shards and back ([`exec`]: target, call, merge, reply), where data lives
//! ([`routing`]: routing cache, channel pools by shard id, replica-group members), the router's
//! client of the cluster catalog ([`catalog`]), its counters, HTTP metrics port and live status
//! page ([`counters`], [`http`], [`status`]), router-owned cursors ([`cursors`]), retryable-write
//! labels ([`retryable`]), the process's settings ([`settings`]) and the mapping of every failure
//! to a MongoDB error reply ([`error`]).
//!
//! Must not: link the `shard` crate or touch storage; it shares only `proto` and `query` with the
//! shards. Every network call it makes has a timeout.
//!
//! ```text
//!  driver --OP_MSG/OP_QUERY--> server --Command--> dispatch --> cmd::<family>
//!                                                                   | parse
//!                                                                   v
//!                                       exec: target --> call --> merge --> reply
//!                                               |          | gRPC (bytes BSON)
//!                                            routing       v
//!                                                        shard
//! ```

#![forbid(unsafe_code)]

pub mod audit;
pub mod auth;
pub mod balancer;
pub mod catalog;
pub mod cmd;
pub mod command;
pub mod commands;
pub mod counters;
pub mod cursors;
pub mod dispatch;
pub mod error;
pub mod exec;
pub mod http;
pub mod retryable;
pub mod routing;
pub mod server;
pub mod settings;
pub mod state;
pub mod status;
pub mod wire;

pub use error::CommandError;
pub use server::run;
pub use settings::RouterSettings;
