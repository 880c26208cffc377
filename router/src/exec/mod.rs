//! The path from a parsed client command to the shards and back.
//!
//! Owns: targeting ([`target`]), calls to shards (versioned, with the StaleConfig retry, failover
//! waits and read preferences: [`call`]), combining several shards' answers ([`merge`]), the
//! router's part of a split pipeline ([`pipeline`]), shaping client replies from shard replies
//! ([`reply`]), multi-shard reads ([`read`]) and sharded writes ([`write`]).
//!
//! Must not: parse commands for dispatch or decide what a command means (the `cmd` handlers
//! do), or hold routing state (`routing` does).

pub mod call;
pub mod merge;
pub mod pipeline;
pub mod read;
pub mod reply;
pub mod target;
pub mod write;
