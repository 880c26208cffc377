//! The `config` database as the router serves it: MongoDB's `config.*` collections answered from
//! the cluster catalog (which the config servers hold) instead of from shards. Reads in [`read`],
//! the catalog's values in MongoDB's document shapes in [`docs`], the few writes mongosh's helpers
//! make in [`write`] (docs/architecture.md, "The `config` database"). `admin.system.users` and
//! `admin.system.roles` are read the same way (users and roles are catalog values too).
//!
//! "config" in this module family means only that database: the router's own process options are
//! its settings (`crate::settings`), the servers holding the catalog its config servers.
//!
//! Must not: send anything to shards, or change the catalog other than through its commands.

pub mod docs;
pub mod read;
pub mod write;

pub use read::{aggregate, count, distinct, find, serves};

/// The database the router answers from the cluster catalog.
pub const NAME: &str = "config";
