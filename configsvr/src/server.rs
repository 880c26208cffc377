//! One config server process: opens the store, starts the Raft node, serves `ConfigRaft` (peers)
//! and `Config` (clients) on one gRPC port and its Prometheus metrics ([`crate::metrics`]) on an
//! optional HTTP port, forms the cluster when told to, and stops cleanly.
//!
//! ```text
//!  run: bind (gRPC, and the metrics port if any: a taken port fails the start)
//!       -> RaftDb::open -> Raft::new(log store, state machine, network) -> register the metrics
//!       -> serve ConfigRaft + Config (+ /metrics), run the replica-group arbiter
//!       -> SHOAL_READY configsvr <addr>
//!       -> [--init] initialize the peers as voters, unless anyone already has state
//!       -> shutdown: end watch streams and /metrics, stop serving, stop Raft, final journal sync
//! ```
//!
//! Initialization rule: only a server started with `--init` may form a cluster, only the lowest id
//! of `--peers` acts on it (so a StatefulSet may give every member the same flags), and only when its
//! own store is pristine and no peer that answers within `init_probe` reports any Raft state. A
//! server that already has state never re-initializes, whatever its flags.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shoal_proto::config::MetricsRequest;
use shoal_proto::config::config_client::ConfigClient;
use shoal_proto::config::config_raft_server::ConfigRaftServer;
use shoal_proto::config::config_server::ConfigServer as ConfigApiServer;
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use shoal_telemetry::Metrics;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::arbiter::ArbiterSettings;
use crate::arbiter::task::{self as arbiter_task, Arbiter};
use crate::error::ServerError;
use crate::metrics::{self as server_metrics, ApiMetrics, PeerRpcMetrics};
use crate::raft::RaftSettings;
use crate::raft::log_store::LogStore;
use crate::raft::network::{NetworkFactory, NetworkSettings, connect_lazy};
use crate::raft::rpc::RaftRpcService;
use crate::raft::state_machine::{CatalogState, StateMachineStore};
use crate::raft::store::RaftDb;
use crate::raft::types::{Node, NodeId, Raft};
use crate::service::{ApiSettings, ConfigService};

#[derive(Debug, Clone)]
pub struct ConfigServerSettings {
    pub id: NodeId,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Every voter of a new cluster, this server included: id -> `host:port`.
    pub peers: BTreeMap<NodeId, String>,
    /// Form the cluster from `peers` if nobody has state yet.
    pub init: bool,
    pub raft: RaftSettings,
    pub network: NetworkSettings,
    pub api: ApiSettings,
    /// Replica-group failover timings.
    pub arbiter: ArbiterSettings,
    /// Largest snapshot accepted from a leader.
    pub snapshot_size_max_bytes: usize,
    /// How long `--init` waits for peers to say whether they already have state.
    pub init_probe: Duration,
    /// Longest a graceful stop waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// Where [`run`] serves `GET /metrics` (Prometheus text); `None`: no metrics port.
    pub metrics_listen: Option<SocketAddr>,
}

impl ConfigServerSettings {
    pub fn new(id: NodeId, listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            id,
            listen,
            data_dir,
            peers: BTreeMap::new(),
            init: false,
            raft: RaftSettings::default(),
            network: NetworkSettings::default(),
            api: ApiSettings::default(),
            arbiter: ArbiterSettings::default(),
            snapshot_size_max_bytes: 1 << 30,
            init_probe: Duration::from_secs(3),
            shutdown_grace: Duration::from_secs(5),
            metrics_listen: None,
        }
    }
}

/// A running config server.
pub struct ConfigServer {
    raft: Raft,
    state: Arc<CatalogState>,
    db: Arc<RaftDb>,
    addr: SocketAddr,
    stop_tx: watch::Sender<bool>,
    serve: JoinHandle<Result<(), tonic::transport::Error>>,
    init: Option<JoinHandle<()>>,
    arbiter: JoinHandle<()>,
    /// This process's registry: every metric of this server (`crate::metrics`).
    metrics: Metrics,
    /// Counts leader changes from Raft's metrics (`metrics::count_leader_changes`).
    leader_changes: JoinHandle<()>,
    shutdown_grace: Duration,
}

