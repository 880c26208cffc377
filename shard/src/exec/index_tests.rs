//! Secondary indexes on one shard without a network: maintenance on every write, unique
//! checks, builds over existing data, planner use (checked through `explain`), multikey
//! deduplication across batches, replication of builds and drops to another store.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use super::tests::{node, req, write};
use crate::exec::{self, Node, Request};

fn command(
    e: &Node,
    f: fn(&Node, &Request<'_>) -> crate::error::ExecResult<(Document, u64)>,
    body: Document,
) -> crate::error::ExecResult<Document> {
    let r = req(body);
    f(e, &Request::parse(&r).expect("parse")).map(|(d, _)| d)
}

/// Every document a find returns, following the cursor with batches of `batch`.
fn find_all(e: &Node, mut body: Document, batch: i32) -> Vec<Document> {
    body.insert("batchSize", batch);
    let r = req(body);
    let (first, _) = exec::find::run(e, &Request::parse(&r).expect("parse")).expect("find");
    let mut out: Vec<Document> =
        first.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect();
    let mut id = first.cursor_id;
    while id != 0 {
        let (next, _) = exec::find::get_more(e, id, batch as usize, "db.c").expect("getMore");
        out.extend(next.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")));
        id = next.cursor_id;
    }
    out
}

fn explain(e: &Node, find: Document) -> Document {
    let r = req(doc! { "explain": find, "verbosity": "executionStats" });
    exec::explain::explain(e, &Request::parse(&r).expect("parse")).expect("explain")
}

/// The stage under FETCH, or the top stage.
fn scan_stage(explained: &Document) -> (String, Option<String>) {
    let mut stage = explained.get_document("queryPlanner").and_then(|q| q.get_document("winningPlan")).expect("plan");
    loop {
        let name = stage.get_str("stage").expect("stage");
        if name == "IXSCAN" || name == "COLLSCAN" || name == "IDHACK" || name == "CLUSTERED_IXSCAN" {
            return (name.to_owned(), stage.get_str("indexName").ok().map(str::to_owned));
        }
        stage = stage.get_document("inputStage").expect("input stage");
    }
}

fn ids(docs: &[Document]) -> Vec<i32> {
    docs.iter().map(|d| d.get_i32("_id").expect("int _id")).collect()
}

#[test]
fn writes_maintain_indexes_and_unique_ones_refuse_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let docs: Vec<Bson> = (0..20).map(|i| Bson::Document(doc! {"_id": i, "a": i * 10, "b": i % 3})).collect();
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": docs });
    let created = command(
        &e,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": true}, {"key": {"b": 1, "a": -1}}] },
    )
    .expect("create");
    assert_eq!(created.get_i32("numIndexesBefore").expect("before"), 1);
    assert_eq!(created.get_i32("numIndexesAfter").expect("after"), 3);

    let dup = write(&e, exec::insert::run, doc! { "insert": "c", "documents": [{"_id": 100, "a": 50}] });
    assert_eq!(dup.write_errors.len(), 1);
    assert_eq!(dup.write_errors[0].code, ErrorCode::DuplicateKey.code());
    assert!(dup.write_errors[0].errmsg.contains("index: a_1 dup key: { a: 50 }"), "{}", dup.write_errors[0].errmsg);
    // Moving a key frees the old one.
    write(&e, exec::update::run, doc! { "update": "c", "updates": [{"q": {"_id": 5}, "u": {"$set": {"a": 555}}}] });
    let ok = write(&e, exec::insert::run, doc! { "insert": "c", "documents": [{"_id": 100, "a": 50}] });
    assert!(ok.write_errors.is_empty());
    let clash =
        write(&e, exec::update::run, doc! { "update": "c", "updates": [{"q": {"_id": 6}, "u": {"$set": {"a": 555}}}] });
    assert_eq!(clash.write_errors[0].code, ErrorCode::DuplicateKey.code());
    write(&e, exec::delete::run, doc! { "delete": "c", "deletes": [{"q": {"_id": 100}, "limit": 1}] });

    let found = find_all(&e, doc! { "find": "c", "filter": {"a": {"$gte": 100, "$lt": 160}} }, 2);
    assert_eq!(ids(&found), vec![10, 11, 12, 13, 14, 15]);
    let ex = explain(&e, doc! { "find": "c", "filter": {"a": {"$gte": 100, "$lt": 160}} });
    assert_eq!(scan_stage(&ex), ("IXSCAN".into(), Some("a_1".into())));
    let stats = ex.get_document("executionStats").expect("stats");
    assert_eq!(stats.get_i64("nReturned").expect("n"), 6);
    assert_eq!(stats.get_i64("totalDocsExamined").expect("docs"), 6, "only the documents in bounds are read");
    assert!(find_all(&e, doc! { "find": "c", "filter": {"a": 50} }, 10).is_empty(), "deleted with its entry");
    assert_eq!(ids(&find_all(&e, doc! { "find": "c", "filter": {"a": 555} }, 10)), vec![5]);

    // Equality on b and the index's order on a (descending) serve the sort without sorting.
    let sorted = find_all(&e, doc! { "find": "c", "filter": {"b": 1}, "sort": {"a": -1} }, 3);
    assert_eq!(ids(&sorted), vec![19, 16, 13, 10, 7, 4, 1]);
    let ex = explain(&e, doc! { "find": "c", "filter": {"b": 1}, "sort": {"a": -1} });
    let plan = ex.get_document("queryPlanner").and_then(|q| q.get_document("winningPlan")).expect("plan");
    assert_eq!(plan.get_str("stage").expect("stage"), "FETCH", "no SORT stage: {plan}");
    let ex = explain(&e, doc! { "find": "c", "filter": {"zz": 1} });
    assert_eq!(scan_stage(&ex).0, "COLLSCAN");

    // An aggregation's leading $match + $sort read in index order (the $sort is skipped).
    let r = req(
        doc! { "aggregate": "c", "pipeline": [{"$match": {"b": 1}}, {"$sort": {"a": -1}}, {"$limit": 3}], "cursor": {} },
    );
    let (batch, _) = exec::aggregate::run(&e, &Request::parse(&r).expect("parse")).expect("aggregate");
    let docs: Vec<Document> =
        batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect();
    assert_eq!(ids(&docs), vec![19, 16, 13]);
}

fn regex(pattern: &str, options: &str) -> Bson {
    Bson::RegularExpression(bson::Regex {
        pattern: pattern.try_into().expect("no NUL"),
        options: options.try_into().expect("no NUL"),
    })
}

#[test]
fn anchored_regexes_scan_only_their_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let names = ["ab", "abc", "abd", "abz", "ac", "b", "aa", "ABC"];
    let docs: Vec<Bson> =
        names.iter().enumerate().map(|(i, n)| Bson::Document(doc! {"_id": i as i32, "n": *n, "m": *n})).collect();
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": docs });
    command(
        &e,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"n": 1}, "name": "n_1"}, {"key": {"m": -1}, "name": "m_-1"}] },
    )
    .expect("create");
    for field in ["n", "m"] {
        let mut filter = Document::new();
        filter.insert(field, regex("^ab", ""));
        let found = find_all(&e, doc! { "find": "c", "filter": filter.clone(), "sort": {"_id": 1} }, 2);
        assert_eq!(ids(&found), vec![0, 1, 2, 3], "{field}");
        let ex = explain(&e, doc! { "find": "c", "filter": filter.clone() });
        assert_eq!(scan_stage(&ex).0, "IXSCAN", "{ex}");
        let stats = ex.get_document("executionStats").expect("stats");
        assert_eq!(stats.get_i64("totalKeysExamined").expect("keys"), 4, "only the prefix's keys: {stats}");
    }
    let insensitive = doc! { "n": regex("^ab", "i") };
    assert_eq!(
        ids(&find_all(&e, doc! { "find": "c", "filter": insensitive.clone(), "sort": {"_id": 1} }, 10)),
        vec![0, 1, 2, 3, 7]
    );
    assert_eq!(scan_stage(&explain(&e, doc! { "find": "c", "filter": insensitive })).0, "COLLSCAN");
}

