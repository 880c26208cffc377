//! Retryable writes without a network: the same statement sent twice runs once.

use bson::{Binary, Bson, Document, doc, spec::BinarySubtype};
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;

use crate::exec::{self, Node, Request};

fn node(dir: &std::path::Path) -> std::sync::Arc<Node> {
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_node(&config).expect("open")
}

fn lsid(n: u8) -> Document {
    doc! { "id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![n; 16] } }
}

fn with_session(mut body: Document, session: u8, txn: i64) -> Document {
    body.insert("lsid", lsid(session));
    body.insert("txnNumber", txn);
    body
}

type WriteFn = fn(&Node, &Request<'_>) -> crate::error::ExecResult<(exec::WriteOutcome, u64)>;

fn write(e: &Node, f: WriteFn, body: Document) -> crate::error::ExecResult<exec::WriteOutcome> {
    let r = CommandRequest { db: "db".into(), body: body.to_vec().expect("encode").into(), ..Default::default() };
    let parsed = Request::parse(&r).expect("parse");
    f(e, &parsed).map(|(o, _)| o)
}

fn docs(e: &Node) -> Vec<Document> {
    let r = CommandRequest {
        db: "db".into(),
        body: doc! {"find": "c", "sort": {"_id": 1}}.to_vec().expect("encode").into(),
        ..Default::default()
    };
    let (batch, _) = exec::find::run(e, &Request::parse(&r).expect("parse")).expect("find");
    batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect()
}

#[test]
fn a_retried_statement_runs_once_and_answers_as_the_first_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let insert = with_session(doc! {"insert": "c", "documents": [{"_id": 1, "v": 0}, {"_id": 2, "v": 0}]}, 1, 1);
    assert_eq!(write(&e, exec::insert::run, insert.clone()).expect("insert").n, 2);
    let again = write(&e, exec::insert::run, insert).expect("retry");
    assert_eq!((again.n, again.write_errors.len()), (2, 0), "a retried insert succeeds without a duplicate");

    let inc = with_session(
        doc! {"update": "c", "updates": [
            {"q": {"_id": 1}, "u": {"$inc": {"v": 1}}},
            {"q": {"_id": 9}, "u": {"$set": {"v": 9}}, "upsert": true},
        ]},
        1,
        2,
    );
    for _ in 0..3 {
        let out = write(&e, exec::update::run, inc.clone()).expect("update");
        assert_eq!((out.n, out.n_modified), (2, 1));
        assert_eq!(out.upserted, vec![(1, Bson::Int32(9))]);
    }
    assert_eq!(docs(&e), vec![doc! {"_id": 1, "v": 1}, doc! {"_id": 2, "v": 0}, doc! {"_id": 9, "v": 9}]);

    let delete = with_session(doc! {"delete": "c", "deletes": [{"q": {"v": {"$gte": 0}}, "limit": 1}]}, 1, 3);
    for _ in 0..2 {
        assert_eq!(write(&e, exec::delete::run, delete.clone()).expect("delete").n, 1);
    }
    assert_eq!(docs(&e).len(), 2, "the retried delete removed nothing more");
}

#[test]
fn stmt_ids_name_statements_across_split_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let mut first = with_session(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 3}]}, 2, 7);
    first.insert("stmtIds", vec![Bson::Int32(0), Bson::Int32(2)]);
    write(&e, exec::insert::run, first).expect("insert");
    // The whole batch again, as a router would resend it: statements 0 and 2 ran, 1 and 3 did not.
    let mut again =
        with_session(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 3}, {"_id": 4}]}, 2, 7);
    again.insert("stmtIds", vec![Bson::Int32(0), Bson::Int32(1), Bson::Int32(2), Bson::Int32(3)]);
    let out = write(&e, exec::insert::run, again).expect("insert");
    assert_eq!((out.n, out.write_errors.len()), (4, 0));
    assert_eq!(docs(&e).len(), 4);
    let mut bad = with_session(doc! {"insert": "c", "documents": [{"_id": 5}]}, 2, 8);
    bad.insert("stmtIds", vec![Bson::Int32(0), Bson::Int32(1)]);
    assert_eq!(write(&e, exec::insert::run, bad).err().map(|e| e.code), Some(ErrorCode::BadValue));
}

