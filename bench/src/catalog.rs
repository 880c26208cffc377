//! `shoal bench catalog`: catalog commits/s and linearizable reads/s of a 3-node Shoal config
//! cluster, beside an etcd cluster of the same size running the same-shaped load on the same
//! machine in the same run.
//!
//! ```text
//!  shoal: 3 x `shoal configsvr` --ConfigClient (gRPC, sent to the leader)--> commit / read
//!         commit = AcquireLease{bench-<i mod 256>, holder bench} (a renewal: always succeeds,
//!                  moves the lease's expiry, one Raft entry, fdatasync on a quorum)
//!         read   = Query{routing_table bench.c, linearizable} (ReadIndex round, then a 1-chunk table)
//!  etcd:  N x `etcd` --KvClient (gRPC, sent to the leader)--> commit / read
//!         commit = Put{bench/lease/<i mod 256>, <the encoded bytes of Shoal's command>}
//!         read   = Range{bench/routing/bench.c} (linearizable: serializable=false), value of the
//!                  size of Shoal's routing-table reply
//! ```
//! For each client count the four measurements run back to back (shoal commits, etcd commits,
//! shoal reads, etcd reads), so both systems see the same machine state. Server CPU time per
//! operation comes from `/proc/<pid>/stat` of the server processes around each measurement. Last,
//! [`crate::catalog_reads`] grows the catalog and compares a router's whole and narrow reads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{Command, Epoch, InitialChunks, KeyPattern, Reply};

use crate::etcd::{self, EtcdCluster};
use crate::measure::{self, Summary};
use crate::procs::{self, Server};

/// Config servers in the Shoal cluster.
pub const SHOAL_NODES: usize = 3;
/// Distinct lease names (and etcd keys) the commits cycle through; below `LEASES_MAX`.
pub const LEASE_NAMES: usize = 256;
const _: () = assert!(LEASE_NAMES <= shoal_configsvr::catalog::LEASES_MAX);
/// Operations of each kind run before measuring, to open connections and elect nothing mid-run.
pub const WARMUP_OPS: usize = 200;
const NS: &str = "bench.c";
const LEASE_TTL_MS: u64 = 120_000;
/// How long the Shoal cluster may take to elect a leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Operations per measurement (one system, one kind, one client count).
    pub ops: usize,
    /// Concurrent client counts, one row each.
    pub clients: Vec<usize>,
    /// The `shoal` executable that provides `configsvr`.
    pub exe: PathBuf,
    /// The `etcd` executable.
    pub etcd: PathBuf,
    pub etcd_members: usize,
}

/// One system's measurement of one kind of operation.
pub struct Cell {
    pub summary: Summary,
    /// CPU time the system's server processes used during the measurement.
    pub server_cpu: Duration,
}

impl Cell {
    pub fn cpu_us_per_op(&self) -> f64 {
        self.server_cpu.as_secs_f64() * 1e6 / self.summary.ops.max(1) as f64
    }
}

pub struct Row {
    pub clients: usize,
    pub shoal_commit: Cell,
    pub etcd_commit: Cell,
    pub shoal_read: Cell,
    pub etcd_read: Cell,
}

