//! Routing by chunk across two shards: 3 config servers, `shard0` and `shard1`, routers with
//! `--config` only. Chunks are split through the router and placed on `shard1` by committing a
//! migration directly in the catalog while the collection is still EMPTY (data migration is not
//! what is tested here). Where documents land is checked on each shard directly over gRPC.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use shoal_proto::catalog::Parts;
use std::time::Duration;

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::options::FindOptions;
use shoal_cluster::config_client::ConfigClient;
use shoal_configsvr::catalog::{ChunkBound, Command};
use shoal_proto::shard::CommandRequest;
use shoal_tests::expect::{insert_many_errors, write_error};
use shoal_tests::sharded_cluster::{ShardedCluster, client_of};

const RPC_TIMEOUT: Duration = Duration::from_secs(20);

/// Documents of `db.coll` stored on `shard` (unversioned count, orphans included).
async fn on_shard(cluster: &ShardedCluster, shard: usize, db: &str, coll: &str) -> i64 {
    let mut client = shoal_tests::grpc::shard(cluster.shard_addr(shard)).await.expect("connect");
    let req = CommandRequest {
        request_id: "sharded-routing-test".into(),
        db: db.into(),
        body: doc! { "count": coll, "query": {} }.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    };
    let reply = tokio::time::timeout(RPC_TIMEOUT, client.command(req)).await.expect("in time").expect("rpc");
    let reply = reply.into_inner();
    assert!(reply.error.is_none(), "{:?}", reply.error);
    let body = Document::from_reader(&mut reply.body.as_ref()).expect("reply");
    match body.get("n") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("count reply {body}: n = {other:?}"),
    }
}

/// Commits the move of every chunk of `ns` not starting at MinKey to `to` (collection empty).
async fn move_upper_chunks(catalog: &ConfigClient, ns: &str, to: &str) {
    let snapshot = catalog.view(Parts::ALL, true).await.expect("catalog read").0;
    let coll = snapshot.collection(ns).expect("sharded").clone();
    for chunk in coll.chunks.values().filter(|c| c.min != ChunkBound::Min) {
        let current = catalog.view(Parts::ALL, true).await.expect("catalog read").0;
        let now = current.collection(ns).expect("sharded").chunks.get(&chunk.min).expect("chunk").clone();
        let cmd = Command::CommitMigration {
            ns: ns.into(),
            epoch: coll.epoch,
            min: now.min.clone(),
            max: now.max.clone(),
            from: now.shard.clone(),
            to: to.into(),
            expected_version: now.version,
            fencing: None,
        };
        catalog.write(&cmd).await.expect("commit").outcome.expect("migration committed");
    }
}

async fn per_shard(client: &mongodb::Client) -> Document {
    let status = client.database("admin").run_command(doc! { "serverStatus": 1 }).await.expect("serverStatus");
    status.get_document("shardingStatistics").expect("shardingStatistics").clone()
}

