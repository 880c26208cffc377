//! Crash safety: writers insert with `{w: 1, j: true}` from several tasks; the shard is SIGKILLed
//! in the middle; after a restart on the same data dir every acknowledged document is present and
//! intact, and nothing is present that was never sent.
//!
//! ```text
//!  writer tasks ──insert j:true──> router ──> shard      acked ids recorded per task
//!          main: wait until ACKED_BEFORE_KILL acks ──> kill -9 shard (writes still in flight)
//!          writers stop at their first error ──> restart shard (same dir, same port)
//!          check: acked ⊆ stored ⊆ attempted, every stored doc == expected(id), counts agree
//! ```
//!
//! The kill point is a count of acknowledgements, not a time, so the test is deterministic in
//! what it checks; which in-flight writes survive is up to the shard.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use shoal_tests::TestContext;
use tokio::sync::watch;

const DB: &str = "durability";
const WRITERS: usize = 6;
/// Writers with an odd index insert batches of this many documents with `insert_many`.
const BATCH_DOCS: usize = 10;
const ACKED_BEFORE_KILL: usize = 1500;
/// Bound on each writer's inserts, should the kill never stop it.
const INSERTS_PER_WRITER_MAX: usize = 200_000;
/// Hang detectors (never performance assertions).
const OP_DEADLINE: Duration = Duration::from_secs(60);
const PHASE_DEADLINE: Duration = Duration::from_secs(180);

fn journaled(ctx: &TestContext, name: &str) -> Collection<Document> {
    let wc = WriteConcern::builder().w(Acknowledgment::Nodes(1)).journal(true).build();
    ctx.db().collection_with_options(name, CollectionOptions::builder().write_concern(wc).build())
}

/// The one document a given id must hold.
fn expected(writer: usize, i: usize) -> Document {
    doc! {
        "_id": format!("w{writer}-{i:07}"),
        "writer": writer as i32,
        "i": i as i64,
        "payload": "p".repeat(16 + (i * 7 + writer) % 200),
        "nested": {"a": [writer as i32, i as i32], "b": {"c": format!("{i}")}},
    }
}

#[derive(Default)]
struct Ledger {
    /// Ids whose insert was acknowledged.
    acked: BTreeSet<String>,
    /// Ids ever sent (acknowledged or not).
    attempted: BTreeSet<String>,
    /// Each writer's first error, for diagnostics.
    errors: Vec<String>,
}

async fn writer(coll: Collection<Document>, w: usize, ledger: Arc<Mutex<Ledger>>, acks: watch::Sender<usize>) {
    let batch = if w % 2 == 1 { BATCH_DOCS } else { 1 };
    let mut i = 0;
    while i < INSERTS_PER_WRITER_MAX {
        let docs: Vec<Document> = (i..i + batch).map(|j| expected(w, j)).collect();
        let ids: Vec<String> = docs.iter().map(|d| d.get_str("_id").unwrap().to_string()).collect();
        ledger.lock().unwrap().attempted.extend(ids.iter().cloned());
        let result = if batch == 1 {
            let d = docs.into_iter().next().unwrap();
            tokio::time::timeout(OP_DEADLINE, coll.insert_one(d)).await.map(|r| r.map(|_| ()))
        } else {
            tokio::time::timeout(OP_DEADLINE, coll.insert_many(docs)).await.map(|r| r.map(|_| ()))
        };
        match result {
            Ok(Ok(())) => {
                ledger.lock().unwrap().acked.extend(ids);
                acks.send_modify(|n| *n += batch);
            }
            Ok(Err(e)) => {
                ledger.lock().unwrap().errors.push(format!("writer {w}: {e}"));
                return;
            }
            Err(_) => {
                ledger.lock().unwrap().errors.push(format!("writer {w}: insert hung for {OP_DEADLINE:?}"));
                return;
            }
        }
        i += batch;
    }
}

