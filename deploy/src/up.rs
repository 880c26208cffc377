//! `shoal up`: start a local cluster from a spec, report how to connect, stop it on a signal.
//!
//! ```text
//!  load spec -> --port override -> validate -> plan
//!     -> start config servers (each: spawn, wait for SHOAL_READY) -> wait for a Raft leader
//!     -> start shards -> register each in the catalog (AddShard; a no-op when already there)
//!     -> start routers -> ping every router through the driver
//!     -> print connection string + `SHOAL_READY cluster <addr>`
//!     -> wait: SIGINT/SIGTERM => stop all, exit 0 | a child exits => report, stop all, exit 1
//! ```
//!
//! Stop order is the reverse of start order: routers, shards, config servers. Without config
//! servers in the spec the catalog steps are skipped (no `--config`, nothing registered).

use anyhow::{Context, bail};
use std::fmt::Write as _;
use std::path::Path;
use tracing::{info, warn};

use crate::cli::UpArgs;
use crate::launcher::Launcher;
use crate::plan::{ClusterPlan, ProcessPlan, Role, plan};
use crate::probe::{wait_for_config_leader, wait_for_ping};
use crate::secrets::{LAUNCHER, Missing, Secrets};
use crate::signals::shutdown_signal;
use crate::spec::{ClusterSpec, TlsModeSpec};

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let (mut spec, source) = ClusterSpec::load(args.file.as_deref())?;
    if let Some(port) = args.port {
        spec.override_first_router_port(port);
    }
    spec.validate(args.insecure).with_context(|| format!("invalid spec {source}"))?;
    let hosts = spec.hosts();
    if let Some(host) = &args.host
        && !hosts.contains(host)
    {
        bail!("{source} has no process on host {host}; its hosts are {}", hosts.join(", "));
    }
    // Absolute so the paths in messages and children's arguments do not depend on a cwd.
    let data_dir =
        std::path::absolute(&args.data_dir).with_context(|| format!("bad data dir {}", args.data_dir.display()))?;
    std::fs::create_dir_all(&data_dir).with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    // One machine of several must not invent its own cluster key or CA: they are made once
    // (`shoal secrets`) and copied to every host.
    let missing = if args.host.is_some() && hosts.len() > 1 { Missing::Shared } else { Missing::Create };
    let secrets = crate::secrets::prepare(&spec, &data_dir, &certificate_hosts(&spec), missing)?;
    // `shoal up` itself talks to the config servers (leader probe, shard registration), so it
    // authenticates as the processes it starts do.
    crate::security::install(&secrets.cluster_args(LAUNCHER))?;
    let access = Access::of(&spec, &secrets);
    let mut cluster = plan(&spec, &data_dir, &secrets);
    if let Some(host) = &args.host {
        cluster = cluster.on_host(host);
    }
    let exe = std::env::current_exe().context("cannot locate the shoal executable to start children")?;
    let scope = args.host.as_deref().map_or_else(|| "this machine".to_owned(), |h| format!("host {h}"));
    info!(cluster = %spec.name, spec = %source, data_dir = %data_dir.display(), "starting {} processes of {scope}", cluster.processes.len());

    // Installed before the first child starts, so Ctrl-C during start-up still stops them all.
    let shutdown = shutdown_signal(false).context("cannot install signal handlers")?;
    let (control_tx, control_rx) = tokio::sync::mpsc::channel(8);
    let socket = crate::supervise::serve_control(&data_dir, control_tx)?;
    let mut launcher = Launcher::new(exe);
    let start = Start {
        cluster_name: &spec.name,
        cluster: &cluster,
        data_dir: &data_dir,
        access: &access,
        // Other hosts may start much later: wait for them rather than give up.
        patient: args.host.is_some(),
        first_router: spec
            .listeners()
            .into_iter()
            .find(|l| spec.routers.iter().any(|r| r.name == l.name))
            .map(|l| l.endpoint.advertise),
    };
    let outcome = tokio::select! {
        outcome = async {
            start_all(&mut launcher, &start).await?;
            crate::supervise::supervise(&mut launcher, &cluster.processes, spec.restart, control_rx).await
        } => outcome,
        () = shutdown => Ok(()),
    };
    match &outcome {
        Ok(()) => info!("stopping the cluster"),
        Err(_) => warn!("stopping the cluster after a failure (reported below)"),
    }
    launcher.stop_all().await;
    let _ = std::fs::remove_file(&socket);
    if outcome.is_ok() {
        info!("cluster stopped");
    }
    outcome
}

