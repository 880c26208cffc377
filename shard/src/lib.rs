//! A Shoal shard: one member of a replica group that stores documents.
//!
//! Owns: the storage interface and its fjall implementation ([`storage`]), the document store with
//! its local catalog of collections, `_id`-clustered documents and oplog ([`store`]), command
//! execution against this member's [`exec::Node`] ([`exec`]) through the table of commands
//! ([`commands`]), cursors ([`cursors`]), sharding state ([`sharding`]: the collection metadata
//! cache loaded from the config servers, the shard-version check that answers StaleConfig, the
//! ownership filter that hides orphans from versioned requests, migration critical sections, and
//! the persisted range deleter), chunk migration donor/recipient with crash recovery
//! ([`migration`]), the work only a primary does with their replicated records ([`primary_only`])
//! the gRPC services routers call ([`service`], its multiplexed stream [`exchange`],
//! [`migration::service`]), the operations in progress with `currentOp`, `killOp`, `top`, the
//! profiler and the slow-query log ([`ops`]) and the process's Prometheus metrics ([`metrics`],
//! served on `metrics_listen`).
//!
//! Must not: speak the MongoDB wire protocol (that is the router's), know about other shards'
//! data, or mention the storage engine outside [`storage`]. Blocking storage work runs on the
//! blocking pool, never on the async runtime.
//!
//! ```text
//!  router --gRPC (BSON bytes)--> service --check version--> exec --> store --> storage::Engine (fjall)
//!                                   |                          \--> cursors          \--> GroupCommit (fsync)
//!                                   \--> sharding (metadata <-- config servers, gates, range deleter)
//! ```

#![forbid(unsafe_code)]

pub mod commands;
pub mod cursors;
pub mod error;
pub mod exchange;
pub mod exec;
pub mod inline;
pub mod lane;
pub mod metrics;
pub mod migration;
pub mod ops;
pub mod primary_only;
pub mod repl;
pub mod service;
pub mod sharding;
pub mod storage;
pub mod store;

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use shoal_proto::shard::migration_server::MigrationServer;
use shoal_proto::shard::replication_server::ReplicationServer;
use shoal_proto::shard::shard_server::ShardServer;

use crate::cursors::CursorManager;
use crate::exec::Node;
use crate::sharding::ShardingState;
use crate::storage::{FjallEngine, StorageError};
use crate::store::Store;

#[derive(Debug, Clone)]
pub struct ShardSettings {
    pub name: String,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Block cache of the storage engine.
    pub cache_size_bytes: u64,
    /// Cursors unused this long are killed (MongoDB's `cursorTimeoutMillis`, 10 min).
    pub cursor_idle_timeout: Duration,
    /// How often idle cursors are looked for.
    pub cursor_reap_interval: Duration,
    /// Config servers (`host:port`): where the shard reads the chunks it owns. Empty: a shard
    /// outside any cluster (tests, benchmarks), which serves unversioned requests only.
    pub config_servers: Vec<String>,
    /// Test crash points (`name=exit,...`, see [`migration::failpoint`]); empty: none.
    pub failpoints: String,
    /// This member's address as the catalog lists it (`host:port`); `None`: the listen address.
    pub advertise: Option<String>,
    pub repl: repl::ReplSettings,
    /// How often the TTL monitor looks for expired documents (MongoDB's `ttlMonitorSleepSecs`).
    pub ttl_monitor_interval: Duration,
    /// Where to serve `GET /metrics` (Prometheus text); `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
}

