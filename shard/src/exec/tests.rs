//! Executor tests without a network: commands run against a store in a temp dir.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;

use crate::exec::{self, Node, Request};

pub(super) fn node(dir: &std::path::Path) -> std::sync::Arc<Node> {
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_node(&config).expect("open")
}

pub(super) fn req(body: Document) -> CommandRequest {
    CommandRequest {
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
    }
}

fn find(e: &Node, body: Document) -> Vec<Document> {
    let r = req(body);
    let parsed = Request::parse(&r).expect("parse");
    let (batch, _) = exec::find::run(e, &parsed).expect("find");
    batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect()
}

pub(super) fn write(
    e: &Node,
    f: fn(&Node, &Request<'_>) -> crate::error::ExecResult<(exec::WriteOutcome, u64)>,
    body: Document,
) -> exec::WriteOutcome {
    let r = req(body);
    let parsed = Request::parse(&r).expect("parse");
    f(e, &parsed).expect("write").0
}

#[test]
fn crud_round_trip_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let e = node(dir.path());
        let out = write(
            &e,
            exec::insert::run,
            doc! { "insert": "c", "documents": [{"_id": 1, "a": 1}, {"a": 2}, {"_id": 1}, {"_id": 3}] },
        );
        assert_eq!(out.n, 2, "ordered insert stops at the duplicate");
        assert_eq!(out.write_errors.len(), 1);
        assert_eq!(out.write_errors[0].code, ErrorCode::DuplicateKey.code());
        let out = write(
            &e,
            exec::update::run,
            doc! { "update": "c", "updates": [{"q": {"a": {"$gte": 1}}, "u": {"$inc": {"a": 10}}, "multi": true}] },
        );
        assert_eq!((out.n, out.n_modified), (2, 2));
        let out = write(
            &e,
            exec::update::run,
            doc! { "update": "c", "updates": [{"q": {"_id": 9}, "u": {"$set": {"b": 1}}, "upsert": true}] },
        );
        assert_eq!(out.upserted.len(), 1);
        let out = write(&e, exec::delete::run, doc! { "delete": "c", "deletes": [{"q": {"a": 12}, "limit": 1}] });
        assert_eq!(out.n, 1);
        e.store.shutdown();
    }
    let e = node(dir.path());
    let docs = find(&e, doc! { "find": "c", "sort": {"_id": 1} });
    assert_eq!(docs, vec![doc! {"_id": 1, "a": 11}, doc! {"_id": 9, "b": 1}]);
    // The oplog holds one entry per change, in order, with MongoDB's fields.
    let ops: Vec<String> = e
        .store
        .oplog_after(bson::Timestamp { time: 0, increment: 0 })
        .map(|kv| {
            Document::from_reader(&mut &kv.expect("kv").1[..]).expect("entry").get_str("op").expect("op").to_owned()
        })
        .collect();
    assert_eq!(ops, vec!["c", "i", "i", "u", "u", "i", "d"]);
}

#[test]
fn cursors_resume_scans_across_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let docs: Vec<Bson> = (0..50).map(|i| Bson::Document(doc! {"_id": i, "even": i % 2 == 0})).collect();
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": docs });
    let r = req(doc! { "find": "c", "filter": {"even": true}, "batchSize": 4, "skip": 1 });
    let (first, _) = exec::find::run(&e, &Request::parse(&r).expect("parse")).expect("find");
    assert_eq!(first.documents.len(), 4);
    let mut total = first.documents.len();
    let mut id = first.cursor_id;
    while id != 0 {
        let (batch, _) = exec::find::get_more(&e, id, 3, "db.c").expect("getMore");
        total += batch.documents.len();
        id = batch.cursor_id;
    }
    assert_eq!(total, 24);
    assert_eq!(exec::find::get_more(&e, 12345, 1, "db.c").err().map(|e| e.code), Some(ErrorCode::CursorNotFound));
}

#[test]
fn bad_arguments_get_mongodb_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": [{"_id": 1, "s": "x"}] });
    let r = req(doc! { "find": "c", "sort": 5 });
    assert_eq!(
        exec::find::run(&e, &Request::parse(&r).expect("parse")).err().map(|e| e.code),
        Some(ErrorCode::TypeMismatch)
    );
    let out = write(&e, exec::update::run, doc! { "update": "c", "updates": [{"q": {}, "u": {"$inc": {"s": 1}}}] });
    assert_eq!(out.write_errors[0].code, ErrorCode::TypeMismatch.code());
    let out = write(&e, exec::update::run, doc! { "update": "c", "updates": [{"q": {}, "u": {"$bogus": {"s": 1}}}] });
    assert_eq!(out.write_errors[0].code, ErrorCode::FailedToParse.code());
    let r = req(doc! { "find": "c", "filter": {"a": {"$bogus": 1}} });
    assert_eq!(
        exec::find::run(&e, &Request::parse(&r).expect("parse")).err().map(|e| e.code),
        Some(ErrorCode::BadValue)
    );
    let r = req(doc! { "find": "c", "skip": -1 });
    assert!(exec::find::run(&e, &Request::parse(&r).expect("parse")).is_err());
    let out = write(&e, exec::insert::run, doc! { "insert": "c", "documents": [{"_id": [1]}] });
    assert_eq!(out.write_errors[0].code, ErrorCode::InvalidIdField.code());
}

