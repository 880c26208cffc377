//! Replication without a network: one store's oplog applied to another's.

use std::sync::Arc;

use bson::{Document, doc};
use bytes::Bytes;
use shoal_proto::shard::CommandRequest;

use crate::exec::{self, Node, Request};
use crate::store::oplog::OpTime;

fn node(dir: &std::path::Path) -> Arc<Node> {
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_node(&config).expect("open")
}

fn run(e: &Node, f: fn(&Node, &Request<'_>) -> crate::error::ExecResult<(exec::WriteOutcome, u64)>, body: Document) {
    let r = CommandRequest { db: "db".into(), body: body.to_vec().expect("encode").into(), ..Default::default() };
    let parsed = Request::parse(&r).expect("parse");
    f(e, &parsed).expect("write");
}

fn oplog(e: &Node) -> Vec<Bytes> {
    e.store.oplog_after(bson::Timestamp { time: 0, increment: 0 }).map(|kv| kv.expect("kv").1).collect()
}

/// Every document of every collection, by namespace, with the collection's UUID.
fn contents(e: &Node) -> Vec<(String, bson::Uuid, Vec<Document>)> {
    e.store
        .all_collections()
        .into_iter()
        .map(|c| {
            let docs = e
                .store
                .scan(&c, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false)
                .map(|kv| Document::from_reader(&mut &kv.expect("kv").1[..]).expect("doc"))
                .collect();
            (c.full_name(), c.uuid, docs)
        })
        .collect()
}

fn workload(e: &Node) {
    run(e, exec::insert::run, doc! {"insert": "a", "documents": [{"_id": 1, "x": 1}, {"_id": 2, "x": 2}, {"_id": 3}]});
    run(e, exec::update::run, doc! {"update": "a", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"x": 5}}}]});
    run(e, exec::delete::run, doc! {"delete": "a", "deletes": [{"q": {"_id": 2}, "limit": 1}]});
    run(e, exec::insert::run, doc! {"insert": "gone", "documents": [{"_id": 1}]});
    let r = CommandRequest {
        db: "db".into(),
        body: doc! {"drop": "gone"}.to_vec().expect("encode").into(),
        ..Default::default()
    };
    exec::ddl::drop(e, &Request::parse(&r).expect("parse")).expect("drop");
    run(e, exec::insert::run, doc! {"insert": "gone", "documents": [{"_id": 7}]});
}

#[test]
fn applying_the_oplog_reproduces_the_data_and_is_idempotent() {
    let (pdir, sdir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (primary, secondary) = (node(pdir.path()), node(sdir.path()));
    workload(&primary);
    let entries = oplog(&primary);
    let position = secondary.store.apply(&entries).expect("apply");
    assert_eq!(position.optime, primary.store.position().optime);
    assert_eq!(contents(&secondary), contents(&primary));
    assert_eq!(oplog(&secondary), entries, "entries are stored verbatim");
    // A suffix applied again (a reconnect, or catch-up after a clone) changes nothing.
    secondary.store.apply(&entries[2..]).expect("apply again");
    assert_eq!(contents(&secondary), contents(&primary));
}

#[test]
fn rollback_restores_given_versions_and_truncates_the_oplog() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    run(&e, exec::insert::run, doc! {"insert": "a", "documents": [{"_id": 1, "v": 1}]});
    let common = e.store.position().optime;
    run(&e, exec::update::run, doc! {"update": "a", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 2}}}]});
    run(&e, exec::insert::run, doc! {"insert": "a", "documents": [{"_id": 2}]});
    let coll = e.store.collection("db.a").expect("collection");
    let v1 = Bytes::from(doc! {"_id": 1, "v": 1}.to_vec().expect("encode"));
    let versions = vec![(Arc::clone(&coll), bson::Bson::Int32(1), Some(v1)), (coll, bson::Bson::Int32(2), None)];
    let position = e.store.rollback_to(common, versions, Vec::new()).expect("rollback");
    assert_eq!(position.optime, common);
    assert_eq!(contents(&e)[0].2, vec![doc! {"_id": 1, "v": 1}]);
    assert_eq!(oplog(&e).len(), 2, "create + the first insert remain");
    assert!(e.store.position().optime > OpTime::ZERO);
}

