//! Range-deleter tests against a real store in a temp dir (no catalog: metadata is installed).

use std::sync::Arc;

use bson::{Bson, Document, doc};
use shoal_proto::catalog::{Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, RoutingTable, Timestamp};
use shoal_proto::shard::CommandRequest;

use super::*;
use crate::exec::{self, Request};
use crate::sharding::metadata::{CollectionMetadata, ShardedMetadata};

fn node(dir: &std::path::Path) -> Arc<Node> {
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_node(&config).expect("open")
}

fn run_cmd<T>(e: &Node, body: Document, f: fn(&Node, &Request<'_>) -> ExecResult<T>) -> T {
    let raw = CommandRequest {
        request_id: "t".into(),
        db: "db".into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    };
    f(e, &Request::parse(&raw).expect("parse")).expect("command")
}

fn a_values(e: &Node) -> Vec<i32> {
    let (batch, _) = run_cmd(e, doc! { "find": "c", "sort": {"a": 1} }, exec::find::run);
    batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc").get_i32("a").expect("a")).collect()
}

fn key(i: i32) -> ChunkBound {
    ChunkBound::Key(shoal_query::shard_key::of_values(&[&Bson::Int32(i)]))
}

fn fields() -> Vec<KeyField> {
    vec![KeyField { name: "a".into(), hashed: false }]
}

fn task(min: ChunkBound, max: ChunkBound) -> RangeDeletion {
    RangeDeletion { ns: "db.c".into(), uuid: Uuid::nil(), key: fields(), min, max }
}

fn insert_twenty(e: &Node) {
    let docs: Vec<Bson> = (0..20).map(|i| Bson::Document(doc! {"_id": i, "a": i})).collect();
    run_cmd(e, doc! { "insert": "c", "documents": docs }, exec::insert::run);
}

/// Metadata in which shard `t` owns `[min, max)` and `other` owns the rest.
fn install_owning(e: &Node, min: i32, max: i32) {
    let chunk = |lo: ChunkBound, hi: ChunkBound, shard: &str, minor: u32| Chunk {
        min: lo,
        max: hi,
        shard: shard.into(),
        version: ChunkVersion::new(2, minor),
        history: Vec::new(),
        jumbo: false,
        on_current_shard_since: Timestamp::default(),
    };
    let table = RoutingTable {
        ns: "db.c".into(),
        uuid: Uuid::nil(),
        epoch: Epoch([1; 12]),
        timestamp: Timestamp { secs: 1, inc: 0 },
        key: KeyPattern::range(&["a"]),
        unique: false,
        version: ChunkVersion::new(2, 2),
        chunks: vec![
            chunk(ChunkBound::Min, key(min), "other", 0),
            chunk(key(min), key(max), "t", 1),
            chunk(key(max), ChunkBound::Max, "other", 2),
        ],
    };
    let meta = CollectionMetadata::Sharded(Arc::new(ShardedMetadata::from_table(table, "t")));
    e.sharding.install_metadata("db.c", meta);
}

#[tokio::test]
async fn tasks_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = task(key(3), ChunkBound::Max);
    {
        let e = node(dir.path());
        e.sharding.schedule_range_deletion(&e.store, &e.cursors, t.clone()).await.expect("schedule");
        assert_eq!(e.sharding.range_deletions_pending(), 1);
        e.store.shutdown();
    }
    let e = node(dir.path());
    assert_eq!(e.sharding.range_deletions_pending(), 1);
    let (id, resumed) = e.sharding.range_deleter.next_ready(&e).expect("ready after restart");
    assert_eq!(resumed, t);
    // Finishing removes the record: the next restart has nothing to resume.
    run_task(&e, id, &resumed).await.expect("run");
    e.sharding.range_deleter.complete(id);
    e.store.shutdown();
    drop(e);
    let e = node(dir.path());
    assert_eq!(e.sharding.range_deletions_pending(), 0);
}

