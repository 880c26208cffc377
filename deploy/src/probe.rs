//! Waits until the cluster can serve: a router answers `ping` through the official MongoDB driver
//! (the path users take, so "up" means a driver can connect, not merely that a port is open), and
//! the config servers have elected a leader (so the catalog takes writes).

use std::time::Duration;

use anyhow::{Context, bail};
use bson::doc;
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use tracing::{debug, info};

const PING_ATTEMPTS_MAX: u32 = 10;
/// Bounds one attempt end to end (connect, handshake, command).
const PING_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Below the attempt timeout so the driver reports its own, more specific error first.
const SERVER_SELECTION_TIMEOUT_MS: u64 = 2_000;
const PING_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const PING_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// How long a config group may take to elect its first leader (a fresh group also waits for node
/// 1's init probe; a restarted one for an election timeout).
pub const LEADER_WAIT: Duration = Duration::from_secs(30);
/// Bounds one metrics call; a server that takes longer is treated as not ready.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);
const METRICS_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const LEADER_BACKOFF_INITIAL: Duration = Duration::from_millis(50);
const LEADER_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often an unbounded leader wait says what it is waiting for.
const PATIENT_REPORT_EVERY: Duration = Duration::from_secs(10);

/// Pings the router at `addr` until it answers; `options` are appended to the probe's connection
/// string (`&tls=true&tlsCAFile=...` for a TLS router).
pub async fn wait_for_ping(addr: &str, options: &str) -> anyhow::Result<()> {
    let uri = format!(
        "mongodb://{addr}/?directConnection=true&appName=shoal-up\
         &serverSelectionTimeoutMS={SERVER_SELECTION_TIMEOUT_MS}&connectTimeoutMS={SERVER_SELECTION_TIMEOUT_MS}{options}"
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

/// Waits until one of the config servers at `addrs` (`host:port`), or the leader one of them
/// names, reports itself the leader, and returns its address. Bounded by `bound` overall (`None`: until one is elected, saying every
/// [`PATIENT_REPORT_EVERY`] what it waits for); every call by [`METRICS_TIMEOUT`].
pub async fn wait_for_config_leader(addrs: &[String], bound: Option<Duration>) -> anyhow::Result<String> {
    let settings = ClientSettings {
        rpc_timeout: METRICS_TIMEOUT,
        connect_timeout: METRICS_CONNECT_TIMEOUT,
        ..ClientSettings::default()
    };
    let client = ConfigClient::new(addrs.to_vec(), settings);
    let mut last_state = String::from("no answer yet");
    let mut last_report = tokio::time::Instant::now();
    let poll = async {
        let mut backoff = LEADER_BACKOFF_INITIAL;
        loop {
            let mut states = Vec::with_capacity(addrs.len());
            for addr in addrs {
                match client.metrics(addr).await {
                    Ok(metrics) if metrics.state == "Leader" => {
                        info!(leader = %addr, id = metrics.id, term = metrics.term, "config servers have a leader");
                        return addr.clone();
                    }
                    Ok(metrics) => {
                        // After a membership change the leader may be a server no list names.
                        let hint = &metrics.leader_addr;
                        if !hint.is_empty()
                            && !addrs.contains(hint)
                            && client.metrics(hint).await.is_ok_and(|m| m.state == "Leader")
                        {
                            info!(leader = %hint, "config servers have a leader (named by {addr})");
                            return hint.clone();
                        }
                        states.push(format!("{addr}: {} in term {}", metrics.state, metrics.term));
                    }
                    Err(e) => states.push(format!("{addr}: {e}")),
                }
            }
            last_state = states.join("; ");
            debug!(state = %last_state, "no config leader yet");
            if bound.is_none() && last_report.elapsed() >= PATIENT_REPORT_EVERY {
                info!(state = %last_state, "waiting for a majority of the config servers (on other hosts?) to elect a leader");
                last_report = tokio::time::Instant::now();
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(LEADER_BACKOFF_MAX);
        }
    };
    let Some(bound) = bound else {
        return Ok(poll.await);
    };
    let outcome = tokio::time::timeout(bound, poll).await;
    match outcome {
        Ok(leader) => Ok(leader),
        Err(_) => {
            bail!("the config servers elected no leader within {} s; last seen: {last_state}", bound.as_secs())
        }
    }
}
