//! Authentication and authorization, pure and I/O-free: what a router needs to decide who a client
//! is and what it may do, and what the config service needs to keep the role graph sound.
//!
//! - [`scram`]: SCRAM-SHA-1 and SCRAM-SHA-256 as MongoDB speaks them (credentials, the server's
//!   conversation).
//! - [`action`]: MongoDB's action types and sets of them.
//! - [`resource`]: what a command acts on and which privilege resources cover it.
//! - [`builtin`]: MongoDB's built-in roles and their privileges.
//! - [`graph`]: role inheritance, the privileges a set of roles adds up to, and the checks a
//!   change of the graph must pass.
//!
//! Must not: do I/O, hold state between calls, or know about connections: routers keep each
//! connection's authenticated user and the cache of users and roles; the config service stores them.

#![forbid(unsafe_code)]

pub mod action;
pub mod builtin;
pub mod graph;
pub mod resource;
pub mod scram;

pub use action::{Action, ActionSet};
pub use graph::Privileges;
pub use resource::Target;
