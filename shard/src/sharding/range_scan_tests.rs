//! The range walk against a real store in a temp dir: each path yields every document of the
//! range (compared with a filtered scan of the whole collection), resumes, and starts over when
//! the path changed between two batches.

use std::collections::BTreeSet;
use std::sync::Arc;

use bson::{Bson, Document, doc};
use proptest::prelude::*;
use shoal_proto::shard::CommandRequest;
use shoal_query::shard_key::{self, Missing};

use super::*;
use crate::error::ExecResult;
use crate::exec::{self, Node, Request};

fn node(dir: &std::path::Path) -> Arc<Node> {
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_node(&config).expect("open")
}

fn request(body: Document) -> CommandRequest {
    CommandRequest {
        request_id: "t".into(),
        db: "db".into(),
        body: body.to_vec().expect("encode").into(),
        ..Default::default()
    }
}

fn run(e: &Node, body: Document, f: fn(&Node, &Request<'_>) -> ExecResult<(Document, u64)>) {
    let raw = request(body);
    f(e, &Request::parse(&raw).expect("parse")).expect("command");
}

fn insert(e: &Node, docs: Vec<Bson>) {
    let raw = request(doc! { "insert": "c", "documents": docs });
    exec::insert::run(e, &Request::parse(&raw).expect("parse")).expect("insert");
}

/// 60 documents: `_id` i, `a` = (i * 7) % 30 (repeats), `b` i, and one without `a` (null key).
fn fill(e: &Node) {
    let mut docs: Vec<Bson> = (0..60).map(|i| Bson::Document(doc! {"_id": i, "a": (i * 7) % 30, "b": i})).collect();
    docs.push(Bson::Document(doc! {"_id": 60, "b": 60}));
    insert(e, docs);
}

fn index(e: &Node, key: Document, extra: Document) {
    let mut spec = doc! {"key": key, "name": "k"};
    spec.extend(extra);
    run(e, doc! {"createIndexes": "c", "indexes": [spec]}, exec::indexes::create_indexes);
}

fn drop_index(e: &Node) {
    run(e, doc! {"dropIndexes": "c", "index": "k"}, exec::indexes::drop_indexes);
}

fn field(name: &str, hashed: bool) -> Vec<KeyField> {
    vec![KeyField { name: name.into(), hashed }]
}

/// A bound at `v` (a hashed key's bounds are hash values, also i64).
fn bound(v: i64) -> ChunkBound {
    ChunkBound::Key(shard_key::of_values(&[&Bson::Int64(v)]))
}

fn coll(e: &Node) -> Arc<CollectionInfo> {
    e.store.collection("db.c").expect("collection")
}

fn in_range(key: &[KeyField], min: &ChunkBound, max: &ChunkBound, doc: &Document) -> bool {
    shard_key::of_document(key, doc, Missing::AsNull).is_ok_and(|k| {
        let k = ChunkBound::Key(k);
        *min <= k && k < *max
    })
}

/// `_id`s of the range's documents the walk yields, in batches of `batch`, and how many
/// candidates it read.
fn walk(e: &Node, key: &[KeyField], min: &ChunkBound, max: &ChunkBound, batch: usize) -> (BTreeSet<i32>, usize) {
    let coll = coll(e);
    let (mut ids, mut read, mut after): (BTreeSet<i32>, usize, Option<Bytes>) = (BTreeSet::new(), 0, None);
    loop {
        let mut n = 0;
        let mut last = None;
        for kv in candidates(&e.store, &coll, key, min, max, after.as_deref()) {
            let (pos, raw) = kv.expect("read");
            let doc = Document::from_reader(&mut &raw[..]).expect("doc");
            if in_range(key, min, max, &doc) {
                ids.insert(doc.get_i32("_id").expect("_id"));
            }
            n += 1;
            last = Some(pos);
            if n == batch {
                break;
            }
        }
        read += n;
        if n < batch {
            return (ids, read);
        }
        after = last;
    }
}

/// The `_id`s a scan of the whole collection finds in the range.
fn expected(e: &Node, key: &[KeyField], min: &ChunkBound, max: &ChunkBound) -> BTreeSet<i32> {
    e.store
        .scan(&coll(e), Bound::Unbounded, Bound::Unbounded, false)
        .map(|kv| Document::from_reader(&mut &kv.expect("read").1[..]).expect("doc"))
        .filter(|d| in_range(key, min, max, d))
        .map(|d| d.get_i32("_id").expect("_id"))
        .collect()
}

#[test]
fn the_path_follows_the_key_and_the_indexes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    fill(&e);
    assert_eq!(Path::choose(&coll(&e), &field("_id", false)), Path::Documents);
    assert_eq!(Path::choose(&coll(&e), &field("a", false)), Path::Collection);
    index(&e, doc! {"a": 1, "b": 1}, doc! {});
    let ident = coll(&e).index("k").expect("index").ident;
    assert_eq!(Path::choose(&coll(&e), &field("a", false)), Path::Index(ident));
    // A hashed key needs a hashed index; `{b: 1}` is not prefixed by `a`.
    assert_eq!(Path::choose(&coll(&e), &field("a", true)), Path::Collection);
    assert_eq!(Path::choose(&coll(&e), &field("b", false)), Path::Collection);
}

