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
    /// Print every process of the spec (config servers, routers) and each shard's replica-group
    /// members (state, health, optime, lag) through a router.
    Status(RouterTarget),
    /// Make the cluster-wide secrets a secured spec needs (key file, CA) once, to copy to every host.
    Secrets(SecretsArgs),
    /// Restart the processes `shoal up` runs, one at a time, without losing availability.
    Restart(RestartArgs),
    /// Is one process alive (or, with --ready, ready for traffic)? Exit status 0 or 1: the check
    /// behind Kubernetes probes and Compose healthchecks.
    Probe(ProbeArgs),
    /// Copy a cluster (or one database) through a router into mongodump's directory format,
    /// with the balancer paused.
    Dump(DumpArgs),
    /// Load a mongodump-format directory into a cluster through a router (any number of shards).
    Restore(RestoreArgs),
    /// Add or remove a config server (one Raft voter per call), or print the config servers' group.
    Reconfig(ReconfigArgs),
    /// Deployment manifests and steps for supervisors other than `shoal up`.
    #[command(subcommand)]
    Deploy(DeployCommand),
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum DeployCommand {
    /// Write Kubernetes, Docker Compose or systemd manifests for a spec.
    Render(RenderArgs),
    /// Register shards in the catalog once the config servers have a leader (what `shoal up` does
    /// after starting the shards; idempotent): the registration job of rendered manifests.
    Register(RegisterArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RenderFormat {
    /// StatefulSets, headless Services, a router Deployment, PodDisruptionBudgets, a Secret, a Job.
    K8s,
    /// One docker-compose.yaml service per process.
    Compose,
    /// One unit per process under `<host>/`, with an install layout.
    Systemd,
    /// `prometheus.yml`: a scrape job per role, every process's metrics port a target.
    Prometheus,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Cluster spec [default: ./deploy/local.yaml if present, else a built-in copy of it].
    #[arg(short = 'f', long = "file", value_name = "SPEC.yaml")]
    pub file: Option<PathBuf>,
    #[arg(long, value_enum)]
    pub format: RenderFormat,
    /// Directory to write into (created; existing files of the same names are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The container image (k8s, compose).
    #[arg(long, default_value = "shoal:latest")]
    pub image: String,
    /// Kubernetes namespace the manifests name (pod DNS names include it).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Storage requested per data volume (k8s PersistentVolumeClaims).
    #[arg(long, default_value = "10Gi")]
    pub storage: String,
    /// Where the `shoal` binary is installed (systemd).
    #[arg(long, default_value = "/usr/local/bin/shoal")]
    pub binary: PathBuf,
    /// Render a spec without authorization and cluster authentication although its processes are
    /// reachable from the network.
    #[arg(long)]
    pub insecure: bool,
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// Config servers (`host:port,host:port,...`).
    #[arg(long, value_delimiter = ',', required = true)]
    pub config: Vec<String>,
    /// A shard and its members: `NAME=host:port,host:port,...`; repeatable.
    #[arg(long = "shard", value_name = "NAME=MEMBERS", required = true)]
    pub shards: Vec<String>,
    /// Give up after this many seconds without a config leader (0: wait forever).
    #[arg(long, default_value_t = 600)]
    pub wait_secs: u64,
    #[command(flatten)]
    pub cluster_auth: ClusterAuthArgs,
}

/// Which router a tool (`status`, `dump`, `restore`) talks to, and as whom.
#[derive(Debug, Args)]
pub struct RouterTarget {
    /// Router to use (`host:port`) [default: the spec's first router that answers].
    #[arg(long, value_name = "HOST:PORT")]
    pub router: Option<String>,
    /// Cluster spec naming the routers (and config servers) and their TLS settings [default:
    /// ./deploy/local.yaml if present, else a built-in copy of it]; with --router alone no spec
    /// is read.
    #[arg(short = 'f', long = "file", value_name = "SPEC.yaml")]
    pub file: Option<PathBuf>,
    /// The data directory `shoal up` used: where a secured spec's key file and certificates are.
    #[arg(long, default_value = "shoal-data")]
    pub data_dir: PathBuf,
    /// A user to authenticate as, when the routers require authentication.
    #[arg(short = 'u', long)]
    pub username: Option<String>,
    /// Its password (or set SHOAL_PASSWORD).
    #[arg(short = 'p', long, env = "SHOAL_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The database the user is defined on.
    #[arg(long = "authenticationDatabase", default_value = "admin")]
    pub authentication_database: String,
}

impl RouterTarget {
    /// Whom to authenticate as.
    pub fn login(&self) -> crate::router_client::Login {
        crate::router_client::Login {
            username: self.username.clone(),
            password: self.password.clone(),
            authentication_database: self.authentication_database.clone(),
        }
    }

    /// Only `--router` was named: no spec is read.
    pub fn router_alone(&self) -> Option<&str> {
        self.router.as_deref().filter(|_| self.file.is_none())
    }
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    #[command(flatten)]
    pub target: RouterTarget,
    /// Directory to write (mongodump's layout: `<db>/<collection>.bson` and `.metadata.json`).
    #[arg(long, short = 'o', default_value = "dump")]
    pub out: PathBuf,
    /// Dump only this database.
    #[arg(long, short = 'd')]
    pub db: Option<String>,
    /// Dump only this collection (with --db).
    #[arg(long, short = 'c')]
    pub collection: Option<String>,
    /// Compress every file with gzip (`.bson.gz`, `.metadata.json.gz`, as mongodump --gzip);
    /// restore reads either.
    #[arg(long)]
    pub gzip: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub target: RouterTarget,
    /// The directory `shoal dump` (or mongodump) wrote.
    #[arg(default_value = "dump")]
    pub dir: PathBuf,
    /// Restore only this database.
    #[arg(long, short = 'd')]
    pub db: Option<String>,
    /// Drop each collection before restoring it (and replace users and roles that exist).
    #[arg(long)]
    pub drop: bool,
    /// Restore only namespaces matching this pattern (`db.collection`, `*` for any characters;
    /// repeatable). Users and roles come with `admin.system.users` / `admin.system.roles`.
    #[arg(long = "nsInclude", value_name = "PATTERN")]
    pub ns_include: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReconfigArgs {
    /// Config servers to reach the group through (`host:port,host:port,...`).
    #[arg(long, value_delimiter = ',', required = true)]
    pub config: Vec<String>,
    /// Add a config server, already started without --init: `ID=HOST:PORT`. It becomes a voter
    /// once it has caught up with the leader's log.
    #[arg(long, value_name = "ID=HOST:PORT", conflicts_with = "remove_config_server")]
    pub add_config_server: Option<String>,
    /// Remove the voter with this id.
    #[arg(long, value_name = "ID")]
    pub remove_config_server: Option<u64>,
    #[command(flatten)]
    pub cluster_auth: ClusterAuthArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeRole {
    Router,
    Shard,
    Configsvr,
}

impl ProbeRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeRole::Router => "router",
            ProbeRole::Shard => "shard",
            ProbeRole::Configsvr => "configsvr",
        }
    }
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[arg(long, value_enum)]
    pub role: ProbeRole,
    /// The process's `host:port`.
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: String,
    /// Ready for traffic, not merely alive: a shard member PRIMARY or SECONDARY, a config server
    /// that knows its leader.
    #[arg(long)]
    pub ready: bool,
    /// The whole check's bound.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// Reach a router over TLS (with --tlsCAFile, and --tlsCertificateKeyFile if it wants one).
    #[arg(long)]
    pub tls: bool,
    #[command(flatten)]
    pub cluster_auth: ClusterAuthArgs,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Inserts/s and finds-by-_id/s at four depths: storage engine, shard executor, shard gRPC, router.
    Crud(CrudBenchArgs),
    /// Config catalog commits/s and linearizable reads/s (3 config servers) beside an etcd cluster.
    Catalog(CatalogBenchArgs),
    /// YCSB load phase: insert `recordcount` records (`-P workload -p key=value ...`).
    Load(YcsbArgs),
    /// YCSB run phase: the workload's operation mix over the loaded records.
    Run(YcsbArgs),
    /// The seed matrix (record sizes x threads x {load, 50/50, 80/20}) on Shoal and PostgreSQL.
    Matrix(MatrixArgs),
    /// Chunk migration MiB/s vs plain copies, critical sections, and a load with and without moves.
    Migration(MigrationBenchArgs),
    /// Time for the balancer to spread N MiB, and an 80/20 load while it fills a new shard vs off.
    Balancer(BalancerBenchArgs),
    /// A replica group on its own cluster: inserts/s at w:1 vs w:majority (and retryable), the
    /// secondaries' apply rate, and failover time over repeated kill -9 of the primary.
    Replication(ReplicationBenchArgs),
    /// An indexed range query vs a collection scan (in-process shard), and a `$group` over a
    /// collection split over two shards vs the same on one shard.
    Query(QueryBenchArgs),
}

#[derive(Debug, Args)]
pub struct QueryBenchArgs {
    /// Documents of the in-process index benchmark.
    #[arg(long, default_value_t = 1_000_000)]
    pub docs: usize,
    /// Range queries per access path.
    #[arg(long, default_value_t = 50)]
    pub queries: usize,
    /// Documents inserted to measure what indexes cost writes.
    #[arg(long, default_value_t = 100_000)]
    pub write_docs: usize,
    /// Documents of the cluster `$group` benchmark (loaded twice: sharded and unsharded).
    #[arg(long, default_value_t = 200_000)]
    pub cluster_docs: usize,
    /// Runs of each `$group` (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReplicationBenchArgs {
    /// Members of the replica group.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Single-document inserts per write-concern mode.
    #[arg(long, default_value_t = 20_000)]
    pub inserts: usize,
    /// Concurrent client tasks of the insert loads.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Kills of the primary measured for failover time.
    #[arg(long, default_value_t = 20)]
    pub kills: usize,
    /// Padding bytes per inserted document.
    #[arg(long, default_value_t = 100)]
    pub doc_bytes: usize,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BalancerBenchArgs {
    /// A router of a running cluster with at least two shards.
    #[arg(long, default_value = "mongodb://127.0.0.1:27017")]
    pub uri: String,
    /// The cluster's config servers (the extra shard the benchmark starts joins with them).
    #[arg(long, default_value = "127.0.0.1:27019,127.0.0.1:27020,127.0.0.1:27021")]
    pub config: String,
    /// MiB of documents to balance.
    #[arg(long, default_value_t = 256)]
    pub data_mib: u64,
    /// Padding bytes per document.
    #[arg(long, default_value_t = 1024)]
    pub doc_bytes: usize,
    /// Chunk size during the run (MiB); set back to MongoDB's default 128 at the end.
    #[arg(long, default_value_t = 8)]
    pub chunk_mib: u32,
    /// Client tasks of the 80/20 find/update load.
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
    /// Seconds of the load with the balancer off.
    #[arg(long, default_value_t = 30)]
    pub load_secs: u64,
    /// Longest a balancing phase may take.
    #[arg(long, default_value_t = 600)]
    pub balance_max_secs: u64,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct MigrationBenchArgs {
    /// A router of a running cluster with at least two shards.
    #[arg(long, default_value = "mongodb://127.0.0.1:27017")]
    pub uri: String,
    /// MiB of documents in the migrated chunk.
    #[arg(long, default_value_t = 64)]
    pub data_mib: u64,
    /// Padding bytes per document.
    #[arg(long, default_value_t = 1024)]
    pub doc_bytes: usize,
    /// Moves measured on the idle cluster.
    #[arg(long, default_value_t = 6)]
    pub moves: usize,
    /// Client tasks of the 80/20 find/update load.
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
    /// Seconds of each load phase (without and with migrations).
    #[arg(long, default_value_t = 30)]
    pub load_secs: u64,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct YcsbArgs {
    /// Workload property file (YCSB's `-P`), e.g. bench/workloads/workloada; repeatable.
    #[arg(short = 'P', value_name = "FILE")]
    pub workload: Vec<PathBuf>,
    /// One workload property (YCSB's `-p`), overriding the files; repeatable.
    #[arg(short = 'p', value_name = "KEY=VALUE")]
    pub property: Vec<String>,
    /// Endpoint: `mongodb://...` (Shoal's router or any MongoDB) or `postgres://...` (JSONB rows).
    #[arg(long, default_value = "mongodb://127.0.0.1:27017/ycsb")]
    pub uri: String,
    #[command(flatten)]
    pub mongo: MongoArgs,
    /// Load phase: drop the table first (otherwise loading over existing keys fails per record).
    #[arg(long)]
    pub fresh: bool,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write PNG charts (throughput over time, latency percentiles) into this directory.
    #[arg(long, value_name = "DIR")]
    pub charts: Option<PathBuf>,
    /// Server processes whose CPU per operation is reported, each with its descendants:
    /// `$(pgrep -f 'shoal up')`, or PostgreSQL's postmaster (first line of `postmaster.pid`).
    #[arg(long, value_delimiter = ',', value_name = "PID,...")]
    pub server_pids: Vec<u32>,
}

#[derive(Debug, Args)]
pub struct MongoArgs {
    /// Write concern `w` for MongoDB-protocol targets: 1, 2, ... or majority [default: the URI's,
    /// else the server's, which is majority and journaled on Shoal].
    #[arg(long)]
    pub write_concern: Option<String>,
    /// Write concern `j` for MongoDB-protocol targets.
    #[arg(long)]
    pub journal: Option<bool>,
    /// Read preference for MongoDB-protocol targets: primary, primaryPreferred, secondary,
    /// secondaryPreferred, nearest.
    #[arg(long)]
    pub read_preference: Option<String>,
}

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// Shoal's router (start one with `shoal up`).
    #[arg(long, default_value = "mongodb://127.0.0.1:27017/ycsb")]
    pub shoal_uri: String,
    /// PostgreSQL (bench/postgres.sh start prints this URL).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:55432/ycsb")]
    pub postgres_uri: String,
    /// Record payload sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256,2000,8192",
          value_parser = clap::value_parser!(u64).range(8..=1_048_576))]
    pub sizes: Vec<u64>,
    /// Client thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,96,128",
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub threads: Vec<u64>,
    /// Records loaded in every cell.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub records: u64,
    /// Operations per run phase.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub operations: u64,
    /// Time limit per run phase, in seconds (loads always insert every record).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_seconds: u64,
    /// Fields per record (each `size / fields` bytes).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub fields: u64,
    /// Directory for report.md, results.json and the charts.
    #[arg(long, default_value = "bench-results/matrix")]
    pub out: PathBuf,
    #[command(flatten)]
    pub mongo: MongoArgs,
    /// Shoal's server processes (with descendants) for CPU per operation: `shoal up`'s pid.
    #[arg(long, value_delimiter = ',', value_name = "PID,...")]
    pub shoal_pids: Vec<u32>,
    /// PostgreSQL's postmaster (with its backends) for CPU per operation.
    #[arg(long, value_delimiter = ',', value_name = "PID,...")]
    pub postgres_pids: Vec<u32>,
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
    /// Serve `/metrics` (Prometheus text) over HTTP on this port, on the listen address's IP
    /// (0 picks a free port). Absent: not served; `shoal up` gives every process its port + 1000.
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// This member's address as the catalog lists it (`host:port`); default: the listen address.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Directory holding this shard's data.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Config servers (`host:port,host:port,...`); the shard reads the catalog from them.
    #[arg(long, value_delimiter = ',')]
    pub config: Vec<String>,
    /// Test crash points, `name=exit,...` (also read from SHOAL_FAILPOINTS); see the shard's
    /// `migration::failpoint`.
    #[arg(long, default_value = "")]
    pub failpoints: String,
    /// Oplog size cap in MiB (MongoDB's `--oplogSize`); the oldest entries are truncated past it.
    /// Default: 1024.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub oplog_size_mb: Option<u64>,
    /// Seconds between TTL monitor passes (MongoDB's `ttlMonitorSleepSecs`).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub ttl_monitor_secs: u64,
    #[command(flatten)]
    pub cluster_auth: ClusterAuthArgs,
    #[command(flatten)]
    pub tracing: TracingArgs,
    #[command(flatten)]
    pub child: ChildArgs,
}

#[derive(Debug, Args)]
pub struct RouterArgs {
    /// MongoDB wire-protocol listen address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:27017")]
    pub listen: SocketAddr,
    /// Serve `/metrics` (Prometheus text) over HTTP on this port, on the listen address's IP
    /// (0 picks a free port). Absent: not served; `shoal up` gives every process its port + 1000.
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// gRPC endpoint of the one shard to forward to when the router has no `--config` (legacy
    /// single-shard mode); with `--config` shards are found in the catalog and this is unused.
    #[arg(long, default_value = "http://127.0.0.1:27101")]
    pub shard: String,
    /// Config servers (`host:port,host:port,...`) holding the cluster catalog; the router routes
    /// by it. Without them the sharding admin commands and the `config` database are unavailable.
    #[arg(long, value_delimiter = ',')]
    pub config: Vec<String>,
    /// Require authentication and check every command's privileges (MongoDB's `--auth`,
    /// `security.authorization: enabled`).
    #[arg(long)]
    pub auth: bool,
    /// How long a failed authentication waits before it answers.
    #[arg(long, default_value_t = 100)]
    pub auth_failed_delay_ms: u64,
    /// TLS on the client port (`net.tls.mode`): disabled, allowTLS, preferTLS (both accept TLS and
    /// plaintext) or requireTLS. Needs `--tlsCertificateKeyFile`; with `--tlsCAFile` clients must
    /// present a certificate it signed.
    #[arg(long = "tlsMode", default_value = "disabled", value_parser = ["disabled", "allowTLS", "preferTLS", "requireTLS"])]
    pub tls_mode: String,
    /// Most client connections at once (`net.maxIncomingConnections`); the open-file limit may
    /// cap it lower.
    #[arg(long = "maxConns", default_value_t = shoal_router::settings::MAX_INCOMING_CONNECTIONS_DEFAULT)]
    pub max_conns: usize,
    /// Connections waiting to be accepted (`net.listenBacklog`) [default: the system's
    /// net.core.somaxconn].
    #[arg(long = "listenBacklog")]
    pub listen_backlog: Option<u32>,
    /// Where the audit log goes (`auditLog.destination`): `file`, with `--auditPath`.
    #[arg(long = "auditDestination", value_parser = ["file"], requires = "audit_path")]
    pub audit_destination: Option<String>,
    /// The audit log file (JSON lines, appended).
    #[arg(long = "auditPath", value_name = "PATH")]
    pub audit_path: Option<PathBuf>,
    /// How long a client may pause in the middle of a message before its connection is closed.
    #[arg(long, default_value_t = 60_000)]
    pub message_stall_timeout_ms: u64,
    /// With `--tlsCAFile`: accept clients that present no certificate (those that do are still
    /// verified).
    #[arg(long = "tlsAllowConnectionsWithoutCertificates")]
    pub tls_allow_connections_without_certificates: bool,
    #[command(flatten)]
    pub balancer: BalancerArgs,
    #[command(flatten)]
    pub cluster_auth: ClusterAuthArgs,
    #[command(flatten)]
    pub tracing: TracingArgs,
    #[command(flatten)]
    pub child: ChildArgs,
}

/// The router's balancer (it runs with `--config`; only the router holding the lease acts).
#[derive(Debug, Args)]
pub struct BalancerArgs {
    /// Do not run the balancer in this router.
    #[arg(long)]
    pub no_balancer: bool,
    /// Pause between balancer rounds that did nothing (1 s after one that did something, 100 ms
    /// when no client request reached a sharded collection in the shards' load window).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub balancer_interval_ms: u64,
    /// A chunk above this many requests/s is hot and split by load.
    #[arg(long, default_value_t = 2500.0)]
    pub balancer_load_split_ops: f64,
    /// How long a chunk must stay hot before it is split by load.
    #[arg(long, default_value_t = 10_000)]
    pub balancer_load_split_after_ms: u64,
    /// A boundary a load split made is not merged away for this long.
    #[arg(long, default_value_t = 600_000)]
    pub balancer_merge_cooldown_ms: u64,
    /// Latency target passed to each balancer migration's donor (admission control; 0 = off).
    #[arg(long, default_value_t = 50)]
    pub migration_latency_target_ms: u32,
}

#[derive(Debug, Args)]
pub struct ConfigsvrArgs {
    /// This server's Raft node id (1, 2, 3, ...), unique in the config cluster. Absent: the id
    /// `--peers` gives `--advertise` (how a StatefulSet's pods, which share one command line, find
    /// theirs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), required_unless_present = "advertise")]
    pub id: Option<u64>,
    /// This server's address as `--peers` lists it (`host:port`); names its id when `--id` is absent.
    #[arg(long, requires = "peers", conflicts_with = "id")]
    pub advertise: Option<String>,
    /// gRPC listen address, for peers and clients alike.
    #[arg(long, default_value = "127.0.0.1:27019")]
    pub listen: SocketAddr,
    /// Serve `/metrics` (Prometheus text) over HTTP on this port, on the listen address's IP
    /// (0 picks a free port). Absent: not served; `shoal up` gives every process its port + 1000.
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Directory holding this server's Raft log and snapshots.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Voters of the cluster, this server included: `1=host:port,2=host:port,3=host:port`.
    #[arg(long, value_parser = shoal_configsvr::server::parse_peers)]
    pub peers: Option<BTreeMap<u64, String>>,
    /// Form the cluster from --peers (or a one-node cluster) unless this server or any peer
    /// already has Raft state; never re-initializes. Only the lowest id of `--peers` acts on it, so
    /// every member may be given it.
    #[arg(long)]
    pub init: bool,
    /// Take a catalog snapshot (and purge the log behind it) after this many log entries.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_logs_since_last: u64,
    /// Log entries kept behind a snapshot for followers that lag a little.
    #[arg(long, default_value_t = 1000)]
    pub snapshot_logs_to_keep: u64,
    #[command(flatten)]
    pub cluster_auth: ClusterAuthArgs,
    #[command(flatten)]
    pub tracing: TracingArgs,
    #[command(flatten)]
    pub child: ChildArgs,
}

/// How the cluster's processes authenticate each other, in MongoDB's option names.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterAuthArgs {
    /// `keyFile` (a shared key; the default when `--keyFile` is given) or `x509` (TLS with
    /// certificates the cluster CA signed, both ways). Absent: peers are not authenticated.
    #[arg(long = "clusterAuthMode", value_parser = ["keyFile", "x509"])]
    pub cluster_auth_mode: Option<String>,
    /// The cluster's shared key (6 to 1024 base64 characters; readable by its owner only).
    #[arg(long = "keyFile", value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// This process's certificate and private key (PEM), for TLS.
    #[arg(long = "tlsCertificateKeyFile", value_name = "PATH")]
    pub tls_certificate_key_file: Option<PathBuf>,
    /// The certificate(s) of the CA that signs the cluster's (and clients') certificates.
    #[arg(long = "tlsCAFile", value_name = "PATH")]
    pub tls_ca_file: Option<PathBuf>,
    /// The certificate presented to other cluster members under x509 (default:
    /// `--tlsCertificateKeyFile`).
    #[arg(long = "tlsClusterFile", value_name = "PATH")]
    pub tls_cluster_file: Option<PathBuf>,
}