/// What [`start_all`] starts and how it reports.
struct Start<'a> {
    cluster_name: &'a str,
    cluster: &'a ClusterPlan,
    data_dir: &'a Path,
    access: &'a Access,
    /// Wait without bound for config servers on other hosts.
    patient: bool,
    /// The spec's first router, for the banner of a host that runs none.
    first_router: Option<String>,
}

/// Starts this host's processes and prints the banner. Fails on a process that does not start, a
/// config group without a leader (within the bound unless `patient`), a shard the catalog
/// refuses, a router that does not answer, or any child exiting while the cluster starts.
async fn start_all(launcher: &mut Launcher, start: &Start<'_>) -> anyhow::Result<()> {
    let cluster = start.cluster;
    for process in cluster.of_role(Role::ConfigServer) {
        launcher.start(process).await?;
    }
    if !cluster.config_servers.is_empty() {
        let bound = if start.patient { None } else { Some(crate::probe::LEADER_WAIT) };
        tokio::select! {
            leader = wait_for_config_leader(&cluster.config_servers, bound) => drop(leader?),
            exited = launcher.first_exit() => bail!("{exited}"),
        }
    }
    for process in cluster.of_role(Role::Shard) {
        launcher.start(process).await?;
    }
    if !cluster.shards.is_empty() {
        tokio::select! {
            registered = crate::register::register_shards(&cluster.config_servers, &cluster.shards) => registered?,
            exited = launcher.first_exit() => bail!("{exited}"),
        }
    }
    for process in cluster.of_role(Role::Router) {
        launcher.start(process).await?;
    }
    let routers: Vec<&ProcessPlan> = cluster.of_role(Role::Router).collect();
    for router in &routers {
        tokio::select! {
            pinged = wait_for_ping(&router.connect, &start.access.probe_options) => pinged.with_context(|| format!("{} is not answering", router.name))?,
            exited = launcher.first_exit() => bail!("{exited}"),
        }
    }
    let counts = Counts {
        config_servers: cluster.of_role(Role::ConfigServer).count(),
        shards: cluster
            .of_role(Role::Shard)
            .filter_map(|p| shard_of(&p.args))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        members: cluster.of_role(Role::Shard).count(),
    };
    let mut addrs: Vec<String> = routers.iter().map(|router| router.connect.clone()).collect();
    if addrs.is_empty()
        && let Some(first) = &start.first_router
    {
        addrs.push(first.clone());
    }
    print!("{}", banner(start.cluster_name, counts, routers.len(), &addrs, start.data_dir, start.access));
    Ok(())
}

/// The `--name` a shard member was planned with.
fn shard_of(args: &[std::ffi::OsString]) -> Option<&std::ffi::OsStr> {
    args.windows(2).find(|w| w[0] == "--name").map(|w| w[1].as_os_str())
}

/// The names a process's certificate holds: what others dial it by. Every certificate names
/// every host of the spec (the cluster's own CA signs them; one list keeps a moved process valid).
pub(crate) fn certificate_hosts(spec: &ClusterSpec) -> Vec<String> {
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    for listener in spec.listeners() {
        let endpoint = listener.endpoint;
        let listen = endpoint.listen.ip();
        let names = [Some(endpoint.host), (!listen.is_unspecified()).then(|| listen.to_string())];
        for name in names.into_iter().flatten() {
            if !hosts.contains(&name) && name.parse::<std::net::IpAddr>().map_or(true, |ip| !ip.is_unspecified()) {
                hosts.push(name);
            }
        }
    }
    hosts
}

