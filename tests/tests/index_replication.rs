//! Indexes in a replica group, over real processes: a build on the primary reaches every member
//! (each one serves IXSCAN plans from its own entries), a member that resyncs from scratch comes
//! back with the index, a new primary after kill -9 enforces the unique index, and a drop reaches
//! every member.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use mongodb::IndexModel;
use mongodb::options::IndexOptions;
use shoal_tests::expect;
use shoal_tests::repl::member_command;
use shoal_tests::replica_cluster::ReplicaCluster;

const DB: &str = "ixr";
const DOCS: i64 = 2000;
const WAIT: Duration = Duration::from_secs(60);

/// The index names member `i` lists for `ixr.c`.
async fn names_on(cluster: &ReplicaCluster, i: usize) -> Vec<String> {
    let listed = member_command(&cluster.addr(i), DB, doc! { "listIndexes": "c" }, true).await.expect("listIndexes");
    let batch = listed.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("batch").clone();
    batch.iter().filter_map(|b| b.as_document()).map(|d| d.get_str("name").expect("name").to_owned()).collect()
}

/// Waits until member `i` lists exactly `want` (members apply the build or drop a moment later).
async fn wait_names(cluster: &ReplicaCluster, i: usize, want: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let names = names_on(cluster, i).await;
        if names == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "member {i} lists {names:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Member `i`'s own plan and counts for `{v: 7}`.
async fn explain_on(cluster: &ReplicaCluster, i: usize) -> Document {
    let body = doc! { "explain": { "find": "c", "filter": { "v": 7 } }, "verbosity": "executionStats" };
    member_command(&cluster.addr(i), DB, body, true).await.expect("explain on a member")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_resyncs_failovers_and_drops_reach_every_member() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let coll = client.database(DB).collection::<Document>("c");
    let docs: Vec<Document> = (0..DOCS).map(|k| doc! { "_id": k, "v": k }).collect();
    coll.insert_many(docs).await.expect("insert");
    coll.create_index(
        IndexModel::builder().keys(doc! { "v": 1 }).options(IndexOptions::builder().unique(true).build()).build(),
    )
    .await
    .expect("unique index");
    coll.insert_one(doc! { "_id": DOCS, "v": DOCS }).await.expect("written after the build");
    for i in 0..cluster.size() {
        cluster.wait_caught_up(i, DB, "c", DOCS as u64 + 1, WAIT).await.expect("caught up");
        wait_names(&cluster, i, &["_id_", "v_1"]).await;
        let explained = explain_on(&cluster, i).await;
        let text = explained.to_string();
        assert!(text.contains("IXSCAN") && text.contains("v_1"), "member {i}: {explained}");
        let stats = explained.get_document("executionStats").expect("stats");
        assert_eq!(stats.get_i64("totalDocsExamined").expect("docs"), 1, "member {i}: {stats}");
    }

    // A member copied from scratch (initial sync) builds the index as it copies.
    let primary = cluster.wait_primary(WAIT).await.expect("primary");
    let wiped = (primary + 1) % cluster.size();
    cluster.wipe(wiped).await.expect("wipe");
    cluster.wait_caught_up(wiped, DB, "c", DOCS as u64 + 1, WAIT).await.expect("resynced");
    wait_names(&cluster, wiped, &["_id_", "v_1"]).await;
    assert!(explain_on(&cluster, wiped).await.to_string().contains("IXSCAN"));

    // The member promoted after the primary dies enforces uniqueness from its own entries.
    cluster.kill9(primary);
    cluster.wait_new_primary(primary, WAIT).await.expect("new primary");
    let dup = coll.insert_one(doc! { "_id": DOCS + 1, "v": 7 }).await;
    let e = expect::write_error(dup, 11000);
    assert!(e.message.contains("v_1"), "{}", e.message);
    cluster.restart(primary).await.expect("restart the old primary");

    coll.drop_index("v_1").await.expect("drop");
    for i in 0..cluster.size() {
        cluster.wait_settled(i, WAIT).await.expect("settled");
        wait_names(&cluster, i, &["_id_"]).await;
    }
}

/// The `hidden` spec member `i` lists for `v_1`.
async fn hidden_on(cluster: &ReplicaCluster, i: usize) -> bool {
    let listed = member_command(&cluster.addr(i), DB, doc! { "listIndexes": "c" }, true).await.expect("listIndexes");
    let batch = listed.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("batch").clone();
    batch
        .iter()
        .filter_map(|b| b.as_document())
        .find(|d| d.get_str("name").ok() == Some("v_1"))
        .is_some_and(|d| d.get_bool("hidden").unwrap_or(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coll_mod_hides_and_unhides_an_index_on_every_member() {
    let cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let db = client.database(DB);
    let coll = db.collection::<Document>("c");
    coll.insert_many((0..100).map(|k| doc! { "_id": k, "v": k })).await.expect("insert");
    coll.create_index(IndexModel::builder().keys(doc! { "v": 1 }).build()).await.expect("index");
    for hidden in [true, false] {
        let reply = db
            .run_command(doc! { "collMod": "c", "index": { "name": "v_1", "hidden": hidden } })
            .await
            .expect("collMod");
        assert_eq!(
            (reply.get_bool("hidden_old").ok(), reply.get_bool("hidden_new").ok()),
            (Some(!hidden), Some(hidden))
        );
        for i in 0..cluster.size() {
            let deadline = tokio::time::Instant::now() + WAIT;
            while hidden_on(&cluster, i).await != hidden {
                assert!(tokio::time::Instant::now() < deadline, "member {i} never applied hidden: {hidden}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Each member's planner follows its own copy of the flag.
            let text = explain_on(&cluster, i).await.to_string();
            assert_eq!(text.contains("IXSCAN"), !hidden, "member {i}, hidden {hidden}: {text}");
        }
    }
}
