//! movePrimary and removeShard on a real cluster: an unsharded collection moves with its
//! database's primary, a router with a stale cache (and writes racing the move) land on the new
//! primary with nothing lost, and a shard drains (removeShard started → ongoing → completed)
//! once its database and chunks are moved off by hand. Bad input gets MongoDB's error codes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use shoal_proto::catalog::Parts;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Document, doc};
use futures::TryStreamExt;
use shoal_proto::shard::CommandRequest;
use shoal_tests::expect::command_error;
use shoal_tests::sharded_cluster::{ShardedCluster, client_of};

const RPC_TIMEOUT: Duration = Duration::from_secs(30);
const DOCS: i32 = 200;

/// Collection names `db` has on the shard at `addr` (asked directly, unversioned).
async fn collections_on(addr: &str, db: &str) -> BTreeSet<String> {
    let mut c = shoal_tests::grpc::shard(addr).await.expect("connect to shard");
    let req = CommandRequest {
        request_id: "move-primary-test".into(),
        db: db.into(),
        body: doc! { "listCollections": 1 }.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: true,
        client: None,
        traceparent: String::new(),
    };
    let reply = tokio::time::timeout(RPC_TIMEOUT, c.command(req)).await.expect("in time").expect("rpc").into_inner();
    assert!(reply.error.is_none(), "listCollections failed: {:?}", reply.error);
    let body = Document::from_reader(&mut &reply.body[..]).expect("reply");
    let batch = body.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("firstBatch");
    batch.iter().filter_map(|d| d.as_document()?.get_str("name").ok().map(str::to_owned)).collect()
}

async fn ids(coll: &mongodb::Collection<Document>) -> BTreeSet<i32> {
    let docs: Vec<Document> = coll.find(doc! {}).await.expect("find").try_collect().await.expect("cursor");
    docs.iter().map(|d| d.get_i32("_id").expect("_id")).collect()
}

async fn primary_of(cluster: &ShardedCluster, db: &str) -> String {
    let (catalog, _) = cluster.catalog().view(Parts::ALL, true).await.expect("catalog");
    catalog.database(db).expect("database").primary.clone()
}

#[tokio::test]
async fn move_primary_moves_unsharded_collections_and_stale_routers_follow() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "app", "primaryShard": "shard0" }).await.expect("enableSharding");
    let plain = client.database("app").collection::<Document>("plain");
    let docs: Vec<Document> = (0..DOCS).map(|i| doc! { "_id": i, "v": format!("doc {i}") }).collect();
    plain.insert_many(docs).await.expect("insert");

    // A second router that caches shard0 as the primary.
    let other = cluster.start_router("router2").await.expect("second router");
    let stale = client_of(&other).await.expect("client of router2");
    let stale_plain = stale.database("app").collection::<Document>("plain");
    assert_eq!(ids(&stale_plain).await.len(), DOCS as usize);

    // Writes through the stale router race the move; every acknowledged one must survive.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (coll, stop) = (stale_plain.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let (mut acked, mut attempted) = (BTreeSet::new(), BTreeSet::new());
            let mut id = 10_000;
            while !stop.load(Ordering::Acquire) && id < 12_000 {
                attempted.insert(id);
                if coll.insert_one(doc! { "_id": id }).await.is_ok() {
                    acked.insert(id);
                }
                id += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (acked, attempted)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    admin.run_command(doc! { "movePrimary": "app", "to": "shard1" }).await.expect("movePrimary");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Release);
    let (acked, attempted) = writer.await.expect("writer");
    assert!(!acked.is_empty(), "no write went through during the move");

    assert_eq!(primary_of(&cluster, "app").await, "shard1");
    assert!(collections_on(&cluster.shard_addr(1), "app").await.contains("plain"));
    assert!(
        !collections_on(&cluster.shard_addr(0), "app").await.contains("plain"),
        "the old primary still has the collection\n{}",
        cluster.log_tails(30)
    );

    // After the move, the stale router's writes land on the new primary.
    let late: Vec<Document> = (20_000..20_050).map(|i| doc! { "_id": i }).collect();
    stale_plain.insert_many(late).await.expect("insert through the stale router");
    let got = ids(&plain).await;
    let base: BTreeSet<i32> = (0..DOCS).chain(20_000..20_050).collect();
    assert!(base.is_subset(&got), "documents lost: {:?}", base.difference(&got).take(5).collect::<Vec<_>>());
    assert!(
        acked.is_subset(&got),
        "acknowledged writes lost: {:?}",
        acked.difference(&got).take(5).collect::<Vec<_>>()
    );
    let unexpected: Vec<_> = got.iter().filter(|i| !base.contains(i) && !attempted.contains(i)).collect();
    assert!(unexpected.is_empty(), "documents nobody wrote: {unexpected:?}");
    assert_eq!(ids(&stale_plain).await, got, "both routers read the same documents");
    assert!(!collections_on(&cluster.shard_addr(0), "app").await.contains("plain"), "a write recreated it on shard0");

    // Bad input.
    command_error(admin.run_command(doc! { "movePrimary": "nosuchdb", "to": "shard0" }).await, 26);
    command_error(admin.run_command(doc! { "movePrimary": "app", "to": "nosuchshard" }).await, 70);
    command_error(admin.run_command(doc! { "movePrimary": "admin", "to": "shard0" }).await, 72);
    command_error(admin.run_command(doc! { "movePrimary": "config", "to": "shard0" }).await, 72);
    command_error(admin.run_command(doc! { "removeShard": "nosuchshard" }).await, 70);
    command_error(client.database("app").run_command(doc! { "movePrimary": "app", "to": "shard0" }).await, 13);
    // The current primary: nothing to do.
    admin.run_command(doc! { "movePrimary": "app", "to": "shard1" }).await.expect("same shard is a no-op");
    assert_eq!(primary_of(&cluster, "app").await, "shard1");
}

