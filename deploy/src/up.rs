//! `shoal up`: start a local cluster from a spec, report how to connect, stop it on a signal.
//!
//! ```text
//!  load spec -> --port override -> validate -> plan
//!     -> start shards, then routers (each: spawn, wait for SHOAL_READY)
//!     -> ping every router through the driver
//!     -> print connection string + `SHOAL_READY cluster <addr>`
//!     -> wait: SIGINT/SIGTERM => stop all, exit 0 | a child exits => report, stop all, exit 1
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, bail};
use tracing::{info, warn};

use crate::cli::UpArgs;
use crate::launcher::Launcher;
use crate::plan::{ProcessPlan, Role, plan};
use crate::probe::wait_for_ping;
use crate::signals::shutdown_signal;
use crate::spec::ClusterSpec;

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let (mut spec, source) = ClusterSpec::load(args.file.as_deref())?;
    if let Some(port) = args.port {
        spec.override_first_router_port(port);
    }
    spec.validate(args.allow_non_loopback).with_context(|| format!("invalid spec {source}"))?;
    if spec.shards.len() > 1 {
        warn!(
            "until config servers arrive (issue 3) routers forward to the first shard only; the other shards get no data"
        );
    }
    // Absolute so the paths in messages and children's arguments do not depend on a cwd.
    let data_dir =
        std::path::absolute(&args.data_dir).with_context(|| format!("bad data dir {}", args.data_dir.display()))?;
    std::fs::create_dir_all(&data_dir).with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    let plans = plan(&spec, &data_dir);
    let exe = std::env::current_exe().context("cannot locate the shoal executable to start children")?;
    info!(cluster = %spec.name, spec = %source, data_dir = %data_dir.display(), "starting {} processes", plans.len());

    // Installed before the first child starts, so Ctrl-C during start-up still stops them all.
    let shutdown = shutdown_signal(false).context("cannot install signal handlers")?;
    let mut launcher = Launcher::new(exe);
    let outcome = tokio::select! {
        outcome = start_and_watch(&mut launcher, &spec.name, &plans, &data_dir) => outcome,
        () = shutdown => Ok(()),
    };
    match &outcome {
        Ok(()) => info!("stopping the cluster"),
        Err(_) => warn!("stopping the cluster after a failure (reported below)"),
    }
    launcher.stop_all().await;
    if outcome.is_ok() {
        info!("cluster stopped");
    }
    outcome
}

/// Starts everything and returns only on failure: a process that fails to start, a router that
/// does not answer, or any child exiting.
async fn start_and_watch(
    launcher: &mut Launcher,
    cluster: &str,
    plans: &[ProcessPlan],
    data_dir: &Path,
) -> anyhow::Result<()> {
    for plan in plans {
        launcher.start(plan).await?;
    }
    let routers: Vec<&ProcessPlan> = plans.iter().filter(|plan| plan.role == Role::Router).collect();
    for router in &routers {
        tokio::select! {
            pinged = wait_for_ping(router.connect) => pinged.with_context(|| format!("{} is not answering", router.name))?,
            exited = launcher.first_exit() => bail!("{exited}"),
        }
    }
    let shards = plans.len() - routers.len();
    let addrs: Vec<SocketAddr> = routers.iter().map(|router| router.connect).collect();
    print!("{}", banner(cluster, shards, &addrs, data_dir));
    let exited = launcher.first_exit().await;
    bail!("{exited}")
}

/// What a person needs to connect, and the `SHOAL_READY cluster <addr>` line scripts wait for.
fn banner(cluster: &str, shards: usize, routers: &[SocketAddr], data_dir: &Path) -> String {
    let mut out = String::new();
    let Some(first) = routers.first() else {
        return out;
    };
    let uri = format!("mongodb://{first}");
    let _ = writeln!(
        out,
        "\nShoal cluster {cluster:?} is up: {shards} shard(s), {} router(s); data and logs in {}",
        routers.len(),
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
    let _ = writeln!(out, "\nCtrl-C stops the cluster.");
    let _ = writeln!(out, "SHOAL_READY cluster {first}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_names_the_first_router_and_ends_with_the_ready_line() {
        let routers = ["127.0.0.1:27017".parse().expect("addr"), "[::1]:27018".parse().expect("addr")];
        let text = banner("local", 1, &routers, Path::new("/d"));
        assert!(text.contains("connection string: mongodb://127.0.0.1:27017\n"), "{text}");
        assert!(text.contains("mongodb://[::1]:27018"), "{text}");
        assert!(text.ends_with("\nSHOAL_READY cluster 127.0.0.1:27017\n"), "{text}");
    }
}
