//! State shared by every connection of one router process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::auth::cache::SecurityCache;
use crate::auth::cursors::CursorOwners;
use crate::auth::session::Session;
use crate::catalog::ClusterCatalogClient;
pub use crate::counters::Counters;
use crate::cursors::CursorRegistry;
use crate::error::CommandError;
use crate::routing::TargetingStats;
use crate::routing::cache::RoutingCache;
use crate::routing::members::Members;
use crate::routing::pool::ShardPools;
use crate::settings::RouterSettings;

pub struct RouterState {
    pub settings: RouterSettings,
    /// Channels by shard id (or the legacy `--shard` pool without config servers).
    pub shards: ShardPools,
    /// Channels by member address and the groups' member status, for reads off the primary.
    pub members: Members,
    pub routing: RoutingCache,
    pub targeting: TargetingStats,
    pub cursors: CursorRegistry,
    pub catalog: ClusterCatalogClient,
    /// Users and roles, for authentication and authorization.
    pub security: SecurityCache,
    /// Who opened each cursor (with authorization enabled).
    pub cursor_owners: CursorOwners,
    /// The audit log (records nothing unless configured).
    pub audit: crate::audit::Auditor,
    pub started: Instant,
    /// Identifies this process in `topologyVersion`.
    pub process_id: bson::oid::ObjectId,
    /// This process's registry: [`Self::counters`] and the gauges read when scraped.
    pub metrics: shoal_telemetry::Metrics,
    pub counters: Counters,
    /// Wakes this router's balancer for a round now (`balancerStart`), as MongoDB's config server
    /// wakes its balancer when the balancer settings change.
    pub balancer_wake: tokio::sync::Notify,
    /// The balancer's series and its recent moves (the status page lists them).
    pub balancer_metrics: crate::balancer::metrics::BalancerMetrics,
    /// The slow-operation log's threshold (`profile`'s `slowms`, `sampleRate`).
    pub slow: crate::cmd::profile::Slow,
}

impl RouterState {
    /// Builds the state; shard channels connect lazily, so this succeeds before shards are up.
    pub async fn new(settings: RouterSettings) -> Result<Self, CommandError> {
        // With config servers, shards are found in the catalog and `--shard` is unused.
        let legacy = settings.config_servers.is_empty().then_some(settings.shard_endpoint.as_str());
        let shards = ShardPools::new(legacy, settings.shard_rpc_timeout)?;
        let cursors = CursorRegistry::new(settings.cursor_idle_timeout);
        let catalog = ClusterCatalogClient::new(&settings.config_servers);
        let members = Members::new(settings.shard_rpc_timeout);
        let audit = match &settings.audit {
            Some(destination) => crate::audit::Auditor::start(destination).await.map_err(|e| {
                CommandError::new(shoal_proto::ErrorCode::BadValue, format!("cannot open the audit log: {e}"))
            })?,
            None => crate::audit::Auditor::default(),
        };
        let metrics = shoal_telemetry::Metrics::new().map_err(metrics_error)?;
        let counters = Counters::new(&metrics).map_err(metrics_error)?;
        Ok(Self {
            settings,
            shards,
            members,
            routing: RoutingCache::default(),
            targeting: TargetingStats::default(),
            cursors,
            catalog,
            security: SecurityCache::default(),
            cursor_owners: CursorOwners::default(),
            audit,
            started: Instant::now(),
            process_id: bson::oid::ObjectId::new(),
            balancer_wake: tokio::sync::Notify::new(),
            balancer_metrics: crate::balancer::metrics::BalancerMetrics::new(&metrics).map_err(metrics_error)?,
            slow: Default::default(),
            metrics,
            counters,
        })
    }
}

/// Registering a metric fails only on a name registered twice: a defect, reported at start.
fn metrics_error(e: shoal_telemetry::Error) -> CommandError {
    CommandError::new(shoal_proto::ErrorCode::InternalError, format!("cannot register the router's metrics: {e}"))
}

/// What a command handler knows about the connection it arrived on.
#[derive(Debug, Clone)]
pub struct ConnContext {
    pub id: i64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Who the client authenticated as (shared with nothing else: the connection runs one
    /// command at a time).
    pub session: Arc<Mutex<Session>>,
    /// The subject of the client's verified TLS certificate (what MONGODB-X509 authenticates).
    pub certificate_subject: Option<String>,
    /// The driver's `application.name` from the connection's first hello.
    pub app_name: std::sync::OnceLock<String>,
    /// `peer` as text, formatted once for the client info every command carries to shards.
    address: String,
}

impl ConnContext {
    pub fn new(id: i64, peer: SocketAddr, local: SocketAddr) -> Self {
        Self {
            id,
            peer,
            local,
            session: Arc::default(),
            certificate_subject: None,
            app_name: Default::default(),
            address: peer.to_string(),
        }
    }

    /// Who runs `body`, as shards show it in `currentOp`, the profiler and the slow-query log:
    /// the connection's address, application and user, and the command's session (`lsid`).
    pub fn client_info(&self, body: &bson::RawDocument) -> Arc<shoal_proto::shard::ClientInfo> {
        let lsid = match body.get("lsid") {
            Ok(Some(bson::RawBsonRef::Document(d))) => bytes::Bytes::copy_from_slice(d.as_bytes()),
            _ => bytes::Bytes::new(),
        };
        let user = self.session().user().map(|u| format!("{}@{}", u.user, u.db)).unwrap_or_default();
        Arc::new(shoal_proto::shard::ClientInfo {
            address: self.address.clone(),
            app_name: self.app_name.get().cloned().unwrap_or_default(),
            connection_id: self.id.max(0) as u64,
            lsid,
            user,
        })
    }

    pub fn with_certificate_subject(self, subject: Option<String>) -> Self {
        Self { certificate_subject: subject, ..self }
    }

    /// The session; never hold it across an await.
    pub fn session(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }
}