fn count_of(stats: &Document, shard: &str) -> i64 {
    stats.get_document("perShard").ok().and_then(|p| p.get_i64(shard).ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_compound_hashed_and_unsharded_collections_route_by_chunk() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    let catalog = cluster.catalog();

    // Range key {a: 1}: [Min, 0) on shard0, [0, Max) on shard1.
    admin.run_command(doc! { "shardCollection": "app.r", "key": {"a": 1} }).await.expect("shard app.r");
    admin.run_command(doc! { "split": "app.r", "middle": {"a": 0} }).await.expect("split");
    let primary = catalog.view(Parts::ALL, true).await.expect("read").0.database("app").expect("app").primary.clone();
    let other = if primary == "shard0" { "shard1" } else { "shard0" };
    move_upper_chunks(&catalog, "app.r", other).await;
    let (lo, hi) = if primary == "shard0" { (0, 1) } else { (1, 0) };

    let r = client.database("app").collection::<Document>("r");
    let docs: Vec<Document> = (-50..50).map(|a| doc! { "a": a, "b": a * 2 }).collect();
    let inserted = r.insert_many(docs).await.expect("insert");
    assert_eq!(inserted.inserted_ids.len(), 100);
    assert_eq!(on_shard(&cluster, lo, "app", "r").await, 50, "a < 0 on the low shard");
    assert_eq!(on_shard(&cluster, hi, "app", "r").await, 50, "a >= 0 on the high shard");

    // A document without the shard key is refused (61) and the rest of an unordered batch lands.
    let errors = insert_many_errors(
        r.insert_many(vec![doc! { "a": 100 }, doc! { "b": 1 }, doc! { "a": -100 }]).ordered(false).await,
    );
    assert_eq!(errors, [(1, 61)]);
    assert_eq!(on_shard(&cluster, lo, "app", "r").await + on_shard(&cluster, hi, "app", "r").await, 102);
    r.delete_many(doc! { "a": { "$in": [100, -100] } }).await.expect("cleanup");

    // Targeted: an equality on the key goes to one shard only.
    let before = per_shard(&client).await;
    let one = r.find_one(doc! { "a": 7 }).await.expect("find").expect("found");
    assert_eq!(one.get_i32("b").ok(), Some(14));
    let after = per_shard(&client).await;
    let high = if hi == 0 { "shard0" } else { "shard1" };
    let low = if lo == 0 { "shard0" } else { "shard1" };
    assert_eq!(count_of(&after, high) - count_of(&before, high), 1, "{before} -> {after}");
    assert_eq!(count_of(&after, low), count_of(&before, low), "{before} -> {after}");

    // explain shows the targeting.
    let app = client.database("app");
    let plan = app.run_command(doc! { "explain": { "find": "r", "filter": { "a": 7 } } }).await.expect("explain");
    let winning = plan.get_document("queryPlanner").and_then(|q| q.get_document("winningPlan")).expect("plan");
    assert_eq!(winning.get_str("stage").ok(), Some("SINGLE_SHARD"), "{plan}");
    assert_eq!(winning.get_array("shards").map(Vec::len).ok(), Some(1), "{plan}");
    let plan = app.run_command(doc! { "explain": { "count": "r", "query": {} } }).await.expect("explain");
    let winning = plan.get_document("queryPlanner").and_then(|q| q.get_document("winningPlan")).expect("plan");
    assert_eq!(winning.get_str("stage").ok(), Some("SHARD_MERGE"), "{plan}");
    assert_eq!(winning.get_array("shards").map(Vec::len).ok(), Some(2), "{plan}");

    // Scatter: merged in sort order, skip/limit after the merge, small batches via getMore.
    let opts = FindOptions::builder().sort(doc! { "a": -1 }).skip(5).limit(30).batch_size(7).build();
    let got: Vec<i32> = r
        .find(doc! {})
        .with_options(opts)
        .await
        .expect("find")
        .try_collect::<Vec<_>>()
        .await
        .expect("cursor")
        .iter()
        .map(|d| d.get_i32("a").expect("a"))
        .collect();
    assert_eq!(got, (15..45).rev().collect::<Vec<i32>>());
    // A projection that drops the sort field still sorts.
    let opts = FindOptions::builder().sort(doc! { "a": 1 }).projection(doc! { "_id": 0, "b": 1 }).limit(4).build();
    let got: Vec<Document> = r
        .find(doc! { "a": { "$gte": -2 } })
        .with_options(opts)
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("cursor");
    assert_eq!(got, vec![doc! { "b": -4 }, doc! { "b": -2 }, doc! { "b": 0 }, doc! { "b": 2 }]);
    // A range on the key inside one chunk targets one shard.
    let before = per_shard(&client).await;
    assert_eq!(r.count_documents(doc! { "a": { "$gte": 10, "$lt": 20 } }).await.expect("count"), 10);
    let after = per_shard(&client).await;
    assert_eq!(count_of(&after, low), count_of(&before, low), "{before} -> {after}");

    // count, distinct, aggregate across both shards.
    assert_eq!(r.count_documents(doc! {}).await.expect("count"), 100);
    let n = client
        .database("app")
        .run_command(doc! { "count": "r", "query": { "a": { "$gte": -10 } }, "skip": 5, "limit": 50 })
        .await
        .expect("count");
    assert_eq!(n.get_i32("n").ok(), Some(50), "{n}");
    let values = r.distinct("b", doc! { "a": { "$gte": -3, "$lt": 3 } }).await.expect("distinct");
    assert_eq!(values, [-6, -4, -2, 0, 2, 4].map(Bson::Int32).to_vec());
    let agg: Vec<Document> = r
        .aggregate(vec![
            doc! { "$match": { "a": { "$gte": -5 } } },
            doc! { "$group": { "_id": null, "s": { "$sum": "$a" } } },
        ])
        .await
        .expect("aggregate")
        .try_collect()
        .await
        .expect("cursor");
    assert_eq!(agg.len(), 1);
    assert_eq!(agg[0].get("s"), Some(&Bson::Int32((-5..50).sum())), "{agg:?}");
    let top: Vec<i32> = r
        .aggregate(vec![
            doc! { "$match": { "a": { "$gte": -10 } } },
            doc! { "$sort": { "a": -1 } },
            doc! { "$limit": 3 },
            doc! { "$project": { "_id": 0, "a": 1 } },
        ])
        .await
        .expect("aggregate")
        .try_collect::<Vec<_>>()
        .await
        .expect("cursor")
        .iter()
        .map(|d| d.get_i32("a").expect("a"))
        .collect();
    assert_eq!(top, [49, 48, 47]);

    // Writes: multi on every targeted shard; single-document by key; untargetable single refused.
    let res = r.update_many(doc! {}, doc! { "$inc": { "c": 1 } }).await.expect("update many");
    assert_eq!((res.matched_count, res.modified_count), (100, 100));
    let res = r.update_one(doc! { "a": 3 }, doc! { "$set": { "c": 10 } }).await.expect("update one");
    assert_eq!(res.modified_count, 1);
    // Not targeted by the key: one matching document is found on some shard and written there.
    let res = r.update_one(doc! { "b": 6 }, doc! { "$set": { "c": 11 } }).await.expect("update one without key");
    assert_eq!((res.matched_count, res.modified_count), (1, 1));
    assert_eq!(r.find_one(doc! { "a": 3 }).await.expect("find").and_then(|d| d.get_i32("c").ok()), Some(11));
    let res = r.update_one(doc! { "c": 1 }, doc! { "$set": { "c": 2 } }).await.expect("update one of many");
    assert_eq!(res.modified_count, 1);
    assert_eq!(r.count_documents(doc! { "c": 2 }).await.expect("count"), 1);
    let found = r.find_one_and_update(doc! { "b": 20 }, doc! { "$set": { "fam": 1 } }).await.expect("fam");
    assert_eq!(found.and_then(|d| d.get_i32("a").ok()), Some(10));
    let found = r.find_one_and_update(doc! { "a": -20 }, doc! { "$set": { "fam": 1 } }).await.expect("fam by key");
    assert_eq!(found.and_then(|d| d.get_i32("b").ok()), Some(-40));
    assert_eq!(r.count_documents(doc! { "fam": 1 }).await.expect("count"), 2);
    let res = r.delete_one(doc! { "b": { "$in": [-98, 98] } }).await.expect("delete one without key");
    assert_eq!(res.deleted_count, 1);
    r.insert_one(doc! { "a": -49, "b": -98, "c": 1 }).await.expect("put back");
    let res = r.delete_one(doc! { "b": 98 }).await.expect("delete one without key");
    assert_eq!(res.deleted_count, 1);
    r.insert_one(doc! { "a": 49, "b": 98, "c": 1 }).await.expect("put back");
    write_error(r.update_one(doc! { "b": 6 }, doc! { "$set": { "c": 10 } }).upsert(true).await, 61);
    let res = r.delete_many(doc! { "a": { "$lt": -40 } }).await.expect("delete many");
    assert_eq!(res.deleted_count, 10);
    assert_eq!(on_shard(&cluster, lo, "app", "r").await, 40);

    // Compound key {a: 1, b: 1}, split at {a: 10, b: 0}, upper chunk on the other shard.
    admin.run_command(doc! { "shardCollection": "app.c", "key": {"a": 1, "b": 1} }).await.expect("shard app.c");
    admin.run_command(doc! { "split": "app.c", "middle": {"a": 10, "b": 0} }).await.expect("split");
    move_upper_chunks(&catalog, "app.c", other).await;
    let c = client.database("app").collection::<Document>("c");
    c.insert_many((0..20).map(|a| doc! { "a": a, "b": a % 3 - 1 })).await.expect("insert");
    // a < 10, and a == 10 with b < 0 (b = 10 % 3 - 1 = 0, so not) → 10 low, 10 high.
    assert_eq!(on_shard(&cluster, lo, "app", "c").await, 10);
    assert_eq!(on_shard(&cluster, hi, "app", "c").await, 10);
    let got: Vec<i32> = c
        .find(doc! {})
        .sort(doc! { "a": -1 })
        .await
        .expect("find")
        .try_collect::<Vec<_>>()
        .await
        .expect("cursor")
        .iter()
        .map(|d| d.get_i32("a").expect("a"))
        .collect();
    assert_eq!(got, (0..20).rev().collect::<Vec<i32>>());

    // Hashed key: initial chunks dealt over both shards.
    admin.run_command(doc! { "shardCollection": "app.h", "key": {"h": "hashed"} }).await.expect("shard app.h");
    let h = client.database("app").collection::<Document>("h");
    h.insert_many((0..200).map(|i| doc! { "h": i, "v": i })).await.expect("insert");
    let (h0, h1) = (on_shard(&cluster, 0, "app", "h").await, on_shard(&cluster, 1, "app", "h").await);
    assert_eq!(h0 + h1, 200);
    assert!(h0 > 0 && h1 > 0, "hashed documents spread: {h0} / {h1}");
    let before = per_shard(&client).await;
    assert_eq!(h.find_one(doc! { "h": 123 }).await.expect("find").and_then(|d| d.get_i32("v").ok()), Some(123));
    let after = per_shard(&client).await;
    let touched = ["shard0", "shard1"].iter().filter(|s| count_of(&after, s) != count_of(&before, s)).count();
    assert_eq!(touched, 1, "{before} -> {after}");
    assert_eq!(h.count_documents(doc! { "h": { "$in": [1, 2, 3, 500] } }).await.expect("count"), 3);
    // More than a shard's first batch on each shard: the merge pulls getMores from each shard.
    h.insert_many((200..600).map(|i| doc! { "h": i, "v": i })).await.expect("insert more");
    let all: Vec<i32> = h
        .find(doc! {})
        .sort(doc! { "v": 1 })
        .batch_size(50)
        .await
        .expect("find")
        .try_collect::<Vec<_>>()
        .await
        .expect("cursor")
        .iter()
        .map(|d| d.get_i32("v").expect("v"))
        .collect();
    assert_eq!(all, (0..600).collect::<Vec<i32>>());
    // killCursors closes a multi-shard cursor.
    let app = client.database("app");
    let first = app.run_command(doc! { "find": "h", "sort": { "v": 1 }, "batchSize": 5 }).await.expect("find");
    let id = first.get_document("cursor").and_then(|c| c.get_i64("id")).expect("cursor id");
    assert_ne!(id, 0);
    let more = app.run_command(doc! { "getMore": id, "collection": "h", "batchSize": 5 }).await.expect("getMore");
    let next: Vec<i32> = more
        .get_document("cursor")
        .and_then(|c| c.get_array("nextBatch"))
        .expect("nextBatch")
        .iter()
        .map(|d| d.as_document().and_then(|d| d.get_i32("v").ok()).expect("v"))
        .collect();
    assert_eq!(next, [5, 6, 7, 8, 9]);
    let killed = app.run_command(doc! { "killCursors": "h", "cursors": [id] }).await.expect("killCursors");
    assert_eq!(killed.get_array("cursorsKilled").map(|a| a.len()).ok(), Some(1), "{killed}");
    let gone = app.run_command(doc! { "getMore": id, "collection": "h" }).await;
    assert!(gone.is_err(), "getMore after killCursors: {gone:?}");

    // Unsharded collections live on their database's primary.
    let plain = client.database("other").collection::<Document>("plain");
    plain.insert_many((0..5).map(|i| doc! { "i": i })).await.expect("insert");
    let other_primary =
        catalog.view(Parts::ALL, true).await.expect("read").0.database("other").expect("created").primary.clone();
    let idx = if other_primary == "shard0" { 0 } else { 1 };
    assert_eq!(on_shard(&cluster, idx, "other", "plain").await, 5);
    assert_eq!(on_shard(&cluster, 1 - idx, "other", "plain").await, 0);
    assert_eq!(plain.count_documents(doc! {}).await.expect("count"), 5);
    // Reads of an unknown database are empty.
    let none = client.database("nope").collection::<Document>("x");
    assert_eq!(none.count_documents(doc! {}).await.expect("count"), 0);
    assert!(none.find_one(doc! {}).await.expect("find").is_none());

    // listDatabases/listCollections are merged over the shards.
    let names = client.list_database_names().await.expect("listDatabases");
    assert!(names.contains(&"app".to_string()) && names.contains(&"other".to_string()), "{names:?}");
    let mut colls = client.database("app").list_collection_names().await.expect("listCollections");
    colls.sort();
    assert_eq!(colls, ["c", "h", "r"]);

    // Dropping a sharded collection empties every shard and the catalog; dropDatabase too.
    r.drop().await.expect("drop");
    assert_eq!(on_shard(&cluster, 0, "app", "r").await + on_shard(&cluster, 1, "app", "r").await, 0);
    assert!(catalog.view(Parts::ALL, true).await.expect("read").0.collection("app.r").is_none());
    client.database("app").drop().await.expect("dropDatabase");
    let snapshot = catalog.view(Parts::ALL, true).await.expect("read").0;
    assert!(snapshot.database("app").is_none() && snapshot.collection("app.h").is_none());
    assert_eq!(on_shard(&cluster, 0, "app", "h").await + on_shard(&cluster, 1, "app", "h").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_router_refreshes_on_stale_config_and_answers_correctly() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    let catalog = cluster.catalog();
    admin.run_command(doc! { "shardCollection": "app.s", "key": {"a": 1} }).await.expect("shard");
    admin.run_command(doc! { "split": "app.s", "middle": {"a": 0} }).await.expect("split");
    let primary = catalog.view(Parts::ALL, true).await.expect("read").0.database("app").expect("app").primary.clone();
    let (lo, hi, other) = if primary == "shard0" { (0, 1, "shard1") } else { (1, 0, "shard0") };

    // The router caches the table while both chunks are on the primary...
    let s = client.database("app").collection::<Document>("s");
    assert_eq!(s.count_documents(doc! {}).await.expect("count"), 0);
    // ...then the upper chunk's ownership moves behind its back (the collection is empty), and
    // a second router, fresh from the catalog, reads through both shards, so the shards learn
    // the new versions (a shard refreshes when a router shows it a newer one).
    move_upper_chunks(&catalog, "app.s", other).await;
    let router2 = cluster.start_router("router2").await.expect("router2");
    let fresh = client_of(&router2).await.expect("client2");
    assert_eq!(fresh.database("app").collection::<Document>("s").count_documents(doc! {}).await.expect("count"), 0);

    // The first router's cached version is now stale: the primary answers StaleConfig, the
    // router refreshes and sends the document to the new owner. The client never sees 13388.
    s.insert_one(doc! { "a": 5 }).await.expect("insert through a stale router");
    s.insert_one(doc! { "a": -5 }).await.expect("insert");
    assert_eq!(on_shard(&cluster, hi, "app", "s").await, 1, "a = 5 went to the chunk's new owner");
    assert_eq!(on_shard(&cluster, lo, "app", "s").await, 1);

    // Both routers read both documents.
    for c in [&client, &fresh] {
        let docs: Vec<Document> = c
            .database("app")
            .collection::<Document>("s")
            .find(doc! {})
            .sort(doc! { "a": 1 })
            .await
            .expect("find")
            .try_collect()
            .await
            .expect("cursor");
        let a: Vec<i32> = docs.iter().map(|d| d.get_i32("a").expect("a")).collect();
        assert_eq!(a, [-5, 5]);
    }

    // flushRouterConfig drops the cache; the next request reloads it.
    admin.run_command(doc! { "flushRouterConfig": 1 }).await.expect("flush");
    assert_eq!(s.count_documents(doc! { "a": 5 }).await.expect("count"), 1);
}
