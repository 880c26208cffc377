//! `shoal bench query`: what indexes and the distributed pipeline buy, measured in one run.
//!
//!  1. In-process (one shard's executor, no network): `docs` documents with a field `v` holding a
//!     permutation of `0..docs`; the time to build an index on `v`; then the same range queries
//!     (`v` in a window of `docs / 1000` values, 0.1% of the collection) read through the index and
//!     by a collection scan (`hint: {$natural: 1}`), latency per query and the ratio; and what
//!     indexes cost writes: inserts/s into a collection without secondary indexes and with two.
//!  2. On a cluster (one config server, two shards, one router, processes from this binary):
//!     `cluster_docs` documents loaded twice, into a collection split evenly over both shards and
//!     into an unsharded one on one shard; the same `$group` (100 groups, `$sum`, `$avg`) timed
//!     over each, median of `repeats`.
//!
//! Must not: assert anything (it measures); timing lives here, never in tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Client;
use shoal_proto::shard::CommandRequest;
use shoal_shard::exec::{self, Node, Request};

use crate::procs::{Server, free_loopback_ports};

/// How long one cluster setup command may keep failing (shards becoming primaries).
const SETUP_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct QueryOptions {
    pub exe: PathBuf,
    pub docs: usize,
    pub queries: usize,
    pub write_docs: usize,
    pub cluster_docs: usize,
    pub repeats: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryReport {
    pub docs: usize,
    pub load_secs: f64,
    pub index_build_secs: f64,
    pub window: usize,
    pub indexed_ms: f64,
    pub scan_ms: f64,
    pub inserts_per_sec_no_index: f64,
    pub inserts_per_sec_two_indexes: f64,
    pub cluster_docs: usize,
    pub group_sharded_ms: f64,
    pub group_one_shard_ms: f64,
}

fn request(body: Document) -> anyhow::Result<CommandRequest> {
    Ok(CommandRequest { db: "qb".into(), body: body.to_vec()?.into(), ..Default::default() })
}

/// Runs a find to exhaustion; returns how many documents it yielded.
fn drain_find(node: &Node, body: Document) -> anyhow::Result<usize> {
    let req = request(body)?;
    let (first, _) = exec::find::run(node, &Request::parse(&req)?).map_err(|e| anyhow::anyhow!(e.message))?;
    let mut n = first.documents.len();
    let mut id = first.cursor_id;
    while id != 0 {
        let (batch, _) = exec::find::get_more(node, id, 0, "qb.c").map_err(|e| anyhow::anyhow!(e.message))?;
        n += batch.documents.len();
        id = batch.cursor_id;
    }
    Ok(n)
}

/// A permutation of `0..n` without an RNG: `i * step mod n` with `step` coprime to `n`.
fn permuted(i: usize, n: usize) -> i64 {
    let mut step = 7919usize;
    while gcd(step, n) != 1 {
        step += 2;
    }
    ((i * step) % n) as i64
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn in_process(opts: &QueryOptions) -> anyhow::Result<InProcess> {
    let dir = tempfile::tempdir()?;
    let config = shoal_shard::ShardSettings::new("bench", "127.0.0.1:0".parse()?, dir.path().to_path_buf());
    let node: Arc<Node> = shoal_shard::open_node(&config)?;
    let started = Instant::now();
    for start in (0..opts.docs).step_by(1000) {
        let docs: Vec<Document> = (start..(start + 1000).min(opts.docs))
            .map(|i| doc! { "_id": i as i64, "v": permuted(i, opts.docs), "pad": "x".repeat(100) })
            .collect();
        let req = request(doc! { "insert": "c", "documents": docs })?;
        exec::insert::run(&node, &Request::parse(&req)?).map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let load_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let req = request(doc! { "createIndexes": "c", "indexes": [{"key": {"v": 1}, "name": "v_1"}] })?;
    exec::indexes::create_indexes(&node, &Request::parse(&req)?).map_err(|e| anyhow::anyhow!(e.message))?;
    let build_secs = started.elapsed().as_secs_f64();
    let window = (opts.docs / 1000).max(1);
    let timed = |hint: bson::Bson| -> anyhow::Result<f64> {
        let started = Instant::now();
        for q in 0..opts.queries {
            let lo = permuted(q * 31 + 1, opts.docs.saturating_sub(window).max(1));
            let body = doc! { "find": "c", "filter": {"v": {"$gte": lo, "$lt": lo + window as i64}}, "hint": hint.clone(), "batchSize": 0 };
            let n = drain_find(&node, body)?;
            anyhow::ensure!(n == window, "query {q} returned {n} documents, expected {window}");
        }
        Ok(started.elapsed().as_secs_f64() * 1000.0 / opts.queries as f64)
    };
    let indexed_ms = timed(bson::Bson::String("v_1".into()))?;
    let scan_ms = timed(bson::Bson::Document(doc! {"$natural": 1}))?;
    let write_cost = (insert_rate(&node, "w0", 0, opts.write_docs)?, insert_rate(&node, "w2", 2, opts.write_docs)?);
    node.store.shutdown();
    Ok(InProcess { load_secs, build_secs, window, indexed_ms, scan_ms, write_cost })
}

/// Inserts/s of `docs` documents (batches of 100) into `coll` carrying `indexes` secondary
/// indexes (0, 1 or 2: `{v: 1}`, `{g: 1, v: -1}`).
fn insert_rate(node: &Node, coll: &str, indexes: usize, docs: usize) -> anyhow::Result<f64> {
    let specs = [doc! {"key": {"v": 1}, "name": "v_1"}, doc! {"key": {"g": 1, "v": -1}, "name": "g_1_v_-1"}];
    let req = request(doc! { "create": coll })?;
    exec::ddl::create(node, &Request::parse(&req)?).map_err(|e| anyhow::anyhow!(e.message))?;
    if indexes > 0 {
        let req = request(doc! { "createIndexes": coll, "indexes": specs[..indexes.min(2)].to_vec() })?;
        exec::indexes::create_indexes(node, &Request::parse(&req)?).map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let started = Instant::now();
    for start in (0..docs).step_by(100) {
        let batch: Vec<Document> = (start..(start + 100).min(docs))
            .map(|i| doc! { "_id": i as i64, "v": permuted(i, docs), "g": (i % 100) as i64, "pad": "x".repeat(100) })
            .collect();
        let req = request(doc! { "insert": coll, "documents": batch })?;
        exec::insert::run(node, &Request::parse(&req)?).map_err(|e| anyhow::anyhow!(e.message))?;
    }
    Ok(docs as f64 / started.elapsed().as_secs_f64())
}

struct InProcess {
    load_secs: f64,
    build_secs: f64,
    window: usize,
    indexed_ms: f64,
    scan_ms: f64,
    /// Inserts/s without secondary indexes and with two.
    write_cost: (f64, f64),
}

async fn start(exe: &Path, args: &[String], log: &Path) -> anyhow::Result<Server> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(exe, &args, log).await
}

async fn cluster_group(opts: &QueryOptions) -> anyhow::Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let ports = free_loopback_ports(3)?;
    let cfg = format!("127.0.0.1:{}", ports[0]);
    let _config = start(
        &opts.exe,
        &[
            "configsvr".into(),
            "--id".into(),
            "1".into(),
            "--listen".into(),
            cfg.clone(),
            "--data-dir".into(),
            dir.path().join("cfg").display().to_string(),
            "--peers".into(),
            format!("1={cfg}"),
            "--init".into(),
        ],
        &dir.path().join("cfg.log"),
    )
    .await?;
    let mut shards = Vec::new();
    for (i, port) in ports[1..].iter().enumerate() {
        let args = vec![
            "shard".to_owned(),
            "--name".into(),
            format!("s{i}"),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            dir.path().join(format!("s{i}")).display().to_string(),
            "--config".into(),
            cfg.clone(),
        ];
        shards.push(start(&opts.exe, &args, &dir.path().join(format!("s{i}.log"))).await?);
    }
    let router_args = vec![
        "router".to_owned(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--config".into(),
        cfg.clone(),
        "--no-balancer".into(),
    ];
    let router = start(&opts.exe, &router_args, &dir.path().join("router.log")).await?;
    let client = Client::with_uri_str(format!("mongodb://{}/?directConnection=true", router.addr)).await?;
    let admin = client.database("admin");
    let middle = (opts.cluster_docs / 2) as i64;
    let setup = [
        doc! { "addShard": format!("s0/127.0.0.1:{}", ports[1]), "name": "s0" },
        doc! { "addShard": format!("s1/127.0.0.1:{}", ports[2]), "name": "s1" },
        doc! { "enableSharding": "gb", "primaryShard": "s0" },
        doc! { "shardCollection": "gb.sharded", "key": { "k": 1 } },
        doc! { "split": "gb.sharded", "middle": { "k": middle } },
        doc! { "moveChunk": "gb.sharded", "find": { "k": middle }, "to": "s1" },
    ];
    for command in setup {
        // A shard takes a moment to become its group's primary after it joins.
        let deadline = Instant::now() + SETUP_WAIT;
        loop {
            match admin.run_command(command.clone()).await {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("setup: {command}")),
            }
        }
    }
    let db = client.database("gb");
    for coll in ["sharded", "single"] {
        let c = db.collection::<Document>(coll);
        for start in (0..opts.cluster_docs).step_by(10_000) {
            let docs: Vec<Document> = (start..(start + 10_000).min(opts.cluster_docs))
                .map(|k| doc! { "k": k as i64, "g": (k % 100) as i64, "v": (k % 997) as i64, "pad": "x".repeat(100) })
                .collect();
            c.insert_many(docs).await.with_context(|| format!("loading {coll}"))?;
        }
    }
    let pipeline = vec![doc! { "$group": { "_id": "$g", "n": { "$sum": 1 }, "avg": { "$avg": "$v" } } }];
    let median = |samples: &mut Vec<f64>| {
        samples.sort_by(|a, b| a.total_cmp(b));
        samples[samples.len() / 2]
    };
    let mut timings = Vec::new();
    for coll in ["sharded", "single"] {
        let c = db.collection::<Document>(coll);
        let mut samples = Vec::with_capacity(opts.repeats);
        for _ in 0..opts.repeats.max(1) {
            let started = Instant::now();
            let groups: Vec<Document> = c.aggregate(pipeline.clone()).await?.try_collect().await?;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(groups.len() == 100.min(opts.cluster_docs), "{coll}: {} groups", groups.len());
        }
        timings.push(median(&mut samples));
    }
    drop(router);
    drop(shards);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok((timings[0], timings[1]))
}

pub async fn run(opts: &QueryOptions) -> anyhow::Result<QueryReport> {
    let o = opts.clone();
    let p = tokio::task::spawn_blocking(move || in_process(&o)).await??;
    let (group_sharded_ms, group_one_shard_ms) = cluster_group(opts).await?;
    Ok(QueryReport {
        docs: opts.docs,
        load_secs: p.load_secs,
        index_build_secs: p.build_secs,
        window: p.window,
        indexed_ms: p.indexed_ms,
        scan_ms: p.scan_ms,
        inserts_per_sec_no_index: p.write_cost.0,
        inserts_per_sec_two_indexes: p.write_cost.1,
        cluster_docs: opts.cluster_docs,
        group_sharded_ms,
        group_one_shard_ms,
    })
}

pub fn json(r: &QueryReport) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec_pretty(r)?)
}

