//! A chunk moved away and straight back while a client holds a cursor on it (grey-failures item
//! 2): the donor's range deletion waits for that cursor, so the move back cannot proceed — it
//! fails at once with ConflictingOperationInProgress naming the pending range deletion (it used
//! to wait 60 s and end "unreachable"), and succeeds once the cursor is closed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::{Duration, Instant};

use bson::{Document, doc};
use shoal_tests::sharded_cluster::ShardedCluster;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moving_a_chunk_back_under_an_open_cursor_fails_at_once_then_succeeds() {
    let cluster = ShardedCluster::start().await.expect("cluster");
    let client = cluster.client().await.unwrap();
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "app", "primaryShard": ShardedCluster::shard_name(0) }).await.unwrap();
    admin.run_command(doc! { "shardCollection": "app.items", "key": { "k": 1 } }).await.unwrap();
    let db = client.database("app");
    let docs: Vec<Document> = (0..50).map(|k| doc! { "k": k }).collect();
    db.collection::<Document>("items").insert_many(docs).await.unwrap();

    // A cursor with documents left on shard0.
    let opened = db.run_command(doc! { "find": "items", "batchSize": 1 }).await.expect("find");
    let cursor_id = opened.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(cursor_id, 0);

    let move_to =
        |shard: usize| doc! { "moveChunk": "app.items", "find": { "k": 1 }, "to": ShardedCluster::shard_name(shard) };
    admin.run_command(move_to(1)).await.expect("move away");
    let started = Instant::now();
    let refused = admin.run_command(move_to(0)).await.expect_err("the move back is refused while the cursor is open");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    let message = refused.to_string();
    match refused.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => assert_eq!(c.code, 117, "{message}"),
        other => panic!("not a command error: {other:?}"),
    }
    assert!(message.contains("range deletion") && !message.contains("unreachable"), "{message}");

    // Closed, the cursor no longer holds the deletion: the move back goes through.
    db.run_command(doc! { "killCursors": "items", "cursors": [cursor_id] }).await.expect("killCursors");
    let deadline = Instant::now() + WAIT;
    loop {
        match admin.run_command(move_to(0)).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("move back not yet possible: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the move back never succeeded: {e}"),
        }
    }
    assert_eq!(db.collection::<Document>("items").count_documents(doc! {}).await.unwrap(), 50);
}
