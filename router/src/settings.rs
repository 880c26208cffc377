//! The router process's settings ([`RouterSettings`], from its command line): called settings so
//! "config" is left to the `config` database (`cmd::config_db`) and the config servers (the
//! cluster catalog's service, reached through `catalog::ClusterCatalogClient`).
//!
//! Must not: hold state that changes while the router runs.

use std::net::SocketAddr;
use std::time::Duration;

pub use crate::balancer::runtime::BalancerSettings;

/// Default wait before answering a failed authentication.
pub const AUTH_FAILED_DELAY_DEFAULT: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct RouterSettings {
    /// Where the wire-protocol server listens (loopback in every default).
    pub listen: SocketAddr,
    /// gRPC endpoint of the one shard this router forwards to when it has no config servers
    /// (legacy single-shard mode), e.g. `http://127.0.0.1:27101`; unused with config servers,
    /// where shards are found in the catalog.
    pub shard_endpoint: String,
    /// Bound on concurrent client connections; above it new connections are closed at once.
    pub max_connections: usize,
    /// Timeout of each gRPC call to a shard.
    pub shard_rpc_timeout: Duration,
    /// Idle router cursors are killed (and their shard cursors with them) after this long.
    pub cursor_idle_timeout: Duration,
    /// Config servers (`host:port`) holding the catalog; empty: no sharding admin commands.
    pub config_servers: Vec<String>,
    /// The balancer this router runs with config servers (only the lease holder acts).
    pub balancer: BalancerSettings,
    /// `security.authorization`: every command checks the privileges of the connection's user.
    pub authorization: bool,
    /// How long a failed authentication waits before it answers.
    pub auth_failed_delay: Duration,
    /// TLS on the client port (`net.tls.*`); `None`: plaintext only.
    pub tls: Option<crate::server::tls::ClientTls>,
}

impl RouterSettings {
    pub fn new(listen: SocketAddr, shard_endpoint: impl Into<String>) -> Self {
        Self {
            listen,
            shard_endpoint: shard_endpoint.into(),
            max_connections: 20_000,
            shard_rpc_timeout: Duration::from_secs(120),
            cursor_idle_timeout: Duration::from_secs(600),
            config_servers: Vec::new(),
            balancer: BalancerSettings::default(),
            authorization: false,
            auth_failed_delay: AUTH_FAILED_DELAY_DEFAULT,
            tls: None,
        }
    }
}