#[test]
fn multikey_indexes_return_each_document_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    command(
        &e,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"t": 1}, "name": "t_1"}] },
    )
    .expect("create");
    let docs: Vec<Bson> = (0..30).map(|i| Bson::Document(doc! {"_id": i, "t": [i, i + 1, i + 2, 100]})).collect();
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": docs });
    assert!(e.store.collection("db.c").expect("coll").indexes[0].multikey);
    // Every document has 100 >= 5; those with an element <= 9 match (through two elements).
    let filter = doc! {"t": {"$gte": 5, "$lte": 9}};
    let found = find_all(&e, doc! { "find": "c", "filter": filter.clone() }, 2);
    let mut got = ids(&found);
    got.sort();
    assert_eq!(got, (0..10).collect::<Vec<_>>(), "each once, across batches");
    let one = find_all(&e, doc! { "find": "c", "filter": {"t": {"$in": [5, 6, 101]}} }, 1);
    let mut got = ids(&one);
    got.sort();
    assert_eq!(got, vec![3, 4, 5, 6], "each once though two of its keys are in bounds");
    // Two ranges on a multikey field match through different elements: [1, 2, 3, 100] has
    // an element > 50 and one < 3.
    let both = find_all(&e, doc! { "find": "c", "filter": {"t": {"$gt": 50, "$lt": 3}} }, 5);
    assert_eq!(ids(&both), vec![0, 1, 2]);
    let ex = explain(&e, doc! { "find": "c", "filter": filter });
    assert_eq!(scan_stage(&ex).1.as_deref(), Some("t_1"));
    let parallel = write(&e, exec::insert::run, doc! { "insert": "c", "documents": [{"_id": 99, "t": 1}] });
    assert!(parallel.write_errors.is_empty());
}

