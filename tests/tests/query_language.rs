//! The rest of the query language through the router over a collection on two shards: `$expr`
//! (and its evaluation errors as the operation's error), `let` variables on find, count, update,
//! delete, findAndModify and aggregate, `$jsonSchema`, `collation` and `comment` on every
//! command.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Database;
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

const DB: &str = "ql";

/// `k` 0..10 split at 5 over the two shards; `a` and `b` so that `a > b` for even `k`.
fn seed_docs() -> Vec<Document> {
    (0..10)
        .map(|k| {
            let mut d =
                doc! { "_id": k, "k": k, "a": if k % 2 == 0 { k + 1 } else { k - 1 }, "b": k, "name": format!("n{k}") };
            if k == 3 {
                d.insert("zero", 0);
            }
            d
        })
        .collect()
}

async fn ids(db: &Database, cmd: Document) -> Vec<i64> {
    let reply = db.run_command(cmd.clone()).await.unwrap_or_else(|e| panic!("{cmd}: {e:?}"));
    let batch = reply.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("firstBatch");
    let mut ids: Vec<i64> = batch
        .iter()
        .map(|d| match d.as_document().and_then(|d| d.get("_id")) {
            Some(Bson::Int32(i)) => i64::from(*i),
            Some(Bson::Int64(i)) => *i,
            other => panic!("_id {other:?}"),
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn code(r: Result<Document, mongodb::error::Error>) -> Option<i32> {
    match r {
        Ok(d) => panic!("expected an error, got {d}"),
        Err(e) => expect::server_code(&e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expr_let_schema_collation_and_comment_over_two_shards() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two(DB, "c", 5).await.expect("ql.c on both shards");
    let client = cluster.client().await.expect("client");
    let db = client.database(DB);
    let c = db.collection::<Document>("c");
    c.insert_many(seed_docs()).await.expect("seed");

    // $expr in find, count, distinct and $match, on both shards.
    let even = vec![0, 2, 4, 6, 8];
    assert_eq!(ids(&db, doc! {"find": "c", "filter": {"$expr": {"$gt": ["$a", "$b"]}}}).await, even);
    assert_eq!(c.count_documents(doc! {"$expr": {"$gt": ["$a", "$b"]}}).await.expect("count"), 5);
    let distinct = c.distinct("k", doc! {"$expr": {"$lt": ["$a", "$b"]}, "k": {"$gte": 5}}).await.expect("distinct");
    assert_eq!(distinct.len(), 3, "{distinct:?}");
    let agg =
        doc! {"aggregate": "c", "pipeline": [{"$match": {"$expr": {"$eq": [{"$mod": ["$k", 3]}, 0]}}}], "cursor": {}};
    assert_eq!(ids(&db, agg).await, vec![0, 3, 6, 9]);

    // let variables, seen by $expr (find, count, aggregate).
    let find = doc! {"find": "c", "filter": {"$expr": {"$in": ["$k", "$$wanted"]}}, "let": {"wanted": [1, 7, 42]}};
    assert_eq!(ids(&db, find).await, vec![1, 7]);
    let count = db
        .run_command(doc! {"count": "c", "query": {"$expr": {"$gte": ["$k", "$$lo"]}}, "let": {"lo": {"$add": [4, 4]}}})
        .await
        .expect("count with let");
    assert_eq!(count.get_i32("n").ok(), Some(2), "{count}");
    let agg = doc! {"aggregate": "c", "pipeline": [{"$match": {"$expr": {"$lt": ["$k", "$$hi"]}}}], "cursor": {}, "let": {"hi": 2}};
    assert_eq!(ids(&db, agg).await, vec![0, 1]);

    // An evaluation error is the operation's error (BadValue for $divide by zero), not "no match".
    let divide = doc! {"$expr": {"$gt": [{"$divide": [1, "$zero"]}, 0]}, "zero": {"$exists": true}};
    assert_eq!(code(db.run_command(doc! {"find": "c", "filter": divide.clone()}).await), Some(2));
    assert_eq!(code(db.run_command(doc! {"count": "c", "query": divide.clone()}).await), Some(2));
    let agg = doc! {"aggregate": "c", "pipeline": [{"$match": divide.clone()}], "cursor": {}};
    assert_eq!(code(db.run_command(agg).await), Some(2));
    expect::server_error(c.update_many(divide.clone(), doc! {"$set": {"x": 1}}).await, 2);
    expect::server_error(c.delete_many(divide.clone()).await, 2);
    let fam = doc! {"findAndModify": "c", "query": divide.clone(), "update": {"$set": {"x": 1}}};
    assert_eq!(code(db.run_command(fam).await), Some(2));
    assert_eq!(code(db.run_command(doc! {"find": "c", "filter": {"$expr": "$$undefinedVar"}}).await), Some(17276));

    // let on writes: update (filter and pipeline update), findAndModify, delete.
    let update = doc! {
        "update": "c",
        "updates": [{"q": {"$expr": {"$lt": ["$k", "$$lim"]}}, "u": [{"$set": {"tag": "$$label"}}], "multi": true}],
        "let": {"lim": 2, "label": "low"},
    };
    let reply = db.run_command(update).await.expect("update with let");
    assert_eq!((reply.get_i32("n").ok(), reply.get_i32("nModified").ok()), (Some(2), Some(2)), "{reply}");
    assert_eq!(c.count_documents(doc! {"tag": "low"}).await.expect("count"), 2);
    // A single update without the shard key: the router's pre-find needs the variables too.
    let update_one = doc! {
        "update": "c",
        "updates": [{"q": {"$expr": {"$eq": ["$name", "$$who"]}}, "u": {"$set": {"one": true}}}],
        "let": {"who": "n8"},
    };
    let reply = db.run_command(update_one).await.expect("updateOne with let");
    assert_eq!(reply.get_i32("nModified").ok(), Some(1), "{reply}");
    assert_eq!(c.find_one(doc! {"one": true}).await.expect("find").and_then(|d| d.get_i32("k").ok()), Some(8));
    let fam = doc! {
        "findAndModify": "c", "query": {"$expr": {"$eq": ["$k", "$$target"]}, "k": 6},
        "update": [{"$set": {"seen": "$$mark"}}], "new": true, "let": {"target": 6, "mark": "yes"},
    };
    let reply = db.run_command(fam).await.expect("findAndModify with let");
    assert_eq!(reply.get_document("value").and_then(|v| v.get_str("seen")).ok(), Some("yes"), "{reply}");
    let delete =
        doc! {"delete": "c", "deletes": [{"q": {"$expr": {"$eq": ["$k", "$$gone"]}}, "limit": 0}], "let": {"gone": 9}};
    let reply = db.run_command(delete).await.expect("delete with let");
    assert_eq!(reply.get_i32("n").ok(), Some(1), "{reply}");

    // Bad let: not an object (TypeMismatch), a name that cannot be a variable (16867).
    assert_eq!(code(db.run_command(doc! {"find": "c", "let": 5}).await), Some(14));
    assert_eq!(code(db.run_command(doc! {"find": "c", "let": {"Bad": 1}}).await), Some(16867));
    let bad_update = doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"z": 1}}}], "let": {"_x": 1}};
    // Over two shards the router reports each shard's refusal as the statement's write error.
    let reply = db.run_command(bad_update).await.expect("reply");
    let first = reply.get_array("writeErrors").ok().and_then(|w| w.first()).and_then(Bson::as_document);
    assert_eq!(first.and_then(|e| e.get_i32("code").ok()), Some(16867), "{reply}");

    // $jsonSchema.
    let schema = doc! {"$jsonSchema": {"required": ["zero"], "properties": {"k": {"bsonType": "int", "maximum": 5}}}};
    assert_eq!(ids(&db, doc! {"find": "c", "filter": schema}).await, vec![3]);
    let schema = doc! {"$jsonSchema": {"properties": {"tag": {"enum": ["low"]}}, "required": ["tag"]}};
    assert_eq!(c.count_documents(schema).await.expect("count"), 2);
    assert_eq!(code(db.run_command(doc! {"find": "c", "filter": {"$jsonSchema": {"bogus": 1}}}).await), Some(9));

    // comment on every command is accepted and changes nothing.
    let with_comment = [
        doc! {"find": "c", "filter": {"k": 1}, "comment": "f"},
        doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "comment": {"any": "value"}},
        doc! {"count": "c", "comment": 1},
        doc! {"distinct": "c", "key": "k", "comment": "d"},
        doc! {"insert": "c", "documents": [{"_id": 100, "k": 100}], "comment": "i"},
        doc! {"update": "c", "updates": [{"q": {"k": 100}, "u": {"$set": {"u": 1}}}], "comment": "u"},
        doc! {"findAndModify": "c", "query": {"k": 100}, "update": {"$set": {"v": 1}}, "comment": "fam"},
        doc! {"delete": "c", "deletes": [{"q": {"k": 100}, "limit": 1}], "comment": "del"},
    ];
    for cmd in with_comment {
        let reply = db.run_command(cmd.clone()).await.unwrap_or_else(|e| panic!("{cmd}: {e:?}"));
        assert!(reply.get("writeErrors").is_none(), "{cmd}: {reply}");
    }
    // The driver repeats a find's comment on its getMores.
    let cursor = c.find(doc! {}).comment("paged").batch_size(2).await.expect("find with comment");
    let all: Vec<Document> = cursor.try_collect().await.expect("getMore with comment");
    assert_eq!(all.len(), 9);
    let agg = c.aggregate(vec![doc! {"$match": {}}]).comment("paged").batch_size(2).await.expect("aggregate");
    assert_eq!(agg.try_collect::<Vec<Document>>().await.expect("getMore").len(), 9);
    let find = doc! {"find": "c", "filter": {"$comment": "in the filter", "k": {"$lt": 2}}};
    assert_eq!(ids(&db, find).await, vec![0, 1]);

    // collation: the simple one is accepted everywhere.
    let simple = doc! {"locale": "simple"};
    assert_eq!(ids(&db, doc! {"find": "c", "filter": {"name": "n1"}, "collation": simple.clone()}).await, vec![1]);
    collations(&cluster, &db).await;
}

