//! `dbStats`, `collStats` and `$collStats` through the router over two shards: counts and sizes
//! are the shards' own, added up, with each shard's answer kept.

use bson::{Document, doc};
use futures::TryStreamExt;
use shoal_tests::sharded_cluster::ShardedCluster;

fn int(d: &Document, k: &str) -> i64 {
    match d.get(k) {
        Some(bson::Bson::Int32(n)) => i64::from(*n),
        Some(bson::Bson::Int64(n)) => *n,
        Some(bson::Bson::Double(f)) => *f as i64,
        other => panic!("{k} in {d}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_add_up_the_shards() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    cluster.shard_in_two("st", "c", 50).await.expect("st.c on both shards");
    let db = client.database("st");
    let docs: Vec<Document> = (0..100).map(|k| doc! { "_id": k, "k": k, "pad": "x".repeat(50) }).collect();
    db.collection::<Document>("c").insert_many(docs).await.expect("insert");
    db.collection::<Document>("u").insert_one(doc! { "_id": 1 }).await.expect("unsharded");

    let coll = db.run_command(doc! { "collStats": "c" }).await.expect("collStats");
    assert_eq!(int(&coll, "count"), 100);
    assert_eq!(coll.get_bool("sharded").ok(), Some(true));
    assert_eq!(int(&coll, "nchunks"), 2, "the catalog's chunks of st.c");
    let shards = coll.get_document("shards").expect("shards");
    assert_eq!(shards.len(), 2, "{coll}");
    let per: i64 = shards.values().map(|s| int(s.as_document().expect("doc"), "count")).sum();
    assert_eq!(per, 100);
    assert!(int(&coll, "size") > 100 * 50, "{coll}");

    let dbs = db.run_command(doc! { "dbStats": 1 }).await.expect("dbStats");
    assert_eq!(int(&dbs, "objects"), 101);
    assert_eq!(int(&dbs, "collections"), 2);
    assert!(int(&dbs, "dataSize") >= int(&coll, "size"));
    let scaled = db.run_command(doc! { "dbStats": 1, "scale": 1024 }).await.expect("dbStats scaled");
    // Each shard scales its own sizes (as under mongos), so the sum may round down once per shard.
    let want = int(&dbs, "dataSize") / 1024;
    assert!((want - 2..=want).contains(&int(&scaled, "dataSize")), "{scaled} vs {dbs}");

    let per_shard: Vec<Document> = db
        .collection::<Document>("c")
        .aggregate(vec![doc! { "$collStats": { "storageStats": {} } }, doc! { "$sort": { "shard": 1 } }])
        .await
        .expect("$collStats")
        .try_collect()
        .await
        .expect("docs");
    assert_eq!(per_shard.len(), 2);
    // A `let` variable reaches the shards' stages and the router's merge stages alike.
    let summed: Vec<Document> = db
        .collection::<Document>("c")
        .aggregate(vec![
            doc! { "$set": { "w": { "$multiply": ["$k", "$$factor"] } } },
            doc! { "$group": { "_id": "$$tag", "total": { "$sum": "$w" } } },
        ])
        .let_vars(doc! { "factor": 2, "tag": "all" })
        .await
        .expect("aggregate with let")
        .try_collect()
        .await
        .expect("docs");
    assert_eq!(summed, vec![doc! { "_id": "all", "total": 9900 }]);
    let counted: i64 =
        per_shard.iter().map(|d| int(d.get_document("storageStats").expect("storageStats"), "count")).sum();
    assert_eq!(counted, 100);
}