#[test]
fn older_transaction_numbers_are_refused_and_newer_ones_replace_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    write(&e, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 1}]}, 3, 5)).expect("insert");
    write(&e, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 2}]}, 3, 6)).expect("insert");
    let old = write(&e, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 1}]}, 3, 5));
    assert_eq!(old.err().map(|e| e.code), Some(ErrorCode::TransactionTooOld));
    let again = write(&e, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 2}]}, 3, 6));
    assert_eq!(again.expect("retry of the newest").write_errors.len(), 0);
    // Transaction 7 reuses statement id 0: transaction 6's record no longer answers for it.
    write(&e, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 4}]}, 3, 7)).expect("insert");
    let records = e.store.meta_records(crate::exec::retry::RECORD_PREFIX).expect("records");
    assert_eq!(records.len(), 1, "one record per statement id of the session");
    // Another session is independent.
    write(&e, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 3}]}, 4, 1)).expect("insert");
    let multi =
        with_session(doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "multi": true}]}, 4, 2);
    let out = write(&e, exec::update::run, multi).expect("update");
    assert_eq!(out.write_errors.first().map(|w| w.code), Some(ErrorCode::InvalidOptions.code()));
}

#[test]
fn find_and_modify_retries_return_the_first_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    write(&e, exec::insert::run, doc! {"insert": "c", "documents": [{"_id": 1, "v": 1}]}).expect("insert");
    let body =
        with_session(doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"v": 1}}, "new": true}, 5, 1);
    let r = CommandRequest { db: "db".into(), body: body.to_vec().expect("encode").into(), ..Default::default() };
    let first = exec::find_and_modify::run(&e, &Request::parse(&r).expect("parse")).expect("fam").0;
    let second = exec::find_and_modify::run(&e, &Request::parse(&r).expect("parse")).expect("fam").0;
    assert_eq!(first, second);
    assert_eq!(first.get_document("value").expect("value"), &doc! {"_id": 1, "v": 2});
    assert_eq!(docs(&e), vec![doc! {"_id": 1, "v": 2}]);
}

#[test]
fn records_replicate_with_their_writes_and_merge_into_a_recipient() {
    let (pdir, sdir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (primary, secondary) = (node(pdir.path()), node(sdir.path()));
    write(&primary, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 1}]}, 6, 1))
        .expect("insert");
    let entries: Vec<bytes::Bytes> =
        primary.store.oplog_after(bson::Timestamp { time: 0, increment: 0 }).map(|kv| kv.expect("kv").1).collect();
    assert_eq!(entries.len(), 2, "create + the insert, which carries its record");
    secondary.store.apply(&entries).expect("apply");
    let records = |e: &Node| {
        let mut all = e.store.meta_records(crate::exec::retry::RECORD_PREFIX).expect("records");
        all.extend(e.store.meta_records(crate::exec::retry::HEAD_PREFIX).expect("heads"));
        all
    };
    assert_eq!(records(&secondary), records(&primary));
    // A migration of db.c carries them to a recipient with an older transaction of the session.
    let rdir = tempfile::tempdir().expect("tempdir");
    let recipient = node(rdir.path());
    write(&recipient, exec::insert::run, with_session(doc! {"insert": "d", "documents": [{"_id": 1}]}, 6, 0))
        .expect("insert");
    let moved = crate::exec::retry::records_of(&primary.store, "db.c").expect("records of");
    assert_eq!(moved.len(), 2, "the head and the statement");
    recipient.store.write(|txn| crate::exec::retry::merge(txn, &moved)).expect("merge");
    assert_eq!(records(&recipient), records(&primary));
    let again =
        write(&recipient, exec::insert::run, with_session(doc! {"insert": "c", "documents": [{"_id": 1}]}, 6, 1))
            .expect("retry on the recipient");
    assert_eq!(again.n, 1);
    assert!(docs(&recipient).is_empty(), "the retry found the donor's record instead of inserting");
}

/// A router re-targeting part of a command (after StaleConfig, say) resends some statements of a
/// transaction number the shard has seen: those that ran answer from their records, the others
/// run. A transaction number the shard has not seen runs every statement, even where a record of
/// an older one has the same statement id.
#[test]
fn a_resent_part_of_a_command_runs_only_what_did_not_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let first = with_session(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}], "stmtIds": [0, 1]}, 8, 1);
    assert_eq!(write(&e, exec::insert::run, first).expect("insert").n, 2);
    let part = with_session(doc! {"insert": "c", "documents": [{"_id": 2}, {"_id": 3}], "stmtIds": [1, 2]}, 8, 1);
    let out = write(&e, exec::insert::run, part).expect("resent part");
    assert_eq!((out.n, out.write_errors.len()), (2, 0), "statement 1 answered from its record, 2 ran");
    let next = with_session(doc! {"insert": "c", "documents": [{"_id": 2}], "stmtIds": [1]}, 8, 2);
    let out = write(&e, exec::insert::run, next).expect("next txn");
    assert_eq!(out.write_errors.iter().map(|w| w.code).collect::<Vec<_>>(), vec![ErrorCode::DuplicateKey.code()]);
    assert_eq!(docs(&e).len(), 3);
}
