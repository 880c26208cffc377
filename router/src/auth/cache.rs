//! The router's copy of the catalog's users and roles: what authentication looks credentials up in
//! and authorization resolves privileges from, on every command of an authenticated client.
//!
//! It is replaced whole (a [`Snapshot`]) when the catalog's security version moves: after a user
//! or role command this router ran (read back linearizably before the command answers, so the
//! client sees its own change), and when the watch stream announces another router's change
//! ([`follow`]). Connections hold user names, never privileges, so a grant, a revoke or a drop
//! applies to connections already authenticated from their next command on.
//!
//! Must not: block a command on the config service except for the first load (a router that has
//! never read the users cannot authenticate anyone), or keep two copies of a user's privileges.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use shoal_auth::Privileges;
use shoal_auth::graph;
use shoal_proto::catalog::{SecurityCatalog, User, UserName};

use crate::catalog::ClusterCatalogClient;
use crate::error::CommandError;
use crate::state::RouterState;

/// Users, roles and the privileges resolved from them, at one security version.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub catalog: SecurityCatalog,
    /// Whether this came from the config service (the initial empty snapshot did not).
    loaded: bool,
    /// Each user's privileges, resolved on first use in this snapshot.
    resolved: Mutex<HashMap<UserName, Arc<Privileges>>>,
}

impl Snapshot {
    fn new(catalog: SecurityCatalog) -> Self {
        Self { catalog, loaded: true, resolved: Mutex::new(HashMap::new()) }
    }

    pub fn user(&self, name: &UserName) -> Option<&User> {
        self.catalog.users.get(name)
    }

    /// The privileges of `name`'s roles; `None` if the user no longer exists.
    pub fn privileges(&self, name: &UserName) -> Option<Arc<Privileges>> {
        let user = self.catalog.users.get(name)?;
        let mut resolved = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        let entry =
            resolved.entry(name.clone()).or_insert_with(|| Arc::new(graph::resolve(&self.catalog, &user.roles)));
        Some(Arc::clone(entry))
    }

    /// MongoDB's localhost exception lasts while no user and no role exists.
    pub fn is_empty(&self) -> bool {
        self.catalog.users.is_empty() && self.catalog.roles.is_empty()
    }
}

pub struct SecurityCache {
    current: RwLock<Arc<Snapshot>>,
    /// One load from the config service at a time.
    loading: tokio::sync::Mutex<()>,
    /// Keys the mock credentials of unknown users (`shoal_auth::scram::mock_credential`).
    mock_secret: [u8; 32],
}

impl Default for SecurityCache {
    fn default() -> Self {
        let mut mock_secret = [0u8; 32];
        rand::Rng::fill(&mut rand::rng(), &mut mock_secret);
        Self { current: RwLock::new(Arc::new(Snapshot::default())), loading: tokio::sync::Mutex::new(()), mock_secret }
    }
}

impl SecurityCache {
    pub fn current(&self) -> Arc<Snapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn mock_secret(&self) -> &[u8] {
        &self.mock_secret
    }

    /// The current snapshot, loading it first if this router never has. A router without config
    /// servers has no users (the empty snapshot).
    pub async fn get(&self, catalog: &ClusterCatalogClient) -> Result<Arc<Snapshot>, CommandError> {
        let current = self.current();
        if current.loaded || !catalog.is_configured() {
            return Ok(current);
        }
        self.reload(catalog, 0).await
    }

    /// Reads users and roles again unless the snapshot held is already at `at_least`; keeps
    /// whichever of the two is newer.
    pub async fn reload(&self, catalog: &ClusterCatalogClient, at_least: u64) -> Result<Arc<Snapshot>, CommandError> {
        let _one_at_a_time = self.loading.lock().await;
        let held = self.current();
        if held.loaded && held.catalog.version >= at_least && at_least > 0 {
            return Ok(held);
        }
        let fresh = catalog.security().await?;
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if !current.loaded || fresh.version >= current.catalog.version {
            *current = Arc::new(Snapshot::new(fresh));
        }
        Ok(Arc::clone(&current))
    }
}

/// Pause after a failed watch, doubling up to [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);

/// Follows the catalog's security version for the router's lifetime (routers with config servers
/// only): another router's user or role change reaches this one's cache within a watch round trip.
pub async fn follow(state: Arc<RouterState>) {
    if !state.catalog.is_configured() {
        return;
    }
    let mut pause = RETRY_PAUSE_MIN;
    loop {
        let seen = match state.security.reload(&state.catalog, 0).await {
            Ok(snapshot) => snapshot.catalog.version,
            Err(e) => {
                tracing::debug!(error = %e, "reading users and roles failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
                continue;
            }
        };
        let mut stream = match state.catalog.watch(0).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "watching the catalog for user changes failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
                continue;
            }
        };
        pause = RETRY_PAUSE_MIN;
        let mut seen = seen;
        loop {
            match stream.message().await {
                Ok(Some(v)) if v.security_version > seen => {
                    match state.security.reload(&state.catalog, v.security_version).await {
                        Ok(snapshot) => seen = snapshot.catalog.version,
                        Err(e) => {
                            tracing::debug!(error = %e, "re-reading users and roles failed");
                            break;
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}
