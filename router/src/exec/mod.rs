//! The path from a parsed client command to the shards and back, one step per module:
//!
//! ```text
//!   parse --> target --> call --> merge --> reply
//!   Read      Route      Answers  Merged    the client's reply document
//! ```
//!
//! Owns: what a read needs from its body ([`parse`]), which shards a command goes to
//! ([`target`]), the calls to them (versioned, with the StaleConfig retry, failover waits and
//! read preferences: [`call`]), combining several shards' answers ([`merge`], with the router's
//! part of a split pipeline in [`pipeline`]), the client's reply ([`reply`]), and sharded
//! writes ([`write`]).
//!
//! Must not: decide what a command means or which handler runs it (the `cmd` handlers and the
//! dispatcher do), or hold routing state (`routing` does).

pub mod call;
pub mod merge;
pub mod parse;
pub mod pipeline;
pub mod reply;
pub mod target;
pub mod write;
