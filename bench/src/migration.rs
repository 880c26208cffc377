//! `shoal bench migration`: how fast a chunk moves between shards, how long its critical section
//! holds writes, and what a migration does to a foreground load — all through a router with the
//! official driver, against any running cluster of at least two shards.
//!
//! ```text
//!  1. load    bench_migration.data {_id: 0..n, pad}, sharded on _id: one chunk on shard A
//!  2. copy    the same bytes (a) read + inserted by a client into another collection (w:majority)
//!                            (b) pushed through one loopback TCP socket (the machine's ceiling)
//!  3. moves   moveChunk A -> B -> A ... `moves` times, idle cluster      -> MB/s per move
//!  4. load    80/20 find/update by random _id, `threads` tasks, `load_secs` -> p50/p99, ops/s
//!  5. load    the same load while moveChunk runs back and forth           -> p50/p99, ops/s
//!  6. critical sections: the durations the donors recorded in config.changelog
//! ```
//! Step 3 waits for nothing but the commit (range deletion runs later, as in MongoDB).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DB: &str = "bench_migration";
const COLL: &str = "data";
const COPY_COLL: &str = "copy";
const INSERT_BATCH_DOCS: usize = 1000;

#[derive(Debug, Clone)]
pub struct MigrationOptions {
    /// A router: `mongodb://127.0.0.1:27017`.
    pub uri: String,
    /// Bytes of documents in the migrated chunk.
    pub data_mib: u64,
    /// Size of each document's padding.
    pub doc_bytes: usize,
    /// Idle moves measured in step 3.
    pub moves: usize,
    /// Client tasks of the foreground load.
    pub threads: usize,
    /// Length of each load phase.
    pub load_secs: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MoveSample {
    pub from: String,
    pub to: String,
    pub millis: f64,
}

pub use crate::load::LoadStats;

#[derive(Debug, Clone, serde::Serialize)]
pub struct MigrationReport {
    pub docs: u64,
    pub data_bytes: u64,
    pub client_copy_ms: f64,
    pub tcp_copy_ms: f64,
    pub moves: Vec<MoveSample>,
    pub critical_section_ms: Vec<f64>,
    pub load_idle: LoadStats,
    pub load_migrating: LoadStats,
}

pub async fn run(opts: &MigrationOptions) -> anyhow::Result<MigrationReport> {
    let since = bson::DateTime::now();
    let client = Client::with_uri_str(&opts.uri).await.context("connecting to the router")?;
    let admin = client.database("admin");
    let shards = shard_ids(&client).await?;
    if shards.len() < 2 {
        bail!("a migration benchmark needs at least two shards; the cluster has {shards:?}");
    }
    let coll = crate::load::fresh_sharded(&client, DB, COLL).await?;
    let db = client.database(DB);
    let (docs, data_bytes) = crate::load::fill(&coll, opts.data_mib, opts.doc_bytes).await?;

    let client_copy_ms = client_copy(&db).await?;
    let tcp_copy_ms = tcp_copy(data_bytes).await?;

    let mut owner = chunk_owner(&client).await?;
    let mut moves = Vec::new();
    for _ in 0..opts.moves {
        let to = other(&shards, &owner);
        let started = Instant::now();
        move_chunk(&admin, &to).await?;
        moves.push(MoveSample { from: owner.clone(), to: to.clone(), millis: started.elapsed().as_secs_f64() * 1e3 });
        owner = to;
    }

    let load_idle = load(&client, opts, docs, None).await?;
    let load_migrating = load(&client, opts, docs, Some((&shards, owner))).await?;
    let critical_section_ms = critical_sections(&client, since).await?;
    Ok(MigrationReport {
        docs,
        data_bytes,
        client_copy_ms,
        tcp_copy_ms,
        moves,
        critical_section_ms,
        load_idle,
        load_migrating,
    })
}

async fn shard_ids(client: &Client) -> anyhow::Result<Vec<String>> {
    let reply = client.database("admin").run_command(doc! { "listShards": 1 }).await?;
    let shards = reply.get_array("shards").context("listShards reply without shards")?;
    Ok(shards.iter().filter_map(|s| s.as_document()?.get_str("_id").ok().map(str::to_owned)).collect())
}

fn other(shards: &[String], owner: &str) -> String {
    shards.iter().find(|s| *s != owner).cloned().unwrap_or_else(|| owner.to_owned())
}

/// The shard owning the collection's only chunk (this benchmark never splits it).
async fn chunk_owner(client: &Client) -> anyhow::Result<String> {
    let ns = format!("{DB}.{COLL}");
    let config = client.database("config");
    let coll = config
        .collection::<Document>("collections")
        .find_one(doc! { "_id": &ns })
        .await?
        .with_context(|| format!("{ns} is not in config.collections"))?;
    let uuid = coll.get("uuid").cloned().context("config.collections without uuid")?;
    let chunk = config
        .collection::<Document>("chunks")
        .find_one(doc! { "uuid": uuid })
        .await?
        .context("the collection has no chunk")?;
    Ok(chunk.get_str("shard")?.to_owned())
}

async fn move_chunk(admin: &mongodb::Database, to: &str) -> anyhow::Result<()> {
    admin
        .run_command(doc! { "moveChunk": format!("{DB}.{COLL}"), "find": { "_id": 0i64 }, "to": to })
        .await
        .with_context(|| format!("moveChunk to {to}"))?;
    Ok(())
}

/// Reads every document through the router and inserts it into another collection.
async fn client_copy(db: &mongodb::Database) -> anyhow::Result<f64> {
    let target = db.collection::<Document>(COPY_COLL);
    target.drop().await?;
    let started = Instant::now();
    let mut cursor = db.collection::<Document>(COLL).find(doc! {}).batch_size(INSERT_BATCH_DOCS as u32).await?;
    let mut batch = Vec::with_capacity(INSERT_BATCH_DOCS);
    while let Some(d) = cursor.try_next().await? {
        batch.push(d);
        if batch.len() == INSERT_BATCH_DOCS {
            target.insert_many(std::mem::take(&mut batch)).ordered(false).await?;
        }
    }
    if !batch.is_empty() {
        target.insert_many(batch).ordered(false).await?;
    }
    let ms = started.elapsed().as_secs_f64() * 1e3;
    target.drop().await?;
    Ok(ms)
}

/// `bytes` through one loopback TCP connection, in 1 MiB writes.
async fn tcp_copy(bytes: u64) -> anyhow::Result<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reader = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = sock.read(&mut buf).await?;
            if n == 0 {
                return Ok::<u64, std::io::Error>(total);
            }
            total += n as u64;
        }
    });
    let started = Instant::now();
    let mut sock = tokio::net::TcpStream::connect(addr).await?;
    let chunk = vec![7u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        sock.write_all(&chunk[..n]).await?;
        left -= n as u64;
    }
    sock.shutdown().await?;
    let got = reader.await??;
    if got != bytes {
        bail!("TCP copy delivered {got} of {bytes} bytes");
    }
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// The 80/20 find/update load for `opts.load_secs`; with `migrate`, moveChunk runs back and forth
/// meanwhile.
async fn load(
    client: &Client,
    opts: &MigrationOptions,
    docs: u64,
    migrate: Option<(&[String], String)>,
) -> anyhow::Result<LoadStats> {
    let coll = client.database(DB).collection::<Document>(COLL);
    let deadline = Instant::now() + Duration::from_secs(opts.load_secs);
    let admin = client.database("admin");
    let during = async {
        let mut moves = 0;
        match migrate {
            Some((shards, mut owner)) => {
                while Instant::now() < deadline {
                    let to = other(shards, &owner);
                    move_chunk(&admin, &to).await?;
                    owner = to;
                    moves += 1;
                }
            }
            None => tokio::time::sleep_until(deadline.into()).await,
        }
        Ok(moves)
    };
    let (mut stats, moves) = crate::load::eighty_twenty(&coll, docs, opts.threads, during).await?;
    stats.moves = moves;
    Ok(stats)
}

