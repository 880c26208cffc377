//! `_shoalChunkStats` on a real shard (contract 2 of issue 6): bytes and documents per range of a
//! collection written through the router, load from versioned requests the router sent, a load
//! split key inside a hot key range, none (with an imbalance reason) for a single hot key; and
//! the donor's fencing: a MoveRange with a stale balancer token changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Bson, Document, doc};
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{ChunkBound, RoutingTable};
use shoal_proto::shard::{CommandRequest, KeyBound, MoveRangeRequest};
use shoal_tests::sharded_cluster::ShardedCluster;

const NS: &str = "app.items";
const DOCS: i32 = 1000;
const SPLIT: i32 = 500;
const RPC_TIMEOUT: Duration = Duration::from_secs(30);

fn request(db: &str, body: Document) -> CommandRequest {
    CommandRequest {
        request_id: "chunk-stats-test".into(),
        db: db.into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    }
}

async fn table(cluster: &ShardedCluster) -> RoutingTable {
    match cluster.catalog().routing_table(NS, None, true).await.expect("routing table").0 {
        RoutingAnswer::Full(Some(t)) => t,
        other => panic!("expected a routing table, got {other:?}"),
    }
}

/// Runs `_shoalChunkStats` over `[MinKey, SPLIT)` and `[SPLIT, MaxKey)` on shard `addr`.
async fn stats(addr: &str, body: Option<Document>) -> Result<Document, (i32, String)> {
    let body = body.unwrap_or_else(|| {
        doc! {
            "_shoalChunkStats": NS,
            "keyPattern": {"k": 1},
            "ranges": [
                {"min": {"k": Bson::MinKey}, "max": {"k": SPLIT}},
                {"min": {"k": SPLIT}, "max": {"k": Bson::MaxKey}},
            ],
        }
    });
    let mut c = shoal_tests::grpc::shard(addr).await.expect("connect to shard");
    let reply = tokio::time::timeout(RPC_TIMEOUT, c.command(request("admin", body)))
        .await
        .expect("in time")
        .expect("rpc")
        .into_inner();
    match reply.error {
        Some(e) => Err((e.code, e.errmsg)),
        None => Ok(Document::from_reader(&mut &reply.body[..]).expect("reply")),
    }
}

fn range(reply: &Document, i: usize) -> Document {
    reply.get_array("ranges").expect("ranges")[i].as_document().expect("range doc").clone()
}

