//! Command handlers, one file per command family. Each handler takes the parsed [`Command`] and
//! returns the reply body without `ok` (the dispatcher adds `ok: 1`), or a [`CommandError`].
//!
//! [`Command`]: crate::command::Command
//! [`CommandError`]: crate::error::CommandError

pub mod agg_output;
pub mod config_db;
pub mod crud;
pub mod cursor;
pub mod data_distribution;
pub mod ddl;
pub mod explain;
pub mod forward;
pub mod handshake;
pub mod indexes;
pub mod info;
pub mod lookup;
pub mod retryable;
pub mod routed_read;
pub mod routed_write;
pub mod shard_call;
pub mod shard_read;
pub mod sharding;
pub mod stats;