impl ConfigServer {
    /// Starts serving on `listener` (already bound, so tests can use port 0).
    pub async fn start(config: ConfigServerSettings, listener: TcpListener) -> Result<Self, ServerError> {
        let addr = listener.local_addr()?;
        let raft_config = config.raft.openraft_config().map_err(ServerError::Config)?;
        config.arbiter.validate().map_err(ServerError::Config)?;
        let dir = config.data_dir.join("raft");
        let db = tokio::task::spawn_blocking(move || RaftDb::open(&dir)).await.map_err(std::io::Error::other)??;
        let log_store = LogStore::new(Arc::clone(&db));
        let state_machine = StateMachineStore::new(Arc::clone(&db));
        let state = state_machine.state();
        // The handles the services count with, resolved before anything is served.
        let metrics = Metrics::new().map_err(metrics_error)?;
        let api_metrics = Arc::new(ApiMetrics::new(&metrics).map_err(metrics_error)?);
        let rpc_metrics = Arc::new(PeerRpcMetrics::new(&metrics).map_err(metrics_error)?);
        let leader_changes = server_metrics::leader_changes(&metrics).map_err(metrics_error)?;
        server_metrics::register_catalog(&metrics, &state).map_err(metrics_error)?;
        let network = NetworkFactory::new(config.id, config.network.clone());
        let raft = Raft::new(config.id, Arc::new(raft_config), network, log_store, state_machine)
            .await
            .map_err(|e| ServerError::Raft(e.to_string()))?;
        if let Err(e) = server_metrics::register_raft(&metrics, &raft) {
            if let Err(stop) = raft.shutdown().await {
                tracing::warn!(error = %stop, "raft core did not stop cleanly");
            }
            return Err(metrics_error(e));
        }

        let (stop_tx, stop_rx) = watch::channel(false);
        let leader_changes = server_metrics::count_leader_changes(&raft, leader_changes, stop_rx.clone());
        let rpc = RaftRpcService::new(
            raft.clone(),
            config.snapshot_size_max_bytes,
            config.network.snapshot_timeout,
            rpc_metrics,
        );
        let arbiter = Arbiter::new(config.arbiter.clone());
        let api = ConfigService::new(
            raft.clone(),
            Arc::clone(&state),
            config.api.clone(),
            Arc::clone(&arbiter),
            stop_rx.clone(),
            api_metrics,
        );
        let arbiter = tokio::spawn(arbiter_task::run(
            arbiter,
            raft.clone(),
            Arc::clone(&state),
            config.api.write_timeout,
            stop_rx.clone(),
        ));
        let mut stop_serving = stop_rx.clone();
        // Peers authenticate as the cluster requires (and get Nagle off) before tonic sees them.
        let incoming = shoal_cluster::net::incoming(listener);
        let serve = tokio::spawn(
            tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(
                    ConfigRaftServer::new(rpc)
                        .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
                        .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES),
                )
                .add_service(
                    ConfigApiServer::new(api)
                        .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
                        .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES),
                )
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stop_serving.wait_for(|stop| *stop).await;
                }),
        );
        tracing::info!(id = config.id, %addr, data_dir = %config.data_dir.display(), "config server listening");

        let init = config.init.then(|| tokio::spawn(initialize(raft.clone(), config.clone(), addr)));
        Ok(Self {
            raft,
            state,
            db,
            addr,
            stop_tx,
            serve,
            init,
            arbiter,
            metrics,
            leader_changes,
            shutdown_grace: config.shutdown_grace,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    pub fn state(&self) -> &Arc<CatalogState> {
        &self.state
    }

    /// This server's metrics registry (render it, or serve it with [`Self::serve_metrics`]).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Serves `GET /metrics` on `listener` until this server shuts down.
    pub fn serve_metrics(&self, listener: TcpListener) -> JoinHandle<()> {
        let mut stop = self.stop_tx.subscribe();
        shoal_telemetry::http::spawn(listener, self.metrics.clone(), axum::Router::new(), async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
    }

    /// Stops serving, stops the Raft node and syncs the store.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        let _ = self.stop_tx.send(true);
        if let Some(init) = self.init {
            init.abort();
        }
        // It may be waiting on a Raft write; Raft is about to stop, so there is nothing to finish.
        self.arbiter.abort();
        self.leader_changes.abort();
        let served = match tokio::time::timeout(self.shutdown_grace, self.serve).await {
            Ok(Ok(served)) => served.map_err(ServerError::from),
            Ok(Err(join)) => Err(ServerError::Io(std::io::Error::other(join))),
            Err(_) => {
                tracing::warn!("gRPC server did not stop within the grace period");
                Ok(())
            }
        };
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft core did not stop cleanly");
        }
        let db = self.db;
        tokio::task::spawn_blocking(move || db.shutdown()).await.map_err(std::io::Error::other)?;
        tracing::info!("config server stopped");
        served
    }
}

/// `shoal configsvr`: binds `config.listen`, prints `SHOAL_READY configsvr <addr>` once serving,
/// and runs until `shutdown` resolves.
/// With `config.metrics_listen`, also serves `GET /metrics` there until shutdown.
pub async fn run(config: ConfigServerSettings, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServerError> {
    validate(&config)?;
    let listener = TcpListener::bind(config.listen).await?;
    // Bound before anything starts, so a taken metrics port fails the start, not a background task.
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(shoal_telemetry::http::bind(addr).await?),
        None => None,
    };
    let grace = config.shutdown_grace;
    let server = ConfigServer::start(config, listener).await?;
    let metrics_http = metrics_listener.map(|listener| server.serve_metrics(listener));
    announce_ready("configsvr", server.addr());
    shutdown.await;
    let stopped = server.shutdown().await;
    if let Some(task) = metrics_http {
        // It began stopping with the server; a scraper holding a connection open cannot keep it.
        let abort = task.abort_handle();
        if tokio::time::timeout(grace, task).await.is_err() {
            tracing::warn!("the metrics port did not stop within the grace period");
            abort.abort();
        }
    }
    stopped
}

