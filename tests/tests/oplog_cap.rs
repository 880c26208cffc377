//! The oplog size cap with real processes: members capped at 1 MiB, a secondary paused while
//! several MiB are written. The primary truncates its oplog past the entries the paused member
//! still needed; when the member wakes it must not skip them: it is refused `TooStale`, resyncs
//! (initial sync) and ends with exactly the primary's documents.

use std::time::Duration;

use bson::{Document, Timestamp, doc};
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use shoal_tests::repl::member_status;
use shoal_tests::replica_cluster::ReplicaCluster;

const WAIT: Duration = Duration::from_secs(60);
const CAP_MB: u64 = 1;
/// Documents written while the secondary sleeps: 800 × 10 KiB ≈ 8 MiB, far past twice the cap and
/// past what the stream's buffers (HTTP/2 window, channel) can hold for the sleeping member.
const DOCS_WHILE_PAUSED: i64 = 800;
const DOC_PAD_BYTES: usize = 10 << 10;

fn oplog_field(status: &Document, field: &str) -> Timestamp {
    status
        .get_document("oplog")
        .and_then(|o| o.get_timestamp(field))
        .unwrap_or_else(|e| panic!("{field}: {e}: {status}"))
}

fn key(ts: Timestamp) -> (u32, u32) {
    (ts.time, ts.increment)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_secondary_that_fell_off_the_capped_oplog_resyncs_and_misses_nothing() {
    let cap = CAP_MB.to_string();
    let cluster = ReplicaCluster::start_with(3, &["--oplog-size-mb", &cap]).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let wc = WriteConcern::builder().w(Acknowledgment::Majority).build();
    let coll = client
        .database("rs")
        .collection_with_options::<Document>("capped", CollectionOptions::builder().write_concern(wc).build());
    coll.insert_many((0..10i64).map(|i| doc! { "_id": i })).await.expect("first inserts");
    for i in 0..cluster.size() {
        cluster.wait_caught_up(i, "rs", "capped", 10, WAIT).await.expect("caught up");
    }
    let primary = cluster.wait_primary(WAIT).await.expect("primary");
    let paused = (primary + 1) % cluster.size();
    let paused_at = member_status(&cluster.addr(paused)).await.expect("status");
    let paused_last = oplog_field(&paused_at, "lastTs");
    cluster.pause(paused);

    let pad = "x".repeat(DOC_PAD_BYTES);
    for chunk in (10..10 + DOCS_WHILE_PAUSED).collect::<Vec<_>>().chunks(20) {
        coll.insert_many(chunk.iter().map(|i| doc! { "_id": *i, "pad": &pad })).await.expect("inserts while paused");
    }
    let total = 10 + DOCS_WHILE_PAUSED as u64;

    // The primary truncated past what the paused member had, and stays near its cap.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = member_status(&cluster.addr(primary)).await.expect("primary status");
        let oplog = s.get_document("oplog").expect("oplog").clone();
        let size = oplog.get_i64("sizeBytes").expect("sizeBytes") as u64;
        if key(oplog_field(&s, "firstTs")) > key(paused_last) && size <= 2 * (CAP_MB << 20) {
            assert_eq!(oplog.get_i64("maxSizeBytes").ok(), Some((CAP_MB << 20) as i64), "{oplog}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the primary's oplog was not truncated: {oplog}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    cluster.resume(paused);
    cluster
        .wait_caught_up(paused, "rs", "capped", total, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log_tails(40)));
    // It resynced: its oplog now starts where its copy began, not where it stopped.
    let after = member_status(&cluster.addr(paused)).await.expect("status");
    assert!(key(oplog_field(&after, "firstTs")) > key(paused_last), "{after}");
    let want: Vec<i64> = (0..total as i64).collect();
    for i in 0..cluster.size() {
        cluster.wait_caught_up(i, "rs", "capped", total, WAIT).await.expect("caught up");
        assert_eq!(cluster.ids_on(i, "rs", "capped").await.expect("ids"), want, "member {i}");
    }
}
