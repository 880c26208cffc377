//! The router process's settings ([`RouterSettings`], from its command line): called settings so
//! "config" is left to the `config` database (`cmd::config_db`) and the config servers (the
//! cluster catalog's service, reached through `catalog::ClusterCatalogClient`).
//!
//! Must not: hold state that changes while the router runs.

use std::net::SocketAddr;
use std::time::Duration;

pub use crate::balancer::runtime::BalancerSettings;

/// MongoDB's default `net.maxIncomingConnections`.
pub const MAX_INCOMING_CONNECTIONS_DEFAULT: usize = 1_000_000;
pub const MESSAGE_STALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

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
    /// Bound on concurrent client connections (`net.maxIncomingConnections`); above it new
    /// connections are closed at once. The open-file limit may cap it lower.
    pub max_connections: usize,
    /// `net.listenBacklog`: connections waiting to be accepted.
    pub listen_backlog: u32,
    /// How long a client may pause in the middle of sending a message before the connection is
    /// closed (idle connections between messages are never closed).
    pub message_stall_timeout: Duration,
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
    /// `auditLog.destination`; `None`: no audit log.
    pub audit: Option<crate::audit::AuditDestination>,
    /// Where `/metrics` (and the status page) are served over HTTP; `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
}

impl RouterSettings {
    pub fn new(listen: SocketAddr, shard_endpoint: impl Into<String>) -> Self {
        Self {
            listen,
            shard_endpoint: shard_endpoint.into(),
            max_connections: MAX_INCOMING_CONNECTIONS_DEFAULT,
            listen_backlog: crate::server::system_listen_backlog(),
            message_stall_timeout: MESSAGE_STALL_TIMEOUT_DEFAULT,
            shard_rpc_timeout: Duration::from_secs(120),
            cursor_idle_timeout: Duration::from_secs(600),
            config_servers: Vec::new(),
            balancer: BalancerSettings::default(),
            authorization: false,
            auth_failed_delay: AUTH_FAILED_DELAY_DEFAULT,
            tls: None,
            audit: None,
            metrics_listen: None,
        }
    }
}