fn metrics_error(e: shoal_telemetry::Error) -> ServerError {
    ServerError::Metrics(e.to_string())
}

/// Parses `1=127.0.0.1:27019,2=127.0.0.1:27020` into id -> address.
/// The id `peers` gives `advertise` (a server started without `--id`).
pub fn id_of(peers: &BTreeMap<NodeId, String>, advertise: &str) -> Option<NodeId> {
    peers.iter().find(|(_, addr)| addr.as_str() == advertise).map(|(id, _)| *id)
}

pub fn parse_peers(s: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut peers = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (id, addr) = item.split_once('=').ok_or_else(|| format!("{item:?} is not <id>=<host:port>"))?;
        let id: NodeId = id.trim().parse().map_err(|e| format!("bad node id in {item:?}: {e}"))?;
        if id == 0 {
            return Err(format!("node ids start at 1: {item:?}"));
        }
        let addr = addr.trim();
        if addr.rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok()).is_none() {
            return Err(format!("{addr:?} is not host:port"));
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(format!("node id {id} listed twice"));
        }
    }
    if peers.is_empty() {
        return Err("no peers given".into());
    }
    Ok(peers)
}

fn validate(config: &ConfigServerSettings) -> Result<(), ServerError> {
    if config.id == 0 {
        return Err(ServerError::Config("--id must be at least 1 (0 means \"unknown\" on the wire)".into()));
    }
    if !config.peers.is_empty() && !config.peers.contains_key(&config.id) {
        return Err(ServerError::Config(format!("--peers must include this server's own id {}", config.id)));
    }
    Ok(())
}

/// The readiness line launchers and tests wait for (same convention as shards and routers).
fn announce_ready(role: &str, addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", shoal_proto::ready::line(role, addr));
    let _ = out.flush();
    shoal_telemetry::log::startup_done();
}

/// Forms the cluster if nobody has Raft state yet (see the module doc for the rule).
/// `bound` is this server's listening address (the one-node cluster's member address when there
/// are no `--peers`; `--listen` may have said port 0).
async fn initialize(raft: Raft, config: ConfigServerSettings, bound: SocketAddr) {
    match raft.is_initialized().await {
        Ok(true) => {
            tracing::info!("--init ignored: this server already belongs to a cluster");
            return;
        }
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %e, "cannot read raft state; not initializing");
            return;
        }
    }
    if let Some(first) = config.peers.keys().next()
        && *first != config.id
    {
        tracing::info!(first, "--init left to the lowest id of --peers; waiting for it to form the cluster");
        return;
    }
    let members: BTreeMap<NodeId, Node> = if config.peers.is_empty() {
        BTreeMap::from([(config.id, Node { addr: bound.to_string() })])
    } else {
        config.peers.iter().map(|(id, addr)| (*id, Node { addr: addr.clone() })).collect()
    };
    if let Some((peer, addr)) = peer_with_state(&config).await {
        tracing::info!(peer, %addr, "--init ignored: a peer already has raft state; waiting to be replicated to");
        return;
    }
    match raft.initialize(members.clone()).await {
        Ok(()) => tracing::info!(voters = ?members.keys().collect::<Vec<_>>(), "initialized the config cluster"),
        Err(e) => tracing::info!(error = %e, "cluster not initialized here (already initialized elsewhere?)"),
    }
}

/// Asks every other peer, until each has answered or `config.init_probe` ran out, whether it has
/// Raft state. Returns the first that does.
async fn peer_with_state(config: &ConfigServerSettings) -> Option<(NodeId, String)> {
    let deadline = tokio::time::Instant::now() + config.init_probe;
    let mut pending: Vec<(NodeId, String)> =
        config.peers.iter().filter(|(id, _)| **id != config.id).map(|(id, a)| (*id, a.clone())).collect();
    let mut backoff = Duration::from_millis(50);
    while !pending.is_empty() && tokio::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for (id, addr) in pending {
            let Ok(channel) = connect_lazy(&addr, config.network.connect_timeout) else {
                continue;
            };
            let mut client = ConfigClient::new(channel);
            match tokio::time::timeout(Duration::from_millis(500), client.metrics(MetricsRequest {})).await {
                Ok(Ok(reply)) => {
                    let m = reply.into_inner();
                    if m.has_log || !m.members.is_empty() {
                        return Some((id, addr));
                    }
                }
                _ => still.push((id, addr)),
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }
    if !pending.is_empty() {
        let ids: Vec<NodeId> = pending.iter().map(|(id, _)| *id).collect();
        tracing::warn!(?ids, "peers did not answer the init probe; initializing without hearing from them");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_peer_lists() {
        let peers = parse_peers("1=127.0.0.1:1, 2=localhost:2,3=[::1]:3").expect("valid list");
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&3], "[::1]:3");
        assert!(parse_peers("1=a:1,1=b:2").is_err());
        assert!(parse_peers("0=a:1").is_err());
        assert!(parse_peers("1=a").is_err());
        assert!(parse_peers("x=a:1").is_err());
        assert!(parse_peers("").is_err());
    }
}
