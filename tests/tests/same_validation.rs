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
