//! Input the router used to accept on some paths and refuse on others (issue: grey failures,
//! items 5-7 and 9): a malformed command gets the same MongoDB error whether its database
//! exists or not and whether its collection is sharded or not, database names are checked as
//! MongoDB checks them, and a PCRE pattern PCRE refuses is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use mongodb::Database;
use shoal_tests::sharded_cluster::ShardedCluster;

fn code_of(result: Result<Document, mongodb::error::Error>) -> Option<i32> {
    match result {
        Ok(_) => None,
        Err(e) => match e.kind.as_ref() {
            mongodb::error::ErrorKind::Command(c) => Some(c.code),
            other => panic!("not a command error: {other:?}"),
        },
    }
}

async fn code(db: &Database, command: Document) -> Option<i32> {
    code_of(db.run_command(command).await)
}

/// The command's error code, or its first write error's (a write refuses a bad statement that way).
async fn failure(db: &Database, command: Document) -> Option<i32> {
    match db.run_command(command).await {
        Ok(reply) => reply
            .get_array("writeErrors")
            .ok()
            .and_then(|e| e.first())
            .and_then(Bson::as_document)
            .and_then(|e| e.get_i32("code").ok()),
        Err(e) => code_of(Err(e)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_commands_are_refused_alike_on_every_path() {
    let cluster = ShardedCluster::start().await.expect("cluster");
    cluster.shard_in_two("shop", "sharded", 100).await.expect("sharded collection");
    let client = cluster.client().await.unwrap();
    let shop = client.database("shop");
    shop.collection::<Document>("plain").insert_one(doc! { "a": 1 }).await.unwrap();
    shop.collection::<Document>("sharded").insert_many([doc! { "k": 1 }, doc! { "k": 500 }]).await.unwrap();
    let nowhere = client.database("no_such_database");

    // Reads: a database that does not exist refuses what an existing one refuses.
    let reads = |coll: &str| {
        vec![
            doc! { "find": coll, "filter": { "a": { "$fuzzOp": 1 } } },
            doc! { "find": coll, "filter": 5 },
            doc! { "find": coll, "sort": { "a": 2 } },
            doc! { "find": coll, "filter": { "a": { "$regex": "a**" } } },
            doc! { "distinct": coll },
            doc! { "aggregate": coll, "pipeline": [{ "$fuzzStage": {} }], "cursor": {} },
            doc! { "aggregate": coll, "pipeline": true, "cursor": {} },
            doc! { "aggregate": coll, "pipeline": [] },
            doc! { "count": coll, "query": 5 },
        ]
    };
    for (on_plain, on_nowhere) in reads("plain").into_iter().zip(reads("plain")) {
        let expected = code(&shop, on_plain.clone()).await;
        assert!(expected.is_some(), "{on_plain} was accepted on an existing database");
        assert_eq!(
            code(&nowhere, on_nowhere.clone()).await,
            expected,
            "{on_nowhere} on a database that does not exist"
        );
    }
    assert_eq!(code(&shop, doc! { "find": "plain", "filter": { "a": { "$regex": "a**" } } }).await, Some(2));

    // Writes and aggregates on a sharded collection: required fields as on an unsharded one.
    let shaped = |coll: &str| {
        vec![
            doc! { "insert": coll },
            doc! { "delete": coll, "deletes": Bson::Null },
            doc! { "update": coll, "updates": Bson::MaxKey },
            doc! { "insert": coll, "documents": "x" },
            doc! { "aggregate": coll, "pipeline": [{ "$match": {} }] },
            doc! { "aggregate": coll, "pipeline": [{ "$match": {} }], "cursor": "a\0b" },
        ]
    };
    for (on_plain, on_sharded) in shaped("plain").into_iter().zip(shaped("sharded")) {
        let expected = code(&shop, on_plain.clone()).await;
        assert!(expected.is_some(), "{on_plain} was accepted on an unsharded collection");
        assert_eq!(code(&shop, on_sharded.clone()).await, expected, "{on_sharded} on a sharded collection");
    }
    assert_eq!(code(&shop, doc! { "insert": "sharded" }).await, Some(40414));
    assert_eq!(code(&shop, doc! { "aggregate": "sharded", "pipeline": [] }).await, Some(9));

    // Explained as run: what running a command refuses, explaining it refuses too.
    let explained = |coll: &str| {
        vec![
            doc! { "update": coll, "updates": [{ "q": {}, "u": { "$fuzzOp": { "a": 1 } } }] },
            doc! { "aggregate": coll, "pipeline": [{ "$group": { "_id": null, "x": { "$fuzzAcc": 1 } } }], "cursor": {} },
            doc! { "distinct": coll },
            doc! { "findAndModify": coll, "query": {} },
        ]
    };
    for coll in ["plain", "sharded"] {
        for command in explained(coll) {
            let expected = failure(&shop, command.clone()).await;
            assert!(expected.is_some(), "{command} was accepted when run");
            assert_eq!(code(&shop, doc! { "explain": command.clone() }).await, expected, "explain of {command}");
        }
    }

    // Database names MongoDB refuses: InvalidNamespace (73), before anything is created.
    for name in [".", "a.b", "a/b", "a b", "a\"b", "a$b", "a\\b", &"x".repeat(64)] {
        let db = client.database(name);
        assert_eq!(code(&db, doc! { "find": "c" }).await, Some(73), "find on database {name:?}");
        assert_eq!(
            code(&db, doc! { "insert": "c", "documents": [{ "a": 1 }] }).await,
            Some(73),
            "insert into {name:?}"
        );
    }
    let longest = "y".repeat(63);
    client
        .database(&longest)
        .collection::<Document>("c")
        .insert_one(doc! { "a": 1 })
        .await
        .expect("a 63-byte name is valid");
    let names = client.list_database_names().await.unwrap();
    assert!(!names.iter().any(|n| n.len() >= 64 || n.contains('.')), "{names:?}");
}

/// What the command fuzzer (`command_fuzz.rs`) found, each class kept as a case.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_the_command_fuzzer_found_stays_fixed() {
    let cluster = ShardedCluster::start().await.expect("cluster");
    cluster.shard_in_two("fz", "sharded", 100).await.expect("sharded collection");
    let client = cluster.client().await.unwrap();
    let fz = client.database("fz");
    fz.create_collection("plain").await.unwrap();
    let sharded = fz.collection::<Document>("sharded");

    // A write without shard key whose filter is missing or not a document changed a document
    // picked by an empty stand-in filter; a findAndModify the same. Now refused, nothing written.
    sharded.insert_many([doc! { "_id": 1, "k": 1 }, doc! { "_id": 2, "k": 500 }]).await.unwrap();
    for command in [
        doc! { "delete": "sharded", "deletes": [{ "q": "x", "limit": 1 }] },
        doc! { "delete": "sharded", "deletes": [{ "limit": 1 }] },
        doc! { "update": "sharded", "updates": [{ "q": [1], "u": { "$set": { "x": 1 } } }] },
        doc! { "findAndModify": "sharded", "query": "x", "remove": true },
        doc! { "findAndModify": "sharded", "query": 5, "update": { "$set": { "x": 1 } } },
    ] {
        assert!(failure(&fz, command.clone()).await.is_some(), "{command} was accepted");
    }
    assert_eq!(sharded.count_documents(doc! { "x": { "$exists": false } }).await.unwrap(), 2, "a document changed");

    // Each command on the unsharded collection, on the sharded one (where nothing matches, so
    // the write without shard key finds no document), on a database that does not exist (reads)
    // and explained: refused alike.
    let cases = |coll: &str| {
        vec![
            // The router rewrote these for several shards unchecked (a skip and limit of
            // i64::MAX even overflowed and closed the connection).
            doc! { "count": coll, "skip": "x" },
            doc! { "count": coll, "skip": -1, "limit": -1 },
            doc! { "find": coll, "skip": "x" },
            doc! { "find": coll, "limit": 1.5 },
            doc! { "find": coll, "singleBatch": "x" },
            doc! { "aggregate": coll, "pipeline": [], "cursor": { "batchSize": "x" } },
            doc! { "aggregate": coll, "pipeline": [], "cursor": { "batchSize": -1 } },
            doc! { "aggregate": coll, "pipeline": [], "cursor": {}, "allowDiskUse": "x" },
            doc! { "aggregate": coll, "pipeline": [], "cursor": {}, "fuzzOption": 1 },
            doc! { "find": coll, "filter": "a b" },
            doc! { "find": coll, "projection": { "a": { "$fuzzProj": 1 } } },
            doc! { "distinct": coll, "key": "a", "query": true },
        ]
    };
    let writes = |coll: &str| {
        vec![
            doc! { "update": coll, "updates": [{ "q": { "k": { "$gt": 1000 } }, "u": 5 }] },
            doc! { "update": coll, "updates": [{ "q": { "k": { "$gt": 1000 } }, "u": { "$unset": { "": 1 } } }] },
            doc! { "delete": coll, "deletes": [{ "q": { "k": { "$gt": 1000 } }, "limit": "1" }] },
            doc! { "findAndModify": coll, "query": { "k": { "$gt": 1000 } } },
            doc! { "findAndModify": coll, "query": { "k": { "$gt": 1000 } }, "remove": true, "update": {} },
            doc! { "findAndModify": coll, "remove": true, "fields": 5 },
            doc! { "update": coll, "updates": "x" },
            doc! { "delete": coll, "deletes": null },
        ]
    };
    let nowhere = client.database("fz_none");
    for (plain, on_sharded) in cases("plain").into_iter().zip(cases("sharded")) {
        let expected = failure(&fz, plain.clone()).await;
        assert!(expected.is_some(), "{plain} was accepted");
        assert!(failure(&fz, on_sharded.clone()).await.is_some(), "{on_sharded} was accepted");
        assert!(failure(&nowhere, plain.clone()).await.is_some(), "{plain} on a database that does not exist");
        assert!(code(&fz, doc! { "explain": plain.clone() }).await.is_some(), "explain of {plain}");
    }
    for (plain, on_sharded) in writes("plain").into_iter().zip(writes("sharded")) {
        assert!(failure(&fz, plain.clone()).await.is_some(), "{plain} was accepted");
        assert!(failure(&fz, on_sharded.clone()).await.is_some(), "{on_sharded} was accepted");
        assert!(code(&fz, doc! { "explain": plain.clone() }).await.is_some(), "explain of {plain}");
    }
    // explain needs no cursor (MongoDB's neither).
    assert_eq!(code(&fz, doc! { "explain": { "aggregate": "plain", "pipeline": [] } }).await, None);

    // $lookup on a database that does not exist answers empty, as on one that does.
    let lookup = doc! {
        "aggregate": "plain",
        "pipeline": [{ "$lookup": { "from": "other", "localField": "a", "foreignField": "b", "as": "c" } }],
        "cursor": {},
    };
    assert_eq!(code(&nowhere, lookup).await, None);
    let names = client.list_database_names().await.unwrap();
    assert!(!names.iter().any(|n| n == "fz_none"), "a read created fz_none: {names:?}");
}
