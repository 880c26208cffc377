//! `shoal probe`: is one process alive, or ready for traffic? The check Kubernetes' liveness and
//! readiness probes, Compose's healthchecks and scripts run; the answer is the exit status (0 yes,
//! 1 no, with the reason on stderr).
//!
//! | role | alive | ready |
//! |---|---|---|
//! | router | answers `ping` through the driver | the same (a router serves what it can reach) |
//! | shard | its `Command` RPC answers `replSetGetStatus` | it is PRIMARY or SECONDARY |
//! | configsvr | its `Metrics` RPC answers | it knows a leader of its Raft group |
//!
//! Must not: retry (the supervisor calls again), write anything, or take longer than `--timeout`.

use std::time::Duration;

use anyhow::{Context, bail};
use bson::{Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_proto::shard::CommandRequest;
use shoal_proto::shard::shard_client::ShardClient;

use crate::cli::{ProbeArgs, ProbeRole};

/// replSetGetStatus `state` codes that serve reads or writes (MongoDB's PRIMARY and SECONDARY).
const SERVING_STATES: [i32; 2] = [1, 2];

pub async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    crate::security::install(&args.cluster_auth)?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let check = async {
        match args.role {
            ProbeRole::Router => router(&args).await,
            ProbeRole::Shard => shard(&args.addr, args.ready, timeout).await,
            ProbeRole::Configsvr => configsvr(&args.addr, args.ready, timeout).await,
        }
    };
    match tokio::time::timeout(timeout, check).await {
        Ok(outcome) => outcome,
        Err(_) => bail!("{} {} did not answer within {} ms", args.role.as_str(), args.addr, args.timeout_ms),
    }
}

async fn router(args: &ProbeArgs) -> anyhow::Result<()> {
    let mut options = String::new();
    if args.tls {
        options.push_str("&tls=true");
        if let Some(ca) = &args.cluster_auth.tls_ca_file {
            options.push_str(&format!("&tlsCAFile={}", ca.display()));
        }
        if let Some(certificate) = &args.cluster_auth.tls_certificate_key_file {
            options.push_str(&format!("&tlsCertificateKeyFile={}", certificate.display()));
        }
    }
    let client = crate::router_client::connect(&args.addr, &options, &Default::default(), "shoal-probe").await?;
    client
        .database("admin")
        .run_command(doc! { "ping": 1 })
        .await
        .with_context(|| format!("router {} does not answer ping", args.addr))?;
    Ok(())
}

async fn shard(addr: &str, ready: bool, timeout: Duration) -> anyhow::Result<()> {
    let channel = shoal_cluster::net::connect_lazy(addr, timeout)?;
    let request = CommandRequest {
        request_id: "probe".into(),
        db: "admin".into(),
        body: doc! { "replSetGetStatus": 1 }.to_vec()?.into(),
        secondary_ok: true,
        ..Default::default()
    };
    let reply = ShardClient::new(channel)
        .command(request)
        .await
        .map_err(|status| anyhow::anyhow!("shard {addr} does not answer: {}", status.message()))?
        .into_inner();
    if let Some(error) = reply.error {
        bail!("shard {addr} answers replSetGetStatus with an error: {}", error.errmsg);
    }
    let status = Document::from_reader(&mut reply.body.as_ref()).context("undecodable replSetGetStatus reply")?;
    let state = status.get_i32("state").unwrap_or(0);
    if ready && !SERVING_STATES.contains(&state) {
        bail!("shard member {addr} is {} (neither PRIMARY nor SECONDARY)", status.get_str("stateStr").unwrap_or("?"));
    }
    Ok(())
}

async fn configsvr(addr: &str, ready: bool, timeout: Duration) -> anyhow::Result<()> {
    let settings = ClientSettings { rpc_timeout: timeout, connect_timeout: timeout, ..ClientSettings::default() };
    let metrics = ConfigClient::new(vec![addr.to_owned()], settings).metrics(addr).await?;
    if ready && metrics.leader_id == 0 {
        bail!("config server {addr} ({} in term {}) knows no leader", metrics.state, metrics.term);
    }
    Ok(())
}
