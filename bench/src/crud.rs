//! `shoal bench crud`: single-document inserts and finds by `_id`, at four depths of the stack.
//!
//! ```text
//!  engine    FjallEngine.commit(doc + oplog) + group-commit fsync; get(key)
//!  executor  shard exec::insert / exec::find in-process (BSON parsing, catalog, oplog, cursors)
//!  grpc      shard process over tonic (adds protobuf envelope, HTTP/2, loopback TCP)
//!  router    router process via the official mongodb driver (adds the wire protocol hop)
//! ```
//! Every insert is acknowledged only once durable (journaled, shared fdatasync), at every depth.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bson::{Document, doc};
use bytes::Bytes;
use shoal_proto::shard::CommandRequest;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_shard::storage::{Engine as _, FjallEngine, GroupCommit, Space, WriteBatch};

use crate::measure::{self, Summary};
use crate::procs::Server;

#[derive(Debug, Clone)]
pub struct CrudOptions {
    /// Documents inserted (and then found) per layer.
    pub docs: usize,
    /// Concurrent clients.
    pub concurrency: usize,
    /// Size of the one string field of each document.
    pub field_bytes: usize,
    /// The `shoal` executable that provides `shard` and `router`.
    pub exe: PathBuf,
}

pub struct LayerResult {
    pub layer: &'static str,
    pub insert: Summary,
    pub find: Summary,
}

fn document(i: usize, field_bytes: usize) -> Document {
    doc! { "_id": i as i64, "field0": "x".repeat(field_bytes) }
}

pub async fn run(opts: &CrudOptions) -> anyhow::Result<Vec<LayerResult>> {
    let dir = tempfile::tempdir()?;
    let mut results = vec![
        engine_layer(opts, &dir.path().join("engine")).await?,
        executor_layer(opts, &dir.path().join("executor")).await?,
    ];
    let shard = Server::start(
        &opts.exe,
        &["shard", "--listen", "127.0.0.1:0", "--data-dir", &dir.path().join("shard").to_string_lossy()],
        &dir.path().join("shard.log"),
    )
    .await?;
    results.push(grpc_layer(opts, &format!("http://{}", shard.addr)).await?);
    shard.stop().await;
    let shard = Server::start(
        &opts.exe,
        &["shard", "--listen", "127.0.0.1:0", "--data-dir", &dir.path().join("shard2").to_string_lossy()],
        &dir.path().join("shard2.log"),
    )
    .await?;
    let router = Server::start(
        &opts.exe,
        &["router", "--listen", "127.0.0.1:0", "--shard", &format!("http://{}", shard.addr)],
        &dir.path().join("router.log"),
    )
    .await?;
    results.push(
        router_layer(
            opts,
            &format!("mongodb://{}/?directConnection=true&maxPoolSize={}", router.addr, opts.concurrency.max(1)),
        )
        .await?,
    );
    router.stop().await;
    shard.stop().await;
    Ok(results)
}

async fn engine_layer(opts: &CrudOptions, dir: &std::path::Path) -> anyhow::Result<LayerResult> {
    let engine = Arc::new(FjallEngine::open(dir, 256 << 20)?);
    let group = Arc::new(GroupCommit::start(Arc::clone(&engine))?);
    let field_bytes = opts.field_bytes;
    let key = |i: usize| (i as u64).to_be_bytes().to_vec();
    let (e, g) = (Arc::clone(&engine), Arc::clone(&group));
    let insert = measure::run(opts.docs, opts.concurrency, move |i| {
        let (e, g) = (Arc::clone(&e), Arc::clone(&g));
        async move {
            let g2 = Arc::clone(&g);
            let seq = tokio::task::spawn_blocking(move || -> anyhow::Result<u64> {
                let bytes = document(i, field_bytes).to_vec()?;
                let mut batch = WriteBatch::new();
                batch.put(Space::Documents, key(i), bytes.clone());
                batch.put(Space::Oplog, key(i), bytes);
                e.commit(batch)?;
                Ok(g2.committed())
            })
            .await??;
            g.wait_durable(seq).await?;
            Ok(())
        }
    })
    .await?;
    let e = Arc::clone(&engine);
    let docs = opts.docs;
    let find = measure::run(opts.docs, opts.concurrency, move |i| {
        let e = Arc::clone(&e);
        async move {
            let k = key((i * 7919) % docs);
            let found = tokio::task::spawn_blocking(move || e.get(Space::Documents, &k)).await??;
            found.map(|_| ()).context("missing document")
        }
    })
    .await?;
    group.shutdown();
    Ok(LayerResult { layer: "engine", insert, find })
}

fn request(db: &str, body: Document, sequence: Option<Bytes>) -> anyhow::Result<CommandRequest> {
    let (sequence_id, sequence) = match sequence {
        Some(d) => ("documents".to_owned(), vec![d]),
        None => (String::new(), Vec::new()),
    };
    Ok(CommandRequest {
        request_id: String::new(),
        db: db.to_owned(),
        body: body.to_vec()?.into(),
        sequence_id,
        sequence,
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    })
}

