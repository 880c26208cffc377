//! `shoal dump` and `shoal restore`: a cluster (or one database) to mongodump's directory format
//! and back, through a router with the official driver.
//!
//! ```text
//!  dump:    balancerStop (remembering its mode) -> per database, per collection:
//!             chunk placement -> documents streamed to <coll>.bson -> placement again
//!             (a chunk moved meanwhile: dump that collection again) -> metadata.json
//!           -> users and roles -> balancerStart if it was on (also after a failure)
//!  restore: per collection: [drop] -> create (options) -> shardCollection with the recorded key
//!           -> createIndexes -> documents in unordered batches at w:majority
//!           -> roles (createRole) -> users with their stored credentials (_shoalRestoreUser)
//! ```
//!
//! Consistency is the migration-fenced kind: no balancer migration runs during the dump, and a
//! collection whose chunk placement changed while it was read (a manual moveChunk) is read again,
//! so no document is missing or doubled by a migration. Writes made while the dump runs may or
//! may not be in it, as with mongodump without `--oplog`. A restore creates sharded collections
//! with their keys before inserting, so the cluster it goes to may have any number of shards.
//!
//! Must not: leave the balancer stopped when it was running, hold a collection in memory, or
//! retry a command unboundedly (every command is bounded by `router_client::command`'s timeout
//! or the driver's).

mod backup;
mod bson_file;
mod layout;
mod restore;

use anyhow::{Context, bail};
use bson::doc;

pub use self::backup::run as dump;
pub use self::restore::run as restore;
use crate::cli::RouterTarget;
use crate::router_client::{command, connect};
use crate::spec::ClusterSpec;

/// Databases a dump never copies (each shard's own, and the catalog's views).
pub const INTERNAL_DATABASES: [&str; 2] = ["local", "config"];

/// A connected router and what was needed to reach it.
pub struct Target {
    pub client: mongodb::Client,
    pub address: String,
}

/// Connects to the first router that answers `ping`: `--router`, else the spec's routers in order.
pub async fn connect_target(target: &RouterTarget, app: &str) -> anyhow::Result<Target> {
    let login = target.login();
    let (routers, tls_options) = match target.router_alone() {
        Some(router) => (vec![router.to_owned()], String::new()),
        None => {
            let (spec, source) = ClusterSpec::load(target.file.as_deref())?;
            let tls_options = crate::status::secured(&spec, &target.data_dir)?;
            let routers: Vec<String> = match &target.router {
                Some(router) => vec![router.clone()],
                None => spec.routers.iter().map(|r| spec.endpoint(r.host.as_deref(), r.port).advertise).collect(),
            };
            if routers.is_empty() {
                bail!("{source} names no router; pass --router host:port");
            }
            (routers, tls_options)
        }
    };
    let mut last = String::from("no router named");
    for address in routers {
        let attempt = async {
            let client = connect(&address, &tls_options, &login, app).await?;
            command(&client.database("admin"), doc! { "ping": 1 }).await?;
            anyhow::Ok(client)
        };
        match attempt.await {
            Ok(client) => return Ok(Target { client, address }),
            Err(e) => last = format!("{address}: {e:#}"),
        }
    }
    bail!("no router answers ({last})")
}

/// The balancer as it was before [`pause_balancer`] stopped it.
pub struct BalancerWas {
    running: bool,
}

/// Stops the balancer and waits for its round in progress to end (`balancerStop` waits).
pub async fn pause_balancer(client: &mongodb::Client) -> anyhow::Result<BalancerWas> {
    let admin = client.database("admin");
    let status = command(&admin, doc! { "balancerStatus": 1 }).await.context("balancerStatus")?;
    let running = status.get_str("mode").is_ok_and(|m| m != "off");
    if running {
        command(&admin, doc! { "balancerStop": 1 }).await.context("balancerStop")?;
        tracing::info!("balancer stopped for the dump");
    }
    Ok(BalancerWas { running })
}

/// Starts the balancer again if it was running.
pub async fn resume_balancer(client: &mongodb::Client, was: BalancerWas) -> anyhow::Result<()> {
    if was.running {
        command(&client.database("admin"), doc! { "balancerStart": 1 }).await.context("balancerStart")?;
        tracing::info!("balancer started again");
    }
    Ok(())
}