impl ClusterAuthArgs {
    /// The flags again, as a command line (what `shoal up` starts a server with).
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        let mut out: Vec<std::ffi::OsString> = Vec::new();
        if let Some(mode) = &self.cluster_auth_mode {
            out.extend(["--clusterAuthMode".into(), mode.into()]);
        }
        let paths = [
            ("--keyFile", &self.key_file),
            ("--tlsCertificateKeyFile", &self.tls_certificate_key_file),
            ("--tlsCAFile", &self.tls_ca_file),
            ("--tlsClusterFile", &self.tls_cluster_file),
        ];
        for (flag, path) in paths {
            if let Some(path) = path {
                out.extend([flag.into(), path.into()]);
            }
        }
        out
    }
}

/// Where a server exports its request spans (docs/operations.md, "Tracing").
#[derive(Debug, Args)]
pub struct TracingArgs {
    /// An OpenTelemetry collector's OTLP/gRPC endpoint (`http://host:4317`): the server sends
    /// its spans there, and a router's shard requests carry their trace context. Absent: no export.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
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
    /// Start a spec whose bind_ip is not loopback although it has no authorization and cluster
    /// authentication (anyone who reaches a port may read and write everything).
    #[arg(long, alias = "allow-non-loopback")]
    pub insecure: bool,
    /// Start only the processes of this host (a `host:` of the spec, or its bind_ip for processes
    /// without one): one command per machine brings up a cluster spread over machines.
    #[arg(long, value_name = "ADDRESS")]
    pub host: Option<String>,
}