/// English strength 1 and 2 over a collection sharded on a string key: a case-insensitive match
/// may live in a chunk the binary value does not fall in, so the router must not narrow targets.
async fn collations(cluster: &ShardedCluster, db: &Database) {
    let admin = cluster.client().await.expect("client").database("admin");
    admin.run_command(doc! {"shardCollection": "ql.s", "key": {"s": 1}}).await.expect("shardCollection");
    admin.run_command(doc! {"split": "ql.s", "middle": {"s": "m"}}).await.expect("split");
    let to = ShardedCluster::shard_name(1);
    admin.run_command(doc! {"moveChunk": "ql.s", "find": {"s": "m"}, "to": to}).await.expect("moveChunk");
    let s = db.collection::<Document>("s");
    // In binary order "apple", "Apple", "Zebra" and "eclair" are below "m" (shard0), "zebra" and
    // "éclair" above it (shard1).
    let docs = [(1, "apple"), (2, "Apple"), (3, "zebra"), (4, "Zebra"), (5, "éclair"), (6, "eclair")];
    s.insert_many(docs.iter().map(|(id, v)| doc! {"_id": id, "s": v})).await.expect("seed s");
    // An index on `s` keys strings in binary order: under a collation it must give neither
    // bounds nor order.
    db.run_command(doc! {"createIndexes": "s", "indexes": [{"key": {"s": 1}, "name": "s_1"}]}).await.expect("index");
    let ci = doc! {"locale": "en", "strength": 2};
    let base = doc! {"locale": "en", "strength": 1};

    let find =
        |filter: Document, collation: &Document| doc! {"find": "s", "filter": filter, "collation": collation.clone()};
    assert_eq!(ids(db, find(doc! {"s": "ZEBRA"}, &ci)).await, vec![3, 4]);
    assert_eq!(ids(db, find(doc! {"s": "ZEBRA"}, &doc! {"locale": "simple"})).await, Vec::<i64>::new());
    assert_eq!(ids(db, find(doc! {"s": "ECLAIR"}, &ci)).await, vec![6]);
    assert_eq!(ids(db, find(doc! {"s": "ECLAIR"}, &base)).await, vec![5, 6]);
    assert_eq!(ids(db, find(doc! {"s": {"$in": ["APPLE", "x"]}}, &ci)).await, vec![1, 2]);
    assert_eq!(ids(db, find(doc! {"s": {"$gte": "B", "$lt": "F"}}, &ci)).await, vec![5, 6]);

    // Sort merged from both shards in collation order (ties by _id).
    let sorted = db
        .run_command(doc! {"find": "s", "sort": {"s": 1, "_id": 1}, "collation": ci.clone()})
        .await
        .expect("sorted find");
    let order: Vec<i32> = sorted
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .expect("batch")
        .iter()
        .filter_map(|d| d.as_document().and_then(|d| d.get_i32("_id").ok()))
        .collect();
    assert_eq!(order, vec![1, 2, 6, 5, 3, 4]);

    // String `_id`s: storage order is binary, so a collated sort on `_id` is not storage order.
    let t = db.collection::<Document>("t");
    t.insert_many(["b", "A", "a", "C"].map(|id| doc! {"_id": id})).await.expect("seed t");
    let by_id = db.run_command(doc! {"find": "t", "sort": {"_id": 1}, "collation": ci.clone()}).await.expect("find t");
    let order: Vec<&str> = by_id
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .expect("batch")
        .iter()
        .filter_map(|d| d.as_document().and_then(|d| d.get_str("_id").ok()))
        .collect();
    assert_eq!(order, ["A", "a", "b", "C"]);

    let count =
        db.run_command(doc! {"count": "s", "query": {"s": "APPLE"}, "collation": ci.clone()}).await.expect("count");
    assert_eq!(count.get_i32("n").ok(), Some(2), "{count}");
    let distinct =
        db.run_command(doc! {"distinct": "s", "key": "s", "collation": base.clone()}).await.expect("distinct");
    assert_eq!(distinct.get_array("values").map(Vec::len).ok(), Some(3), "{distinct}");

    let update = doc! {"update": "s", "updates": [{"q": {"s": "ZEBRA"}, "u": {"$set": {"z": 1}}, "multi": true, "collation": ci.clone()}]};
    let reply = db.run_command(update).await.expect("update with collation");
    assert_eq!(reply.get_i32("nModified").ok(), Some(2), "{reply}");
    let delete = doc! {"delete": "s", "deletes": [{"q": {"s": "APPLE"}, "limit": 1, "collation": ci.clone()}]};
    let reply = db.run_command(delete).await.expect("delete with collation");
    assert_eq!(reply.get_i32("n").ok(), Some(1), "{reply}");
    let fam = doc! {"findAndModify": "s", "query": {"s": "ECLAIR"}, "remove": true, "collation": base.clone()};
    let reply = db.run_command(fam).await.expect("findAndModify with collation");
    assert_eq!(reply.get_document("lastErrorObject").and_then(|l| l.get_i32("n")).ok(), Some(1), "{reply}");

    // What Shoal does not implement is refused, never answered in binary order.
    assert_eq!(code(db.run_command(find(doc! {}, &doc! {"locale": "fr", "strength": 1})).await), Some(238));
    assert_eq!(code(db.run_command(find(doc! {}, &doc! {"locale": "en"})).await), Some(238));
    assert_eq!(
        code(db.run_command(find(doc! {}, &doc! {"locale": "en", "strength": 2, "numericOrdering": true})).await),
        Some(238)
    );
    assert_eq!(code(db.run_command(find(doc! {}, &doc! {"locale": "xx_YY"})).await), Some(2));
    let agg = doc! {"aggregate": "s", "pipeline": [], "cursor": {}, "collation": ci.clone()};
    assert_eq!(code(db.run_command(agg).await), Some(238));
}
