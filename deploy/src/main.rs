//! The `shoal` binary: parses the command line, sets up logging and the tokio runtime, and hands
//! each subcommand to the module that owns it.
//!
//! ```text
//!  shoal shard     --> serve::shard     (one shard server, foreground)
//!  shoal router    --> serve::router    (one router, foreground)
//!  shoal configsvr --> serve::configsvr (one config server, foreground)
//!  shoal up        --> up::run          (spec.rs -> plan.rs -> launcher.rs children, probe.rs ping)
//!  shoal up --host --> the same, for the processes of one host of a multi-host spec
//!                      (supervise.rs restarts what dies and serves the control socket)
//!  shoal status    --> status::run      (config servers' Raft state, routers pinged, replSetGetStatus per shard)
//!  shoal secrets   --> secrets::run     (the cluster key / CA once, to copy to every host)
//!  shoal restart   --> restart::run     (rolling restart through shoal up's control socket)
//!  shoal dump      --> dump::dump       (mongodump's layout through a router, balancer paused)
//!  shoal restore   --> dump::restore    (collections, shard keys, indexes, documents, roles, users)
//!  shoal reconfig  --> reconfig::run    (add / remove a config server: Raft membership, one voter at a time)
//!  shoal probe     --> health::run      (one process alive / ready: Kubernetes probes, healthchecks)
//!  shoal deploy render   --> render::run   (k8s / compose / systemd manifests from a spec)
//!  shoal deploy register --> register::run (AddShard once the config servers have a leader)
//!  shoal bench     --> shoal_bench::{crud, catalog, ycsb (load, run, matrix), migration}
//! ```

#![forbid(unsafe_code)]

mod cli;
mod dump;
mod health;
mod launcher;
mod plan;
mod probe;
mod reconfig;
mod register;
mod render;
mod restart;
mod router_client;
mod secrets;
mod security;
mod serve;
mod signals;
mod spec;
mod status;
mod supervise;
mod up;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing::error;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// Transparent huge pages off for this process and the ones it starts (the flag is inherited), as
/// MongoDB's production notes advise for mongod: mimalloc asks for huge pages on its arenas, and
/// each first touch of a page it had purged zeroed a whole 2 MiB page again (`clear_page_erms`
/// was 10-18 % of a shard's samples). Without them: default cluster at majority 1.09x ops/s,
/// 0.90x server CPU; 2 x 1 load 1.09x (docs/benchmarks.md, change 5). Best effort: a kernel
/// without the prctl keeps its default.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("shoal: could not turn transparent huge pages off ({e}); continuing with them");
    }
}