pub struct CatalogResult {
    pub rows: Vec<Row>,
    /// Bytes of one Shoal command / etcd put value, and of one read's payload.
    pub commit_bytes: usize,
    pub read_bytes: usize,
    /// Leader terms before and after the measurements: a change means an election mid-run.
    pub shoal_terms: (u64, u64),
    pub etcd_terms: (u64, u64),
    /// Single-client Shoal variants that locate the cost: a read without the quorum round, and
    /// commits and reads sent to a follower (which forwards them to the leader).
    pub diagnostics: Vec<(&'static str, Cell)>,
    /// What a router's catalog reads cost, whole vs narrow ([`crate::catalog_reads`]).
    pub router_reads: Vec<crate::catalog_reads::ReadCost>,
}

/// Operations of each diagnostic measurement, at most.
pub const DIAGNOSTIC_OPS_MAX: usize = 500;

pub fn validate(opts: &CatalogOptions) -> anyhow::Result<()> {
    anyhow::ensure!(opts.ops >= 1, "--ops must be at least 1");
    anyhow::ensure!(!opts.clients.is_empty(), "--clients needs at least one client count");
    if let Some(bad) = opts.clients.iter().find(|c| !(1..=4096).contains(*c)) {
        anyhow::bail!("--clients: {bad} is outside 1..=4096");
    }
    anyhow::ensure!((1..=7).contains(&opts.etcd_members), "--etcd-members must be 1..=7");
    anyhow::ensure!(
        opts.etcd.is_file(),
        "etcd binary {} not found (install it with bench/etcd.sh install)",
        opts.etcd.display()
    );
    Ok(())
}

fn lease_command(i: usize) -> Command {
    Command::AcquireLease { name: format!("bench-{}", i % LEASE_NAMES), holder: "bench".into(), ttl_ms: LEASE_TTL_MS }
}

struct ShoalCluster {
    servers: Vec<Server>,
    addrs: Vec<String>,
}

impl ShoalCluster {
    async fn start(exe: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<Self> {
        let ports = procs::free_loopback_ports(SHOAL_NODES)?;
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let peers = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
        let mut servers = Vec::new();
        // The node with --init last, so its peers already answer its "anyone initialized?" probe.
        for id in (1..=SHOAL_NODES).rev() {
            let data = dir.join(format!("c{id}"));
            let (id_s, data_s) = (id.to_string(), data.to_string_lossy().into_owned());
            let mut args =
                vec!["configsvr", "--id", &id_s, "--listen", &addrs[id - 1], "--data-dir", &data_s, "--peers", &peers];
            if id == 1 {
                args.push("--init");
            }
            servers.push(Server::start(exe, &args, &dir.join(format!("c{id}.log"))).await?);
        }
        Ok(Self { servers, addrs })
    }

    /// The leader's address and term once every node names the same leader.
    async fn leader(&self, client: &ConfigClient) -> anyhow::Result<(String, u64)> {
        let deadline = tokio::time::Instant::now() + LEADER_TIMEOUT;
        loop {
            let mut seen = Vec::new();
            for a in &self.addrs {
                if let Ok(m) = client.metrics(a).await {
                    seen.push((m.leader_id, m.leader_addr, m.term));
                }
            }
            if seen.len() == self.addrs.len() && seen[0].0 != 0 && seen.iter().all(|s| s.0 == seen[0].0) {
                let (_, addr, term) = seen.swap_remove(0);
                return Ok((addr, term));
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "no Shoal config leader within {LEADER_TIMEOUT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(Server::pid).collect()
    }

    async fn stop(self) {
        for s in self.servers {
            s.stop().await;
        }
    }
}

fn cpu_of(pids: &[u32]) -> Duration {
    pids.iter().filter_map(|p| procs::cpu_time(*p)).sum()
}

/// Runs `op` `ops` times from `clients` tasks and notes the CPU time of `pids` meanwhile.
pub(crate) async fn cell<F, Fut>(pids: &[u32], ops: usize, clients: usize, op: F) -> anyhow::Result<Cell>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let before = cpu_of(pids);
    let summary = measure::run(ops, clients, op).await?;
    Ok(Cell { summary, server_cpu: cpu_of(pids).saturating_sub(before) })
}

/// Sets up the catalog the reads target: one shard, one database, `bench.c` sharded in one chunk.
async fn prepare_shoal(client: &ConfigClient) -> anyhow::Result<usize> {
    let commands = [
        Command::AddShard {
            shard: "bench-shard".into(),
            replica_set: "bench-rs".into(),
            members: vec!["127.0.0.1:1".into()],
        },
        Command::CreateDatabase { name: "bench".into(), primary: "bench-shard".into(), uuid: uuid::Uuid::new_v4() },
        Command::ShardCollection {
            ns: NS.into(),
            uuid: uuid::Uuid::new_v4(),
            epoch: Epoch(*b"shoal-bench!"),
            key: KeyPattern::range(&["_id"]),
            unique: false,
            initial: InitialChunks::Single,
        },
    ];
    for c in &commands {
        let outcome = client.write(c).await.with_context(|| format!("setting up: {c}"))?;
        outcome.outcome.map_err(|e| anyhow::anyhow!("setting up: {c}: {e}"))?;
    }
    let (answer, _) = client.routing_table(NS, None, true).await?;
    anyhow::ensure!(matches!(answer, RoutingAnswer::Full(Some(_))), "{NS} has no routing table after setup");
    Ok(shoal_proto::catalog::wire::encode(&answer)?.len())
}

pub async fn run(opts: &CatalogOptions) -> anyhow::Result<CatalogResult> {
    validate(opts)?;
    let dir = tempfile::tempdir()?;
    let shoal = ShoalCluster::start(&opts.exe, dir.path()).await?;
    let etcd_dir = dir.path().join("etcd");
    std::fs::create_dir_all(&etcd_dir)?;
    let etcd = EtcdCluster::start(&opts.etcd, &etcd_dir, opts.etcd_members).await?;
    let outcome = measure_all(opts, &shoal, &etcd).await;
    etcd.stop().await;
    shoal.stop().await;
    outcome.with_context(|| format!("server logs were in {}", dir.path().display()))
}

async fn measure_all(opts: &CatalogOptions, shoal: &ShoalCluster, etcd: &EtcdCluster) -> anyhow::Result<CatalogResult> {
    let probe = ConfigClient::new(shoal.addrs.clone(), ClientSettings::default());
    let (leader, shoal_term_before) = shoal.leader(&probe).await?;
    // The leader first: the client keeps using the first server that answers, and a follower
    // would forward every request to the leader (a hop etcd's client does not pay either).
    let mut addrs = vec![leader.clone()];
    addrs.extend(shoal.addrs.iter().filter(|a| **a != leader).cloned());
    let client = Arc::new(ConfigClient::new(addrs, ClientSettings::default()));
    let read_bytes = prepare_shoal(&client).await?;
    let commit_bytes = shoal_configsvr::codec::encode(&lease_command(0))?.len();

    let etcd_leader = etcd.leader_url().await?;
    let etcd_term_before = etcd.term().await?;
    let kv = etcd::kv_client(&etcd_leader)?;
    let read_key = format!("bench/routing/{NS}").into_bytes();
    kv.clone()
        .put(etcd::pb::PutRequest { key: read_key.clone(), value: vec![b'r'; read_bytes], lease: 0 })
        .await
        .context("etcd: writing the key the reads target")?;

    let shoal_commit = {
        let c = Arc::clone(&client);
        move |i: usize| {
            let c = Arc::clone(&c);
            async move {
                match c.write(&lease_command(i)).await?.outcome {
                    Ok(Reply::Lease { .. }) => Ok(()),
                    other => anyhow::bail!("unexpected outcome {other:?}"),
                }
            }
        }
    };
    let shoal_read = {
        let c = Arc::clone(&client);
        move |_: usize| {
            let c = Arc::clone(&c);
            async move {
                match c.routing_table(NS, None, true).await?.0 {
                    RoutingAnswer::Full(Some(_)) => Ok(()),
                    other => anyhow::bail!("unexpected routing answer {other:?}"),
                }
            }
        }
    };
    let etcd_commit = {
        let kv = kv.clone();
        move |i: usize| {
            let mut kv = kv.clone();
            async move {
                let key = format!("bench/lease/{}", i % LEASE_NAMES).into_bytes();
                let value = shoal_configsvr::codec::encode(&lease_command(i))?;
                kv.put(etcd::pb::PutRequest { key, value, lease: 0 }).await?;
                Ok(())
            }
        }
    };
    let etcd_read = {
        let kv = kv.clone();
        move |_: usize| {
            let (mut kv, key) = (kv.clone(), read_key.clone());
            async move {
                let reply = kv
                    .range(etcd::pb::RangeRequest { key, serializable: false, ..Default::default() })
                    .await?
                    .into_inner();
                anyhow::ensure!(reply.kvs.len() == 1, "etcd: the read key is missing");
                Ok(())
            }
        }
    };
    let shoal_commit = Arc::new(shoal_commit);
    let shoal_read = Arc::new(shoal_read);
    let etcd_commit = Arc::new(etcd_commit);
    let etcd_read = Arc::new(etcd_read);
    let (shoal_pids, etcd_pids) = (shoal.pids(), etcd.pids());

    for (name, warm) in [
        ("shoal commits", cell(&[], WARMUP_OPS, 16, arc_op(&shoal_commit)).await?),
        ("etcd commits", cell(&[], WARMUP_OPS, 16, arc_op(&etcd_commit)).await?),
        ("shoal reads", cell(&[], WARMUP_OPS, 16, arc_op(&shoal_read)).await?),
        ("etcd reads", cell(&[], WARMUP_OPS, 16, arc_op(&etcd_read)).await?),
    ] {
        anyhow::ensure!(warm.summary.errors == 0, "warm-up of {name}: {} of {WARMUP_OPS} failed", warm.summary.errors);
    }

    let mut rows = Vec::new();
    for &clients in &opts.clients {
        rows.push(Row {
            clients,
            shoal_commit: cell(&shoal_pids, opts.ops, clients, arc_op(&shoal_commit)).await?,
            etcd_commit: cell(&etcd_pids, opts.ops, clients, arc_op(&etcd_commit)).await?,
            shoal_read: cell(&shoal_pids, opts.ops, clients, arc_op(&shoal_read)).await?,
            etcd_read: cell(&etcd_pids, opts.ops, clients, arc_op(&etcd_read)).await?,
        });
    }
    let diagnostics = diagnose(opts, shoal, &leader, &shoal_pids).await?;
    let router_reads = crate::catalog_reads::measure(opts.ops, &leader, &shoal_pids).await?;
    let shoal_term_after = shoal.leader(&probe).await?.1;
    let etcd_term_after = etcd.term().await?;
    Ok(CatalogResult {
        rows,
        commit_bytes,
        read_bytes,
        shoal_terms: (shoal_term_before, shoal_term_after),
        etcd_terms: (etcd_term_before, etcd_term_after),
        diagnostics,
        router_reads,
    })
}

async fn diagnose(
    opts: &CatalogOptions,
    shoal: &ShoalCluster,
    leader: &str,
    pids: &[u32],
) -> anyhow::Result<Vec<(&'static str, Cell)>> {
    let ops = opts.ops.min(DIAGNOSTIC_OPS_MAX);
    let to_leader = Arc::new(ConfigClient::new(vec![leader.to_owned()], ClientSettings::default()));
    let follower = shoal.addrs.iter().find(|a| *a != leader).context("no follower")?;
    let to_follower = Arc::new(ConfigClient::new(vec![follower.clone()], ClientSettings::default()));
    let read = |client: &Arc<ConfigClient>, linearizable: bool| {
        let c = Arc::clone(client);
        move |_: usize| {
            let c = Arc::clone(&c);
            async move {
                match c.routing_table(NS, None, linearizable).await?.0 {
                    RoutingAnswer::Full(Some(_)) => Ok(()),
                    other => anyhow::bail!("unexpected routing answer {other:?}"),
                }
            }
        }
    };
    let commit = |client: &Arc<ConfigClient>| {
        let c = Arc::clone(client);
        move |i: usize| {
            let c = Arc::clone(&c);
            async move { c.write(&lease_command(i)).await?.outcome.map(|_| ()).map_err(anyhow::Error::from) }
        }
    };
    Ok(vec![
        ("read, not linearizable, leader", cell(pids, ops, 1, read(&to_leader, false)).await?),
        ("linearizable read via a follower", cell(pids, ops, 1, read(&to_follower, true)).await?),
        ("commit via a follower", cell(pids, ops, 1, commit(&to_follower)).await?),
    ])
}

/// `measure::run` takes its operation by value; this shares one across measurements.
fn arc_op<F, Fut>(op: &Arc<F>) -> impl Fn(usize) -> Fut + Send + Sync + 'static
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
{
    let op = Arc::clone(op);
    move |i| op(i)
}

fn latency(s: &Summary) -> String {
    format!("{} / {}", s.p50_us, s.p99_us)
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 { format!("{:.2}×", a / b) } else { "–".into() }
}

/// Two markdown tables (commits, reads), one row per client count.
pub fn report(opts: &CatalogOptions, r: &CatalogResult) -> String {
    let mut out = format!(
        "shoal: {SHOAL_NODES} config servers; etcd: {} member(s); {} ops per cell; commit payload {} bytes, read payload {} bytes; \
         leader terms shoal {}→{}, etcd {}→{} (a change means an election during the run)\n",
        opts.etcd_members,
        opts.ops,
        r.commit_bytes,
        r.read_bytes,
        r.shoal_terms.0,
        r.shoal_terms.1,
        r.etcd_terms.0,
        r.etcd_terms.1
    );
    type CellsOf = fn(&Row) -> (&Cell, &Cell);
    let kinds: [(&str, CellsOf); 2] = [
        ("commits", |row| (&row.shoal_commit, &row.etcd_commit)),
        ("linearizable reads", |row| (&row.shoal_read, &row.etcd_read)),
    ];
    for (kind, cells) in kinds {
        out.push_str(&format!(
            "\n{kind}:\n\n| clients | shoal ops/s | etcd ops/s | shoal/etcd | shoal p50 / p99 µs | etcd p50 / p99 µs | shoal server CPU µs/op | etcd server CPU µs/op | errors shoal / etcd |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        ));
        for row in &r.rows {
            let (s, e) = cells(row);
            out.push_str(&format!(
                "| {} | {:.0} | {:.0} | {} | {} | {} | {:.0} | {:.0} | {} / {} |\n",
                row.clients,
                s.summary.ops_per_sec(),
                e.summary.ops_per_sec(),
                ratio(s.summary.ops_per_sec(), e.summary.ops_per_sec()),
                latency(&s.summary),
                latency(&e.summary),
                s.cpu_us_per_op(),
                e.cpu_us_per_op(),
                s.summary.errors,
                e.summary.errors
            ));
        }
    }
    if !r.diagnostics.is_empty() {
        out.push_str(
            "\nshoal, 1 client, where the time goes:\n\n| variant | ops/s | p50 / p99 µs | server CPU µs/op | errors |\n|---|---:|---:|---:|---:|\n",
        );
        for (name, c) in &r.diagnostics {
            out.push_str(&format!(
                "| {name} | {:.0} | {} | {:.0} | {} |\n",
                c.summary.ops_per_sec(),
                latency(&c.summary),
                c.cpu_us_per_op(),
                c.summary.errors
            ));
        }
    }
    out.push_str(&crate::catalog_reads::report(&r.router_reads));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> CatalogOptions {
        CatalogOptions {
            ops: 10,
            clients: vec![1, 16],
            exe: PathBuf::from("shoal"),
            etcd: std::env::current_exe().expect("test binary path"),
            etcd_members: 3,
        }
    }

    #[test]
    fn validates_options() {
        assert!(validate(&opts()).is_ok());
        assert!(validate(&CatalogOptions { clients: vec![], ..opts() }).is_err());
        assert!(validate(&CatalogOptions { clients: vec![1, 0], ..opts() }).is_err());
        assert!(validate(&CatalogOptions { ops: 0, ..opts() }).is_err());
        assert!(validate(&CatalogOptions { etcd_members: 0, ..opts() }).is_err());
        assert!(validate(&CatalogOptions { etcd: PathBuf::from("/nonexistent/etcd"), ..opts() }).is_err());
    }

    #[test]
    fn lease_commands_cycle_through_a_bounded_set_of_names() {
        assert_eq!(lease_command(3), lease_command(3 + LEASE_NAMES));
        assert_ne!(lease_command(3), lease_command(4));
    }

    #[test]
    fn ratio_of_zero_is_a_dash() {
        assert_eq!(ratio(1.0, 0.0), "–");
        assert_eq!(ratio(3.0, 2.0), "1.50×");
    }
}