/// How clients reach the routers: the connection string's options and what the probe adds.
#[derive(Debug, Clone, Default)]
struct Access {
    /// `?tls=true&tlsCAFile=...` when the routers serve TLS, else empty.
    uri_options: String,
    /// Appended to the probe's own options: TLS, and the launcher's certificate when clients
    /// must present one.
    probe_options: String,
    authorization: bool,
}

impl Access {
    fn of(spec: &ClusterSpec, secrets: &Secrets) -> Access {
        let authorization = spec.security.authorization.is_enabled() || secrets.cluster_auth.is_some();
        let tls = &spec.net.tls;
        if tls.mode == TlsModeSpec::Disabled {
            return Access { authorization, ..Access::default() };
        }
        let mut uri_options = "?tls=true".to_owned();
        if let Some(ca) = &secrets.ca_file {
            uri_options.push_str(&format!("&tlsCAFile={}", ca.display()));
        }
        let mut probe_options = uri_options.replacen('?', "&", 1);
        if !tls.allow_connections_without_certificates.unwrap_or(secrets.ca_generated)
            && let Some(certificate) = secrets.certificate(LAUNCHER)
        {
            probe_options.push_str(&format!("&tlsCertificateKeyFile={}", certificate.display()));
        }
        Access { uri_options, probe_options, authorization }
    }
}

#[derive(Debug, Clone, Copy)]
struct Counts {
    config_servers: usize,
    shards: usize,
    /// Shard members (processes) over all shards.
    members: usize,
}

/// What a person needs to connect, and the `SHOAL_READY cluster <addr>` line scripts wait for.
/// `local_routers` of `routers` run here (a host without routers names the spec's first one).
fn banner(
    cluster: &str,
    counts: Counts,
    local_routers: usize,
    routers: &[String],
    data_dir: &Path,
    access: &Access,
) -> String {
    let mut out = String::new();
    let Some(first) = routers.first() else {
        return out;
    };
    let uri = if access.uri_options.is_empty() {
        format!("mongodb://{first}")
    } else {
        format!("mongodb://{first}/{}", access.uri_options)
    };
    let _ = writeln!(
        out,
        "\nShoal cluster {cluster:?} is up: {} config server(s), {} shard(s) of {} member(s), {} router(s); data and logs in {}",
        counts.config_servers,
        counts.shards,
        counts.members,
        local_routers,
        data_dir.display()
    );
    let _ = writeln!(out, "\n  connection string: {uri}");
    for other in &routers[1..] {
        let _ = writeln!(out, "  also:              mongodb://{other}");
    }
    let _ = writeln!(out, "\n  mongosh:  mongosh \"{uri}\"");
    let _ = writeln!(
        out,
        "  pymongo:  python3 -c 'import pymongo; print(pymongo.MongoClient(\"{uri}\").admin.command(\"ping\"))'"
    );
    if access.authorization {
        let _ = writeln!(
            out,
            "\n  Authorization is on. Until the first user exists, a client on this machine may create it\n  \
             (MongoDB's localhost exception): mongosh \"{uri}\" --eval 'db.getSiblingDB(\"admin\").createUser({{user: \"admin\", pwd: passwordPrompt(), roles: [\"root\"]}})'"
        );
    }
    let _ = writeln!(out, "\nCtrl-C stops the cluster.");
    let _ = writeln!(out, "{}", shoal_proto::ready::line("cluster", first));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_names_the_first_router_and_ends_with_the_ready_line() {
        let routers = ["127.0.0.1:27017".to_owned(), "[::1]:27018".to_owned()];
        let text = banner(
            "local",
            Counts { config_servers: 3, shards: 1, members: 1 },
            2,
            &routers,
            Path::new("/d"),
            &Access::default(),
        );
        assert!(text.contains("is up: 3 config server(s), 1 shard(s) of 1 member(s), 2 router(s);"), "{text}");
        assert!(text.contains("connection string: mongodb://127.0.0.1:27017\n"), "{text}");
        assert!(text.contains("mongodb://[::1]:27018"), "{text}");
        assert!(text.ends_with("\nSHOAL_READY cluster 127.0.0.1:27017\n"), "{text}");
    }
}