#[test]
fn builds_index_existing_documents_and_fail_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    let docs: Vec<Bson> = (0..(3 * exec::index_build::BUILD_BATCH_DOCS as i32 + 7))
        .map(|i| Bson::Document(doc! {"_id": i, "k": i % 100, "u": i}))
        .collect();
    write(&e, exec::insert::run, doc! { "insert": "c", "documents": docs });
    let err = command(
        &e,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"k": 1}, "name": "k_1", "unique": true}] },
    )
    .expect_err("duplicates exist");
    assert_eq!(err.code, ErrorCode::DuplicateKey);
    let listed = command(&e, |e, r| exec::indexes::list_indexes(e, r).map(|d| (d, 0)), doc! { "listIndexes": "c" })
        .expect("list");
    let batch = listed.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("batch");
    assert_eq!(batch.len(), 1, "the failed build left no index: {batch:?}");
    command(
        &e,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"k": 1}, "name": "k_1"}] },
    )
    .expect("create");
    assert_eq!(find_all(&e, doc! { "find": "c", "filter": {"k": 42} }, 100).len(), 16);
    // Same spec again: a no-op; same name, other key: 86; same key, other name: 85.
    let again = command(
        &e,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"k": 1}, "name": "k_1"}] },
    )
    .expect("no-op");
    assert_eq!(again.get_str("note").expect("note"), "all indexes already exist");
    let conflict = |spec: Document| {
        command(&e, exec::indexes::create_indexes, doc! { "createIndexes": "c", "indexes": [spec] })
            .expect_err("conflict")
            .code
    };
    assert_eq!(conflict(doc! {"key": {"u": 1}, "name": "k_1"}), ErrorCode::IndexKeySpecsConflict);
    assert_eq!(conflict(doc! {"key": {"k": 1}, "name": "other"}), ErrorCode::IndexOptionsConflict);
    // Hints: the index by name or key, an unknown one refused.
    let hinted = find_all(&e, doc! { "find": "c", "filter": {"u": 7}, "hint": "k_1" }, 10);
    assert_eq!(ids(&hinted), vec![7]);
    let r = req(doc! { "find": "c", "filter": {}, "hint": {"nope": 1} });
    let e2 = exec::find::run(&e, &Request::parse(&r).expect("parse")).err().expect("bad hint");
    assert_eq!(e2.code, ErrorCode::BadValue);
    let dropped =
        command(&e, exec::indexes::drop_indexes, doc! { "dropIndexes": "c", "index": {"k": 1} }).expect("drop");
    assert_eq!(dropped.get_i32("nIndexesWas").expect("was"), 2);
    let missing =
        command(&e, exec::indexes::drop_indexes, doc! { "dropIndexes": "c", "index": "k_1" }).expect_err("gone");
    assert_eq!(missing.code, ErrorCode::IndexNotFound);
    let id = command(&e, exec::indexes::drop_indexes, doc! { "dropIndexes": "c", "index": "_id_" }).expect_err("_id");
    assert_eq!(id.code, ErrorCode::InvalidOptions);
    while e.store.purge_dropped().expect("purge") > 0 {}
    assert_eq!(
        e.store.index_scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false).count(),
        0,
        "entries of the failed build and the dropped index are purged"
    );
}

#[test]
fn builds_and_drops_replicate() {
    let (d1, d2) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (primary, member) = (node(d1.path()), node(d2.path()));
    let docs: Vec<Bson> = (0..50).map(|i| Bson::Document(doc! {"_id": i, "s": format!("v{}", i % 5)})).collect();
    write(&primary, exec::insert::run, doc! { "insert": "c", "documents": docs });
    command(
        &primary,
        exec::indexes::create_indexes,
        doc! { "createIndexes": "c", "indexes": [{"key": {"s": 1}, "name": "s_1", "partialFilterExpression": {"_id": {"$gte": 10}}}] },
    )
    .expect("create");
    write(&primary, exec::insert::run, doc! { "insert": "c", "documents": [{"_id": 60, "s": "v1"}] });
    let entries: Vec<bytes::Bytes> =
        primary.store.oplog_after(bson::Timestamp { time: 0, increment: 0 }).map(|kv| kv.expect("kv").1).collect();
    member.store.apply(&entries).expect("apply");
    let filter = doc! {"s": "v1", "_id": {"$gte": 10}};
    let on_member = find_all(&member, doc! { "find": "c", "filter": filter.clone(), "sort": {"_id": 1} }, 3);
    assert_eq!(ids(&on_member), vec![11, 16, 21, 26, 31, 36, 41, 46, 60]);
    let ex = explain(&member, doc! { "find": "c", "filter": filter });
    assert_eq!(scan_stage(&ex).1.as_deref(), Some("s_1"), "the member built the index: {ex}");
    let stats = ex.get_document("executionStats").expect("stats");
    assert_eq!(stats.get_i64("totalKeysExamined").expect("keys"), 9);
    let before = primary.store.oplog_last().expect("last");
    command(&primary, exec::indexes::drop_indexes, doc! { "dropIndexes": "c", "index": "*" }).expect("drop");
    let more: Vec<bytes::Bytes> = primary.store.oplog_after(before).map(|kv| kv.expect("kv").1).collect();
    member.store.apply(&more).expect("apply");
    assert!(member.store.collection("db.c").expect("coll").indexes.is_empty());
}
