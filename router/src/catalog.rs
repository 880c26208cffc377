//! The router's client of the cluster catalog held by the config servers ([`ClusterCatalogClient`]):
//! one leader-following client (`shoal_cluster::config_client`, which speaks only `config.proto`),
//! and the mapping of its failures to MongoDB errors.
//!
//! Must not: cache (the routing cache is `routing::cache`) or answer reads of the `config`
//! database (`cmd::config_db` shapes them from what this returns).

use shoal_cluster::config_client::{self as client, ClientError, ClientSettings, ConfigClient, What};
use shoal_cluster::routing::RoutingSource;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{
    ClusterCatalogView, Collection, Command, Database, Parts, Reply, RoutingAnswer, RoutingSince, Settings, Shard,
};
use shoal_proto::config::{All, CatalogPart};

use crate::error::CommandError;

/// The router's client of the cluster catalog (`state.catalog`); without config servers every
/// call fails with NotYetInitialized.
pub struct ClusterCatalogClient {
    client: Option<ConfigClient>,
}

impl ClusterCatalogClient {
    /// `config_servers` empty: a router without a catalog (sharding commands refuse to run).
    pub fn new(config_servers: &[String]) -> Self {
        let client =
            (!config_servers.is_empty()).then(|| ConfigClient::new(config_servers.to_vec(), ClientSettings::default()));
        Self { client }
    }

    fn client(&self) -> Result<&ConfigClient, CommandError> {
        self.client.as_ref().ok_or_else(|| {
            CommandError::new(
                ErrorCode::NotYetInitialized,
                "this router has no config servers: start it with --config host:port,... (shoal up does)",
            )
        })
    }

    /// The named `parts` of the catalog at one version, confirmed current with a quorum: for the
    /// balancer and for `config.*` and admin commands that show several parts; everything else
    /// reads one value.
    pub async fn view(&self, parts: &[CatalogPart]) -> Result<ClusterCatalogView, CommandError> {
        let (view, _) = self.client()?.view(Parts::of(parts), true).await.map_err(client_error)?;
        Ok(view)
    }

    /// The shard `id`, confirmed current with a quorum.
    pub async fn shard(&self, id: &str) -> Result<Option<Shard>, CommandError> {
        self.client()?.shard(id, true).await.map_err(client_error)
    }

    /// Every shard as the answering config server has applied them (not confirmed with a
    /// quorum), with that catalog version: for following changes announced by the watch stream,
    /// which that server applied.
    pub async fn shards_applied(&self) -> Result<(Vec<Shard>, u64), CommandError> {
        self.client()?.shards(false).await.map_err(client_error)
    }

    /// Every shard, confirmed current with a quorum.
    pub async fn shards(&self) -> Result<Vec<Shard>, CommandError> {
        Ok(self.client()?.shards(true).await.map_err(client_error)?.0)
    }

    /// Every shard and every database, read at one catalog version (where to place a new
    /// database), confirmed current with a quorum.
    pub async fn shards_and_databases(&self) -> Result<(Vec<Shard>, Vec<Database>), CommandError> {
        let queries = vec![client::query(What::Shards(All {})), client::query(What::Databases(All {}))];
        let (answers, _) = self.client()?.query(queries, true).await.map_err(client_error)?;
        let [shards, databases] = answers.as_slice() else {
            return Err(CommandError::new(ErrorCode::InternalError, "config servers: two answers expected"));
        };
        Ok((client::answer(shards).map_err(client_error)?, client::answer(databases).map_err(client_error)?))
    }

    /// The database `name`, confirmed current with a quorum.
    pub async fn database(&self, name: &str) -> Result<Option<Database>, CommandError> {
        self.client()?.database(name, true).await.map_err(client_error)
    }

    /// The sharded collection `ns` with its chunks, confirmed current with a quorum.
    pub async fn collection(&self, ns: &str) -> Result<Option<Collection>, CommandError> {
        self.client()?.collection(ns, true).await.map_err(client_error)
    }

    /// The balancer and chunk-size settings, confirmed current with a quorum.
    pub async fn settings(&self) -> Result<Settings, CommandError> {
        self.client()?.settings(true).await.map_err(client_error)
    }

    /// Every user and user-defined role, confirmed current with a quorum.
    pub async fn security(&self) -> Result<shoal_proto::catalog::SecurityCatalog, CommandError> {
        self.client()?.security(true).await.map_err(client_error)
    }

    /// Catalog versions from `from_version` on, as the config servers apply them.
    pub async fn watch(
        &self,
        from_version: u64,
    ) -> Result<tonic::Streaming<shoal_proto::config::CatalogVersion>, CommandError> {
        self.client()?.watch(from_version).await.map_err(client_error)
    }

    /// Whether the router has config servers (else it runs in legacy single-shard mode).
    pub fn is_configured(&self) -> bool {
        self.client.is_some()
    }

    /// The config leader's view of `shard`'s replica group, from its members' heartbeats.
    pub async fn group_status(&self, shard: &str) -> Result<shoal_proto::config::GroupStatusReply, CommandError> {
        self.client()?.group_status(shard).await.map_err(client_error)
    }

    /// Commits `command`; a refusal by the catalog becomes the MongoDB error it carries.
    pub async fn write(&self, command: &Command) -> Result<Reply, CommandError> {
        let outcome = self.client()?.write(command).await.map_err(client_error)?;
        outcome.outcome.map_err(|e| CommandError::new(e.code(), e.to_string()))
    }
}

/// Routing tables for the routing cache, always linearizable: a router refreshes after a shard said
/// it is stale, so the answer must be at least that new.
impl RoutingSource for ClusterCatalogClient {
    async fn routing_table(
        &self,
        ns: &str,
        since: Option<RoutingSince>,
        _linearizable: bool,
    ) -> Result<RoutingAnswer, ClientError> {
        let client =
            self.client.as_ref().ok_or_else(|| ClientError::Unavailable("this router has no config servers".into()))?;
        Ok(client.routing_table(ns, since, true).await?.0)
    }
}

/// A config client failure as the MongoDB error a client sees.
pub(crate) fn client_error(e: ClientError) -> CommandError {
    match &e {
        ClientError::Service { code, code_name, errmsg } => {
            CommandError::with_code(*code, code_name.clone(), errmsg.clone())
        }
        ClientError::Exhausted { .. } => {
            CommandError::new(ErrorCode::ExceededTimeLimit, format!("config servers: {e}"))
        }
        ClientError::Unavailable(_) => CommandError::new(ErrorCode::HostUnreachable, format!("config servers: {e}")),
        ClientError::Decode(_) => CommandError::new(ErrorCode::InternalError, format!("config servers: {e}")),
    }
}
