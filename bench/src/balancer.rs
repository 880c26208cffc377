//! `shoal bench balancer`: how long the balancer takes to spread N MiB, and what spreading a
//! freshly added shard costs a foreground load — against a running cluster (`shoal up`), through a
//! router with the official driver. The benchmark starts its own extra shard process and removes
//! it again at the end, so the cluster is left as it was found.
//!
//! ```text
//!  1. load     bench_balancer.data {_id: 0..n, pad} sharded on _id, balancer stopped: every
//!              document in one chunk on the database's primary shard
//!  2. spread   balancerStart -> until balancerCollectionStatus says compliant  => time, MiB/s
//!  3. add      balancerStop, start `shoal shard` (temp dir), addShard
//!  4. off      80/20 find/update by random _id for `load_secs`, balancer stopped
//!  5. on       the same load, balancerStart, until compliant (the new shard filled)
//!  6. clean    drop the database, removeShard the extra shard until completed, stop it
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bson::{Document, doc};
use mongodb::Client;

use crate::load::{LoadStats, eighty_twenty};
use crate::procs::Server;

const DB: &str = "bench_balancer";
const COLL: &str = "data";
/// The extra shard's name in the catalog.
const EXTRA_SHARD: &str = "bench_extra";
/// How often the benchmark asks whether the collection is balanced.
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct BalancerOptions {
    /// A router: `mongodb://127.0.0.1:27017`.
    pub uri: String,
    /// The config servers, for the extra shard's `--config`.
    pub config: String,
    /// The `shoal` executable (the extra shard runs it).
    pub exe: PathBuf,
    pub data_mib: u64,
    pub doc_bytes: usize,
    /// The cluster's chunk size during the run (MiB), restored to 128 at the end.
    pub chunk_mib: u32,
    pub threads: usize,
    /// Length of the load with the balancer off.
    pub load_secs: u64,
    /// Longest a balancing phase may take before the benchmark gives up.
    pub balance_max_secs: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BalancerReport {
    pub docs: u64,
    pub data_bytes: u64,
    pub shards_before: usize,
    /// Step 2: from balancerStart to compliant, and the migrations it took.
    pub spread_ms: f64,
    pub spread_moves: usize,
    /// Step 4 and 5.
    pub load_off: LoadStats,
    pub load_on: LoadStats,
    pub fill_ms: f64,
}

pub async fn run(opts: &BalancerOptions) -> anyhow::Result<BalancerReport> {
    let client = Client::with_uri_str(&opts.uri).await.context("connecting to the router")?;
    let admin = client.database("admin");
    let shards_before = shard_count(&client).await?;
    if shards_before < 2 {
        bail!("the balancer benchmark needs at least two shards; the cluster has {shards_before}");
    }
    let settings = client.database("config").collection::<Document>("settings");
    settings.update_one(doc! { "_id": "chunksize" }, doc! { "$set": { "value": opts.chunk_mib } }).upsert(true).await?;
    admin.run_command(doc! { "balancerStop": 1 }).await?;

    let coll = crate::load::fresh_sharded(&client, DB, COLL).await?;
    let (docs, data_bytes) = crate::load::fill(&coll, opts.data_mib, opts.doc_bytes).await?;

    let since = bson::DateTime::now();
    let started = Instant::now();
    admin.run_command(doc! { "balancerStart": 1 }).await?;
    wait_compliant(&client, opts.balance_max_secs).await.context("spreading the data")?;
    let spread_ms = started.elapsed().as_secs_f64() * 1e3;
    let spread_moves = moves_since(&client, since).await?;

    admin.run_command(doc! { "balancerStop": 1 }).await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("extra-shard.log");
    let data_dir = dir.path().join("data").display().to_string();
    let args =
        ["shard", "--name", EXTRA_SHARD, "--listen", "127.0.0.1:0", "--data-dir", &data_dir, "--config", &opts.config];
    let extra = Server::start(&opts.exe, &args, &log).await?;
    let outcome = fill(&client, opts, docs, &extra).await;
    let cleanup = remove_extra(&client).await;
    extra.stop().await;
    settings.update_one(doc! { "_id": "chunksize" }, doc! { "$set": { "value": 128 } }).await?;
    let (load_off, load_on, fill_ms) = outcome?;
    cleanup?;
    Ok(BalancerReport { docs, data_bytes, shards_before, spread_ms, spread_moves, load_off, load_on, fill_ms })
}

/// Steps 3–5: add the extra shard, the load with the balancer off, then on until compliant.
async fn fill(
    client: &Client,
    opts: &BalancerOptions,
    docs: u64,
    extra: &Server,
) -> anyhow::Result<(LoadStats, LoadStats, f64)> {
    let admin = client.database("admin");
    admin.run_command(doc! { "addShard": format!("{EXTRA_SHARD}/{}", extra.addr), "name": EXTRA_SHARD }).await?;
    let coll = client.database(DB).collection::<Document>(COLL);
    let off_for = Duration::from_secs(opts.load_secs);
    let (load_off, ()) = eighty_twenty(&coll, docs, opts.threads, async {
        tokio::time::sleep(off_for).await;
        Ok(())
    })
    .await?;
    let since = bson::DateTime::now();
    let (mut load_on, fill_ms) = eighty_twenty(&coll, docs, opts.threads, async {
        let started = Instant::now();
        admin.run_command(doc! { "balancerStart": 1 }).await?;
        wait_compliant(client, opts.balance_max_secs).await.context("filling the new shard")?;
        Ok(started.elapsed().as_secs_f64() * 1e3)
    })
    .await?;
    load_on.moves = moves_since(client, since).await?;
    Ok((load_off, load_on, fill_ms))
}

/// Step 6: nothing of the benchmark left on the extra shard, then remove it from the catalog.
async fn remove_extra(client: &Client) -> anyhow::Result<()> {
    let admin = client.database("admin");
    client.database(DB).drop().await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let reply = admin.run_command(doc! { "removeShard": EXTRA_SHARD }).await?;
        if reply.get_str("state").ok() == Some("completed") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("removing {EXTRA_SHARD} did not complete: {reply}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn shard_count(client: &Client) -> anyhow::Result<usize> {
    let reply = client.database("admin").run_command(doc! { "listShards": 1 }).await?;
    Ok(reply.get_array("shards").context("listShards reply without shards")?.len())
}

/// Polls `balancerCollectionStatus` until the collection is compliant.
async fn wait_compliant(client: &Client, max_secs: u64) -> anyhow::Result<()> {
    let admin = client.database("admin");
    let deadline = Instant::now() + Duration::from_secs(max_secs);
    loop {
        let status = admin.run_command(doc! { "balancerCollectionStatus": format!("{DB}.{COLL}") }).await?;
        if status.get_bool("balancerCompliant").ok() == Some(true) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("not balanced after {max_secs} s: {status}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Migrations of the benchmark's collection committed since `since` (`config.changelog`).
async fn moves_since(client: &Client, since: bson::DateTime) -> anyhow::Result<usize> {
    let n = client
        .database("config")
        .collection::<Document>("changelog")
        .count_documents(doc! { "ns": format!("{DB}.{COLL}"), "what": "moveChunk.commit", "time": { "$gte": since } })
        .await?;
    Ok(n as usize)
}

pub fn json(r: &BalancerReport) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec_pretty(r)?)
}

/// The report as Markdown.
pub fn report(opts: &BalancerOptions, r: &BalancerReport) -> String {
    let mib = r.data_bytes as f64 / f64::from(1 << 20);
    let mut out = String::new();
    out.push_str(&format!(
        "data: {} documents of {} B padding, {mib:.1} MiB of BSON; chunk size {} MiB; {} shards + 1 added\n\n",
        r.docs, opts.doc_bytes, opts.chunk_mib, r.shards_before
    ));
    out.push_str(&format!(
        "spread from one shard over {}: {:.1} s, {} migrations ({:.1} MiB of data per second of balancing)\n\n",
        r.shards_before,
        r.spread_ms / 1e3,
        r.spread_moves,
        mib / (r.spread_ms / 1e3)
    ));
    out.push_str(&format!(
        "| 80/20 find/update, {} tasks | ops/s | p50 (us) | p99 (us) | max (us) | errors | moves |\n",
        opts.threads
    ));
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    let off = format!("balancer off, new shard empty ({} s)", opts.load_secs);
    let on = format!("balancer filling the new shard ({:.1} s)", r.fill_ms / 1e3);
    for (name, l) in [(off, &r.load_off), (on, &r.load_on)] {
        out.push_str(&format!(
            "| {name} | {:.0} | {} | {} | {} | {} | {} |\n",
            l.ops_per_sec, l.p50_us, l.p99_us, l.max_us, l.errors, l.moves
        ));
    }
    out.push_str(&format!(
        "\nwhile balancing: throughput {:.2}x, p99 {:.2}x of the balancer-off run\n",
        r.load_on.ops_per_sec / r.load_off.ops_per_sec.max(f64::MIN_POSITIVE),
        r.load_on.p99_us as f64 / (r.load_off.p99_us.max(1)) as f64
    ));
    out
}
