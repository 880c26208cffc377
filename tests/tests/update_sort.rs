//! MongoDB 8.0's `sort` on single-document updates (`updateOne`, `replaceOne`) and findAndModify's
//! sort, through the router on a collection split over two shards and on an unsharded one: the
//! statement takes the first matching document in that order across every shard, not each
//! shard's own first; `sort` with `multi: true` is InvalidOptions (72).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Document, doc};
use shoal_tests::sharded_cluster::ShardedCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_updates_take_the_first_document_in_their_sort_order() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    cluster.shard_in_two("us", "sharded", 50).await.expect("us.sharded on both shards");
    let db = client.database("us");
    for name in ["sharded", "plain"] {
        let coll = db.collection::<Document>(name);
        // The highest score lives on the second shard, the lowest on the first.
        coll.insert_many((0..100i64).map(|k| doc! { "_id": k, "k": k, "score": k, "kind": k % 2 }))
            .await
            .expect("insert");
        let reply = db
            .run_command(doc! { "update": name, "updates": [
                { "q": { "kind": 1 }, "u": { "$set": { "top": true } }, "sort": { "score": -1 } },
            ] })
            .await
            .expect("updateOne with sort");
        assert_eq!((reply.get_i32("n").ok(), reply.get_i32("nModified").ok()), (Some(1), Some(1)), "{name}: {reply}");
        let top = coll.find_one(doc! { "top": true }).await.expect("find").expect("one updated");
        assert_eq!(top.get_i64("k").ok(), Some(99), "{name}: {top}");
        // A replacement taking the lowest score (on the first shard) keeps its shard key: 0 as an
        // int32 is the stored int64 0, as MongoDB compares them.
        let reply = db
            .run_command(doc! { "update": name, "updates": [
                { "q": {}, "u": { "k": 0, "score": 0, "replaced": true }, "sort": { "score": 1 } },
            ] })
            .await
            .expect("replaceOne with sort");
        assert_eq!(reply.get_i32("nModified").ok(), Some(1), "{name}: {reply}");
        let replaced = coll.find_one(doc! { "_id": 0 }).await.expect("find").expect("doc 0");
        assert_eq!(replaced.get_bool("replaced").ok(), Some(true), "{name}: {replaced}");
        // findAndModify's sort chooses across shards too.
        let reply = db
            .run_command(doc! { "findAndModify": name, "query": { "kind": 0 }, "sort": { "score": -1 },
            "update": { "$set": { "picked": true } }, "new": true })
            .await
            .expect("findAndModify with sort");
        assert_eq!(reply.get_document("value").and_then(|v| v.get_i64("k")).ok(), Some(98), "{name}: {reply}");
        let multi = db
            .run_command(doc! { "update": name, "updates": [
                { "q": {}, "u": { "$set": { "x": 1 } }, "sort": { "score": 1 }, "multi": true },
            ] })
            .await
            .expect("the reply carries the write error");
        let errors = multi.get_array("writeErrors").expect("writeErrors");
        let code = errors.first().and_then(|e| e.as_document()).and_then(|e| e.get_i32("code").ok());
        assert_eq!(code, Some(72), "{name}: {multi}");
        let bad = db
            .run_command(doc! { "update": name, "updates": [{ "q": {}, "u": { "$set": { "x": 1 } }, "sort": 1 }] })
            .await
            .expect("the reply carries the write error");
        let code = bad
            .get_array("writeErrors")
            .ok()
            .and_then(|e| e.first())
            .and_then(|e| e.as_document())
            .and_then(|e| e.get_i32("code").ok());
        assert_eq!(code, Some(14), "{name}: {bad}");
    }
}
