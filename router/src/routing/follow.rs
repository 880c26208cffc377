//! Following replica-group primaries: a watch on the catalog's versions re-reads the shards
//! (not the whole catalog) when it changes, so shard channels point at each group's new primary
//! within a round trip of the config service naming it (requests that hit the old one also
//! refresh, see `exec::call`).
//!
//! Must not: block requests (it only replaces pools), or spin: every failure backs off.

use std::sync::Arc;
use std::time::Duration;

use crate::state::RouterState;

/// Pause after a failed watch, doubling up to [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);
/// Catalog changes closer together than this share one re-read.
const COALESCE: Duration = Duration::from_millis(10);

/// Runs for the router's lifetime (routers with a catalog only).
pub async fn follow_primaries(state: Arc<RouterState>) {
    if !state.catalog.is_configured() {
        return;
    }
    let mut pause = RETRY_PAUSE_MIN;
    let mut seen = 0u64;
    loop {
        match state.catalog.shards_applied().await {
            Ok((shards, version)) => {
                state.shards.update(&shards);
                seen = seen.max(version);
            }
            Err(e) => tracing::debug!(error = %e, "reading the shards to follow primaries failed"),
        }
        let mut stream = match state.catalog.watch(seen + 1).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "watching the catalog failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
                continue;
            }
        };
        pause = RETRY_PAUSE_MIN;
        loop {
            match stream.message().await {
                Ok(Some(v)) if v.version > seen => {
                    tokio::time::sleep(COALESCE).await;
                    match state.catalog.shards_applied().await {
                        Ok((shards, version)) => {
                            state.shards.update(&shards);
                            seen = seen.max(version).max(v.version);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "re-reading the shards failed");
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
