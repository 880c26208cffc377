//! Retryable writes with real processes: a write sent again with the same session and
//! `txnNumber` runs once — after a failover (the record replicated with the write), across a
//! batch split between shards (`stmtIds`), and after its chunk moved (the records moved with it);
//! and a driver's retryable writes under repeated kill -9 of the primary never apply twice.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{Binary, Bson, Document, doc, spec::BinarySubtype};
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use shoal_tests::replica_cluster::ReplicaCluster;
use shoal_tests::sharded_cluster::ShardedCluster;
use shoal_tests::wire::WireConn;

/// Failover and restart waits (generous: a loaded 2-core CI machine).
const WAIT: Duration = Duration::from_secs(60);
/// Resends of one command while the group has no primary.
const RESENDS_MAX: u32 = 100;

fn session(n: u8) -> Document {
    doc! { "id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![n; 16] } }
}

fn retryable(mut body: Document, lsid: u8, txn: i64) -> Document {
    body.insert("lsid", session(lsid));
    body.insert("txnNumber", txn);
    body.insert("writeConcern", doc! { "w": "majority" });
    body.insert("$db", "rw");
    body
}

fn ok(reply: &Document) -> bool {
    matches!(reply.get("ok"), Some(Bson::Double(v)) if *v == 1.0) || matches!(reply.get("ok"), Some(Bson::Int32(1)))
}

/// Sends `body` on a fresh connection until the router answers ok (a driver's retry loop).
async fn send_until_ok(router: std::net::SocketAddr, body: &Document) -> Document {
    let mut last = String::new();
    for _ in 0..RESENDS_MAX {
        match WireConn::connect_client(router).await {
            Ok(mut conn) => match conn.command(body).await {
                Ok(reply) if ok(&reply) => return reply,
                Ok(reply) => last = reply.to_string(),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{body} never succeeded; last answer: {last}");
}

fn count(reply: &Document, field: &str) -> i64 {
    match reply.get(field) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("{field} missing in {reply}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_resent_after_failover_runs_once() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let router = cluster.router.addr();
    // One session per command: a session's older transaction numbers are refused once a newer began.
    let insert = retryable(doc! { "insert": "c", "documents": [{ "_id": 1, "n": 0 }, { "_id": 2, "n": 0 }] }, 1, 1);
    let inc = retryable(doc! { "update": "c", "updates": [{ "q": { "_id": 1 }, "u": { "$inc": { "n": 1 } } }] }, 2, 5);
    let fam = retryable(
        doc! { "findAndModify": "c", "query": { "_id": 2 }, "update": { "$inc": { "n": 10 } }, "new": true },
        3,
        1,
    );
    assert_eq!(count(&send_until_ok(router, &insert).await, "n"), 2);
    let first_inc = send_until_ok(router, &inc).await;
    let first_fam = send_until_ok(router, &fam).await;

    let primary = cluster.wait_primary(WAIT).await.expect("a primary");
    cluster.kill9(primary);
    cluster.wait_new_primary(primary, WAIT).await.expect("a new primary");

    // The same commands again: answered from the records the new primary replicated.
    let again = send_until_ok(router, &insert).await;
    assert_eq!((count(&again, "n"), again.get("writeErrors")), (2, None), "no duplicate key: {again}");
    let again_inc = send_until_ok(router, &inc).await;
    assert_eq!((count(&again_inc, "n"), count(&again_inc, "nModified")), (1, 1));
    assert_eq!((count(&first_inc, "n"), count(&first_inc, "nModified")), (1, 1));
    let again_fam = send_until_ok(router, &fam).await;
    assert_eq!(again_fam.get("value"), first_fam.get("value"), "findAndModify answers with its first image");

    let client = cluster.client().await.expect("client");
    let docs: Vec<Document> = {
        use futures::TryStreamExt;
        let cursor = client.database("rw").collection::<Document>("c").find(doc! {}).await.expect("find");
        cursor.try_collect().await.expect("docs")
    };
    assert_eq!(docs, vec![doc! { "_id": 1, "n": 1 }, doc! { "_id": 2, "n": 10 }], "each statement applied once");

    // An older transaction number of the session is refused; transactions are refused.
    let mut conn = WireConn::connect_client(router).await.expect("connect");
    let stale =
        conn.command(&retryable(doc! { "insert": "c", "documents": [{ "_id": 9 }] }, 2, 4)).await.expect("reply");
    assert_eq!(stale.get_i32("code").ok(), Some(225), "TransactionTooOld: {stale}");
    let mut txn = retryable(doc! { "insert": "c", "documents": [{ "_id": 9 }] }, 4, 1);
    txn.insert("startTransaction", true);
    txn.insert("autocommit", false);
    let refused = conn.command(&txn).await.expect("reply");
    assert_eq!(refused.get_i32("code").ok(), Some(20), "IllegalOperation: {refused}");
    cluster.restart(primary).await.expect("restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_batches_and_moved_chunks_keep_statements_once() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    cluster.shard_in_two("rw", "c", 100).await.expect("rw.c on both shards");
    let other = ShardedCluster::shard_name(1);
    let router = cluster.router.addr();

    // One batch, two shards: statements keep their client ids, so the resend inserts nothing twice.
    let docs: Vec<Document> =
        (0..6).map(|i| doc! { "_id": i, "k": if i % 2 == 0 { i } else { 100 + i }, "n": 0 }).collect();
    let insert = retryable(doc! { "insert": "c", "documents": docs, "ordered": false }, 3, 1);
    assert_eq!(count(&send_until_ok(router, &insert).await, "n"), 6);
    let again = send_until_ok(router, &insert).await;
    assert_eq!((count(&again, "n"), again.get("writeErrors")), (6, None), "{again}");

    // A single-document delete whose filter lacks the shard key, resent: the shards are asked
    // where it ran before a document is picked, so the resend deletes nothing more.
    let tagged = retryable(
        doc! { "insert": "c", "documents": [{ "_id": 50, "k": 50, "t": 1 }, { "_id": 150, "k": 150, "t": 1 }] },
        5,
        1,
    );
    send_until_ok(router, &tagged).await;
    let delete_one = retryable(doc! { "delete": "c", "deletes": [{ "q": { "t": 1 }, "limit": 1 }] }, 5, 2);
    for _ in 0..2 {
        assert_eq!(count(&send_until_ok(router, &delete_one).await, "n"), 1);
    }
    let left = client.database("rw").collection::<Document>("c").count_documents(doc! { "t": 1 }).await.expect("count");
    assert_eq!(left, 1, "one tagged document deleted, once");

    // An increment on shard0, then its chunk moves to shard1: the resend must find the record there.
    let inc = retryable(doc! { "update": "c", "updates": [{ "q": { "k": 2 }, "u": { "$inc": { "n": 1 } } }] }, 3, 2);
    send_until_ok(router, &inc).await;
    admin
        .run_command(doc! { "moveChunk": "rw.c", "find": { "k": 2 }, "to": &other, "_waitForDelete": true })
        .await
        .expect("move the incremented document's chunk");
    let again = send_until_ok(router, &inc).await;
    assert_eq!(count(&again, "nModified"), 1);
    let doc = client.database("rw").collection::<Document>("c").find_one(doc! { "k": 2 }).await.expect("find");
    assert_eq!(doc.and_then(|d| d.get_i32("n").ok()), Some(1), "the increment ran once, before the move");

    // An unsharded collection whose database moves to another primary shard carries its records too.
    admin
        .run_command(doc! { "enableSharding": "rw2", "primaryShard": ShardedCluster::shard_name(0) })
        .await
        .expect("db");
    let mut seed = retryable(doc! { "insert": "u", "documents": [{ "_id": 1, "n": 0 }] }, 4, 1);
    seed.insert("$db", "rw2");
    send_until_ok(router, &seed).await;
    let mut inc =
        retryable(doc! { "update": "u", "updates": [{ "q": { "_id": 1 }, "u": { "$inc": { "n": 1 } } }] }, 4, 2);
    inc.insert("$db", "rw2");
    send_until_ok(router, &inc).await;
    admin.run_command(doc! { "movePrimary": "rw2", "to": &other }).await.expect("movePrimary");
    let again = send_until_ok(router, &inc).await;
    assert_eq!(count(&again, "nModified"), 1);
    let doc = client.database("rw2").collection::<Document>("u").find_one(doc! { "_id": 1 }).await.expect("find");
    assert_eq!(doc.and_then(|d| d.get_i32("n").ok()), Some(1), "the increment ran once, before movePrimary");
}

/// What the driver saw for one counter: increments acknowledged and increments that failed.
#[derive(Default, Debug)]
struct Seen {
    acked: i64,
    failed: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn driver_retryable_writes_apply_once_under_repeated_primary_kills_and_pauses() {
    const COUNTERS: i64 = 10;
    const OPS_PER_ROUND: i64 = 200;
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let wc = WriteConcern::builder().w(Acknowledgment::Majority).build();
    let coll: mongodb::Collection<Document> =
        client.database("rw").collection_with_options("kills", CollectionOptions::builder().write_concern(wc).build());
    let docs: Vec<Document> = (0..COUNTERS).map(|i| doc! { "_id": i, "n": 0_i64 }).collect();
    coll.insert_many(docs).await.expect("seed counters");
    let mut seen: BTreeMap<i64, Seen> = BTreeMap::new();
    let mut inserted: Vec<i64> = Vec::new();
    let mut duplicate_key_errors = 0;
    // Rounds 0 and 1 kill the primary (-9); rounds 2 and 3 pause it (SIGSTOP, as if partitioned)
    // until another member took over, then resume it: it rolls back what no majority had.
    for round in 0..4 {
        let pause = round >= 2;
        let primary = cluster.wait_primary(WAIT).await.expect("a primary");
        let writer_coll = coll.clone();
        let writer = tokio::spawn(async move {
            let mut out: Vec<(i64, bool, Option<String>)> = Vec::new();
            for op in 0..OPS_PER_ROUND {
                let counter = op % COUNTERS;
                // The driver retries once itself (retryWrites is on by default); the router resends too.
                let inc = writer_coll.update_one(doc! { "_id": counter }, doc! { "$inc": { "n": 1_i64 } }).await;
                out.push((counter, inc.is_ok(), None));
                let id = 1000 * (round + 1) + op;
                let ins = writer_coll.insert_one(doc! { "_id": id }).await;
                out.push((-id, ins.is_ok(), ins.err().map(|e| e.to_string())));
            }
            out
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        if pause {
            cluster.pause(primary);
        } else {
            cluster.kill9(primary);
        }
        cluster.wait_new_primary(primary, WAIT).await.expect("a new primary");
        for (key, acked, err) in writer.await.expect("writer") {
            if key >= 0 {
                let s = seen.entry(key).or_default();
                if acked { s.acked += 1 } else { s.failed += 1 }
            } else if acked {
                inserted.push(-key);
            } else if err.as_deref().is_some_and(|e| e.contains("11000")) {
                duplicate_key_errors += 1;
            }
        }
        if pause {
            cluster.resume(primary);
            cluster.wait_settled(primary, WAIT).await.expect("the old primary follows again");
        } else {
            cluster.restart(primary).await.expect("restart the old primary");
        }
        eprintln!("round {round}: primary {primary} {}", if pause { "paused" } else { "killed" });
    }
    assert_eq!(duplicate_key_errors, 0, "a retried insert that had run must not fail with a duplicate key");
    let find_all = |c: mongodb::Collection<Document>| async move {
        use futures::TryStreamExt;
        c.find(doc! {}).await.expect("find").try_collect::<Vec<Document>>().await.expect("docs")
    };
    let all = find_all(coll.clone()).await;
    for (counter, s) in &seen {
        let n = all
            .iter()
            .find(|d| d.get_i64("_id").ok() == Some(*counter) || d.get_i32("_id").ok() == Some(*counter as i32));
        let n = n.and_then(|d| d.get_i64("n").ok()).expect("counter present");
        assert!(
            s.acked <= n && n <= s.acked + s.failed,
            "counter {counter}: {n} increments applied, {} acknowledged, {} failed — an increment ran twice or was lost",
            s.acked,
            s.failed
        );
    }
    for id in &inserted {
        let present =
            all.iter().filter(|d| d.get_i64("_id").ok() == Some(*id) || d.get_i32("_id").ok() == Some(*id as i32));
        assert_eq!(present.count(), 1, "acknowledged insert {id} present exactly once");
    }
    // Every member ends with the same documents.
    let total = all.len() as u64;
    let mut want: Vec<i64> =
        all.iter().map(|d| d.get_i64("_id").or_else(|_| d.get_i32("_id").map(i64::from)).expect("_id")).collect();
    want.sort_unstable();
    for i in 0..cluster.size() {
        cluster
            .wait_caught_up(i, "rw", "kills", total, WAIT)
            .await
            .unwrap_or_else(|e| panic!("member {i}: {e}\n{}", cluster.log_tails(40)));
        assert_eq!(cluster.ids_on(i, "rw", "kills").await.expect("ids"), want, "member {i}");
    }
}