/// A sharded collection split at SPLIT with DOCS documents written through the router; returns
/// the cluster, a client, the owner's index and the documents' total size per chunk.
async fn setup() -> (ShardedCluster, mongodb::Client, usize, [i64; 2]) {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "shardCollection": NS, "key": {"k": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": NS, "middle": {"k": SPLIT} }).await.expect("split");
    let docs: Vec<Document> =
        (0..DOCS).map(|k| doc! {"_id": k, "k": k, "pad": "x".repeat(50 + (k % 7) as usize * 10)}).collect();
    let mut bytes = [0i64; 2];
    for d in &docs {
        bytes[usize::from(d.get_i32("k").expect("k") >= SPLIT)] += d.to_vec().expect("encode").len() as i64;
    }
    let coll = client.database("app").collection::<Document>("items");
    coll.insert_many(docs).await.expect("insert through the router");
    let t = table(&cluster).await;
    assert!(t.chunks.iter().all(|c| c.shard == t.chunks[0].shard), "both chunks start on one shard");
    let owner = if t.chunks[0].shard == "shard0" { 0 } else { 1 };
    (cluster, client, owner, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_stats_report_sizes_and_where_the_load_is() {
    let (cluster, client, owner, bytes) = setup().await;
    let addr = cluster.shard_addr(owner);

    let reply = stats(&addr, None).await.expect("stats");
    assert!(reply.get_f64("loadWindowSecs").expect("window") > 0.0, "{reply}");
    for (i, want) in bytes.iter().enumerate() {
        let r = range(&reply, i);
        assert_eq!(r.get_i64("docs").expect("docs"), i64::from(DOCS / 2), "{reply}");
        assert_eq!(r.get_i64("bytes").expect("bytes"), *want, "{reply}");
    }
    // Asked again with nothing written: the same answer (from the cache).
    let again = stats(&addr, None).await.expect("stats");
    assert_eq!(again.get_array("ranges").map(|r| r.len()).ok(), Some(2));
    assert_eq!(range(&again, 0).get_i64("bytes").ok(), range(&reply, 0).get_i64("bytes").ok());

    // A skewed load through the router: reads and writes on k in [0, 100) only.
    let coll = client.database("app").collection::<Document>("items");
    for i in 0..300 {
        let k = i % 100;
        if i % 3 == 0 {
            coll.update_one(doc! {"k": k}, doc! {"$inc": {"n": 1}}).await.expect("update");
        } else {
            coll.find_one(doc! {"k": k}).await.expect("find").expect("document");
        }
    }
    let reply = stats(&addr, None).await.expect("stats");
    let (hot, cold) = (range(&reply, 0), range(&reply, 1));
    let hot_ops = hot.get_f64("opsPerSec").expect("opsPerSec");
    assert!(hot_ops > 0.0 && hot_ops > 10.0 * cold.get_f64("opsPerSec").expect("opsPerSec"), "{reply}");
    assert!(hot.get_i32("samples").expect("samples") >= 100, "{reply}");
    let key = hot.get_document("loadSplitKey").unwrap_or_else(|_| panic!("a load split key: {reply}"));
    let k = key.get_i32("k").expect("k");
    assert!(0 < k && k < 100, "the split key {k} is inside the hot part: {reply}");
    assert!(hot.get("noLoadSplitReason").is_none(), "{reply}");
    assert!(cold.get_str("noLoadSplitReason").expect("reason").starts_with("too few samples"), "{reply}");

    // A single hot key in the other chunk: no key, and the reason says the load is on one key.
    for _ in 0..300 {
        coll.find_one(doc! {"k": 700}).await.expect("find").expect("document");
    }
    let reply = stats(&addr, None).await.expect("stats");
    let single = range(&reply, 1);
    assert!(single.get_i32("samples").expect("samples") >= 100, "{reply}");
    assert!(single.get("loadSplitKey").is_none(), "{reply}");
    let why = single.get_str("noLoadSplitReason").expect("reason");
    assert!(why.contains("imbalance") && why.contains("one key"), "{why}");

    // Writes since: the sizes follow.
    coll.insert_one(doc! {"_id": DOCS, "k": 10}).await.expect("insert");
    let reply = stats(&addr, None).await.expect("stats");
    assert_eq!(range(&reply, 0).get_i64("docs").ok(), Some(i64::from(DOCS / 2 + 1)), "{reply}");

    // The other shard has none of it; an unknown namespace answers zeros.
    let other = stats(&cluster.shard_addr(1 - owner), None).await.expect("stats");
    assert_eq!(range(&other, 0).get_i64("docs").ok(), Some(0));
    let unknown = stats(
        &addr,
        Some(doc! {"_shoalChunkStats": "app.nope", "keyPattern": {"k": 1},
        "ranges": [{"min": {"k": Bson::MinKey}, "max": {"k": Bson::MaxKey}}]}),
    )
    .await
    .expect("stats");
    assert_eq!(range(&unknown, 0).get_i64("bytes").ok(), Some(0));

    // Bad input: MongoDB error codes.
    let bad = |body: Document| stats(&addr, Some(body));
    let (code, _) = bad(doc! {"_shoalChunkStats": "nodot", "keyPattern": {"k": 1}, "ranges": []}).await.unwrap_err();
    assert_eq!(code, 73, "InvalidNamespace");
    let (code, _) = bad(doc! {"_shoalChunkStats": NS, "keyPattern": {"k": "x"}, "ranges": []}).await.unwrap_err();
    assert_eq!(code, 2, "BadValue");
    let (code, _) = bad(doc! {"_shoalChunkStats": NS, "keyPattern": {"k": 1}, "ranges": 5}).await.unwrap_err();
    assert_eq!(code, 14, "TypeMismatch");
    let overlapping = doc! {"_shoalChunkStats": NS, "keyPattern": {"k": 1}, "ranges": [
    {"min": {"k": 0}, "max": {"k": 10}}, {"min": {"k": 5}, "max": {"k": 20}}]};
    let (code, msg) = bad(overlapping).await.unwrap_err();
    assert_eq!(code, 2, "{msg}");
    let (code, msg) =
        bad(doc! {"_shoalChunkStats": NS, "keyPattern": {"k": 1}, "ranges": [{"min": {"j": 0}, "max": {"k": 1}}]})
            .await
            .unwrap_err();
    assert_eq!(code, 2, "{msg}");
}

fn bound(k: i32) -> KeyBound {
    let fields = [shoal_query::shard_key::KeyField { name: "k".into(), hashed: false }];
    let key = shoal_query::shard_key::of_document(&fields, &doc! {"k": k}, shoal_query::shard_key::Missing::AsNull)
        .expect("key");
    KeyBound { kind: 1, key: key.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_with_a_stale_fencing_token_changes_nothing() {
    let (cluster, client, owner, _) = setup().await;
    let before = table(&cluster).await;
    let upper = before.chunks.iter().find(|c| c.max == ChunkBound::Max).expect("upper chunk").clone();
    let mut donor = shoal_tests::grpc::migration(cluster.shard_addr(owner)).await.expect("connect");
    let req = MoveRangeRequest {
        request_id: "fencing-test".into(),
        ns: NS.into(),
        min: Some(bound(SPLIT)),
        max: Some(KeyBound { kind: 2, key: Default::default() }),
        to_shard: ShardedCluster::shard_name(1 - owner),
        epoch: before.epoch.0.to_vec().into(),
        major: upper.version.major,
        minor: upper.version.minor,
        wait_for_delete: false,
        fencing_lease: shoal_configsvr::catalog::BALANCER_LEASE.into(),
        fencing_token: 424_242,
        latency_target_ms: 50,
    };
    let reply = tokio::time::timeout(Duration::from_secs(120), donor.move_range(req))
        .await
        .expect("in time")
        .expect("rpc")
        .into_inner();
    let e = reply.error.expect("refused: nobody holds the balancer lease with that token");
    assert_eq!(e.code, 46, "LockBusy from the catalog: {}", e.errmsg);

    let after = table(&cluster).await;
    assert_eq!(after.chunks, before.chunks, "the catalog did not change");
    // Every document once, through the router, and the shards accept the move unfenced.
    let coll = client.database("app").collection::<Document>("items");
    assert_eq!(coll.count_documents(doc! {}).await.expect("count"), DOCS as u64);
    client
        .database("admin")
        .run_command(doc! { "moveChunk": NS, "find": {"k": SPLIT}, "to": ShardedCluster::shard_name(1 - owner) })
        .await
        .expect("an unfenced move after the refusal");
    assert_eq!(coll.count_documents(doc! {}).await.expect("count"), DOCS as u64);
}
