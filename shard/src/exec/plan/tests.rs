use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document, doc};
use shoal_proto::Namespace;

use super::*;
use crate::store::indexes::IndexSpec;

fn coll(indexes: &[Document]) -> CollectionInfo {
    let indexes = indexes
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut s = IndexSpec::from_user(spec).expect("valid spec");
            s.ident = 100 + i as u64;
            Arc::new(s)
        })
        .collect();
    CollectionInfo {
        id: 7,
        ns: Namespace::new("d", "c").expect("valid"),
        uuid: bson::Uuid::new(),
        options: doc! {},
        indexes,
    }
}

/// The path chosen with no sort and no hint.
fn choose(c: &CollectionInfo, filter: &Document) -> AccessPath {
    plan(c, filter, None, None).expect("plan").path
}

fn index_name(p: &Plan) -> Option<&str> {
    match &p.path {
        AccessPath::Index(s) => Some(s.spec.name.as_str()),
        _ => None,
    }
}

#[test]
fn chooses_id_paths() {
    let c = coll(&[]);
    assert_eq!(choose(&c, &doc! {"_id": 5}), AccessPath::Point(Bson::Int32(5)));
    assert_eq!(choose(&c, &doc! {"_id": {"$eq": "x"}}), AccessPath::Point(Bson::String("x".into())));
    assert_eq!(choose(&c, &doc! {"a": 1}), AccessPath::full());
    assert_eq!(choose(&c, &doc! {"_id": {"$in": [1, 2]}}), AccessPath::full());
    match choose(&c, &doc! {"_id": {"$gte": 1, "$lt": 9}}) {
        AccessPath::Range { lower: Bound::Included(_), upper: Bound::Excluded(_) } => {}
        other => panic!("unexpected {other:?}"),
    }
    // A subdocument equality is a point too (documents are valid _id values).
    assert_eq!(choose(&c, &doc! {"_id": {"a": 1}}), AccessPath::Point(Bson::Document(doc! {"a": 1})));
    assert!(path_implies_filter(&AccessPath::Point(Bson::Int32(5)), &doc! {"_id": 5}));
    assert!(!path_implies_filter(&AccessPath::Point(Bson::Int32(5)), &doc! {"_id": 5, "a": 1}));
    assert!(!path_implies_filter(&AccessPath::Point(Bson::Int32(1)), &doc! {"$and": [{"_id": 1}, {"a": 2}]}));
}

#[test]
fn prefers_the_index_pinned_by_most_equalities() {
    let c = coll(&[doc! {"key": {"a": 1}}, doc! {"key": {"a": 1, "b": 1}}, doc! {"key": {"c": 1}}]);
    let p = plan(&c, &doc! {"a": 1, "b": 2}, None, None).expect("plan");
    assert_eq!(index_name(&p), Some("a_1_b_1"));
    assert_eq!(p.rejected.len(), 1, "a_1 was a candidate too");
    let p = plan(&c, &doc! {"c": {"$gt": 5}}, None, None).expect("plan");
    assert_eq!(index_name(&p), Some("c_1"));
    let p = plan(&c, &doc! {"d": 1}, None, None).expect("plan");
    assert_eq!(index_name(&p), None, "no index bounds d: collection scan");
    let p = plan(&c, &doc! {"_id": 3, "a": 1}, None, None).expect("plan");
    assert_eq!(p.path, AccessPath::Point(Bson::Int32(3)));
    let p = plan(&c, &doc! {"a": {"$in": [3, 1, 2]}}, None, None).expect("plan");
    match &p.path {
        AccessPath::Index(s) => assert_eq!(s.intervals.len(), 3),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn uses_indexes_for_sort() {
    let c = coll(&[doc! {"key": {"a": 1, "b": -1}}]);
    let p = plan(&c, &doc! {}, Some(&doc! {"a": -1, "b": 1}), None).expect("plan");
    assert_eq!(index_name(&p), Some("a_1_b_-1"));
    assert!(p.sorted && p.reverse);
    let p = plan(&c, &doc! {"a": 5}, Some(&doc! {"b": -1}), None).expect("plan");
    assert!(p.sorted && !p.reverse, "a pinned: b order follows the index");
    let p = plan(&c, &doc! {}, Some(&doc! {"b": 1}), None).expect("plan");
    assert!(!p.sorted, "b alone is not in index order");
    assert_eq!(index_name(&p), None);
}

#[test]
fn sparse_and_partial_indexes_only_when_safe() {
    let c = coll(&[
        doc! {"key": {"s": 1}, "sparse": true},
        doc! {"key": {"p": 1}, "partialFilterExpression": {"q": {"$gt": 5}}},
    ]);
    assert_eq!(index_name(&plan(&c, &doc! {"s": 3}, None, None).expect("plan")), Some("s_1"));
    assert_eq!(index_name(&plan(&c, &doc! {"s": null}, None, None).expect("plan")), None);
    assert_eq!(index_name(&plan(&c, &doc! {"p": 1, "q": {"$gt": 10}}, None, None).expect("plan")), Some("p_1"));
    assert_eq!(index_name(&plan(&c, &doc! {"p": 1, "q": {"$gt": 5}}, None, None).expect("plan")), Some("p_1"));
    assert_eq!(index_name(&plan(&c, &doc! {"p": 1, "q": 3}, None, None).expect("plan")), None);
    assert_eq!(index_name(&plan(&c, &doc! {"p": 1}, None, None).expect("plan")), None);
}

#[test]
fn hints_force_or_fail() {
    let c = coll(&[doc! {"key": {"a": 1}}]);
    let p = plan(&c, &doc! {"b": 1}, None, Some(&Bson::String("a_1".into()))).expect("plan");
    assert_eq!(index_name(&p), Some("a_1"));
    let p = plan(&c, &doc! {"a": 1}, None, Some(&Bson::Document(doc! {"$natural": -1}))).expect("plan");
    assert_eq!(p.path, AccessPath::full());
    assert!(p.reverse);
    let e = plan(&c, &doc! {}, None, Some(&Bson::String("nope".into()))).expect_err("unknown index");
    assert_eq!(e.code, shoal_proto::ErrorCode::BadValue);
}

#[test]
fn multikey_ranges_use_one_side() {
    let mut c = coll(&[doc! {"key": {"a": 1}}]);
    let mut spec = (*c.indexes[0]).clone();
    spec.multikey = true;
    c.indexes[0] = Arc::new(spec);
    let p = plan(&c, &doc! {"a": {"$gt": 3, "$lt": 5}}, None, None).expect("plan");
    let AccessPath::Index(s) = &p.path else { panic!("index expected") };
    let mut key = 100u64.to_be_bytes().to_vec();
    key.extend(shoal_query::keystring::encode(&Bson::Int32(10)));
    key.extend(shoal_query::keystring::encode(&Bson::Int32(1)));
    assert!(s.contains(&key), "[1, 10] matches through two elements: 10 must be in bounds");
}
