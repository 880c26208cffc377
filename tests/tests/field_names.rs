//! Field names with `$` and `.` as MongoDB 5.0+ stores them, through the router on a collection
//! split over two shards and on an unsharded one: inserted (one by one and in a batch), returned
//! as stored, read with `$getField`, rewritten with `$setField`; a `$`-prefixed field inside
//! `_id` is refused (DollarPrefixedFieldName, 52), and so is an update operator naming one.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Document, doc};
use futures::TryStreamExt;
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dollar_and_dotted_field_names_are_stored_and_read_back() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    cluster.shard_in_two("fields", "sharded", 5).await.expect("fields.sharded on both shards");
    let db = client.database("fields");
    for name in ["sharded", "plain"] {
        let coll = db.collection::<Document>(name);
        coll.insert_one(doc! { "_id": 1, "k": 1, "$price": 10, "a.b": "dotted", "n": { "$inner": true } })
            .await
            .unwrap_or_else(|e| panic!("{name}: insert with $ and . names: {e:?}"));
        coll.insert_many(vec![doc! { "_id": 7, "k": 7, "$price": 70, "a.b": "seven" }]).await.expect("batch");
        let back: Vec<Document> =
            coll.find(doc! {}).sort(doc! { "_id": 1 }).await.expect("find").try_collect().await.expect("docs");
        assert_eq!(
            back,
            vec![
                doc! { "_id": 1, "k": 1, "$price": 10, "a.b": "dotted", "n": { "$inner": true } },
                doc! { "_id": 7, "k": 7, "$price": 70, "a.b": "seven" },
            ],
            "{name}"
        );
        // A dotted name is not a path: $getField reads it, and $setField writes it.
        let found: Vec<Document> = coll
            .find(doc! { "$expr": { "$eq": [{ "$getField": "a.b" }, "seven"] } })
            .projection(doc! { "_id": 1 })
            .await
            .expect("find by $getField")
            .try_collect()
            .await
            .expect("docs");
        assert_eq!(found, vec![doc! { "_id": 7 }], "{name}");
        let pipeline = vec![doc! { "$replaceWith": {
            "$setField": { "field": { "$literal": "$price" }, "input": "$$ROOT", "value": { "$multiply": [{ "$getField": { "$literal": "$price" } }, 2] } }
        } }];
        coll.update_one(doc! { "_id": 7 }, pipeline).await.expect("pipeline update with $setField");
        let seven = coll.find_one(doc! { "_id": 7 }).await.expect("find").expect("doc");
        assert_eq!(seven.get_i32("$price").ok(), Some(140), "{name}: {seven}");
        // Not inside _id, and an update operator cannot name a $ field.
        let bad_id = coll.insert_one(doc! { "_id": { "$oops": 1 }, "k": 3 }).await;
        expect::write_error(bad_id, 52);
        let bad_set = coll.update_one(doc! { "_id": 1 }, doc! { "$set": { "$price": 1 } }).await;
        expect::write_error(bad_set, 52);
    }
}
