//! Concurrent writers during repeated migrations: writers insert, update and delete documents of
//! the moving chunk with shard versions, as a router would (StaleConfig → refresh from the
//! catalog → retry at the new owner), while the chunk moves back and forth. Afterwards the
//! shards the catalog names hold exactly the documents (and values) the writers' acknowledged
//! writes produced, each once, and no orphan remains.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bson::{Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{ChunkBound, PlacementVersion, RoutingTable};
use shoal_proto::shard::shard_client::ShardClient;
use shoal_proto::shard::{CommandRequest, ShardVersion};
use shoal_query::shard_key::{KeyField, Missing, of_document};
use shoal_tests::sharded_cluster::ShardedCluster;
use tonic::transport::Channel;

const NS: &str = "app.items";
const RPC_TIMEOUT: Duration = Duration::from_secs(60);
const SETTLE_MAX: Duration = Duration::from_secs(90);
const SPLIT: i32 = 100;
const INITIAL: i32 = 300;
const WRITERS: i32 = 3;
const MOVES: usize = 4;
/// Retries of one write after StaleConfig (each after a catalog refresh) or NotWritablePrimary.
const STALE_RETRIES_MAX: usize = 50;
const NOT_PRIMARY_BACKOFF: Duration = Duration::from_millis(100);

/// NotWritablePrimary, PrimarySteppedDown, InterruptedDueToReplStateChange: the primary could not
/// take the write now (its lease lapsed while a config election ran, as it may on a loaded
/// machine); nothing was applied, so a router retries.
fn not_primary(code: i32) -> bool {
    matches!(code, 10107 | 189 | 11602)
}

fn bound(k: i32) -> ChunkBound {
    let fields = [KeyField { name: "k".into(), hashed: false }];
    ChunkBound::Key(of_document(&fields, &doc! {"k": k}, Missing::AsNull).expect("key"))
}

async fn table(catalog: &ConfigClient) -> RoutingTable {
    match catalog.routing_table(NS, None, true).await.expect("routing table").0 {
        RoutingAnswer::Full(Some(t)) => t,
        other => panic!("expected a routing table, got {other:?}"),
    }
}

fn owner_of(t: &RoutingTable, k: i32) -> String {
    let key = bound(k);
    t.chunks.iter().find(|c| c.min <= key && key < c.max).expect("covering chunk").shard.clone()
}

fn request(body: Document, version: Option<ShardVersion>) -> CommandRequest {
    CommandRequest {
        request_id: "migration-writes-test".into(),
        db: "app".into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: version,
        database_version: None,
        secondary_ok: true,
        client: None,
        traceparent: String::new(),
    }
}

async fn client(addr: &str) -> ShardClient<Channel> {
    shoal_tests::grpc::shard(addr).await.expect("connect to shard").max_decoding_message_size(usize::MAX)
}

/// `k -> v` of every document on a shard, unversioned (orphans included); duplicates fail.
async fn docs_on(addr: &str) -> BTreeMap<i32, i32> {
    let req = request(doc! { "find": "items", "filter": {}, "batchSize": 100_000, "singleBatch": true }, None);
    let reply = tokio::time::timeout(RPC_TIMEOUT, client(addr).await.find(req)).await.expect("in time").expect("rpc");
    let reply = reply.into_inner();
    assert!(reply.error.is_none(), "find failed: {:?}", reply.error);
    let mut out = BTreeMap::new();
    for b in &reply.documents {
        let d = Document::from_reader(&mut &b[..]).expect("doc");
        let k = d.get_i32("k").expect("k");
        assert!(out.insert(k, d.get_i32("v").unwrap_or(0)).is_none(), "k={k} twice on {addr}");
    }
    out
}

/// One writer's next write: update, delete (of a key it holds) or insert (of a new key).
enum Op {
    Update(i32),
    Delete(i32),
    Insert(i32),
}

/// Writer `w`'s write at `step`, given the keys it holds (`model`).
fn next_op(model: &BTreeMap<i32, i32>, w: i32, step: i32) -> Op {
    let present: Vec<i32> = model.keys().copied().collect();
    match (step % 3, present.get((step as usize * 7919) % present.len().max(1)).copied()) {
        (0, Some(k)) => Op::Update(k),
        (1, Some(k)) => Op::Delete(k),
        _ => Op::Insert(INITIAL + w + WRITERS * step),
    }
}

/// A tiny router for one writer: targets the owner with its shard version, refreshes on StaleConfig.
struct Writer {
    stale: Arc<AtomicUsize>,
    cluster_addrs: Vec<String>,
    catalog: ConfigClient,
    table: RoutingTable,
}