/// An ownership of `[MinKey, {a: 5})` on shard key `{a: 1}`.
fn owns_below_five() -> std::sync::Arc<crate::sharding::Ownership> {
    use shoal_proto::catalog::{ChunkBound, ChunkVersion, Epoch, PlacementVersion, Timestamp};
    let five = ChunkBound::Key(shoal_query::shard_key::of_values(&[&Bson::Int32(5)]));
    let version = PlacementVersion {
        epoch: Epoch([1; 12]),
        timestamp: Timestamp { secs: 1, inc: 0 },
        version: ChunkVersion::new(1, 0),
    };
    let key = vec![shoal_query::shard_key::KeyField { name: "a".into(), hashed: false }];
    std::sync::Arc::new(crate::sharding::Ownership::new("db.c", key, version, vec![(ChunkBound::Min, five)]))
}

/// Runs `f` as a versioned request owning `owned`.
fn versioned<T>(
    e: &Node,
    owned: &std::sync::Arc<crate::sharding::Ownership>,
    body: Document,
    f: impl FnOnce(&Node, &Request<'_>) -> crate::error::ExecResult<T>,
) -> crate::error::ExecResult<T> {
    let r = req(body);
    let mut parsed = Request::parse(&r).expect("parse");
    parsed.ownership = Some(std::sync::Arc::clone(owned));
    f(e, &parsed)
}

fn docs_of(batch: &exec::find::Batch) -> Vec<Document> {
    batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect()
}

fn ten_docs(e: &Node) {
    let docs: Vec<Bson> = (0..10).map(|i| Bson::Document(doc! {"_id": i, "a": i})).collect();
    write(e, exec::insert::run, doc! { "insert": "c", "documents": docs });
}

#[test]
fn orphans_are_hidden_from_versioned_reads_and_visible_to_unversioned_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    ten_docs(&e);
    let owned = owns_below_five();

    assert_eq!(find(&e, doc! { "find": "c" }).len(), 10);
    let (batch, _) = versioned(&e, &owned, doc! { "find": "c" }, exec::find::run).expect("find");
    assert_eq!(docs_of(&batch).iter().map(|d| d.get_i32("a").expect("a")).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    // Sorted (buffered) finds, point reads and getMores filter too.
    let (batch, _) = versioned(&e, &owned, doc! { "find": "c", "sort": {"a": -1} }, exec::find::run).expect("find");
    assert_eq!(docs_of(&batch).len(), 5);
    let (batch, _) = versioned(&e, &owned, doc! { "find": "c", "filter": {"_id": 7} }, exec::find::run).expect("find");
    assert!(batch.documents.is_empty());
    let (first, _) = versioned(&e, &owned, doc! { "find": "c", "batchSize": 2 }, exec::find::run).expect("find");
    let mut total = first.documents.len();
    let mut id = first.cursor_id;
    while id != 0 {
        let (batch, _) = exec::find::get_more(&e, id, 2, "db.c").expect("getMore");
        total += batch.documents.len();
        id = batch.cursor_id;
    }
    assert_eq!(total, 5);

    let count = versioned(&e, &owned, doc! { "count": "c" }, exec::count::count).expect("count");
    assert_eq!(count.get_i32("n").expect("n"), 5);
    let count = exec::count::count(&e, &Request::parse(&req(doc! { "count": "c" })).expect("parse")).expect("count");
    assert_eq!(count.get_i32("n").expect("n"), 10);
    let distinct =
        versioned(&e, &owned, doc! { "distinct": "c", "key": "a" }, exec::count::distinct).expect("distinct");
    assert_eq!(distinct.get_array("values").expect("values").len(), 5);
    let agg = doc! { "aggregate": "c", "pipeline": [{"$match": {"a": {"$gte": 3}}}], "cursor": {} };
    let (batch, _) = versioned(&e, &owned, agg.clone(), exec::aggregate::run).expect("aggregate");
    assert_eq!(docs_of(&batch).len(), 2);
    let (batch, _) = exec::aggregate::run(&e, &Request::parse(&req(agg)).expect("parse")).expect("aggregate");
    assert_eq!(docs_of(&batch).len(), 7);
}

#[test]
fn versioned_writes_skip_orphans_and_keep_the_shard_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    ten_docs(&e);
    let owned = owns_below_five();

    let multi = doc! { "update": "c", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "multi": true}] };
    let (out, _) = versioned(&e, &owned, multi, exec::update::run).expect("update");
    assert_eq!((out.n, out.n_modified), (5, 5));
    assert_eq!(find(&e, doc! { "find": "c", "filter": {"x": 1} }).len(), 5);
    let single = doc! { "update": "c", "updates": [{"q": {"a": 7}, "u": {"$set": {"y": 1}}}] };
    let (out, _) = versioned(&e, &owned, single, exec::update::run).expect("update");
    assert_eq!(out.n, 0, "an orphan is not matched");

    let fam = doc! { "findAndModify": "c", "query": {"a": 8}, "remove": true };
    let (reply, _) = versioned(&e, &owned, fam, exec::find_and_modify::run).expect("findAndModify");
    assert_eq!(reply.get("value"), Some(&Bson::Null));

    let change_key = doc! { "update": "c", "updates": [{"q": {"a": 1}, "u": {"$set": {"a": 2}}}] };
    let (out, _) = versioned(&e, &owned, change_key.clone(), exec::update::run).expect("update");
    assert_eq!(out.write_errors.len(), 1);
    assert_eq!(out.write_errors[0].code, ErrorCode::ImmutableField.code());
    assert!(out.write_errors[0].errmsg.contains("(immutable) field 'a'"), "{}", out.write_errors[0].errmsg);
    // Unversioned, the shard key is just a field.
    assert_eq!(write(&e, exec::update::run, change_key).n_modified, 1);

    let upsert = doc! { "update": "c", "updates": [{"q": {"_id": 100}, "u": {"$set": {"z": 1}}, "upsert": true}] };
    let (out, _) = versioned(&e, &owned, upsert, exec::update::run).expect("update");
    assert_eq!(out.write_errors[0].code, ErrorCode::ShardKeyNotFound.code());

    let (out, _) = versioned(&e, &owned, doc! { "delete": "c", "deletes": [{"q": {}, "limit": 0}] }, exec::delete::run)
        .expect("delete");
    assert_eq!(out.n, 5);
    let left: Vec<i32> =
        find(&e, doc! { "find": "c", "sort": {"a": 1} }).iter().map(|d| d.get_i32("a").expect("a")).collect();
    assert_eq!(left, vec![5, 6, 7, 8, 9], "the orphans are still there");
}