#[test]
fn sparse_partial_and_multikey_indexes_are_not_used() {
    for (extra, multikey) in
        [(doc! {"sparse": true}, false), (doc! {"partialFilterExpression": {"a": {"$gt": 3}}}, false), (doc! {}, true)]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = node(dir.path());
        fill(&e);
        if multikey {
            insert(&e, vec![Bson::Document(doc! {"_id": 100, "a": 1, "b": [1, 2]})]);
        }
        index(&e, doc! {"a": 1, "b": 1}, extra.clone());
        assert_eq!(Path::choose(&coll(&e), &field("a", false)), Path::Collection, "{extra}");
    }
}

#[test]
fn each_path_yields_the_range_and_reads_only_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    fill(&e);
    let (min, max) = (bound(10), bound(20));
    // {_id: 1}: the documents' own range, nothing else read.
    let (ids, read) = walk(&e, &field("_id", false), &min, &max, 3);
    assert_eq!(ids, (10..20).collect());
    assert_eq!(read, 10);
    // {a: 1} without an index: everything read.
    let key = field("a", false);
    let (ids, read) = walk(&e, &key, &min, &max, 7);
    assert_eq!(ids, expected(&e, &key, &min, &max));
    assert_eq!(read, 61);
    // With {a: 1, b: 1}: only the range's entries.
    index(&e, doc! {"a": 1, "b": 1}, doc! {});
    let (ids, read) = walk(&e, &key, &min, &max, 7);
    assert_eq!(ids, expected(&e, &key, &min, &max));
    assert_eq!(read, ids.len());
    // MinKey .. 0 holds the document without `a` (null sorts first) and nothing else below 0.
    let (ids, _) = walk(&e, &key, &ChunkBound::Min, &bound(0), 2);
    assert_eq!(ids, BTreeSet::from([60]));
    let (ids, _) = walk(&e, &key, &bound(25), &ChunkBound::Max, 2);
    assert_eq!(ids, expected(&e, &key, &bound(25), &ChunkBound::Max));
}

#[test]
fn a_hashed_key_reads_its_hashed_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    fill(&e);
    index(&e, doc! {"a": "hashed"}, doc! {});
    let key = field("a", true);
    for (lo, hi) in [(i64::MIN / 2, 0), (0, i64::MAX / 3), (-5, 5)] {
        let (min, max) = (bound(lo), bound(hi));
        let (ids, read) = walk(&e, &key, &min, &max, 4);
        assert_eq!(ids, expected(&e, &key, &min, &max));
        assert_eq!(read, ids.len());
    }
}

#[test]
fn a_position_from_another_path_starts_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = node(dir.path());
    fill(&e);
    let key = field("a", false);
    let (min, max) = (bound(0), bound(30));
    index(&e, doc! {"a": 1}, doc! {});
    // A first batch by the index, then the index is dropped: the next batch is the whole scan
    // from the start, so nothing the index had not yet yielded is missed.
    let coll0 = coll(&e);
    let first: Vec<(Bytes, Bytes)> =
        candidates(&e.store, &coll0, &key, &min, &max, None).take(5).map(|kv| kv.expect("read")).collect();
    drop_index(&e);
    let after = first.last().map(|(p, _)| p.clone());
    let rest = candidates(&e.store, &coll(&e), &key, &min, &max, after.as_deref()).count();
    assert_eq!(rest, 61);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_range_by_index_equals_the_filtered_scan(lo in -2i64..32, len in 0i64..34, batch in 1usize..9) {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = node(dir.path());
        fill(&e);
        index(&e, doc! {"a": 1, "b": -1}, doc! {});
        let key = field("a", false);
        let (min, max) = (bound(lo), bound(lo + len));
        let (ids, read) = walk(&e, &key, &min, &max, batch);
        prop_assert_eq!(&ids, &expected(&e, &key, &min, &max));
        prop_assert_eq!(read, ids.len());
    }
}