/// Polls until the router serves reads of `coll` again (the shard restarted, the router
/// reconnected); returns the count then.
async fn wait_until_readable(coll: &Collection<Document>) -> u64 {
    let deadline = tokio::time::Instant::now() + PHASE_DEADLINE;
    loop {
        match coll.count_documents(doc! {}).await {
            Ok(n) => return n,
            Err(e) if tokio::time::Instant::now() > deadline => {
                panic!("router did not serve reads within {PHASE_DEADLINE:?} of the restart: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Reads every document and checks: acked ⊆ stored ⊆ attempted, each document intact.
async fn verify(coll: &Collection<Document>, ledger: &Ledger) -> usize {
    let count = wait_until_readable(coll).await;
    let docs: Vec<Document> = coll.find(doc! {}).batch_size(1000).await.unwrap().try_collect().await.unwrap();
    assert_eq!(docs.len() as u64, count, "find and count_documents disagree");
    let mut stored = BTreeMap::new();
    for d in docs {
        let id = d.get_str("_id").expect("string _id").to_string();
        let writer = d.get_i32("writer").expect("writer field") as usize;
        let i = d.get_i64("i").expect("i field") as usize;
        assert_eq!(d, expected(writer, i), "document {id} is corrupt");
        assert!(stored.insert(id.clone(), ()).is_none(), "_id {id} returned twice");
        assert!(ledger.attempted.contains(&id), "{id} was never sent");
    }
    let lost: Vec<&String> = ledger.acked.iter().filter(|id| !stored.contains_key(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged journaled inserts lost after kill -9, e.g. {:?}",
        lost.len(),
        ledger.acked.len(),
        &lost[..lost.len().min(10)]
    );
    stored.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_journaled_inserts_survive_kill_9() {
    let mut ctx = TestContext::owned(DB).await;
    let coll = journaled(&ctx, "acked");

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (acks_tx, mut acks_rx) = watch::channel(0usize);
    let writers: Vec<_> =
        (0..WRITERS).map(|w| tokio::spawn(writer(coll.clone(), w, ledger.clone(), acks_tx.clone()))).collect();
    drop(acks_tx);

    // The `Ref` that `wait_for` returns holds the channel's read lock, which would block every
    // writer's `send_modify` (and with it a runtime thread): drop it at once.
    let reached =
        tokio::time::timeout(PHASE_DEADLINE, acks_rx.wait_for(|n| *n >= ACKED_BEFORE_KILL)).await.map(|r| r.map(drop));
    if !matches!(reached, Ok(Ok(()))) {
        let l = ledger.lock().unwrap();
        panic!("only {} inserts acknowledged before the kill point; writer errors: {:?}", l.acked.len(), l.errors);
    }
    ctx.cluster_mut().kill9_shard();

    for (w, handle) in writers.into_iter().enumerate() {
        if tokio::time::timeout(PHASE_DEADLINE, handle).await.is_err() {
            let l = ledger.lock().unwrap();
            let prefix = format!("w{w}-");
            panic!(
                "writer {w} did not stop within {PHASE_DEADLINE:?} after the shard died; it sent \
                 {} inserts, {} acknowledged; errors so far: {:?}",
                l.attempted.iter().filter(|id| id.starts_with(&prefix)).count(),
                l.acked.iter().filter(|id| id.starts_with(&prefix)).count(),
                l.errors
            );
        }
    }
    let ledger = Arc::try_unwrap(ledger).ok().expect("writers are done").into_inner().unwrap();
    assert_eq!(ledger.errors.len(), WRITERS, "every writer stops at an error");
    eprintln!(
        "killed the shard with {} inserts acknowledged, {} attempted",
        ledger.acked.len(),
        ledger.attempted.len()
    );

    ctx.cluster_mut().restart_shard().await.unwrap();
    let stored = verify(&coll, &ledger).await;
    assert!(stored >= ledger.acked.len());

    // The recovered shard takes journaled writes, and a second crash loses none of them.
    let mut ledger = ledger;
    let after: Vec<Document> = (0..100).map(|i| expected(99, i)).collect();
    for d in &after {
        let id = d.get_str("_id").unwrap().to_string();
        ledger.attempted.insert(id.clone());
        coll.insert_one(d.clone()).await.unwrap();
        ledger.acked.insert(id);
    }
    ctx.cluster_mut().kill9_shard();
    ctx.cluster_mut().restart_shard().await.unwrap();
    let stored_again = verify(&coll, &ledger).await;
    assert!(stored_again >= stored + after.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_deletes_survive_kill_9() {
    let mut ctx = TestContext::owned(DB).await;
    let coll = journaled(&ctx, "mutations");
    coll.insert_many((0..200).map(|i| doc! {"_id": i, "v": 0})).await.unwrap();
    coll.update_many(doc! {"_id": {"$lt": 100}}, doc! {"$set": {"v": 1}}).await.unwrap();
    coll.delete_many(doc! {"_id": {"$gte": 150}}).await.unwrap();
    coll.update_one(doc! {"_id": 7}, doc! {"$push": {"log": "x"}, "$inc": {"v": 10}}).await.unwrap();
    coll.replace_one(doc! {"_id": 8}, doc! {"replaced": true}).await.unwrap();

    ctx.cluster_mut().kill9_shard();
    ctx.cluster_mut().restart_shard().await.unwrap();

    assert_eq!(wait_until_readable(&coll).await, 150);
    assert_eq!(coll.count_documents(doc! {"v": 1}).await.unwrap(), 98);
    assert_eq!(coll.count_documents(doc! {"v": 0}).await.unwrap(), 50);
    assert_eq!(coll.find_one(doc! {"_id": 7}).await.unwrap(), Some(doc! {"_id": 7, "v": 11, "log": ["x"]}));
    assert_eq!(coll.find_one(doc! {"_id": 8}).await.unwrap(), Some(doc! {"_id": 8, "replaced": true}));
    assert_eq!(coll.find_one(doc! {"_id": 150}).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_open_across_a_shard_restart_is_cursor_not_found() {
    let mut ctx = TestContext::owned(DB).await;
    let coll = journaled(&ctx, "cursor_restart");
    coll.insert_many((0..20).map(|i| doc! {"_id": i})).await.unwrap();
    let reply =
        ctx.db().run_command(doc! {"find": "cursor_restart", "sort": {"_id": 1}, "batchSize": 2}).await.unwrap();
    let id = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(id, 0);

    ctx.cluster_mut().kill9_shard();
    ctx.cluster_mut().restart_shard().await.unwrap();
    assert_eq!(wait_until_readable(&coll).await, 20);

    // The restarted shard has no such cursor; the router must say so, not hang or crash.
    let result =
        tokio::time::timeout(OP_DEADLINE, ctx.db().run_command(doc! {"getMore": id, "collection": "cursor_restart"}))
            .await
            .expect("getMore hung");
    shoal_tests::expect::command_error(result, 43);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_kill_9_and_restart_loses_nothing() {
    let mut ctx = TestContext::owned(DB).await;
    let coll = journaled(&ctx, "router_restart");
    coll.insert_many((0..500).map(|i| doc! {"_id": i, "v": i})).await.unwrap();
    ctx.cluster_mut().restart_router().await.unwrap();
    // The old client's pooled connections are dead; a fresh client sees everything.
    let client = ctx.new_client().await;
    let fresh: Collection<Document> = client.database(DB).collection("router_restart");
    assert_eq!(wait_until_readable(&fresh).await, 500);
    fresh.insert_one(doc! {"_id": 500, "v": 500}).await.unwrap();
    assert_eq!(fresh.count_documents(doc! {}).await.unwrap(), 501);
}