/// mimalloc instead of glibc's malloc: under the YCSB load glibc's allocator took about 30 % of a
/// shard's CPU (docs/benchmarks.md, "Where Shoal loses").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("shoal: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: an OTLP exporter's channel runs on it. Dropped last, flushing spans.
    let _traces = {
        let _runtime = runtime.enter();
        init_logging(exported(&cli.command))
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Shard(args) => serve::shard(args).await,
            Command::Router(args) => serve::router(args).await,
            Command::Configsvr(args) => serve::configsvr(args).await,
            Command::Up(args) => up::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Secrets(args) => secrets::run(args),
            Command::Restart(args) => restart::run(args).await,
            Command::Probe(args) => health::run(args).await,
            Command::Reconfig(args) => reconfig::run(args).await,
            Command::Dump(args) => dump::dump(args).await,
            Command::Restore(args) => dump::restore(args).await,
            Command::Deploy(cli::DeployCommand::Render(args)) => render::run(args),
            Command::Deploy(cli::DeployCommand::Register(args)) => register::run(args).await,
            Command::Bench(cli::BenchCommand::Crud(args)) => bench_crud(args).await,
            Command::Bench(cli::BenchCommand::Catalog(args)) => bench_catalog(args).await,
            Command::Bench(cli::BenchCommand::Load(args)) => bench_ycsb(shoal_bench::ycsb::Phase::Load, args).await,
            Command::Bench(cli::BenchCommand::Run(args)) => bench_ycsb(shoal_bench::ycsb::Phase::Run, args).await,
            Command::Bench(cli::BenchCommand::Matrix(args)) => bench_matrix(args).await,
            Command::Bench(cli::BenchCommand::Migration(args)) => bench_migration(args).await,
            Command::Bench(cli::BenchCommand::Balancer(args)) => bench_balancer(args).await,
            Command::Bench(cli::BenchCommand::Replication(args)) => bench_replication(args).await,
            Command::Bench(cli::BenchCommand::Query(args)) => bench_query(args).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench_crud(args: cli::CrudBenchArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::crud::CrudOptions {
        docs: args.docs as usize,
        concurrency: args.concurrency as usize,
        field_bytes: args.field_bytes,
        exe: std::env::current_exe()?,
    };
    let results = shoal_bench::crud::run(&opts).await?;
    println!("{}", shoal_bench::crud::report(&opts, &results));
    Ok(())
}

async fn bench_catalog(args: cli::CatalogBenchArgs) -> anyhow::Result<()> {
    let etcd = match args.etcd_bin {
        Some(path) => path,
        None => shoal_bench::etcd::find_binary()
            .ok_or_else(|| anyhow::anyhow!("no `etcd` on PATH: run bench/etcd.sh install, or pass --etcd-bin"))?,
    };
    let opts = shoal_bench::catalog::CatalogOptions {
        ops: args.ops as usize,
        clients: args.clients.iter().map(|c| *c as usize).collect(),
        exe: std::env::current_exe()?,
        etcd,
        etcd_members: args.etcd_members as usize,
    };
    let result = shoal_bench::catalog::run(&opts).await?;
    println!("{}", shoal_bench::catalog::report(&opts, &result));
    Ok(())
}

fn mongo_options(args: cli::MongoArgs) -> shoal_bench::ycsb::MongoOptions {
    shoal_bench::ycsb::MongoOptions {
        write_concern: args.write_concern,
        journal: args.journal,
        read_preference: args.read_preference,
    }
}

async fn bench_ycsb(phase: shoal_bench::ycsb::Phase, args: cli::YcsbArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::ycsb::PhaseOptions {
        phase,
        workload_files: args.workload,
        overrides: args.property,
        uri: args.uri,
        mongo: mongo_options(args.mongo),
        fresh: args.fresh,
        json: args.json,
        charts: args.charts,
        server_pids: args.server_pids,
    };
    let report = shoal_bench::ycsb::run_phase(&opts).await?;
    match shoal_bench::ycsb::report::errors(&report) {
        0 => Ok(()),
        n => Err(anyhow::anyhow!("{n} operations failed (counted in the report above)")),
    }
}

async fn bench_migration(args: cli::MigrationBenchArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::migration::MigrationOptions {
        uri: args.uri,
        data_mib: args.data_mib,
        doc_bytes: args.doc_bytes,
        moves: args.moves,
        threads: args.threads,
        load_secs: args.load_secs,
    };
    let report = shoal_bench::migration::run(&opts).await?;
    println!("{}", shoal_bench::migration::report(&opts, &report));
    if let Some(path) = args.json {
        std::fs::write(&path, shoal_bench::migration::json(&report)?)?;
    }
    Ok(())
}

async fn bench_query(args: cli::QueryBenchArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::query::QueryOptions {
        exe: std::env::current_exe()?,
        docs: args.docs,
        queries: args.queries,
        write_docs: args.write_docs,
        cluster_docs: args.cluster_docs,
        repeats: args.repeats,
    };
    let report = shoal_bench::query::run(&opts).await?;
    println!("{}", shoal_bench::query::report(&opts, &report));
    if let Some(path) = args.json {
        std::fs::write(&path, shoal_bench::query::json(&report)?)?;
    }
    Ok(())
}

async fn bench_replication(args: cli::ReplicationBenchArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::replication::ReplicationOptions {
        exe: std::env::current_exe()?,
        members: args.members,
        inserts: args.inserts,
        concurrency: args.concurrency,
        kills: args.kills,
        doc_bytes: args.doc_bytes,
    };
    let report = shoal_bench::replication::run(&opts).await?;
    println!("{}", shoal_bench::replication::report(&opts, &report));
    if let Some(path) = args.json {
        std::fs::write(&path, shoal_bench::replication::json(&report)?)?;
    }
    Ok(())
}

async fn bench_balancer(args: cli::BalancerBenchArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::balancer::BalancerOptions {
        uri: args.uri,
        config: args.config,
        exe: std::env::current_exe()?,
        data_mib: args.data_mib,
        doc_bytes: args.doc_bytes,
        chunk_mib: args.chunk_mib,
        threads: args.threads,
        load_secs: args.load_secs,
        balance_max_secs: args.balance_max_secs,
    };
    let report = shoal_bench::balancer::run(&opts).await?;
    println!("{}", shoal_bench::balancer::report(&opts, &report));
    if let Some(path) = args.json {
        std::fs::write(&path, shoal_bench::balancer::json(&report)?)?;
    }
    Ok(())
}

async fn bench_matrix(args: cli::MatrixArgs) -> anyhow::Result<()> {
    let opts = shoal_bench::ycsb::matrix::MatrixOptions {
        shoal_uri: args.shoal_uri,
        postgres_uri: args.postgres_uri,
        sizes: args.sizes.iter().map(|s| *s as usize).collect(),
        threads: args.threads.iter().map(|t| *t as usize).collect(),
        records: args.records,
        operations: args.operations,
        max_seconds: args.max_seconds,
        field_count: args.fields as usize,
        out: args.out,
        mongo: mongo_options(args.mongo),
        shoal_pids: args.shoal_pids,
        postgres_pids: args.postgres_pids,
    };
    shoal_bench::ycsb::matrix::run(&opts).await?;
    println!("wrote {}", opts.out.join("report.md").display());
    Ok(())
}

/// Logs go to stderr because stdout carries the `SHOAL_READY` line the launcher waits for.
/// Colours only on a terminal: children of `shoal up` write to log files.
/// openraft's core logs "election timeout expired" at info on every tick (~20 ms) while a config
/// server has no leader, hence warn for that module by default.
/// The service name and OTLP endpoint of a server that exports its spans.
fn exported(command: &Command) -> Option<(&'static str, &str)> {
    let (service, tracing) = match command {
        Command::Shard(args) => ("shoal-shard", &args.tracing),
        Command::Router(args) => ("shoal-router", &args.tracing),
        Command::Configsvr(args) => ("shoal-configsvr", &args.tracing),
        _ => return None,
    };
    Some((service, tracing.otlp_endpoint.as_deref().filter(|e| !e.is_empty())?))
}

fn init_logging(exported: Option<(&str, &str)>) -> Option<shoal_telemetry::otlp::Guard> {
    let filter = || {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            EnvFilter::new("info,fjall=warn,lsm_tree=warn,openraft::core::raft_core=warn,tokio_postgres=warn")
        })
    };
    let ansi = std::io::stderr().is_terminal();
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // The stderr log and the same events as MongoDB JSON lines, kept for `getLog`
    // (shoal_telemetry::log), both under RUST_LOG; spans to OTLP under their own filter, so
    // exporting request spans does not turn on debug logging.
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .and_then(shoal_telemetry::log::RingLayer)
        .with_filter(filter());
    let (otlp, guard, failed) = match exported.map(|(service, e)| shoal_telemetry::otlp::init(e, service)) {
        Some(Ok((layer, guard))) => (Some(layer.with_filter(shoal_telemetry::otlp::filter())), Some(guard), None),
        Some(Err(e)) => (None, None, Some(e)),
        None => (None, None, None),
    };
    tracing_subscriber::registry().with(logs).with(otlp).init();
    if let Some(e) = failed {
        tracing::warn!("not exporting traces: {e}");
    } else if let Some((service, endpoint)) = exported {
        tracing::info!(%endpoint, service, "exporting traces over OTLP");
    }
    guard
}
