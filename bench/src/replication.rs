//! `shoal bench replication`: a shard replica group's costs, measured on its own cluster (three
//! config servers, one shard of `members`, one router; all processes started from this binary):
//!
//!  1. insert throughput through the router at `w: 1`, `w: "majority"` and `w: "majority"` as a
//!     retryable write (the driver's default), each the same number of single-document inserts;
//!  2. while the `w: 1` load runs, the secondaries' apply rate beside the primary's write rate
//!     (documents on each member, sampled every second), and how long they take to catch up;
//!  3. failover: the primary is killed (-9) `kills` times under a writer that inserts one document
//!     at a time (`w: "majority"`, retryable writes off, so nothing hides a lost write); failover
//!     time = kill → the first insert sent after the kill that is acknowledged. The killed member
//!     is restarted and caught up before the next kill.
//!
//! Must not: assert anything (it measures); timing lives here, never in tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bson::{Document, doc};
use mongodb::Client;
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use shoal_proto::shard::CommandRequest;
use shoal_proto::shard::shard_client::ShardClient;

use crate::procs::{Server, free_loopback_ports};

const SHARD: &str = "rs0";
const DB: &str = "replbench";
/// One gRPC call to a member (status, count).
const MEMBER_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the group may take to have a primary, or a restarted member to catch up.
const SETTLE_WAIT: Duration = Duration::from_secs(60);
/// How long one failover may take before the run gives up.
const FAILOVER_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct ReplicationOptions {
    pub exe: PathBuf,
    pub members: usize,
    pub inserts: usize,
    pub concurrency: usize,
    pub kills: usize,
    pub doc_bytes: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Throughput {
    pub label: String,
    pub ops_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ApplyRate {
    /// Documents per second on the primary during the `w: 1` load.
    pub primary_docs_per_sec: f64,
    /// Per secondary: documents per second applied during the load.
    pub secondary_docs_per_sec: Vec<f64>,
    /// Largest gap seen between the primary's and a secondary's document count.
    pub max_lag_docs: u64,
    /// From the end of the load until every secondary had every document.
    pub catch_up_ms: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplicationReport {
    pub throughput: Vec<Throughput>,
    pub apply: ApplyRate,
    /// Milliseconds from each kill to the first acknowledged insert sent after it.
    pub failover_ms: Vec<f64>,
}

struct Cluster {
    dir: tempfile::TempDir,
    exe: PathBuf,
    _config: Vec<Server>,
    members: Vec<Option<Server>>,
    member_args: Vec<Vec<String>>,
    member_addrs: Vec<String>,
    _router: Server,
    uri: String,
}

impl Cluster {
    async fn start(exe: &Path, members: usize) -> anyhow::Result<Cluster> {
        let dir = tempfile::tempdir()?;
        let ports = free_loopback_ports(3 + members)?;
        let (cfg_ports, member_ports) = ports.split_at(3);
        let peers: Vec<String> =
            cfg_ports.iter().enumerate().map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1)).collect();
        let cfg_addrs: Vec<String> = cfg_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut config = Vec::new();
        for (i, port) in cfg_ports.iter().enumerate() {
            let data = dir.path().join(format!("cfg{}", i + 1));
            let mut args = vec![
                "configsvr".to_owned(),
                "--id".into(),
                (i + 1).to_string(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--data-dir".into(),
                data.display().to_string(),
                "--peers".into(),
                peers.join(","),
            ];
            if i == 0 {
                args.push("--init".into());
            }
            config.push(start(exe, &args, &dir.path().join(format!("cfg{}.log", i + 1))).await?);
        }
        let mut member_args = Vec::new();
        let mut procs = Vec::new();
        let mut member_addrs = Vec::new();
        for (i, port) in member_ports.iter().enumerate() {
            let args = vec![
                "shard".to_owned(),
                "--name".into(),
                SHARD.into(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--data-dir".into(),
                dir.path().join(format!("m{i}")).display().to_string(),
                "--config".into(),
                cfg_addrs.join(","),
            ];
            procs.push(Some(start(exe, &args, &dir.path().join(format!("m{i}.log"))).await?));
            member_args.push(args);
            member_addrs.push(format!("127.0.0.1:{port}"));
        }
        let router_args =
            vec!["router".to_owned(), "--listen".into(), "127.0.0.1:0".into(), "--config".into(), cfg_addrs.join(",")];
        let router = start(exe, &router_args, &dir.path().join("router.log")).await?;
        let uri = format!("mongodb://{}/?directConnection=true", router.addr);
        let cluster = Cluster {
            dir,
            exe: exe.to_path_buf(),
            _config: config,
            members: procs,
            member_args,
            member_addrs,
            _router: router,
            uri,
        };
        let client = Client::with_uri_str(&cluster.uri).await?;
        let host = format!("{SHARD}/{}", cluster.member_addrs.join(","));
        client.database("admin").run_command(doc! { "addShard": host, "name": SHARD }).await?;
        cluster.wait_primary(SETTLE_WAIT).await?;
        Ok(cluster)
    }

    /// The index of the member that reports itself PRIMARY.
    async fn wait_primary(&self, within: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            for (i, addr) in self.member_addrs.iter().enumerate() {
                if self.members[i].is_some()
                    && let Ok(s) = member_command(addr, "admin", doc! { "replSetGetStatus": 1 }).await
                    && s.get_str("stateStr").is_ok_and(|v| v == "PRIMARY")
                {
                    return Ok(i);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("no primary within {within:?}")
    }

    async fn count(&self, i: usize, coll: &str) -> anyhow::Result<u64> {
        let reply = member_command(&self.member_addrs[i], DB, doc! { "count": coll, "query": {} }).await?;
        Ok(match reply.get("n") {
            Some(bson::Bson::Int32(n)) => *n as u64,
            Some(bson::Bson::Int64(n)) => *n as u64,
            Some(bson::Bson::Double(n)) => *n as u64,
            other => bail!("count: unexpected n {other:?}"),
        })
    }

    fn kill9(&mut self, i: usize) {
        if let Some(pid) = self.members[i].take().and_then(|s| s.pid()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }

    async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let log = self.dir.path().join(format!("m{i}.restart.log"));
        self.members[i] = Some(start(&self.exe, &self.member_args[i], &log).await?);
        Ok(())
    }
}

async fn start(exe: &Path, args: &[String], log: &Path) -> anyhow::Result<Server> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(exe, &args, log).await
}

/// A command sent straight to a member over gRPC (secondaries answer reads).
async fn member_command(addr: &str, db: &str, body: Document) -> anyhow::Result<Document> {
    let connect = ShardClient::connect(format!("http://{addr}"));
    let mut client = tokio::time::timeout(MEMBER_CALL_TIMEOUT, connect).await.context("connect timed out")??;
    let request = CommandRequest {
        request_id: "replbench".into(),
        db: db.into(),
        body: body.to_vec()?.into(),
        secondary_ok: true,
        ..Default::default()
    };
    let reply =
        tokio::time::timeout(MEMBER_CALL_TIMEOUT, client.command(request)).await.context("call timed out")??;
    let reply = reply.into_inner();
    if let Some(e) = reply.error {
        bail!("{} ({})", e.errmsg, e.code);
    }
    Ok(Document::from_reader(&mut &reply.body[..])?)
}

fn collection(client: &Client, name: &str, w: Acknowledgment) -> mongodb::Collection<Document> {
    let wc = WriteConcern::builder().w(w).build();
    client.database(DB).collection_with_options(name, CollectionOptions::builder().write_concern(wc).build())
}

async fn insert_load(
    client: &Client,
    name: &str,
    w: Acknowledgment,
    opts: &ReplicationOptions,
) -> anyhow::Result<crate::measure::Summary> {
    let coll = collection(client, name, w);
    let pad = "x".repeat(opts.doc_bytes);
    crate::measure::run(opts.inserts, opts.concurrency, move |i| {
        let (coll, pad) = (coll.clone(), pad.clone());
        async move {
            coll.insert_one(doc! { "_id": i as i64, "p": pad }).await?;
            Ok(())
        }
    })
    .await
}

fn throughput(label: &str, s: &crate::measure::Summary) -> Throughput {
    Throughput {
        label: label.into(),
        ops_per_sec: s.ops_per_sec(),
        p50_us: s.p50_us,
        p99_us: s.p99_us,
        errors: s.errors,
    }
}

pub async fn run(opts: &ReplicationOptions) -> anyhow::Result<ReplicationReport> {
    let mut cluster = Cluster::start(&opts.exe, opts.members).await?;
    let retrying = Client::with_uri_str(&cluster.uri).await?;
    let plain = Client::with_uri_str(format!("{}&retryWrites=false", cluster.uri)).await?;
    let mut report = ReplicationReport {
        throughput: Vec::new(),
        apply: ApplyRate {
            primary_docs_per_sec: 0.0,
            secondary_docs_per_sec: Vec::new(),
            max_lag_docs: 0,
            catch_up_ms: 0.0,
        },
        failover_ms: Vec::new(),
    };

    // w:1 with the members sampled every second while it runs.
    let primary = cluster.wait_primary(SETTLE_WAIT).await?;
    let load = {
        let (client, opts) = (plain.clone(), opts.clone());
        tokio::spawn(async move { insert_load(&client, "w1", Acknowledgment::Nodes(1), &opts).await })
    };
    let started = Instant::now();
    let mut samples: Vec<(f64, Vec<u64>)> = Vec::new();
    while !load.is_finished() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut counts = Vec::new();
        for i in 0..opts.members {
            counts.push(cluster.count(i, "w1").await.unwrap_or(0));
        }
        samples.push((started.elapsed().as_secs_f64(), counts));
    }
    let w1 = load.await??;
    let load_end = Instant::now();
    let total = opts.inserts as u64;
    loop {
        let mut all = true;
        for i in 0..opts.members {
            all &= cluster.count(i, "w1").await.unwrap_or(0) >= total;
        }
        if all || load_end.elapsed() > SETTLE_WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    report.apply.catch_up_ms = load_end.elapsed().as_secs_f64() * 1e3;
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let secs = (last.0 - first.0).max(1e-9);
        let rates: Vec<f64> = (0..opts.members).map(|i| last.1[i].saturating_sub(first.1[i]) as f64 / secs).collect();
        report.apply.primary_docs_per_sec = rates[primary];
        report.apply.secondary_docs_per_sec =
            rates.iter().enumerate().filter(|(i, _)| *i != primary).map(|(_, r)| *r).collect();
        report.apply.max_lag_docs = samples
            .iter()
            .flat_map(|(_, c)| (0..opts.members).filter(|i| *i != primary).map(|i| c[primary].saturating_sub(c[i])))
            .max()
            .unwrap_or(0);
    }
    report.throughput.push(throughput("w:1", &w1));
    let majority = insert_load(&plain, "wmaj", Acknowledgment::Majority, opts).await?;
    report.throughput.push(throughput("w:majority", &majority));
    let retryable = insert_load(&retrying, "wmajretry", Acknowledgment::Majority, opts).await?;
    report.throughput.push(throughput("w:majority, retryable", &retryable));

    // Failover under a one-at-a-time writer.
    let coll = collection(&plain, "failover", Acknowledgment::Majority);
    let mut next_id = 0i64;
    for round in 0..opts.kills {
        let primary = cluster.wait_primary(SETTLE_WAIT).await?;
        coll.insert_one(doc! { "_id": next_id }).await.context("a write before the kill")?;
        next_id += 1;
        cluster.kill9(primary);
        let killed = Instant::now();
        loop {
            if killed.elapsed() > FAILOVER_WAIT {
                bail!("round {round}: no write accepted within {FAILOVER_WAIT:?} of the kill");
            }
            let id = next_id;
            next_id += 1;
            if coll.insert_one(doc! { "_id": id }).await.is_ok() {
                break;
            }
        }
        report.failover_ms.push(killed.elapsed().as_secs_f64() * 1e3);
        cluster.restart(primary).await?;
        // The next kill starts from a whole group: the restarted member caught up.
        let want = cluster.count(cluster.wait_primary(SETTLE_WAIT).await?, "failover").await?;
        let deadline = Instant::now() + SETTLE_WAIT;
        while cluster.count(primary, "failover").await.unwrap_or(0) < want {
            if Instant::now() > deadline {
                bail!("round {round}: the restarted member did not catch up");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(report)
}

pub fn json(r: &ReplicationReport) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec_pretty(r)?)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn report(opts: &ReplicationOptions, r: &ReplicationReport) -> String {
    let mut out = format!(
        "replica group of {} members; {} inserts of {} B per mode, {} clients\n\n",
        opts.members, opts.inserts, opts.doc_bytes, opts.concurrency
    );
    out.push_str("| write concern | inserts/s | p50 ms | p99 ms | errors | vs w:1 |\n|---|---|---|---|---|---|\n");
    let base = r.throughput.first().map_or(1.0, |t| t.ops_per_sec.max(1e-9));
    for t in &r.throughput {
        out.push_str(&format!(
            "| {} | {:.0} | {:.2} | {:.2} | {} | {:.2}× |\n",
            t.label,
            t.ops_per_sec,
            t.p50_us as f64 / 1e3,
            t.p99_us as f64 / 1e3,
            t.errors,
            t.ops_per_sec / base
        ));
    }
    let secondaries: Vec<String> = r.apply.secondary_docs_per_sec.iter().map(|s| format!("{s:.0}")).collect();
    out.push_str(&format!(
        "\napply rate during the w:1 load: primary {:.0} docs/s, secondaries {} docs/s; largest lag {} docs; \
         caught up {:.0} ms after the load ended\n",
        r.apply.primary_docs_per_sec,
        secondaries.join(", "),
        r.apply.max_lag_docs,
        r.apply.catch_up_ms
    ));
    let mut sorted = r.failover_ms.clone();
    sorted.sort_by(f64::total_cmp);
    out.push_str(&format!(
        "\nfailover (kill -9 of the primary → first acknowledged w:majority insert), {} kills: p50 {:.0} ms, \
         p90 {:.0} ms, max {:.0} ms, min {:.0} ms\n",
        sorted.len(),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.9),
        sorted.last().copied().unwrap_or(0.0),
        sorted.first().copied().unwrap_or(0.0)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert_eq!(percentile(&v, 1.0), 4.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