#[tokio::test]
async fn remove_shard_drains_after_move_primary_and_move_chunk() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "app", "primaryShard": "shard1" }).await.expect("enableSharding");
    admin.run_command(doc! { "shardCollection": "app.items", "key": {"k": 1} }).await.expect("shardCollection");
    let items = client.database("app").collection::<Document>("items");
    let plain = client.database("app").collection::<Document>("plain");
    items.insert_many((0..50).map(|i| doc! { "_id": i, "k": i }).collect::<Vec<_>>()).await.expect("insert items");
    plain.insert_many((0..50).map(|i| doc! { "_id": i }).collect::<Vec<_>>()).await.expect("insert plain");

    let started = admin.run_command(doc! { "removeShard": "shard1" }).await.expect("removeShard starts");
    assert_eq!(started.get_str("msg").ok(), Some("draining started successfully"), "{started}");
    assert_eq!(started.get_str("state").ok(), Some("started"));
    assert_eq!(started.get_str("shard").ok(), Some("shard1"));
    assert_eq!(started.get_array("dbsToMove").expect("dbsToMove"), &vec![bson::Bson::String("app".into())]);
    assert!(started.get_str("note").is_ok_and(|n| n.contains("movePrimary")));

    let ongoing = admin.run_command(doc! { "removeShard": "shard1" }).await.expect("removeShard ongoing");
    assert_eq!(ongoing.get_str("state").ok(), Some("ongoing"), "{ongoing}");
    assert_eq!(ongoing.get_str("msg").ok(), Some("draining ongoing"));
    let remaining = ongoing.get_document("remaining").expect("remaining");
    assert_eq!(remaining.get_i64("dbs").ok(), Some(1));
    // A balancer may already have moved the chunk away.
    assert!(remaining.get_i64("chunks").is_ok_and(|c| c <= 1), "{remaining}");
    assert!(remaining.get_i64("jumboChunks").is_ok());
    assert_eq!(ongoing.get_array("dbsToMove").expect("dbsToMove").len(), 1);
    let listed = admin.run_command(doc! { "listShards": 1 }).await.expect("listShards");
    let draining = listed
        .get_array("shards")
        .expect("shards")
        .iter()
        .filter_map(|s| s.as_document())
        .any(|s| s.get_str("_id").ok() == Some("shard1") && s.get_bool("draining").ok() == Some(true));
    assert!(draining, "shard1 is not shown draining: {listed}");

    admin.run_command(doc! { "movePrimary": "app", "to": "shard0" }).await.expect("movePrimary");
    admin
        .run_command(doc! { "moveChunk": "app.items", "find": {"k": 0}, "to": "shard0", "_waitForDelete": true })
        .await
        .expect("moveChunk");
    let done = admin.run_command(doc! { "removeShard": "shard1" }).await.expect("removeShard completes");
    assert_eq!(done.get_str("state").ok(), Some("completed"), "{done}");
    assert_eq!(done.get_str("msg").ok(), Some("removeshard completed successfully"));
    assert_eq!(done.get_str("shard").ok(), Some("shard1"));

    let listed = admin.run_command(doc! { "listShards": 1 }).await.expect("listShards");
    let names: Vec<&str> = listed
        .get_array("shards")
        .expect("shards")
        .iter()
        .filter_map(|s| s.as_document()?.get_str("_id").ok())
        .collect();
    assert_eq!(names, vec!["shard0"]);
    // Everything is still readable, and writable, through the router.
    assert_eq!(ids(&items).await, (0..50).collect());
    assert_eq!(ids(&plain).await, (0..50).collect());
    plain.insert_one(doc! { "_id": 50 }).await.expect("insert after removal");
    items.insert_one(doc! { "_id": 50, "k": 50 }).await.expect("insert after removal");
    assert_eq!(collections_on(&cluster.shard_addr(0), "app").await, BTreeSet::from(["items".into(), "plain".into()]));
    command_error(admin.run_command(doc! { "removeShard": "shard0" }).await, 20);
}