#[derive(Debug, Args)]
pub struct SecretsArgs {
    /// Cluster spec [default: ./deploy/local.yaml if present, else a built-in copy of it].
    #[arg(short = 'f', long = "file", value_name = "SPEC.yaml")]
    pub file: Option<PathBuf>,
    /// Where to write them (`cluster.key`, `pki/`): copy them to the same place under every
    /// host's `shoal up --data-dir`.
    #[arg(long, default_value = "shoal-data")]
    pub data_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct RestartArgs {
    /// Restart one process at a time so the cluster keeps serving: per shard the secondaries,
    /// then the primary after it steps down; config servers one at a time, the leader last;
    /// routers one at a time. (The only mode offered.)
    #[arg(long, required = true)]
    pub rolling: bool,
    #[arg(short = 'f', long = "file", value_name = "SPEC.yaml")]
    pub file: Option<PathBuf>,
    /// The `--data-dir` of the `shoal up` whose processes to restart (its control socket is there).
    #[arg(long, default_value = "shoal-data")]
    pub data_dir: PathBuf,
    /// Restart only this host's processes (what `shoal up --host` runs here).
    #[arg(long, value_name = "ADDRESS")]
    pub host: Option<String>,
    /// A user to authenticate as, when the routers require authentication.
    #[arg(short = 'u', long)]
    pub username: Option<String>,
    /// Its password (or set SHOAL_PASSWORD).
    #[arg(short = 'p', long, env = "SHOAL_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The database the user is defined on.
    #[arg(long = "authenticationDatabase", default_value = "admin")]
    pub authentication_database: String,
}