#[tokio::test]
async fn deletion_keeps_what_the_shard_owns_again_and_marks_oplog_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    insert_twenty(&e);
    // The task covers [5, 15); the shard owns [8, 10) again (moved back since).
    install_owning(&e, 8, 10);
    let before = e.store.oplog_after(bson::Timestamp { time: 0, increment: 0 }).count();
    let deleted = run_task(&e, 1, &task(key(5), key(15))).await.expect("run");
    assert_eq!(deleted, 8);
    let expected: Vec<i32> = (0..5).chain(8..10).chain(15..20).collect();
    assert_eq!(a_values(&e), expected);
    let entries: Vec<Document> = e
        .store
        .oplog_after(bson::Timestamp { time: 0, increment: 0 })
        .skip(before)
        .map(|kv| Document::from_reader(&mut &kv.expect("kv").1[..]).expect("entry"))
        .collect();
    // Eight deletes, then the task record's removal (a no-op entry: replicated bookkeeping).
    assert_eq!(entries.len(), 9);
    let (deletes, record) = entries.split_at(8);
    assert!(deletes.iter().all(|d| d.get_str("op").ok() == Some("d") && d.get_bool("fromMigrate").ok() == Some(true)));
    let meta = record[0].get_array("meta").expect("a no-op entry carrying the record's removal");
    let write = meta.first().and_then(|w| w.as_document()).expect("one meta write");
    assert!(write.get("v").is_none(), "the record is removed: {write}");
}

#[tokio::test]
async fn another_incarnation_of_the_collection_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    insert_twenty(&e);
    install_owning(&e, 0, 1);
    let mut t = task(key(5), key(15));
    t.uuid = Uuid::from_u128(7);
    assert_eq!(run_task(&e, 1, &t).await.expect("run"), 0);
    assert_eq!(a_values(&e).len(), 20);
}

#[test]
fn batches_are_bounded_and_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let docs: Vec<Bson> = (0..(DELETE_DOCS_PER_BATCH_MAX as i32 + 10)).map(|i| Bson::Document(doc! {"a": i})).collect();
    run_cmd(&e, doc! { "insert": "c", "documents": docs }, exec::insert::run);
    let t = task(ChunkBound::Min, ChunkBound::Max);
    let parts = vec![(ChunkBound::Min, ChunkBound::Max)];
    let (n, next) = delete_batch(&e.store, &t, &parts, None).expect("batch");
    assert_eq!(n, DELETE_DOCS_PER_BATCH_MAX as u64);
    let next = next.expect("more to do");
    let (n, next) = delete_batch(&e.store, &t, &parts, Some(next)).expect("batch");
    assert_eq!((n, next), (10, None));
    assert!(a_values(&e).is_empty());
}

#[tokio::test]
async fn deletion_waits_for_cursors_open_when_scheduled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    insert_twenty(&e);
    let (batch, _) = run_cmd(&e, doc! { "find": "c", "batchSize": 2 }, exec::find::run);
    assert_ne!(batch.cursor_id, 0);
    e.sharding.schedule_range_deletion(&e.store, &e.cursors, task(key(10), ChunkBound::Max)).await.expect("schedule");
    assert!(e.sharding.range_deleter.next_ready(&e).is_none(), "an open cursor holds the deletion back");
    // A cursor opened after scheduling does not.
    let (later, _) = run_cmd(&e, doc! { "find": "c", "batchSize": 2 }, exec::find::run);
    e.cursors.kill(batch.cursor_id);
    assert!(e.sharding.range_deleter.next_ready(&e).is_some());
    let deleter = tokio::spawn(run(Arc::clone(&e)));
    e.sharding.wait_for_range_deletion("db.c", &key(12), &key(13)).await;
    deleter.abort();
    assert_eq!(e.sharding.range_deletions_pending(), 0);
    assert_eq!(a_values(&e), (0..10).collect::<Vec<_>>());
    e.cursors.kill(later.cursor_id);
}

#[tokio::test]
async fn a_member_taking_over_waits_for_the_cursors_it_opened_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    insert_twenty(&e);
    e.sharding.schedule_range_deletion(&e.store, &e.cursors, task(key(10), ChunkBound::Max)).await.expect("schedule");
    // A cursor on the range opened before this member takes over (as a secondary, say).
    let (batch, _) = run_cmd(&e, doc! { "find": "c", "batchSize": 2 }, exec::find::run);
    assert_ne!(batch.cursor_id, 0);
    e.sharding.range_deleter.reload(&e.store, e.cursors.pin_seq()).expect("reload as a new primary");
    assert_eq!(e.sharding.range_deletions_pending(), 1);
    assert!(e.sharding.range_deleter.next_ready(&e).is_none(), "the open cursor holds the resumed deletion back");
    e.cursors.kill(batch.cursor_id);
    assert!(e.sharding.range_deleter.next_ready(&e).is_some());
}
