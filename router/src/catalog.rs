//! The router's access to the cluster catalog held by the config servers: one leader-following
//! client (`shoal_configsvr::client`, built without the Raft server), and the mapping of its
//! failures to MongoDB errors.

use shoal_configsvr::catalog::api::{RoutingAnswer, RoutingSince};
use shoal_configsvr::catalog::{Catalog, Command, Reply};
use shoal_configsvr::client::{ClientError, ClientSettings, ConfigClient};
use shoal_proto::ErrorCode;

use crate::error::CommandError;

pub struct CatalogAccess {
    client: Option<ConfigClient>,
}

impl CatalogAccess {
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

    /// The catalog, confirmed current with a quorum (reads of `config.*` and admin commands are
    /// rare, so they pay for a linearizable read rather than risk a stale answer).
    pub async fn read(&self) -> Result<Catalog, CommandError> {
        let (catalog, _) = self.client()?.read(true).await.map_err(client_error)?;
        Ok(catalog)
    }

    /// The catalog as the answering config server has applied it (not confirmed with a quorum):
    /// for following changes announced by the watch stream, which that server applied.
    pub async fn read_applied(&self) -> Result<(Catalog, u64), CommandError> {
        self.client()?.read(false).await.map_err(client_error)
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

    /// The routing table of `ns`, whole or the changes after `since` (linearizable: a router
    /// refreshes after a shard said it is stale, so the answer must be at least that new).
    pub async fn routing_table(&self, ns: &str, since: Option<RoutingSince>) -> Result<RoutingAnswer, CommandError> {
        let (answer, _) = self.client()?.routing_table(ns, since, true).await.map_err(client_error)?;
        Ok(answer)
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

fn client_error(e: ClientError) -> CommandError {
    match &e {
        ClientError::Service { code, code_name, errmsg } => {
            CommandError { code: *code, code_name: code_name.clone(), errmsg: errmsg.clone() }
        }
        ClientError::Exhausted { .. } => {
            CommandError::new(ErrorCode::ExceededTimeLimit, format!("config servers: {e}"))
        }
        ClientError::Unavailable(_) => CommandError::new(ErrorCode::HostUnreachable, format!("config servers: {e}")),
        ClientError::Decode(_) => CommandError::new(ErrorCode::InternalError, format!("config servers: {e}")),
    }
}