async fn executor_layer(opts: &CrudOptions, dir: &std::path::Path) -> anyhow::Result<LayerResult> {
    let config = shoal_shard::ShardSettings::new("bench", "127.0.0.1:0".parse()?, dir.to_path_buf());
    let node = shoal_shard::open_node(&config)?;
    let field_bytes = opts.field_bytes;
    let e = Arc::clone(&node);
    let insert = measure::run(opts.docs, opts.concurrency, move |i| {
        let e = Arc::clone(&e);
        async move {
            let req = request("bench", doc! { "insert": "c" }, Some(document(i, field_bytes).to_vec()?.into()))?;
            let e2 = Arc::clone(&e);
            let (outcome, seq) = tokio::task::spawn_blocking(move || {
                let parsed = shoal_shard::exec::Request::parse(&req)?;
                shoal_shard::exec::insert::run(&e2, &parsed)
            })
            .await??;
            anyhow::ensure!(outcome.write_errors.is_empty(), "write error");
            e.store.wait_durable(seq).await?;
            Ok(())
        }
    })
    .await?;
    let e = Arc::clone(&node);
    let docs = opts.docs;
    let find = measure::run(opts.docs, opts.concurrency, move |i| {
        let e = Arc::clone(&e);
        async move {
            let id = ((i * 7919) % docs) as i64;
            let req =
                request("bench", doc! { "find": "c", "filter": { "_id": id }, "limit": 1, "singleBatch": true }, None)?;
            let (batch, _) = tokio::task::spawn_blocking(move || {
                let parsed = shoal_shard::exec::Request::parse(&req)?;
                shoal_shard::exec::find::run(&e, &parsed)
            })
            .await??;
            anyhow::ensure!(batch.documents.len() == 1, "missing document");
            Ok(())
        }
    })
    .await?;
    node.store.shutdown();
    Ok(LayerResult { layer: "executor", insert, find })
}

async fn grpc_layer(opts: &CrudOptions, endpoint: &str) -> anyhow::Result<LayerResult> {
    // As many channels as the router uses, so the two rows differ only by the router hop.
    let ep = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?.timeout(Duration::from_secs(30));
    let mut clients = Vec::new();
    for _ in 0..ROUTER_CHANNELS_PER_SHARD {
        clients.push(ShardClient::new(ep.connect().await?));
    }
    let clients = Arc::new(clients);
    let field_bytes = opts.field_bytes;
    let c = Arc::clone(&clients);
    let insert = measure::run(opts.docs, opts.concurrency, move |i| {
        let mut c = c[i % c.len()].clone();
        async move {
            let reply = c
                .insert(request("bench", doc! { "insert": "c" }, Some(document(i, field_bytes).to_vec()?.into()))?)
                .await?
                .into_inner();
            anyhow::ensure!(reply.error.is_none() && reply.write_errors.is_empty(), "insert failed");
            Ok(())
        }
    })
    .await?;
    let docs = opts.docs;
    let find = measure::run(opts.docs, opts.concurrency, move |i| {
        let mut c = clients[i % clients.len()].clone();
        async move {
            let id = ((i * 7919) % docs) as i64;
            let reply = c
                .find(request(
                    "bench",
                    doc! { "find": "c", "filter": { "_id": id }, "limit": 1, "singleBatch": true },
                    None,
                )?)
                .await?
                .into_inner();
            anyhow::ensure!(reply.documents.len() == 1, "missing document");
            Ok(())
        }
    })
    .await?;
    Ok(LayerResult { layer: "shard gRPC", insert, find })
}

/// The router's channels per shard (`shoal_router::shard_client::CHANNELS_PER_SHARD`; the bench
/// does not link the router).
const ROUTER_CHANNELS_PER_SHARD: usize = 4;

async fn router_layer(opts: &CrudOptions, uri: &str) -> anyhow::Result<LayerResult> {
    let client = mongodb::Client::with_uri_str(uri).await?;
    let coll = client.database("bench").collection::<Document>("c");
    let field_bytes = opts.field_bytes;
    let c = coll.clone();
    let insert = measure::run(opts.docs, opts.concurrency, move |i| {
        let c = c.clone();
        async move {
            c.insert_one(document(i, field_bytes)).await?;
            Ok(())
        }
    })
    .await?;
    let docs = opts.docs;
    let find = measure::run(opts.docs, opts.concurrency, move |i| {
        let c = coll.clone();
        async move {
            let id = ((i * 7919) % docs) as i64;
            c.find_one(doc! { "_id": id }).await?.context("missing document")?;
            Ok(())
        }
    })
    .await?;
    Ok(LayerResult { layer: "router", insert, find })
}

/// A markdown table of the results, with each layer's throughput relative to the engine's.
pub fn report(opts: &CrudOptions, results: &[LayerResult]) -> String {
    let mut out = format!(
        "docs per layer: {}, concurrency: {}, document: {{_id: int64, field0: {}-byte string}}, inserts journaled (group commit)\n\n",
        opts.docs, opts.concurrency, opts.field_bytes
    );
    out.push_str("| layer | inserts/s | insert p50 µs | insert p99 µs | finds/s | find p50 µs | find p99 µs | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let base = results.first().map(|r| (r.insert.ops_per_sec(), r.find.ops_per_sec()));
    for r in results {
        let (ri, rf) = base.map(|(i, f)| (r.insert.ops_per_sec() / i, r.find.ops_per_sec() / f)).unwrap_or((1.0, 1.0));
        out.push_str(&format!(
            "| {} | {:.0} ({:.2}×) | {} | {} | {:.0} ({:.2}×) | {} | {} | {} |\n",
            r.layer,
            r.insert.ops_per_sec(),
            ri,
            r.insert.p50_us,
            r.insert.p99_us,
            r.find.ops_per_sec(),
            rf,
            r.find.p50_us,
            r.find.p99_us,
            r.insert.errors + r.find.errors
        ));
    }
    out
}