/// Critical-section durations (ms) the donors recorded for this run's moves: any numeric
/// detail of a `moveChunk.*` changelog entry whose name mentions the critical section.
async fn critical_sections(client: &Client, since: bson::DateTime) -> anyhow::Result<Vec<f64>> {
    let ns = format!("{DB}.{COLL}");
    let mut cursor = client
        .database("config")
        .collection::<Document>("changelog")
        .find(doc! { "ns": &ns, "what": { "$regex": "^moveChunk" }, "time": { "$gte": since } })
        .await?;
    let mut out = Vec::new();
    while let Some(entry) = cursor.try_next().await? {
        let Ok(details) = entry.get_document("details") else { continue };
        for (key, value) in details {
            if !key.to_ascii_lowercase().contains("critical") {
                continue;
            }
            let ms = match value {
                Bson::Int32(v) => f64::from(*v),
                Bson::Int64(v) => *v as f64,
                Bson::Double(v) => *v,
                _ => continue,
            };
            out.push(ms);
        }
    }
    Ok(out)
}

/// The results as pretty JSON.
pub fn json(r: &MigrationReport) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec_pretty(r)?)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The report as Markdown.
pub fn report(opts: &MigrationOptions, r: &MigrationReport) -> String {
    let mib = r.data_bytes as f64 / f64::from(1 << 20);
    let rate = |ms: f64| mib / (ms / 1e3);
    let mut move_ms: Vec<f64> = r.moves.iter().map(|m| m.millis).collect();
    move_ms.sort_by(f64::total_cmp);
    let median_move = percentile(&move_ms, 0.5);
    let mut cs = r.critical_section_ms.clone();
    cs.sort_by(f64::total_cmp);
    let mut out = String::new();
    out.push_str(&format!("chunk: {} documents of {} B padding, {mib:.1} MiB of BSON\n\n", r.docs, opts.doc_bytes));
    out.push_str("| copy of the chunk's bytes | time (ms) | MiB/s | vs migration |\n|---|---:|---:|---:|\n");
    out.push_str(&format!(
        "| moveChunk, idle cluster (median of {}) | {median_move:.0} | {:.1} | 1.00 |\n",
        move_ms.len(),
        rate(median_move)
    ));
    out.push_str(&format!(
        "| client read + insert (w:majority) through the router | {:.0} | {:.1} | {:.2} |\n",
        r.client_copy_ms,
        rate(r.client_copy_ms),
        rate(r.client_copy_ms) / rate(median_move)
    ));
    out.push_str(&format!(
        "| one loopback TCP socket | {:.0} | {:.1} | {:.2} |\n\n",
        r.tcp_copy_ms,
        rate(r.tcp_copy_ms),
        rate(r.tcp_copy_ms) / rate(median_move)
    ));
    if cs.is_empty() {
        out.push_str("critical sections: none recorded in config.changelog\n\n");
    } else {
        out.push_str(&format!(
            "critical sections ({} recorded): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n\n",
            cs.len(),
            percentile(&cs, 0.5),
            percentile(&cs, 0.99),
            cs.last().copied().unwrap_or(f64::NAN)
        ));
    }
    out.push_str(&format!(
        "| 80/20 find/update, {} tasks, {} s | ops/s | p50 (us) | p99 (us) | max (us) | errors | moves |\n",
        opts.threads, opts.load_secs
    ));
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for (name, l) in [("no migration", &r.load_idle), ("chunk moving back and forth", &r.load_migrating)] {
        out.push_str(&format!(
            "| {name} | {:.0} | {} | {} | {} | {} | {} |\n",
            l.ops_per_sec, l.p50_us, l.p99_us, l.max_us, l.errors, l.moves
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_small_samples() {
        assert!(percentile(&[], 0.5).is_nan());
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.5), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
    }

    #[tokio::test]
    async fn tcp_copy_moves_every_byte() {
        assert!(tcp_copy(3 << 20 | 17).await.unwrap() >= 0.0);
    }
}
