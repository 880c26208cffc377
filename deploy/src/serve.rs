//! `shoal shard`, `shoal router` and `shoal configsvr`: run one server in the foreground until
//! SIGINT/SIGTERM.
//!
//! The servers themselves print `SHOAL_READY <role> <addr>` on stdout once listening; this file
//! only turns flags into their configs and hands them the shutdown trigger.

use anyhow::Context;

use crate::cli::{ConfigsvrArgs, RouterArgs, ShardArgs};
use crate::signals::shutdown_signal;

pub async fn shard(args: ShardArgs) -> anyhow::Result<()> {
    crate::security::install(&args.cluster_auth)?;
    let shutdown = shutdown_signal(args.child.exit_on_stdin_eof).context("cannot install signal handlers")?;
    let mut config = shoal_shard::ShardSettings::new(args.name, args.listen, args.data_dir);
    config.config_servers = args.config;
    config.failpoints = args.failpoints;
    config.advertise = args.advertise;
    config.metrics_listen = metrics_listen(args.listen, args.metrics_port);
    config.ttl_monitor_interval = std::time::Duration::from_secs(args.ttl_monitor_secs);
    if let Some(mb) = args.oplog_size_mb {
        config.repl.oplog_size_max_bytes = mb.saturating_mul(1 << 20);
    }
    let name = config.name.clone();
    shoal_shard::run(config, shutdown).await.with_context(|| format!("shard {name} failed"))
}

pub async fn router(args: RouterArgs) -> anyhow::Result<()> {
    // As on MongoDB, a router that authenticates its peers also requires clients to authenticate.
    let members_authenticate = crate::security::install(&args.cluster_auth)?;
    let shutdown = shutdown_signal(args.child.exit_on_stdin_eof).context("cannot install signal handlers")?;
    let mut config = shoal_router::RouterSettings::new(args.listen, args.shard);
    config.config_servers = args.config;
    config.metrics_listen = metrics_listen(args.listen, args.metrics_port);
    config.authorization = args.auth || members_authenticate;
    config.max_connections = args.max_conns;
    if let (Some(_), Some(path)) = (&args.audit_destination, &args.audit_path) {
        config.audit = Some(shoal_router::audit::AuditDestination::File(path.clone()));
    }
    config.message_stall_timeout = std::time::Duration::from_millis(args.message_stall_timeout_ms);
    if let Some(backlog) = args.listen_backlog {
        config.listen_backlog = backlog;
    }
    config.auth_failed_delay = std::time::Duration::from_millis(args.auth_failed_delay_ms);
    config.tls = crate::security::client_tls(
        &args.cluster_auth,
        &args.tls_mode,
        args.tls_allow_connections_without_certificates,
    )?;
    let b = &args.balancer;
    config.balancer.enabled = !b.no_balancer;
    config.balancer.round_interval = std::time::Duration::from_millis(b.balancer_interval_ms);
    config.balancer.migration_latency_target_ms = b.migration_latency_target_ms;
    config.balancer.params.load_split_ops_per_sec = b.balancer_load_split_ops;
    config.balancer.params.load_split_after_ms = b.balancer_load_split_after_ms;
    config.balancer.params.merge_cooldown_ms = b.balancer_merge_cooldown_ms;
    let listen = config.listen;
    shoal_router::run(config, shutdown).await.with_context(|| format!("router on {listen} failed"))
}

pub async fn configsvr(args: ConfigsvrArgs) -> anyhow::Result<()> {
    crate::security::install(&args.cluster_auth)?;
    let shutdown = shutdown_signal(args.child.exit_on_stdin_eof).context("cannot install signal handlers")?;
    let peers = args.peers.unwrap_or_default();
    let id = match (args.id, &args.advertise) {
        (Some(id), _) => id,
        (None, Some(advertise)) => shoal_configsvr::server::id_of(&peers, advertise).with_context(|| {
            format!("--advertise {advertise} is none of --peers; the id comes from the peer with that address")
        })?,
        (None, None) => anyhow::bail!("--id or --advertise is required"),
    };
    let mut config = shoal_configsvr::server::ConfigServerSettings::new(id, args.listen, args.data_dir);
    config.peers = peers;
    config.metrics_listen = metrics_listen(args.listen, args.metrics_port);
    config.init = args.init;
    config.raft.snapshot_logs_since_last = args.snapshot_logs_since_last;
    config.raft.snapshot_logs_to_keep = args.snapshot_logs_to_keep;
    let id = config.id;
    shoal_configsvr::server::run(config, shutdown).await.with_context(|| format!("config server {id} failed"))
}

/// The metrics port's socket: the listen address's IP with `--metrics-port`.
fn metrics_listen(listen: std::net::SocketAddr, port: Option<u16>) -> Option<std::net::SocketAddr> {
    port.map(|port| std::net::SocketAddr::new(listen.ip(), port))
}
