//! State shared by every connection of one router process.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Instant;

use crate::config::RouterConfig;
use crate::cursors::CursorRegistry;
use crate::shard_client::ShardPool;

pub struct RouterState {
    pub config: RouterConfig,
    pub shards: ShardPool,
    pub cursors: CursorRegistry,
    pub started: Instant,
    /// Identifies this process in `topologyVersion`.
    pub process_id: bson::oid::ObjectId,
    pub counters: Counters,
}

/// Numbers `serverStatus` reports.
#[derive(Default)]
pub struct Counters {
    pub connections_current: AtomicI64,
    pub connections_total: AtomicU64,
    pub next_connection_id: AtomicI64,
    pub commands_total: AtomicU64,
    pub commands_failed: AtomicU64,
}

/// What a command handler knows about the connection it arrived on.
#[derive(Debug, Clone)]
pub struct ConnContext {
    pub id: i64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
}