#[test]
fn split_vector_and_data_size_over_a_key_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let docs: Vec<Bson> = (0..100).map(|i| Bson::Document(doc! {"_id": i, "k": i * 10, "h": i})).collect();
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": docs });
    let run = |f: fn(&Node, &Request<'_>) -> crate::error::ExecResult<Document>, body: Document| {
        let r = req(body);
        f(&e, &Request::parse(&r).expect("parse"))
    };
    let median = run(
        exec::split_vector::split_vector,
        doc! { "splitVector": "db.c", "keyPattern": {"k": 1}, "min": {"k": 100}, "max": {"k": 300}, "force": true },
    )
    .expect("splitVector");
    assert_eq!(median, doc! { "splitKeys": [{"k": 200}] }, "median of k in [100, 300)");
    let by_size = run(
        exec::split_vector::split_vector,
        doc! { "splitVector": "db.c", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1000_i64 },
    )
    .expect("splitVector");
    let points = by_size.get_array("splitKeys").expect("splitKeys");
    assert!(points.len() >= 4, "about 3 kB of documents cut every 500 B: {by_size}");
    let hashed = run(
        exec::split_vector::split_vector,
        doc! { "splitVector": "db.c", "keyPattern": {"h": "hashed"}, "force": true },
    )
    .expect("splitVector");
    let point = hashed.get_array("splitKeys").expect("splitKeys")[0].as_document().expect("doc").clone();
    assert!(matches!(point.get("h"), Some(Bson::Int64(_))), "hashed points are NumberLong: {point}");
    let size = run(
        exec::split_vector::data_size,
        doc! { "dataSize": "db.c", "keyPattern": {"k": 1}, "min": {"k": 0}, "max": {"k": 500} },
    )
    .expect("dataSize");
    assert_eq!(size.get_i64("numObjects").expect("numObjects"), 50);
    assert!(size.get_i64("size").expect("size") > 50 * 20);
    let err = run(exec::split_vector::split_vector, doc! { "splitVector": "db.c", "keyPattern": {"k": 1} })
        .expect_err("neither force nor a size");
    assert_eq!(err.code, ErrorCode::BadValue);
    let err =
        run(exec::split_vector::split_vector, doc! { "splitVector": "db.c", "keyPattern": {"k": -1}, "force": true })
            .expect_err("descending key");
    assert_eq!(err.code, ErrorCode::BadValue);
}
