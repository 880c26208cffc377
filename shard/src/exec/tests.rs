//! Executor tests without a network: commands run against a store in a temp dir.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;

use crate::exec::{self, Engine, Request};

fn engine(dir: &std::path::Path) -> std::sync::Arc<Engine> {
    let config = crate::ShardConfig::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_engine(&config).expect("open")
}

fn req(body: Document) -> CommandRequest {
    CommandRequest {
        request_id: "t".into(),
        db: "db".into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
    }
}

fn find(e: &Engine, body: Document) -> Vec<Document> {
    let r = req(body);
    let parsed = Request::parse(&r).expect("parse");
    let (batch, _) = exec::find::run(e, &parsed).expect("find");
    batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect()
}

fn write(
    e: &Engine,
    f: fn(&Engine, &Request<'_>) -> crate::error::ExecResult<(exec::WriteOutcome, u64)>,
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
        let e = engine(dir.path());
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
    let e = engine(dir.path());
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
    let e = engine(dir.path());
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
    let e = engine(dir.path());
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