impl ShardSettings {
    pub fn new(name: impl Into<String>, listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            name: name.into(),
            listen,
            data_dir,
            cache_size_bytes: 256 << 20,
            cursor_idle_timeout: Duration::from_secs(600),
            cursor_reap_interval: Duration::from_secs(30),
            ttl_monitor_interval: Duration::from_secs(60),
            config_servers: Vec::new(),
            failpoints: String::new(),
            advertise: None,
            repl: repl::ReplSettings::default(),
            metrics_listen: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("metrics: {0}")]
    Metrics(#[from] shoal_telemetry::Error),
}

/// Opens the store in `config.data_dir`, with the process's metrics registry.
pub fn open_node(config: &ShardSettings) -> Result<Arc<Node>, ShardError> {
    let metrics = crate::metrics::ShardMetrics::new()?;
    let engine = FjallEngine::open(&config.data_dir.join("db"), config.cache_size_bytes)?;
    let store = Store::open(Arc::new(engine))?;
    let standalone = config.config_servers.is_empty();
    if !standalone && repl::initial_sync::interrupted(&store)? {
        tracing::warn!("an initial sync was interrupted: wiping the partial copy");
        store.wipe()?;
    }
    let sharding = ShardingState::new(config.name.clone(), &config.config_servers);
    let resumed = sharding.range_deleter.load(&store, 0)?;
    if resumed > 0 {
        tracing::info!(tasks = resumed, "resuming range deletions");
    }
    let store = Arc::new(store);
    let me = config.advertise.clone().unwrap_or_else(|| config.listen.to_string());
    let ops = ops::Ops::new(ops::Ops::host_of(&me));
    let repl = repl::Repl::new(
        config.name.clone(),
        me,
        Arc::clone(&store),
        config.repl.clone(),
        config.data_dir.join("rollback"),
        standalone,
        metrics.repl.clone(),
    );
    let node = Arc::new(Node {
        store,
        cursors: CursorManager::new(config.cursor_idle_timeout),
        sharding,
        latency: Default::default(),
        repl,
        metrics,
        ops,
    });
    crate::metrics::register_pulled(&node)?;
    Ok(node)
}

/// Opens the store, serves gRPC on `config.listen` (and `/metrics` on `config.metrics_listen`, if
/// set) until `shutdown` resolves, then closes cleanly. Once listening it prints
/// `SHOAL_READY shard <addr>` on stdout (the bound address, so `--listen 127.0.0.1:0` works).
pub async fn run(config: ShardSettings, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ShardError> {
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let local = listener.local_addr()?;
    // Bound before the store opens and before ready: a taken port fails the start.
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(shoal_telemetry::http::bind(addr).await?),
        None => None,
    };
    // With `--listen host:0` the member's name is the port it got.
    let mut config = config;
    config.advertise.get_or_insert_with(|| local.to_string());
    let cfg = config.clone();
    let node = tokio::task::spawn_blocking(move || open_node(&cfg)).await.map_err(std::io::Error::other)??;
    tracing::info!(name = %config.name, addr = %local, data_dir = %config.data_dir.display(), "shard listening");

    migration::failpoint::init(&config.failpoints);
    let migrations = Arc::new(migration::Migrations::new(Arc::clone(&node)));
    // Migration recovery and range deletions run while this member is primary.
    let primary_only = tokio::spawn(primary_only::run(Arc::clone(&node), Arc::clone(&migrations)));
    let background = tokio::spawn(background_tasks(Arc::clone(&node), config.cursor_reap_interval));
    let ttl = tokio::spawn(ttl_monitor(Arc::clone(&node), config.ttl_monitor_interval));
    let mut repl_tasks = vec![
        tokio::spawn(repl::track_durability(Arc::clone(&node.repl))),
        tokio::spawn(repl::oplog_cap::run(Arc::clone(&node.repl))),
    ];
    let mut heartbeat_thread = None;
    if !config.config_servers.is_empty() {
        // Its own client, thread and runtime: heartbeats (the lease) must not wait behind catalog
        // reads or a runtime busy with writes, and give up fast.
        let settings = shoal_cluster::config_client::ClientSettings {
            rpc_timeout: config.repl.heartbeat_timeout,
            deadline: config.repl.heartbeat_timeout,
            connect_timeout: config.repl.heartbeat_timeout,
            ..Default::default()
        };
        let heartbeat = repl::heartbeat::spawn_thread(Arc::clone(&node.repl), config.config_servers.clone(), settings)?;
        heartbeat_thread = Some(heartbeat);
        repl_tasks.push(tokio::spawn(repl::fetcher::run(Arc::clone(&node.repl))));
    }
    let replication = ReplicationServer::new(repl::source::ReplicationService::new(Arc::clone(&node.repl)))
        .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES);
    let service = ShardServer::new(service::ShardService::new(Arc::clone(&node))?)
        .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES);
    let migration_service = MigrationServer::new(migration::service::MigrationService::new(migrations))
        .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES);
    // Peers authenticate as the cluster requires (and get Nagle off: it held each reply's last
    // frame ~40 ms, found by `shoal bench catalog`) before tonic sees them.
    let incoming = shoal_cluster::net::incoming(listener);
    // The metrics port stops with the gRPC server: when `shutdown` resolves, or when the server
    // ends on its own (the sender is dropped then).
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    let metrics_http = metrics_listener.map(|l| {
        let mut stop = stop.clone();
        shoal_telemetry::http::spawn(l, node.metrics.registry().clone(), axum::Router::new(), async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
    });
    announce_ready("shard", local);
    let served = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(service)
        .add_service(migration_service)
        .add_service(replication)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    drop(stop);
    if let Some(http) = metrics_http {
        // A scraper's kept-alive connection would hold a graceful stop open: cut it.
        http.abort();
    }
    background.abort();
    ttl.abort();
    primary_only.abort();
    for task in repl_tasks {
        task.abort();
    }
    if let Some(heartbeat) = heartbeat_thread {
        heartbeat.abort();
    }
    let store = Arc::clone(&node.store);
    tokio::task::spawn_blocking(move || store.shutdown()).await.map_err(std::io::Error::other)?;
    tracing::info!(name = %config.name, "shard stopped");
    served.map_err(ShardError::from)
}

