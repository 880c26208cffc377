//! `shoal status`: every process of a cluster and how it is doing. With a spec it asks each config
//! server for its Raft state, pings each router, and prints what `replSetGetStatus {shard}` says
//! about every shard's members through the first router that answers (MongoDB's `rs.status()` /
//! `rs.printSecondaryReplicationInfo()` figures: state, health, optime, lag behind the primary).
//!
//! ```text
//!  shoal status --router host:port | -f SPEC.yaml
//!     --gRPC----> every config server: Metrics (only with a spec)
//!     --driver--> every router: ping (only with a spec)
//!     --driver--> the first router up: listShards, then replSetGetStatus {shard} per shard
//!     --> render()
//! ```
//!
//! Reads only; every call is bounded and the per-process probes run concurrently, so a cluster
//! with hosts down answers in a few seconds. Rendering ([`render`]) is pure and unit-tested.

mod render;

use std::time::Duration;

use anyhow::Context;
use bson::doc;
use futures::future::join_all;
use shoal_cluster::config_client::{ClientSettings, ConfigClient};

pub use self::render::{ConfigServerState, Process, render};
use crate::cli::RouterTarget;
use crate::router_client::{Login, command};
use crate::spec::ClusterSpec;

/// Bounds one config server's Metrics call.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// What the command was pointed at: routers to try in order, the config servers (empty without a
/// spec) and the TLS options of the routers' connection string.
struct Targets {
    routers: Vec<Process<()>>,
    config_servers: Vec<Process<()>>,
    tls_options: String,
    /// Routers come from the spec (each is pinged and listed) rather than from `--router`.
    from_spec: bool,
    /// Every process's metrics address (empty without a spec).
    metrics: Vec<Process<()>>,
}

pub async fn run(args: RouterTarget) -> anyhow::Result<()> {
    let targets = targets(&args)?;
    let login = args.login();
    let (config_servers, routers) = tokio::join!(
        config_states(&targets.config_servers),
        router_states(&targets.routers, &targets.tls_options, &login),
    );
    let Some(asked) = routers.iter().find(|r| r.state.is_ok()).or(routers.first()) else {
        anyhow::bail!("no router to ask");
    };
    let client = match &asked.state {
        Ok(client) => client.clone(),
        Err(e) => anyhow::bail!("no router answers (first: {} {e})", asked.address),
    };
    let admin = client.database("admin");
    let shards =
        command(&admin, doc! { "listShards": 1 }).await.with_context(|| format!("listShards on {}", asked.address))?;
    let mut statuses = Vec::new();
    for shard in shards.get_array("shards").map(|a| a.as_slice()).unwrap_or_default() {
        let Some(id) = shard.as_document().and_then(|s| s.get_str("_id").ok()) else { continue };
        let status = command(&admin, doc! { "replSetGetStatus": 1, "shard": id }).await.map_err(|e| format!("{e:#}"));
        statuses.push((id.to_owned(), status));
    }
    let asked = asked.address.clone();
    let routers: Vec<Process<Result<(), String>>> = if targets.from_spec {
        routers.into_iter().map(|r| r.map(|state| state.map(|_| ()))).collect()
    } else {
        Vec::new()
    };
    print!("{}", render(&asked, &config_servers, &routers, &statuses, &targets.metrics));
    Ok(())
}

/// The routers and config servers to ask. With a secured spec, this process authenticates to the
/// config servers with the cluster's credentials from `--data-dir`.
fn targets(args: &RouterTarget) -> anyhow::Result<Targets> {
    let unnamed = |address: &str| Process { name: String::new(), address: address.to_owned(), state: () };
    if let Some(router) = args.router_alone() {
        return Ok(Targets {
            routers: vec![unnamed(router)],
            config_servers: Vec::new(),
            tls_options: String::new(),
            from_spec: false,
            metrics: Vec::new(),
        });
    }
    let (spec, source) = ClusterSpec::load(args.file.as_deref())?;
    let tls_options = secured(&spec, &args.data_dir)?;
    let named = |name: &str, host: Option<&str>, port: u16| Process {
        name: name.to_owned(),
        address: spec.endpoint(host, port).advertise,
        state: (),
    };
    let config_servers = spec.config_servers.iter().map(|c| named(&c.name, c.host.as_deref(), c.port)).collect();
    let (routers, from_spec) = match &args.router {
        Some(r) => (vec![unnamed(r)], false),
        None => (spec.routers.iter().map(|r| named(&r.name, r.host.as_deref(), r.port)).collect(), true),
    };
    if routers.is_empty() {
        anyhow::bail!("{source} names no router; pass --router host:port");
    }
    let metrics = spec
        .listeners()
        .into_iter()
        .map(|l| Process { name: l.name, address: l.metrics.advertise, state: () })
        .collect();
    Ok(Targets { routers, config_servers, tls_options, from_spec, metrics })
}

/// Installs the cluster's credentials (if the spec has security) and answers the TLS options for
/// the router's connection string.
pub(crate) fn secured(spec: &ClusterSpec, data_dir: &std::path::Path) -> anyhow::Result<String> {
    if spec.security.effective_cluster_auth().is_none() && spec.net.tls.mode == crate::spec::TlsModeSpec::Disabled {
        return Ok(String::new());
    }
    let data_dir = std::path::absolute(data_dir).with_context(|| format!("bad data dir {}", data_dir.display()))?;
    let secrets = crate::secrets::prepare(spec, &data_dir, &[], crate::secrets::Missing::Refuse)?;
    crate::security::install(&secrets.cluster_args(crate::secrets::LAUNCHER))?;
    if spec.net.tls.mode == crate::spec::TlsModeSpec::Disabled {
        return Ok(String::new());
    }
    let mut options = "&tls=true".to_owned();
    if let Some(ca) = &secrets.ca_file {
        options.push_str(&format!("&tlsCAFile={}", ca.display()));
    }
    if let Some(certificate) = secrets.certificate(crate::secrets::LAUNCHER) {
        options.push_str(&format!("&tlsCertificateKeyFile={}", certificate.display()));
    }
    Ok(options)
}

/// Each config server's Raft view, asked concurrently.
async fn config_states(servers: &[Process<()>]) -> Vec<Process<Result<ConfigServerState, String>>> {
    if servers.is_empty() {
        return Vec::new();
    }
    let settings =
        ClientSettings { rpc_timeout: METRICS_TIMEOUT, connect_timeout: METRICS_TIMEOUT, ..Default::default() };
    let client = ConfigClient::new(servers.iter().map(|s| s.address.clone()).collect(), settings);
    join_all(servers.iter().map(|server| {
        let client = &client;
        async move {
            let state = client
                .metrics(&server.address)
                .await
                .map(|m| ConfigServerState { state: m.state, term: m.term, applied: m.last_applied_index })
                .map_err(|e| e.to_string());
            server.clone().map(|()| state)
        }
    }))
    .await
}

/// Each router connected and pinged concurrently: a client that answered, or why not.
async fn router_states(
    routers: &[Process<()>],
    tls_options: &str,
    login: &Login,
) -> Vec<Process<Result<mongodb::Client, String>>> {
    join_all(routers.iter().map(|router| async move {
        let state = async {
            let client = crate::router_client::connect(&router.address, tls_options, login, "shoal-status").await?;
            command(&client.database("admin"), doc! { "ping": 1 }).await?;
            anyhow::Ok(client)
        }
        .await
        .map_err(|e| format!("{e:#}"));
        router.clone().map(|()| state)
    }))
    .await
}