impl Writer {
    async fn write(&mut self, k: i32, body: Document) -> i64 {
        for _ in 0..STALE_RETRIES_MAX {
            let owner = owner_of(&self.table, k);
            let i = if owner == "shard0" { 0 } else { 1 };
            let v = PlacementVersion {
                epoch: self.table.epoch,
                timestamp: self.table.timestamp,
                version: self.table.shard_version(&owner),
            };
            let version = ShardVersion {
                epoch: v.epoch.0.to_vec().into(),
                timestamp_secs: v.timestamp.secs,
                timestamp_inc: v.timestamp.inc,
                major: v.version.major,
                minor: v.version.minor,
            };
            let mut c = client(&self.cluster_addrs[i]).await;
            let req = request(body.clone(), Some(version));
            let name = body.keys().next().cloned().unwrap_or_default();
            let call = async {
                match name.as_str() {
                    "insert" => c.insert(req).await,
                    "update" => c.update(req).await,
                    _ => c.delete(req).await,
                }
            };
            let reply = tokio::time::timeout(RPC_TIMEOUT, call).await.expect("in time").expect("rpc").into_inner();
            match reply.error.as_ref().map(|e| e.code) {
                None => {
                    assert!(reply.write_errors.is_empty(), "k={k}: {:?}", reply.write_errors);
                    return reply.n;
                }
                Some(13388) => {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                    self.table = table(&self.catalog).await;
                }
                Some(code) if not_primary(code) => tokio::time::sleep(NOT_PRIMARY_BACKOFF).await,
                Some(_) => panic!("k={k}: {:?}", reply.error),
            }
        }
        panic!("k={k}: still stale or not primary after {STALE_RETRIES_MAX} retries");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_during_repeated_migrations_end_with_the_exact_documents() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let router = cluster.client().await.expect("client");
    let admin = router.database("admin");
    admin.run_command(doc! { "shardCollection": NS, "key": {"k": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": NS, "middle": {"k": SPLIT} }).await.expect("split");
    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let addrs: Vec<String> = (0..2).map(|i| cluster.shard_addr(i)).collect();
    let start = table(&catalog).await;
    let home = if owner_of(&start, 0) == "shard0" { 0 } else { 1 };
    let docs: Vec<Document> = (0..INITIAL).map(|k| doc! {"_id": k, "k": k, "v": 0}).collect();
    for attempt in 0.. {
        // Unordered: a retry after a lease lapsed part-way inserts the rest (duplicates refused).
        let body = doc! {"insert": "items", "documents": docs.clone(), "ordered": false};
        let reply = client(&addrs[home]).await.insert(request(body, None)).await;
        match reply.expect("rpc").into_inner().error.map(|e| e.code) {
            None => break,
            Some(code) if not_primary(code) && attempt < STALE_RETRIES_MAX => {
                tokio::time::sleep(NOT_PRIMARY_BACKOFF).await
            }
            Some(code) => panic!("initial insert: {code}"),
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let (stale, steps) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (stop, addrs, stale, steps) = (Arc::clone(&stop), addrs.clone(), Arc::clone(&stale), Arc::clone(&steps));
        let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
        writers.push(tokio::spawn(async move {
            let table = table(&catalog).await;
            let mut writer = Writer { stale, cluster_addrs: addrs, catalog, table };
            // This writer's keys: its share of the moving chunk, and new keys above INITIAL.
            let mut model: BTreeMap<i32, i32> = (SPLIT..INITIAL).filter(|k| k % WRITERS == w).map(|k| (k, 0)).collect();
            let (mut step, mut after_stop) = (0, 0);
            // Writes go on through every move and for a while after the last one.
            while after_stop < 20 {
                if stop.load(Ordering::Relaxed) {
                    after_stop += 1;
                }
                step += 1;
                steps.fetch_add(1, Ordering::Relaxed);
                match next_op(&model, w, step) {
                    Op::Update(k) => {
                        let body = doc! {"update": "items", "updates": [{"q": {"_id": k}, "u": {"$set": {"v": step}}}]};
                        assert_eq!(writer.write(k, body).await, 1, "update of k={k}");
                        model.insert(k, step);
                    }
                    Op::Delete(k) => {
                        let body = doc! {"delete": "items", "deletes": [{"q": {"_id": k}, "limit": 1}]};
                        assert_eq!(writer.write(k, body).await, 1, "delete of k={k}");
                        model.remove(&k);
                    }
                    Op::Insert(k) => {
                        let body = doc! {"insert": "items", "documents": [{"_id": k, "k": k, "v": step}]};
                        assert_eq!(writer.write(k, body).await, 1, "insert of k={k}");
                        model.insert(k, step);
                    }
                }
            }
            model
        }));
    }

    // Let the writers get going before the first move.
    while steps.load(Ordering::Relaxed) < 30 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for m in 0..MOVES {
        let t = table(&catalog).await;
        let to = if owner_of(&t, SPLIT) == "shard0" { "shard1" } else { "shard0" };
        let reply = admin.run_command(doc! { "moveChunk": NS, "find": {"k": SPLIT}, "to": to }).await;
        assert!(reply.is_ok(), "move {m} to {to}: {reply:?}\n{}", cluster.log_tails(30));
    }
    stop.store(true, Ordering::Relaxed);
    let mut expected: BTreeMap<i32, i32> = (0..SPLIT).map(|k| (k, 0)).collect();
    for w in writers {
        expected.extend(w.await.expect("writer"));
    }

    assert!(stale.load(Ordering::Relaxed) > 0, "no write ever crossed a migration (no StaleConfig seen)");

    // Exactly the expected documents on their owners, and (once range deletion ran) nowhere else.
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        let t = table(&catalog).await;
        let mut found = BTreeMap::new();
        let mut orphans = 0;
        for (i, addr) in addrs.iter().enumerate() {
            for (k, v) in docs_on(addr).await {
                if owner_of(&t, k) == ShardedCluster::shard_name(i) {
                    assert!(found.insert(k, v).is_none(), "k={k} owned twice");
                } else {
                    orphans += 1;
                }
            }
        }
        assert_eq!(found, expected, "the owned documents differ from what the writers wrote");
        if orphans == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{orphans} orphans never deleted\n{}", cluster.log_tails(30));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The same through the router with the official driver: the router targets by chunk, retries on
/// StaleConfig itself, and the client never sees a migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_writes_through_the_router_during_repeated_migrations_end_with_the_exact_documents() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "shardCollection": NS, "key": {"k": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": NS, "middle": {"k": SPLIT} }).await.expect("split");
    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let items = client.database("app").collection::<Document>("items");
    items.insert_many((0..INITIAL).map(|k| doc! {"_id": k, "k": k, "v": 0})).await.expect("seed");

    let stop = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (stop, steps, items) = (Arc::clone(&stop), Arc::clone(&steps), items.clone());
        writers.push(tokio::spawn(async move {
            let mut model: BTreeMap<i32, i32> = (SPLIT..INITIAL).filter(|k| k % WRITERS == w).map(|k| (k, 0)).collect();
            let (mut step, mut after_stop) = (0, 0);
            while after_stop < 20 {
                if stop.load(Ordering::Relaxed) {
                    after_stop += 1;
                }
                step += 1;
                steps.fetch_add(1, Ordering::Relaxed);
                match next_op(&model, w, step) {
                    Op::Update(k) => {
                        let r = items.update_one(doc! {"k": k}, doc! {"$set": {"v": step}}).await.expect("update");
                        assert_eq!(r.matched_count, 1, "update of k={k}");
                        model.insert(k, step);
                    }
                    Op::Delete(k) => {
                        let r = items.delete_one(doc! {"k": k}).await.expect("delete");
                        assert_eq!(r.deleted_count, 1, "delete of k={k}");
                        model.remove(&k);
                    }
                    Op::Insert(k) => {
                        items.insert_one(doc! {"_id": k, "k": k, "v": step}).await.expect("insert");
                        model.insert(k, step);
                    }
                }
            }
            model
        }));
    }
    while steps.load(Ordering::Relaxed) < 30 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for m in 0..MOVES {
        let t = table(&catalog).await;
        let to = if owner_of(&t, SPLIT) == "shard0" { "shard1" } else { "shard0" };
        let reply = admin.run_command(doc! { "moveChunk": NS, "find": {"k": SPLIT}, "to": to }).await;
        assert!(reply.is_ok(), "move {m} to {to}: {reply:?}\n{}", cluster.log_tails(30));
    }
    stop.store(true, Ordering::Relaxed);
    let mut expected: BTreeMap<i32, i32> = (0..SPLIT).map(|k| (k, 0)).collect();
    for w in writers {
        expected.extend(w.await.expect("writer"));
    }

    // Through the router: exactly the expected documents, once each (orphans filtered out).
    let mut seen = BTreeMap::new();
    let mut cursor = items.find(doc! {}).sort(doc! {"k": 1}).batch_size(50).await.expect("find");
    while cursor.advance().await.expect("getMore") {
        let d = cursor.deserialize_current().expect("doc");
        let k = d.get_i32("k").expect("k");
        assert!(seen.insert(k, d.get_i32("v").expect("v")).is_none(), "k={k} returned twice");
    }
    assert_eq!(seen, expected, "the router's answer differs from what the writers wrote");
    assert_eq!(items.count_documents(doc! {}).await.expect("count"), expected.len() as u64);
    // And on the shards, once range deletion ran, nothing but the owned documents.
    let addrs: Vec<String> = (0..2).map(|i| cluster.shard_addr(i)).collect();
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        let total: usize =
            futures::future::join_all(addrs.iter().map(|a| docs_on(a))).await.iter().map(|m| m.len()).sum();
        if total == expected.len() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{total} documents on the shards, expected {}", expected.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
