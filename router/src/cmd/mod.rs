//! Command handlers, one file per command family. Each handler takes the parsed [`Command`] and
//! returns the reply body without `ok` (the dispatcher adds `ok: 1`), or a [`CommandError`].
//!
//! [`Command`]: crate::command::Command
//! [`CommandError`]: crate::error::CommandError

pub mod config_db;
pub mod crud;
pub mod cursor;
pub mod data_distribution;
pub mod ddl;
pub mod documents;
pub mod explain;
pub mod handshake;
pub mod indexes;
pub mod info;
pub mod javascript;
pub mod operations;
pub mod profile;
pub mod sharding;
pub mod stats;
pub mod user_admin;
