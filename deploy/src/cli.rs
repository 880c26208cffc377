//! The `shoal` command line: one clap `Subcommand` variant and one args struct per subcommand.
//!
//! A new subcommand (e.g. `shoal bench`) is one variant in [`Command`], its args struct here, and
//! one match arm in `main.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "shoal", version, about = "Shoal: a MongoDB-compatible sharded database")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one shard server (the mongod of a shard), serving gRPC.
    Shard(ShardArgs),
    /// Run one router (a mongos), serving the MongoDB wire protocol.
    Router(RouterArgs),
    /// Run one config server (a member of the Raft-replicated catalog), serving gRPC.
    Configsvr(ConfigsvrArgs),
    /// Start a whole local cluster from a YAML spec; stop it with Ctrl-C.
    Up(UpArgs),
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Inserts/s and finds-by-_id/s at four depths: storage engine, shard executor, shard gRPC, router.
    Crud(CrudBenchArgs),
    /// Config catalog commits/s and linearizable reads/s (3 config servers) beside an etcd cluster.
    Catalog(CatalogBenchArgs),
}

#[derive(Debug, Args)]
pub struct CatalogBenchArgs {
    /// Operations per measurement (one system, one kind, one client count).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub ops: u64,
    /// Concurrent client counts, comma-separated; one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256",
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub clients: Vec<u64>,
    /// The etcd executable [default: `etcd` on PATH; bench/etcd.sh installs it].
    #[arg(long)]
    pub etcd_bin: Option<PathBuf>,
    /// Members of the etcd cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub etcd_members: u64,
}

#[derive(Debug, Args)]
pub struct CrudBenchArgs {
    /// Documents inserted (then found) at each depth.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub docs: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub concurrency: u64,
    /// Bytes in each document's string field.
    #[arg(long, default_value_t = 100)]
    pub field_bytes: usize,
}

#[derive(Debug, Args)]
pub struct ShardArgs {
    /// Name of the shard.
    #[arg(long, default_value = "shard0")]
    pub name: String,
    /// gRPC listen address (port 0 picks a free port; the bound one is printed in SHOAL_READY).
    #[arg(long, default_value = "127.0.0.1:27101")]
    pub listen: SocketAddr,
    /// Directory holding this shard's data.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Config servers (`host:port,host:port,...`); the shard reads the catalog from them.
    #[arg(long, value_delimiter = ',')]
    pub config: Vec<String>,
    #[command(flatten)]
    pub child: ChildArgs,
}

#[derive(Debug, Args)]
pub struct RouterArgs {
    /// MongoDB wire-protocol listen address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:27017")]
    pub listen: SocketAddr,
    /// gRPC endpoint of the shard to forward to.
    #[arg(long, default_value = "http://127.0.0.1:27101")]
    pub shard: String,
    /// Config servers (`host:port,host:port,...`) holding the cluster catalog; without them the
    /// sharding admin commands and the `config` database are unavailable.
    #[arg(long, value_delimiter = ',')]
    pub config: Vec<String>,
    #[command(flatten)]
    pub child: ChildArgs,
}

#[derive(Debug, Args)]
pub struct ConfigsvrArgs {
    /// This server's Raft node id (1, 2, 3, ...), unique in the config cluster.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,
    /// gRPC listen address, for peers and clients alike.
    #[arg(long, default_value = "127.0.0.1:27019")]
    pub listen: SocketAddr,
    /// Directory holding this server's Raft log and snapshots.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Voters of the cluster, this server included: `1=host:port,2=host:port,3=host:port`.
    #[arg(long, value_parser = shoal_configsvr::server::parse_peers)]
    pub peers: Option<BTreeMap<u64, String>>,
    /// Form the cluster from --peers (or a one-node cluster) unless this server or any peer
    /// already has Raft state; never re-initializes.
    #[arg(long)]
    pub init: bool,
    /// Take a catalog snapshot (and purge the log behind it) after this many log entries.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_logs_since_last: u64,
    /// Log entries kept behind a snapshot for followers that lag a little.
    #[arg(long, default_value_t = 1000)]
    pub snapshot_logs_to_keep: u64,
    #[command(flatten)]
    pub child: ChildArgs,
}

/// Flags `shoal up` passes to the servers it starts; hidden because people have no use for them.
#[derive(Debug, Args)]
pub struct ChildArgs {
    /// Also shut down when stdin reaches EOF. The launcher holds the other end of the pipe, so its
    /// servers go away with it even when it is SIGKILLed and cannot stop them itself.
    #[arg(long, hide = true)]
    pub exit_on_stdin_eof: bool,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Cluster spec [default: ./deploy/local.yaml if present, else a built-in copy of it].
    #[arg(short = 'f', long = "file", value_name = "SPEC.yaml")]
    pub file: Option<PathBuf>,
    /// Directory under which each process gets its data dir and `<name>.log`.
    #[arg(long, default_value = "shoal-data")]
    pub data_dir: PathBuf,
    /// Port of the first router, overriding the spec.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Allow a bind_ip that is not loopback (exposes unauthenticated servers to the network).
    #[arg(long)]
    pub allow_non_loopback: bool,
}
