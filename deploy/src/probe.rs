//! Waits until a router answers `ping` through the official MongoDB driver: the path users take,
//! so "up" means a driver can connect, not merely that a port is open.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use bson::doc;
use tracing::debug;

const PING_ATTEMPTS_MAX: u32 = 10;
/// Bounds one attempt end to end (connect, handshake, command).
const PING_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Below the attempt timeout so the driver reports its own, more specific error first.
const SERVER_SELECTION_TIMEOUT_MS: u64 = 2_000;
const PING_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const PING_BACKOFF_MAX: Duration = Duration::from_secs(2);

pub async fn wait_for_ping(addr: SocketAddr) -> anyhow::Result<()> {
    let uri = format!(
        "mongodb://{addr}/?directConnection=true&appName=shoal-up\
         &serverSelectionTimeoutMS={SERVER_SELECTION_TIMEOUT_MS}&connectTimeoutMS={SERVER_SELECTION_TIMEOUT_MS}"
    );
    let client = mongodb::Client::with_uri_str(&uri).await.with_context(|| format!("bad probe URI {uri}"))?;
    let admin = client.database("admin");
    let mut backoff = PING_BACKOFF_INITIAL;
    let mut last_error = String::new();
    for attempt in 1..=PING_ATTEMPTS_MAX {
        match tokio::time::timeout(PING_ATTEMPT_TIMEOUT, admin.run_command(doc! { "ping": 1 })).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => last_error = e.to_string(),
            Err(_) => last_error = format!("no answer within {} s", PING_ATTEMPT_TIMEOUT.as_secs()),
        }
        debug!(%addr, attempt, error = %last_error, "router does not answer ping yet");
        if attempt < PING_ATTEMPTS_MAX {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(PING_BACKOFF_MAX);
        }
    }
    bail!("router at {addr} did not answer ping after {PING_ATTEMPTS_MAX} attempts; last error: {last_error}")
}
