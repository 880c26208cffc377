//! Secondary indexes through the router with the Rust driver, over real processes: each index
//! kind returns what a collection scan returns, `explain` shows IXSCAN where an index serves
//! and COLLSCAN where none does, unique violations are 11000 with the key, TTL deletes, builds
//! run while writes continue, and chunks moved to a shard arrive with their indexes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::{Duration, Instant};

use bson::{Bson, DateTime, Document, doc};
use futures::TryStreamExt;
use mongodb::options::IndexOptions;
use mongodb::{Collection, IndexModel};
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

/// Every scan stage name and index name in an explain reply (per shard plans included).
fn scans(explained: &Document) -> Vec<(String, Option<String>)> {
    fn walk(d: &Document, out: &mut Vec<(String, Option<String>)>) {
        if let Ok(stage) = d.get_str("stage")
            && matches!(stage, "IXSCAN" | "COLLSCAN" | "IDHACK" | "CLUSTERED_IXSCAN")
        {
            out.push((stage.to_owned(), d.get_str("indexName").ok().map(str::to_owned)));
        }
        for (_, v) in d {
            match v {
                Bson::Document(inner) => walk(inner, out),
                Bson::Array(items) => items.iter().filter_map(Bson::as_document).for_each(|i| walk(i, out)),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(p) = explained.get_document("queryPlanner") {
        walk(p, &mut out);
    }
    out
}

async fn explain_find(db: &mongodb::Database, coll: &str, filter: Document) -> Document {
    db.run_command(doc! { "explain": { "find": coll, "filter": filter }, "verbosity": "executionStats" })
        .await
        .expect("explain")
}

async fn ids(coll: &Collection<Document>, filter: Document, hint: Option<&str>) -> Vec<i64> {
    let mut find = coll.find(filter).sort(doc! { "_id": 1 });
    if let Some(h) = hint {
        find = find.hint(mongodb::options::Hint::Name(h.to_owned()));
    }
    let docs: Vec<Document> = find.await.expect("find").try_collect().await.expect("docs");
    docs.iter().map(|d| d.get_i64("_id").or_else(|_| d.get_i32("_id").map(i64::from)).expect("_id")).collect()
}

fn model(keys: Document, options: IndexOptions) -> IndexModel {
    IndexModel::builder().keys(keys).options(options).build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_kinds_change_plans_not_results() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    cluster.shard_in_two("ix", "c", 500).await.expect("ix.c on both shards");
    let db = client.database("ix");
    let coll = db.collection::<Document>("c");
    let docs: Vec<Document> = (0..1000i64)
        .map(|k| {
            let mut d = doc! { "_id": k, "k": k, "a": k % 50, "b": format!("s{}", k % 7), "tags": [k % 3, k % 5] };
            if k % 4 == 0 {
                d.insert("sp", k);
            }
            d
        })
        .collect();
    coll.insert_many(docs).await.expect("insert");
    let created = coll
        .create_indexes(vec![
            model(doc! { "a": 1, "b": -1 }, IndexOptions::default()),
            model(doc! { "tags": 1 }, IndexOptions::default()),
            model(doc! { "sp": 1 }, IndexOptions::builder().sparse(true).build()),
            model(
                doc! { "b": 1 },
                IndexOptions::builder().partial_filter_expression(doc! { "a": { "$gte": 40 } }).build(),
            ),
            model(doc! { "k": "hashed" }, IndexOptions::default()),
        ])
        .await
        .expect("createIndexes");
    assert_eq!(created.index_names.len(), 5);
    let names: Vec<String> = coll.list_index_names().await.expect("listIndexes");
    // `k_1` is the shard key's index, which shardCollection built.
    assert_eq!(names, vec!["_id_", "k_1", "a_1_b_-1", "tags_1", "sp_1", "b_1", "k_hashed"]);

    let stats = db.run_command(doc! { "collStats": "c" }).await.expect("collStats");
    assert_eq!(stats.get_i32("nindexes").expect("nindexes"), 7, "{stats}");
    let sizes = stats.get_document("indexSizes").expect("indexSizes");
    assert!(sizes.len() == 7 && stats.get_i64("totalIndexSize").expect("total") > 0, "{stats}");
    let cases: Vec<(Document, Option<&str>)> = vec![
        (doc! { "a": 7 }, Some("a_1_b_-1")),
        (doc! { "a": { "$in": [3, 4] }, "b": "s3" }, Some("a_1_b_-1")),
        (doc! { "a": { "$gt": 45 } }, Some("a_1_b_-1")),
        (doc! { "tags": 4 }, Some("tags_1")),
        (doc! { "tags": { "$gte": 2, "$lt": 4 } }, Some("tags_1")),
        (doc! { "sp": { "$gt": 900 } }, Some("sp_1")),
        (doc! { "b": "s2", "a": { "$gte": 45 } }, None),
        (doc! { "k": 777 }, Some("k_hashed")),
        (doc! { "zz": 1 }, None),
        (doc! { "sp": null }, None),
    ];
    let plain = db.collection::<Document>("plain");
    let copy: Vec<Document> = coll.find(doc! {}).await.expect("find").try_collect().await.expect("docs");
    plain.insert_many(copy).await.expect("unindexed copy");
    for (filter, index) in cases {
        let want = ids(&plain, filter.clone(), None).await;
        assert_eq!(ids(&coll, filter.clone(), None).await, want, "results of {filter}");
        let explained = explain_find(&db, "c", filter.clone()).await;
        let used = scans(&explained);
        match index {
            Some(name) => assert!(
                used.iter().any(|(s, i)| s == "IXSCAN" && i.as_deref() == Some(name)),
                "{filter} should use {name}: {used:?}"
            ),
            None if filter.contains_key("b") => {}
            None => assert!(used.iter().all(|(s, _)| s == "COLLSCAN"), "{filter} should scan: {used:?}"),
        }
    }
    // The partial index serves queries implying its filter.
    let explained = explain_find(&db, "c", doc! { "b": "s2", "a": { "$gte": 45 } }).await;
    assert!(scans(&explained).iter().any(|(s, _)| s == "IXSCAN"), "{explained}");
    let explained = explain_find(&db, "c", doc! { "b": "s2" }).await;
    assert!(scans(&explained).iter().all(|(_, i)| i.as_deref() != Some("b_1")), "{explained}");
    // executionStats per stage and per shard: each shard's chain says what every stage passed on,
    // its times add up towards the top, and the router adds its own wall time and the shards'.
    let explained = db
        .run_command(doc! {
            "explain": { "find": "c", "filter": { "a": { "$gte": 40 } }, "sort": { "b": -1, "k": 1 },
                "skip": 5, "limit": 10, "projection": { "a": 1 } },
            "verbosity": "executionStats",
        })
        .await
        .expect("explain");
    let stats = explained.get_document("executionStats").expect("executionStats");
    assert_eq!(stats.get_i64("nReturned").expect("n"), 10, "{explained}");
    let merged = stats.get_document("executionStages").expect("stages");
    assert_eq!(merged.get_str("stage").expect("stage"), "SHARD_MERGE", "{explained}");
    assert!(merged.get_i64("executionTimeMillis").is_ok() && merged.get_i64("totalChildMillis").is_ok(), "{merged}");
    let shards = merged.get_array("shards").expect("shards");
    assert_eq!(shards.len(), 2, "{explained}");
    for shard in shards.iter().filter_map(Bson::as_document) {
        let mut chain = Vec::new();
        let mut stage = shard.get_document("executionStages").ok();
        let mut keys = None;
        while let Some(s) = stage {
            assert!(s.get_i64("works").is_ok() && s.get_i32("isEOF").is_ok(), "{s}");
            let millis = s.get_i64("executionTimeMillisEstimate").expect("time");
            chain.push((s.get_str("stage").expect("stage").to_owned(), s.get_i64("nReturned").expect("n"), millis));
            keys = s.get_i64("keysExamined").ok().or(keys);
            stage = s.get_document("inputStage").ok();
        }
        let names: Vec<(&str, i64)> = chain.iter().map(|(s, n, _)| (s.as_str(), *n)).collect();
        // 100 of each shard's 500 documents have a >= 40; the sort keeps skip + limit of them.
        assert_eq!(
            names,
            [("PROJECTION_SIMPLE", 10), ("LIMIT", 10), ("SKIP", 10), ("SORT", 15), ("FETCH", 100), ("IXSCAN", 100)],
            "{shard}"
        );
        assert_eq!(keys, Some(100), "{shard}");
        assert!(chain.windows(2).all(|w| w[0].2 >= w[1].2), "a stage's time includes its input's: {chain:?}");
    }
    // executionStats: documents examined follow the index bounds.
    let explained = explain_find(&db, "c", doc! { "a": 7 }).await;
    let stats = explained.get_document("executionStats").expect("executionStats");
    assert_eq!(stats.get_i64("nReturned").expect("n"), 20);
    assert_eq!(stats.get_i64("totalDocsExamined").expect("docs"), 20, "{stats}");
    // Sorted by an index: no in-memory sort, same order as the unindexed copy.
    let sorted = |c: Collection<Document>| async move {
        let docs: Vec<Document> = c
            .find(doc! { "a": 7 })
            .sort(doc! { "b": -1, "_id": 1 })
            .await
            .expect("find")
            .try_collect()
            .await
            .expect("docs");
        docs
    };
    assert_eq!(sorted(coll.clone()).await, sorted(plain.clone()).await);
    // Covered: the unsharded copy answers from index entries alone, with the stored types.
    plain.create_index(model(doc! { "a": 1, "b": -1 }, IndexOptions::default())).await.expect("index");
    let covered: Vec<Document> = plain
        .find(doc! { "a": { "$in": [7, 8] } })
        .projection(doc! { "_id": 0, "b": 1, "a": 1 })
        .sort(doc! { "a": 1, "b": -1 })
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("docs");
    assert_eq!(covered.len(), 40);
    assert_eq!(covered[0], doc! { "a": 7_i64, "b": "s6" }, "types and fields as stored");
    let explained = db
        .run_command(doc! {
            "explain": { "find": "plain", "filter": { "a": { "$in": [7, 8] } }, "projection": { "_id": 0, "a": 1, "b": 1 } },
            "verbosity": "executionStats",
        })
        .await
        .expect("explain");
    let stats = explained.get_document("executionStats").expect("stats");
    assert_eq!(stats.get_i64("totalDocsExamined").expect("docs"), 0, "{explained}");
    assert_eq!(stats.get_i64("nReturned").expect("n"), 40);
    assert!(explained.to_string().contains("PROJECTION_COVERED"), "{explained}");
    // Hints: by name; an unknown index is refused.
    assert_eq!(ids(&coll, doc! { "k": { "$lt": 5 } }, Some("a_1_b_-1")).await, vec![0, 1, 2, 3, 4]);
    let err = coll.find(doc! {}).hint(mongodb::options::Hint::Name("nope".into())).await;
    expect::server_error(err, 2);

    coll.drop_index("a_1_b_-1").await.expect("dropIndexes");
    let explained = explain_find(&db, "c", doc! { "a": 7 }).await;
    assert!(scans(&explained).iter().all(|(s, _)| s == "COLLSCAN"), "{explained}");
    let err = coll.drop_index("a_1_b_-1").await;
    expect::command_error(err, 27);
    coll.drop_indexes().await.expect("drop all");
    assert_eq!(coll.list_index_names().await.expect("listIndexes"), vec!["_id_"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_indexes_refuse_duplicates_with_the_key() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    cluster.shard_in_two("uq", "c", 100).await.expect("uq.c on both shards");
    let db = client.database("uq");
    let sharded = db.collection::<Document>("c");
    // Not prefixed by the shard key {k: 1}: a sharded collection cannot enforce it.
    let err = sharded.create_index(model(doc! { "e": 1 }, IndexOptions::builder().unique(true).build())).await;
    expect::command_error(err, 67);
    sharded
        .create_index(model(doc! { "k": 1, "e": 1 }, IndexOptions::builder().unique(true).build()))
        .await
        .expect("prefixed by the shard key");
    sharded.insert_many(vec![doc! { "k": 5, "e": 1 }, doc! { "k": 150, "e": 1 }]).await.expect("distinct keys");
    let dup = sharded.insert_one(doc! { "k": 150, "e": 1 }).await;
    let e = expect::write_error(dup, 11000);
    assert!(e.message.contains("k_1_e_1") && e.message.contains("dup key"), "{}", e.message);

    let unsharded = db.collection::<Document>("u");
    unsharded.insert_many((0..10).map(|i| doc! { "_id": i, "email": format!("u{i}@x") })).await.expect("insert");
    unsharded
        .create_index(model(doc! { "email": 1 }, IndexOptions::builder().unique(true).build()))
        .await
        .expect("unique on existing distinct values");
    let dup = unsharded.insert_one(doc! { "_id": 99, "email": "u3@x" }).await;
    let e = expect::write_error(dup, 11000);
    assert!(e.message.contains("email: \"u3@x\""), "{}", e.message);
    let upd = unsharded.update_one(doc! { "_id": 4 }, doc! { "$set": { "email": "u5@x" } }).await;
    expect::write_error(upd, 11000);
    // findAndModify's DuplicateKey names the index's key and the value beside errmsg, as MongoDB's
    // does (the driver keeps only code and message, so read the reply off the wire).
    let mut wire = shoal_tests::wire::WireConn::connect_client(cluster.router.addr()).await.expect("wire connection");
    let reply = wire
        .command(&doc! {
            "findAndModify": "u", "query": { "_id": 4 }, "update": { "$set": { "email": "u5@x" } }, "$db": "uq",
        })
        .await
        .expect("reply");
    assert_eq!(reply.get_i32("code").ok(), Some(11000), "{reply}");
    assert_eq!(reply.get_document("keyPattern").ok(), Some(&doc! { "email": 1 }), "{reply}");
    assert_eq!(reply.get_document("keyValue").ok(), Some(&doc! { "email": "u5@x" }), "{reply}");
    unsharded.insert_one(doc! { "_id": 100, "x": 1 }).await.expect("missing email is null");
    let second_null = unsharded.insert_one(doc! { "_id": 101, "x": 2 }).await;
    expect::write_error(second_null, 11000);
    // $merge on a field other than _id needs a unique index on it in the target (51183).
    let merge_on_email = vec![
        doc! { "$match": { "_id": { "$lt": 3 } } },
        doc! { "$project": { "_id": 0, "email": 1, "seen": { "$literal": true } } },
        doc! { "$merge": { "into": "u", "on": "email", "whenMatched": "merge", "whenNotMatched": "discard" } },
    ];
    let err = unsharded.aggregate(vec![doc! { "$merge": { "into": "dups", "on": "n" } }]).await;
    expect::command_error(err, 51183);
    let merged: Vec<Document> = unsharded
        .aggregate(merge_on_email)
        .await
        .expect("$merge on a unique field")
        .try_collect()
        .await
        .expect("cursor");
    assert!(merged.is_empty());
    assert_eq!(unsharded.count_documents(doc! { "seen": true }).await.expect("count"), 3);
    // Sharding it on another key would leave email's uniqueness unenforceable.
    let refused = client.database("admin").run_command(doc! { "shardCollection": "uq.u", "key": { "_id": 1 } }).await;
    expect::command_error(refused, 72);
    // Building a unique index over duplicates fails, reported, and leaves no index.
    let other = db.collection::<Document>("dups");
    other.insert_many(vec![doc! { "_id": 200, "n": 1 }, doc! { "_id": 201, "n": 1 }]).await.expect("insert");
    let build = other.create_index(model(doc! { "n": 1 }, IndexOptions::builder().unique(true).build())).await;
    expect::command_error(build, 11000);
    assert_eq!(other.list_index_names().await.expect("list"), vec!["_id_"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_indexes_delete_expired_documents() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let coll = client.database("ttl").collection::<Document>("sessions");
    let now = DateTime::now();
    let old = DateTime::from_millis(now.timestamp_millis() - 3_600_000);
    let docs: Vec<Document> = (0..50)
        .map(|i| doc! { "_id": i, "at": if i % 2 == 0 { old } else { now }, "n": i })
        .chain([doc! { "_id": 100, "at": "never" }])
        .collect();
    coll.insert_many(docs).await.expect("insert");
    coll.create_index(model(doc! { "at": 1 }, IndexOptions::builder().expire_after(Duration::from_secs(600)).build()))
        .await
        .expect("TTL index");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = coll.count_documents(doc! {}).await.expect("count");
        if left == 26 {
            break;
        }
        assert!(Instant::now() < deadline, "expired documents still there: {left}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = ids(&coll, doc! {}, None).await;
    assert!(left.iter().all(|i| i % 2 == 1 || *i == 100), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_run_while_writes_continue_and_move_with_chunks() {
    const DOCS: i64 = 100_000;
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin
        .run_command(doc! { "enableSharding": "bld", "primaryShard": ShardedCluster::shard_name(0) })
        .await
        .expect("enableSharding");
    let coll = client.database("bld").collection::<Document>("c");
    for start in (0..DOCS).step_by(10_000) {
        let batch: Vec<Document> = (start..start + 10_000).map(|k| doc! { "_id": k, "k": k, "v": k % 1000 }).collect();
        coll.insert_many(batch).await.expect("load");
    }
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let writer = {
        let coll = coll.clone();
        let progress = std::sync::Arc::clone(&progress);
        tokio::spawn(async move {
            let mut written = 0i64;
            let started = Instant::now();
            // Writes through the whole build (bounded: a hung build fails the test below).
            while started.elapsed() < Duration::from_secs(120) {
                let k = DOCS + written;
                coll.insert_one(doc! { "_id": k, "k": k, "v": k % 1000 }).await.expect("write during build");
                coll.update_one(doc! { "_id": written }, doc! { "$set": { "v": 5000 + written } })
                    .await
                    .expect("update during build");
                written += 1;
                progress.store(written, std::sync::atomic::Ordering::SeqCst);
                if written >= 50 && started.elapsed() > Duration::from_millis(300) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if written > 3000 {
                    break;
                }
            }
            written
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = progress.load(std::sync::atomic::Ordering::SeqCst);
    coll.create_index(model(doc! { "v": 1 }, IndexOptions::default())).await.expect("build");
    let after = progress.load(std::sync::atomic::Ordering::SeqCst);
    let written = writer.await.expect("writer");
    assert!(after > before, "writes went on during the build ({before} before, {after} after)");
    assert!(written >= after);
    // Every document, written before, during or after the build, is found through the index
    // exactly as by a scan.
    for filter in
        [doc! { "v": 7 }, doc! { "v": { "$gte": 5000, "$lt": 5040 } }, doc! { "v": { "$gt": 990, "$lt": 1000 } }]
    {
        let by_index = coll.count_documents(filter.clone()).hint(mongodb::options::Hint::Name("v_1".into())).await;
        let by_scan =
            coll.count_documents(filter.clone()).hint(mongodb::options::Hint::Keys(doc! { "$natural": 1 })).await;
        assert_eq!(by_index.expect("count by index"), by_scan.expect("count by scan"), "{filter}");
    }
    // Sharded afterwards and a chunk moved: the recipient builds the index before documents arrive.
    admin.run_command(doc! { "shardCollection": "bld.c", "key": { "k": 1 } }).await.expect("shardCollection");
    admin.run_command(doc! { "split": "bld.c", "middle": { "k": 90_000 } }).await.expect("split");
    admin
        .run_command(doc! { "moveChunk": "bld.c", "find": { "k": 95_000 }, "to": ShardedCluster::shard_name(1) })
        .await
        .expect("moveChunk");
    let filter = doc! { "k": { "$gte": 95_000, "$lt": DOCS }, "v": 7 };
    let explained = client
        .database("bld")
        .run_command(doc! { "explain": { "find": "c", "filter": filter.clone() }, "verbosity": "executionStats" })
        .await
        .expect("explain");
    let planner = explained.get_document("queryPlanner").expect("queryPlanner");
    let shards = planner.get_document("winningPlan").and_then(|w| w.get_array("shards")).expect("shards");
    assert_eq!(shards.len(), 1, "targeted: {explained}");
    let shard = shards[0].as_document().expect("doc");
    assert_eq!(shard.get_str("shardName").expect("name"), ShardedCluster::shard_name(1));
    assert!(scans(&explained).iter().any(|(s, _)| s == "IXSCAN"), "the moved chunk's shard has the index: {explained}");
    assert_eq!(coll.count_documents(filter).await.expect("count"), 5);
}

/// Index names `db.coll` has on one shard (asked over its gRPC service), or none without it.
async fn names_on_shard(cluster: &ShardedCluster, i: usize, db: &str, coll: &str) -> Vec<String> {
    let mut shard = shoal_tests::grpc::shard(&cluster.shard_addr(i)).await.expect("connect to shard");
    let req = shoal_proto::shard::CommandRequest {
        request_id: "indexes-test".into(),
        db: db.into(),
        body: doc! { "listIndexes": coll }.to_vec().expect("encode").into(),
        ..Default::default()
    };
    let reply = shard.command(req).await.expect("rpc").into_inner();
    if reply.error.as_ref().is_some_and(|e| e.code == 26) {
        return Vec::new();
    }
    assert!(reply.error.is_none(), "listIndexes on shard {i}: {:?}", reply.error);
    let doc = Document::from_reader(&mut reply.body.as_ref()).expect("reply");
    let batch = doc.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("firstBatch");
    let mut names: Vec<String> =
        batch.iter().filter_map(Bson::as_document).map(|d| d.get_str("name").expect("name").to_owned()).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_collection_builds_the_shard_keys_index_where_chunks_go() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    let db = client.database("ki");
    // An empty range key: `a_1` on the database's primary, unique when the key is.
    admin.run_command(doc! { "shardCollection": "ki.a", "key": { "a": 1 }, "unique": true }).await.expect("shard ki.a");
    let listed = db.run_command(doc! { "listIndexes": "a" }).await.expect("listIndexes");
    let batch = listed.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("firstBatch");
    let a_1 = batch.iter().filter_map(Bson::as_document).find(|i| i.get_str("name").ok() == Some("a_1")).expect("a_1");
    assert_eq!(a_1.get_document("key").expect("key"), &doc! {"a": 1});
    assert_eq!(a_1.get_bool("unique").ok(), Some(true));
    // A pre-split hashed key: every shard given chunks has `h_hashed`.
    admin.run_command(doc! { "shardCollection": "ki.h", "key": { "h": "hashed" } }).await.expect("shard ki.h");
    for i in 0..2 {
        assert_eq!(names_on_shard(&cluster, i, "ki", "h").await, ["_id_", "h_hashed"], "shard {i}");
    }
    // An index the key prefixes already supports it: nothing more is built.
    let c = db.collection::<Document>("c");
    c.create_index(IndexModel::builder().keys(doc! { "c": 1, "d": -1 }).build()).await.expect("createIndex");
    admin.run_command(doc! { "shardCollection": "ki.c", "key": { "c": 1 } }).await.expect("shard ki.c");
    let mut names = c.list_index_names().await.expect("list");
    names.sort();
    assert_eq!(names, ["_id_", "c_1_d_-1"]);
    // A collection with documents and no supporting index gets it built (MongoDB would refuse).
    let n = db.collection::<Document>("n");
    n.insert_many((0..50).map(|i| doc! { "_id": i, "k": i % 7 })).await.expect("insert");
    admin.run_command(doc! { "shardCollection": "ki.n", "key": { "k": 1 } }).await.expect("shard ki.n");
    let mut names = n.list_index_names().await.expect("list");
    names.sort();
    assert_eq!(names, ["_id_", "k_1"]);
    // A moved range arrives whole (the donor reads it through `k_1`), indexed, and leaves the
    // donor.
    admin.run_command(doc! { "split": "ki.n", "middle": { "k": 3 } }).await.expect("split");
    let config = client.database("config").collection::<Document>("databases");
    let primary = config.find_one(doc! { "_id": "ki" }).await.expect("find").expect("ki's entry");
    let to = if primary.get_str("primary").expect("primary") == ShardedCluster::shard_name(0) { 1 } else { 0 };
    admin
        .run_command(doc! { "moveChunk": "ki.n", "find": { "k": 5 }, "to": ShardedCluster::shard_name(to), "_waitForDelete": true })
        .await
        .expect("moveChunk");
    assert_eq!(names_on_shard(&cluster, to, "ki", "n").await, ["_id_", "k_1"]);
    let upper = (0..50).filter(|i| i % 7 >= 3).count() as u64;
    assert_eq!(n.count_documents(doc! {}).await.expect("count"), 50);
    assert_eq!(n.count_documents(doc! { "k": { "$gte": 3 } }).await.expect("count"), upper);
    let mut on_recipient = shoal_tests::grpc::shard(&cluster.shard_addr(to)).await.expect("connect");
    let req = shoal_proto::shard::CommandRequest {
        request_id: "indexes-test".into(),
        db: "ki".into(),
        body: doc! { "count": "n", "query": {} }.to_vec().expect("encode").into(),
        ..Default::default()
    };
    let reply = on_recipient.command(req).await.expect("rpc").into_inner();
    let counted = Document::from_reader(&mut reply.body.as_ref()).expect("reply");
    assert_eq!(
        counted.get("n").and_then(Bson::as_i64).or_else(|| counted.get_i32("n").ok().map(i64::from)),
        Some(upper as i64),
        "{counted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_indexes_and_coll_mod_on_both_shards() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    cluster.shard_in_two("hid", "c", 50).await.expect("hid.c on both shards");
    let db = client.database("hid");
    let coll = db.collection::<Document>("c");
    coll.insert_many((0..100i64).map(|k| doc! { "_id": k, "k": k, "a": k % 10, "t": DateTime::now() }))
        .await
        .expect("insert");
    coll.create_index(model(doc! { "a": 1 }, IndexOptions::builder().hidden(true).build()))
        .await
        .expect("hidden index");
    coll.create_index(model(doc! { "t": 1 }, IndexOptions::builder().expire_after(Duration::from_secs(3600)).build()))
        .await
        .expect("ttl index");
    let reply = db.run_command(doc! { "listIndexes": "c" }).await.expect("listIndexes");
    let listed: Vec<Document> = reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .expect("firstBatch")
        .iter()
        .filter_map(|b| b.as_document().cloned())
        .collect();
    let a = listed.iter().find(|d| d.get_str("name").ok() == Some("a_1")).expect("a_1 listed");
    assert_eq!(a.get_bool("hidden").ok(), Some(true), "{a}");
    // `background` is ignored since 4.2 but listed as given, and not an option that conflicts.
    // (The driver deprecates its option, so the command is sent as written.)
    db.run_command(doc! { "createIndexes": "c", "indexes": [{ "key": { "k": 1, "a": 1 }, "name": "k_1_a_1", "background": true }] })
        .await
        .expect("background index");
    coll.create_index(model(doc! { "k": 1, "a": 1 }, IndexOptions::default())).await.expect("the same index again");
    let reply = db.run_command(doc! { "listIndexes": "c" }).await.expect("listIndexes");
    let text = reply.to_string();
    assert!(text.contains("\"background\": true"), "{text}");
    // Hidden: never planned, not hintable, still maintained.
    let used = scans(&explain_find(&db, "c", doc! { "a": 7 }).await);
    assert!(used.iter().all(|(s, _)| s == "COLLSCAN"), "hidden index planned: {used:?}");
    let hinted = coll.find(doc! { "a": 7 }).hint(mongodb::options::Hint::Name("a_1".into())).await;
    expect::server_error(hinted, 2);
    coll.insert_one(doc! { "_id": 500, "k": 90, "a": 7 }).await.expect("written while hidden");
    // collMod by name on every shard that has the collection; the reply is MongoDB's.
    let reply =
        db.run_command(doc! { "collMod": "c", "index": { "name": "a_1", "hidden": false } }).await.expect("unhide");
    assert_eq!(
        (reply.get_bool("hidden_old").ok(), reply.get_bool("hidden_new").ok()),
        (Some(true), Some(false)),
        "{reply}"
    );
    let explained = explain_find(&db, "c", doc! { "a": 7 }).await;
    let used = scans(&explained);
    assert!(used.len() == 2 && used.iter().all(|(s, i)| s == "IXSCAN" && i.as_deref() == Some("a_1")), "{used:?}");
    assert_eq!(
        explained.get_document("executionStats").and_then(|s| s.get_i64("nReturned")).ok(),
        Some(11),
        "{explained}"
    );
    // By key pattern, and a TTL change.
    let reply = db
        .run_command(doc! { "collMod": "c", "index": { "keyPattern": { "t": 1 }, "expireAfterSeconds": 60 } })
        .await
        .expect("ttl");
    assert_eq!(
        (reply.get_i64("expireAfterSeconds_old").ok(), reply.get_i64("expireAfterSeconds_new").ok()),
        (Some(3600), Some(60)),
        "{reply}"
    );
    // What is refused, with MongoDB's codes.
    expect::command_error(
        db.run_command(doc! { "collMod": "c", "index": { "name": "nope", "hidden": true } }).await,
        27,
    );
    expect::command_error(
        db.run_command(doc! { "collMod": "c", "index": { "name": "_id_", "hidden": true } }).await,
        2,
    );
    expect::command_error(
        db.run_command(doc! { "collMod": "missing", "index": { "name": "a_1", "hidden": true } }).await,
        26,
    );
    expect::command_error(db.run_command(doc! { "collMod": "c", "validator": { "a": { "$type": "int" } } }).await, 238);
    expect::command_error(db.run_command(doc! { "collMod": "c", "bogus": 1 }).await, 40415);
}