#[test]
fn bookkeeping_records_replicate_and_roll_back() {
    let (pdir, sdir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (primary, secondary) = (node(pdir.path()), node(sdir.path()));
    primary.store.become_primary(1, std::time::Instant::now() + std::time::Duration::from_secs(60)).expect("primary");
    primary
        .store
        .write(|txn| {
            txn.put_meta(b"test/a".to_vec(), Some(b"1".to_vec()))?;
            txn.put_meta(b"test/b".to_vec(), Some(b"2".to_vec()))?;
            assert_eq!(txn.meta_records(b"test/")?.len(), 2, "staged records are visible");
            txn.put_meta(b"test/b".to_vec(), None)
        })
        .expect("write");
    secondary.store.apply(&oplog(&primary)).expect("apply");
    let records = secondary.store.meta_records(b"test/").expect("records");
    assert_eq!(records, vec![(Bytes::from_static(b"test/a"), Bytes::from_static(b"1"))]);
    let position = secondary.store.rollback_to(OpTime::ZERO, Vec::new(), vec![b"test/a".to_vec()]).expect("rollback");
    assert_eq!(position.optime, OpTime::ZERO);
    assert!(secondary.store.meta_records(b"test/").expect("records").is_empty());
}

#[test]
fn initial_sync_copies_the_replicated_bookkeeping_records_and_nothing_else() {
    use crate::store::keys;
    let (pdir, sdir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (source, member) = (node(pdir.path()), node(sdir.path()));
    workload(&source);
    let replicated = [keys::range_deletion_key(3), b"migdonor/m1".to_vec(), b"migrecv/m2".to_vec()];
    for key in &replicated {
        source.store.put_meta_replicated(key.clone(), Some(b"record".to_vec())).expect("record");
    }
    source.store.put_meta(keys::INITIAL_SYNC_KEY.to_vec(), Some(b"local".to_vec())).expect("local record");
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    super::initial_sync::produce_clone(&source.store, 1 << 20, &tx).expect("clone");
    drop(tx);
    let mut copied = Vec::new();
    while let Ok(chunk) = rx.try_recv() {
        let chunk = chunk.expect("chunk");
        copied.extend(chunk.meta_keys.into_iter().zip(chunk.meta_values));
    }
    let mut want: Vec<Vec<u8>> = replicated.to_vec();
    want.sort();
    let mut got: Vec<Vec<u8>> = copied.iter().map(|(k, _)| k.to_vec()).collect();
    got.sort();
    assert_eq!(got, want);
    super::initial_sync::put_meta_records(&member.store, copied).expect("store the copies");
    for prefix in keys::REPLICATED_META_PREFIXES {
        assert_eq!(
            member.store.meta_records(prefix).expect("records"),
            source.store.meta_records(prefix).expect("records")
        );
    }
    // A record of another kind in a clone is refused, not stored.
    let local = vec![(Bytes::from_static(keys::INITIAL_SYNC_KEY), Bytes::from_static(b"x"))];
    assert!(super::initial_sync::put_meta_records(&member.store, local).is_err());
}

/// A primary whose lease lapsed keeps its role for the grace period (a late renewal resumes its
/// writes without a step-down) and steps down once the grace is over.
#[test]
fn a_lapsed_lease_steps_down_only_after_the_grace_period() {
    use std::time::{Duration, Instant};

    use super::state::MemberState;
    use super::{Repl, lease_over};

    let now = Instant::now();
    let grace = Duration::from_millis(1000);
    assert!(!lease_over(now, now, grace), "just lapsed");
    assert!(!lease_over(now, now + Duration::from_millis(999), grace));
    assert!(lease_over(now, now + grace, grace));

    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.path().to_path_buf());
    let node = crate::open_node(&config).expect("open");
    let repl = Repl::new(
        "rs".into(),
        "m:1".into(),
        node.store.clone(),
        Default::default(),
        dir.path().join("rb"),
        false,
        node.metrics.repl.clone(),
    );
    let set = |until: Instant| {
        let mut inner = repl.lock();
        inner.state = MemberState::Primary;
        inner.lease_until = Some(until);
    };
    set(Instant::now() - Duration::from_millis(10));
    repl.step_down_if_lease_lapsed();
    assert_eq!(repl.lock().state, MemberState::Primary, "lapsed 10 ms ago: still primary, waiting for a renewal");
    set(Instant::now() - repl.lease_grace() - Duration::from_millis(1));
    repl.step_down_if_lease_lapsed();
    assert_eq!(repl.lock().state, MemberState::Secondary, "past the grace period: stepped down");
}

/// What the in-memory tail serves after a cursor is what storage holds after it, on a primary
/// and on a secondary that applied its entries, and nothing rolled back is served from it.
#[test]
fn the_oplog_tail_serves_what_storage_holds() {
    let (pdir, sdir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (primary, secondary) = (node(pdir.path()), node(sdir.path()));
    workload(&primary);
    secondary.store.apply(&oplog(&primary)).expect("apply");
    for e in [&primary, &secondary] {
        let stored = oplog(e);
        let mut served = 0;
        for (i, raw) in stored.iter().enumerate() {
            let doc = bson::RawDocument::from_bytes(raw).expect("entry");
            let ts = crate::store::oplog::EntryView::parse(doc).expect("parse").optime.timestamp();
            if let Some((entries, _)) = e.store.oplog_tail_after(ts, 1000, 1 << 30) {
                assert_eq!(entries, stored[i + 1..].to_vec());
                served += 1;
            }
        }
        assert_eq!(served, stored.len(), "a fresh store's tail holds its whole oplog");
    }
    let common = primary.store.position().optime;
    run(&primary, exec::insert::run, doc! {"insert": "a", "documents": [{"_id": 9}]});
    primary.store.rollback_to(common, Vec::new(), Vec::new()).expect("rollback");
    assert!(primary.store.oplog_tail_after(common.timestamp(), 1000, 1 << 30).is_none(), "rolled back: read storage");
    run(&primary, exec::insert::run, doc! {"insert": "a", "documents": [{"_id": 10}]});
    let newest = primary.store.position().optime.timestamp();
    assert_eq!(primary.store.oplog_tail_after(newest, 1000, 1 << 30).map(|(e, _)| e.len()), Some(0));
    assert!(primary.store.oplog_tail_after(common.timestamp(), 1000, 1 << 30).is_none());
}
