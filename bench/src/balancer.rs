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
//!  5. on       the same load, balancerStart, until compliant (the new shard filled) or the time
//!              limit (then reported as it stands: what moved, not compliant)
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
    /// Longest a balancing phase may take; one that is not compliant by then is reported as it
    /// stands (`Moves::compliant` false).
    pub balance_max_secs: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BalancerReport {
    pub docs: u64,
    pub data_bytes: u64,
    pub shards_before: usize,
    /// Step 2: from balancerStart to compliant (or to `balance_max_secs`), what it moved.
    pub spread_ms: f64,
    pub spread: Moves,
    /// Step 4 and 5.
    pub load_off: LoadStats,
    pub load_on: LoadStats,
    pub fill_ms: f64,
    pub fill: Moves,
}

/// What a balancing phase did, from `config.changelog`, and whether it ended compliant: a phase
/// that runs out of time is reported with what it got to, not dropped.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Moves {
    pub compliant: bool,
    pub moves: usize,
    pub cloned_bytes: u64,
    /// Time donors paused their clones for the foreground's latency (`throttledMillis`).
    pub throttled_ms: u64,
    pub max_critical_section_ms: u64,
    /// `balancerCollectionStatus` at the end, when not compliant.
    pub last_status: Option<String>,
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
    let status = wait_compliant(&client, opts.balance_max_secs).await.context("spreading the data")?;
    let spread_ms = started.elapsed().as_secs_f64() * 1e3;
    let spread = moves_since(&client, since, status).await?;

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
    let (load_off, load_on, fill_ms, fill) = outcome?;
    cleanup?;
    Ok(BalancerReport { docs, data_bytes, shards_before, spread_ms, spread, load_off, load_on, fill_ms, fill })
}

/// Steps 3–5: add the extra shard, the load with the balancer off, then on until compliant.
async fn fill(
    client: &Client,
    opts: &BalancerOptions,
    docs: u64,
    extra: &Server,
) -> anyhow::Result<(LoadStats, LoadStats, f64, Moves)> {
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
    let (mut load_on, (fill_ms, status)) = eighty_twenty(&coll, docs, opts.threads, async {
        let started = Instant::now();
        admin.run_command(doc! { "balancerStart": 1 }).await?;
        let status = wait_compliant(client, opts.balance_max_secs).await.context("filling the new shard")?;
        Ok((started.elapsed().as_secs_f64() * 1e3, status))
    })
    .await?;
    let fill = moves_since(client, since, status).await?;
    load_on.moves = fill.moves;
    Ok((load_off, load_on, fill_ms, fill))
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

/// Polls `balancerCollectionStatus` until the collection is compliant (`None`) or `max_secs`
/// have passed (the last status).
async fn wait_compliant(client: &Client, max_secs: u64) -> anyhow::Result<Option<Document>> {
    let admin = client.database("admin");
    let deadline = Instant::now() + Duration::from_secs(max_secs);
    loop {
        let status = admin.run_command(doc! { "balancerCollectionStatus": format!("{DB}.{COLL}") }).await?;
        if status.get_bool("balancerCompliant").ok() == Some(true) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Ok(Some(status));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The benchmark collection's migrations since `since` (`config.changelog`: each committed move,
/// and the donor's `moveChunk.from` details of every attempt).
async fn moves_since(client: &Client, since: bson::DateTime, status: Option<Document>) -> anyhow::Result<Moves> {
    use futures::TryStreamExt;
    let changelog = client.database("config").collection::<Document>("changelog");
    let ns = format!("{DB}.{COLL}");
    let moves =
        changelog.count_documents(doc! { "ns": &ns, "what": "moveChunk.commit", "time": { "$gte": since } }).await?;
    let mut out = Moves { compliant: status.is_none(), moves: moves as usize, ..Moves::default() };
    out.last_status = status.map(|s| s.to_string());
    let mut froms = changelog.find(doc! { "ns": &ns, "what": "moveChunk.from", "time": { "$gte": since } }).await?;
    while let Some(entry) = froms.try_next().await? {
        let Ok(details) = entry.get_document("details") else { continue };
        let int = |k: &str| details.get(k).and_then(|v| v.as_i64().or_else(|| v.as_i32().map(i64::from))).unwrap_or(0);
        out.cloned_bytes += int("clonedBytes").max(0) as u64;
        out.throttled_ms += int("throttledMillis").max(0) as u64;
        out.max_critical_section_ms = out.max_critical_section_ms.max(int("criticalSectionMillis").max(0) as u64);
    }
    Ok(out)
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
    let phase = |name: &str, ms: f64, m: &Moves| {
        let secs = ms / 1e3;
        let cloned = m.cloned_bytes as f64 / f64::from(1 << 20);
        let end = if m.compliant {
            format!("compliant after {secs:.1} s")
        } else {
            format!("NOT compliant after {secs:.1} s (last status: {})", m.last_status.as_deref().unwrap_or("-"))
        };
        format!(
            "{name}: {end}; {} migrations cloned {cloned:.1} MiB ({:.1} MiB/s moved); donors throttled {:.1} s; \
             longest critical section {} ms\n",
            m.moves,
            cloned / secs.max(f64::MIN_POSITIVE),
            m.throttled_ms as f64 / 1e3,
            m.max_critical_section_ms
        )
    };
    out.push_str(&phase(&format!("spread from one shard over {}", r.shards_before), r.spread_ms, &r.spread));
    if r.spread.compliant {
        out.push_str(&format!("  {:.1} MiB of data per second of balancing\n", mib / (r.spread_ms / 1e3)));
    }
    out.push_str(&phase("fill the new shard under the load", r.fill_ms, &r.fill));
    out.push('\n');
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