pub fn report(opts: &QueryOptions, r: &QueryReport) -> String {
    format!(
        "query benchmark ({} queries per access path, {} $group repeats)\n\
         in-process shard, {} documents: loaded in {:.1} s, index on v built in {:.1} s\n\
         range query over {} values of v (0.1%): index {:.2} ms, collection scan {:.2} ms ({:.0}x)\n\
         inserts ({} documents, batches of 100): no secondary index {:.0}/s, two indexes {:.0}/s ({:.2}x)\n\
         cluster, {} documents, $group into 100 groups: two shards {:.1} ms, one shard {:.1} ms ({:.2}x)\n",
        opts.queries,
        opts.repeats,
        r.docs,
        r.load_secs,
        r.index_build_secs,
        r.window,
        r.indexed_ms,
        r.scan_ms,
        r.scan_ms / r.indexed_ms.max(f64::MIN_POSITIVE),
        opts.write_docs,
        r.inserts_per_sec_no_index,
        r.inserts_per_sec_two_indexes,
        r.inserts_per_sec_two_indexes / r.inserts_per_sec_no_index.max(f64::MIN_POSITIVE),
        r.cluster_docs,
        r.group_sharded_ms,
        r.group_one_shard_ms,
        r.group_one_shard_ms / r.group_sharded_ms.max(f64::MIN_POSITIVE),
    )
}