/// The readiness line launchers and tests wait for.
pub fn announce_ready(role: &str, addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", shoal_proto::ready::line(role, addr));
    let _ = out.flush();
    shoal_telemetry::log::startup_done();
}

/// Deletes expired documents of TTL indexes, on the primary ([`exec::ttl`]).
async fn ttl_monitor(node: Arc<Node>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let state = node.repl.role().state;
        if state != repl::MemberState::Primary && state != repl::MemberState::Standalone {
            continue;
        }
        let store = Arc::clone(&node.store);
        match tokio::task::spawn_blocking(move || exec::ttl::pass(&store, bson::DateTime::now())).await {
            Ok(Ok(n)) if n > 0 => tracing::info!(deleted = n, "TTL monitor deleted expired documents"),
            Ok(Err(e)) => tracing::warn!(error = %e.message, "TTL pass failed; will retry"),
            _ => {}
        }
    }
}

/// Reaps idle cursors, deletes the documents of dropped collections and, on the primary, the
/// records of idle retryable-write sessions (the range deleter runs as its own task,
/// [`sharding::range_deleter::run`]).
async fn background_tasks(node: Arc<Node>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        let reaped = node.cursors.reap_idle();
        if reaped > 0 {
            tracing::info!(reaped, "killed idle cursors");
        }
        let store = Arc::clone(&node.store);
        let purge = tokio::task::spawn_blocking(move || {
            let mut total = 0;
            loop {
                match store.purge_dropped() {
                    Ok(0) => return Ok(total),
                    Ok(n) => total += n,
                    Err(e) => return Err(e),
                }
            }
        });
        match purge.await {
            Ok(Ok(n)) if n > 0 => tracing::debug!(keys = n, "purged dropped collections"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "purging dropped collections failed; will retry")
            }
            _ => {}
        }
        if node.repl.role().state == repl::MemberState::Primary
            || node.repl.role().state == repl::MemberState::Standalone
        {
            let store = Arc::clone(&node.store);
            match tokio::task::spawn_blocking(move || exec::retry::reap_idle(&store, bson::DateTime::now())).await {
                Ok(Ok(n)) if n > 0 => tracing::info!(records = n, "removed idle retryable-write sessions"),
                Ok(Err(e)) => tracing::debug!(error = %e, "reaping idle sessions failed; will retry"),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn settings(dir: &std::path::Path, metrics: SocketAddr) -> ShardSettings {
        let mut config = ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
        config.metrics_listen = Some(metrics);
        config
    }

    #[tokio::test]
    async fn a_taken_metrics_port_fails_the_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let config = settings(dir.path(), taken.local_addr().expect("addr"));
        let started = tokio::time::timeout(Duration::from_secs(30), run(config, std::future::pending())).await;
        let err = started.expect("failed at once").expect_err("the port is taken");
        assert!(err.to_string().contains("cannot listen for metrics"), "{err}");
    }

    #[tokio::test]
    async fn metrics_are_served_until_shutdown() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A free port, released for the shard to take.
        let addr = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shard = tokio::spawn(run(settings(dir.path(), addr), async {
            let _ = stopped.await;
        }));
        let mut reply = String::new();
        for _ in 0..200 {
            if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("write");
                s.read_to_string(&mut reply).await.expect("read");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("\nshoal_repl_primary 1\n"), "{reply}");
        assert!(reply.contains("shoal_command_duration_seconds"), "{reply}");
        stop.send(()).expect("running");
        let ran = tokio::time::timeout(Duration::from_secs(30), shard).await.expect("stopped").expect("task");
        assert!(ran.is_ok(), "{ran:?}");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the metrics port closed with the shard");
    }
}
