//! Unit tests of find projections and of the `$project`/`$addFields`/`$unset` dialects.

use super::*;
use bson::doc;

fn project(spec: Document, d: Document) -> Document {
    Projection::parse(&spec).unwrap().apply(&d).unwrap()
}

fn keys(d: &Document) -> Vec<&str> {
    d.keys().map(String::as_str).collect()
}

fn sample() -> Document {
    doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "e": [1, 2, 3, 4, 5]}
}

#[test]
fn empty_spec_keeps_everything() {
    let p = Projection::parse(&doc! {}).unwrap();
    assert!(p.is_identity());
    assert_eq!(p.apply(&sample()).unwrap(), sample());
}

#[test]
fn inclusion_keeps_id_and_document_order() {
    assert_eq!(project(doc! {"e": 1, "a": true}, sample()), doc! {"_id": 1, "a": 1, "e": [1, 2, 3, 4, 5]});
    assert_eq!(project(doc! {"a": 1, "_id": 0}, sample()), doc! {"a": 1});
    assert_eq!(project(doc! {"_id": 1}, sample()), doc! {"_id": 1});
    assert_eq!(project(doc! {"a": 1.0, "zzz": 1i64}, sample()), doc! {"_id": 1, "a": 1});
    assert_eq!(Projection::parse(&doc! {"a": 1}).unwrap().kind(), Kind::Inclusion);
}

#[test]
fn exclusion() {
    assert_eq!(project(doc! {"a": 0, "e": false}, sample()), doc! {"_id": 1, "b": {"c": 1, "d": 2}});
    assert_eq!(project(doc! {"_id": 0}, doc! {"_id": 1, "a": 1}), doc! {"a": 1});
    assert_eq!(project(doc! {"b.c": 0}, sample()), doc! {"_id": 1, "a": 1, "b": {"d": 2}, "e": [1, 2, 3, 4, 5]});
    assert_eq!(Projection::parse(&doc! {"a": 0}).unwrap().kind(), Kind::Exclusion);
}

#[test]
fn mixing_is_refused_except_for_id() {
    let err = Projection::parse(&doc! {"a": 1, "b": 0}).unwrap_err();
    assert_eq!(err.code, ErrorCode::Location31254);
    assert_eq!(err.message, "Cannot do exclusion on field b in inclusion projection");
    let err = Projection::parse(&doc! {"a": 0, "b": 1}).unwrap_err();
    assert_eq!(err.code, ErrorCode::Location31253);
    assert_eq!(err.message, "Cannot do inclusion on field b in exclusion projection");
    assert!(Projection::parse(&doc! {"a": 0, "_id": 1}).is_ok());
    assert!(Projection::parse(&doc! {"a": 1, "_id": 0}).is_ok());
    assert!(Projection::parse(&doc! {"a._id": 0, "b": 1}).is_err());
}

#[test]
fn dotted_and_nested_specs() {
    assert_eq!(project(doc! {"b.c": 1}, sample()), doc! {"_id": 1, "b": {"c": 1}});
    assert_eq!(project(doc! {"b": {"d": 1}}, sample()), doc! {"_id": 1, "b": {"d": 2}});
    // A scalar where a sub-document is expected disappears from an inclusion.
    assert_eq!(project(doc! {"a.x": 1}, sample()), doc! {"_id": 1});
    let err = Projection::parse(&doc! {"b": 1, "b.c": 1}).unwrap_err();
    assert_eq!(err.message, "Path collision at b.c");
    assert!(Projection::parse(&doc! {"b.c": 1, "b": {"c": 0}}).is_err());
    assert_eq!(Projection::parse(&doc! {"b": {}}).unwrap_err().code, ErrorCode::BadValue);
    assert_eq!(Projection::parse(&doc! {"a..b": 1}).unwrap_err().code, ErrorCode::Location15998);
}

#[test]
fn paths_into_arrays_of_documents() {
    let d = doc! {"_id": 1, "a": [{"b": 1, "c": 2}, 3, {"c": 4}, [{"b": 5, "c": 6}]]};
    assert_eq!(project(doc! {"a.b": 1}, d.clone()), doc! {"_id": 1, "a": [{"b": 1}, {}, [{"b": 5}]]});
    assert_eq!(project(doc! {"a.b": 0}, d), doc! {"_id": 1, "a": [{"c": 2}, 3, {"c": 4}, [{"c": 6}]]});
}

#[test]
fn slice() {
    let e = |spec: Bson| project(doc! {"e": {"$slice": spec}}, sample()).get("e").cloned().unwrap();
    assert_eq!(e(Bson::Int32(2)), bson::bson!([1, 2]));
    assert_eq!(e(Bson::Int32(-2)), bson::bson!([4, 5]));
    assert_eq!(e(Bson::Int32(10)), bson::bson!([1, 2, 3, 4, 5]));
    assert_eq!(e(bson::bson!([1, 2])), bson::bson!([2, 3]));
    assert_eq!(e(bson::bson!([-2, 5])), bson::bson!([4, 5]));
    assert_eq!(e(bson::bson!([10, 1])), bson::bson!([]));
    // $slice alone keeps the other fields; with an inclusion, only the included ones.
    assert_eq!(keys(&project(doc! {"e": {"$slice": 1}}, sample())), vec!["_id", "a", "b", "e"]);
    assert_eq!(keys(&project(doc! {"e": {"$slice": 1}, "a": 1}, sample())), vec!["_id", "a", "e"]);
    // Non-arrays pass through.
    assert_eq!(project(doc! {"a": {"$slice": 1}}, doc! {"a": 5}), doc! {"a": 5});
    for bad in [bson::bson!("x"), bson::bson!([1]), bson::bson!([1, 0]), bson::bson!([1, -1])] {
        assert_eq!(
            Projection::parse(&doc! {"e": {"$slice": bad.clone()}}).unwrap_err().code,
            ErrorCode::BadValue,
            "{bad}"
        );
    }
}

#[test]
fn elem_match() {
    let d = doc! {"_id": 1, "x": 0, "a": [{"b": 1}, {"b": 2, "c": 1}, {"b": 2}]};
    assert_eq!(project(doc! {"a": {"$elemMatch": {"b": 2}}}, d.clone()), doc! {"_id": 1, "a": [{"b": 2, "c": 1}]});
    assert_eq!(project(doc! {"a": {"$elemMatch": {"b": 9}}}, d.clone()), doc! {"_id": 1});
    assert_eq!(
        project(doc! {"a": {"$elemMatch": {"b": {"$gt": 1}}}, "x": 1}, d),
        doc! {"_id": 1, "x": 0, "a": [{"b": 2, "c": 1}]}
    );
    assert_eq!(project(doc! {"s": {"$elemMatch": {"$gt": 3}}}, doc! {"s": [1, 5, 9]}), doc! {"s": [5]});
    assert_eq!(Projection::parse(&doc! {"a": {"$elemMatch": 1}}).unwrap_err().code, ErrorCode::BadValue);
    assert_eq!(Projection::parse(&doc! {"a.b": {"$elemMatch": {"c": 1}}}).unwrap_err().code, ErrorCode::BadValue);
}

#[test]
fn not_yet_supported() {
    assert_eq!(Projection::parse(&doc! {"a.$": 1}).unwrap_err().code, ErrorCode::NotImplemented);
    assert_eq!(Projection::parse(&doc! {"s": {"$meta": "textScore"}}).unwrap_err().code, ErrorCode::NotImplemented);
}

#[test]
fn find_projection_expressions() {
    assert_eq!(project(doc! {"x": "$b.c", "a": 1}, sample()), doc! {"_id": 1, "a": 1, "x": 1});
    assert_eq!(project(doc! {"x": {"$add": ["$a", 1]}, "_id": 0}, sample()), doc! {"x": 2});
    let err = Projection::parse(&doc! {"a": 0, "x": "$a"}).unwrap_err();
    assert_eq!(err.code, ErrorCode::BadValue);
}

#[test]
fn project_stage_dialect() {
    let p = Projection::parse_project(&doc! {"a": 1, "n.m": {"$literal": 5}, "s": {"$slice": 1}});
    // `$slice` is the aggregation expression here, which takes two or three arguments.
    assert_eq!(p.unwrap_err().code, ErrorCode::BadValue);
    let p = Projection::parse_project(&doc! {"a": 1, "n.m": {"$literal": 5}}).unwrap();
    assert_eq!(p.apply(&sample()).unwrap(), doc! {"_id": 1, "a": 1, "n": {"m": 5}});
    // Computed sub-fields replace scalars and map over arrays.
    let p = Projection::parse_project(&doc! {"_id": 0, "e.v": "$a"}).unwrap();
    assert_eq!(p.apply(&doc! {"a": 1, "e": [1, {"w": 1}]}).unwrap(), doc! {"e": [{"v": 1}, {"v": 1}]});
    let p = Projection::parse_project(&doc! {"_id": 0, "a": "$$REMOVE", "b": 1}).unwrap();
    assert_eq!(p.apply(&sample()).unwrap(), doc! {"b": {"c": 1, "d": 2}});
    assert_eq!(Projection::parse_project(&doc! {}).unwrap_err().code, ErrorCode::BadValue);
}

#[test]
fn add_fields_dialect() {
    let p = Projection::parse_add_fields(&doc! {"a": 5, "z": "$a", "b": {"c": "x", "n": {"$add": [1, 1]}}}).unwrap();
    let out = p.apply(&sample()).unwrap();
    assert_eq!(out, doc! {"_id": 1, "a": 5, "b": {"c": "x", "d": 2, "n": 2}, "e": [1, 2, 3, 4, 5], "z": 1});
    assert_eq!(keys(&out), vec!["_id", "a", "b", "e", "z"]);
    let p = Projection::parse_add_fields(&doc! {"a": "$$REMOVE", "e.x": 1}).unwrap();
    assert_eq!(p.apply(&doc! {"a": 1, "e": [{"y": 1}, 2]}).unwrap(), doc! {"e": [{"y": 1, "x": 1}, {"x": 1}]});
    let p = Projection::parse_add_fields(&doc! {"o": {}}).unwrap();
    assert_eq!(p.apply(&doc! {}).unwrap(), doc! {"o": {}});
    assert_eq!(p.kind(), Kind::AddFields);
}

#[test]
fn unset_dialect() {
    let p = Projection::exclusion_of(&["a".to_string(), "b.c".to_string(), "_id".to_string()]).unwrap();
    assert_eq!(p.apply(&sample()).unwrap(), doc! {"b": {"d": 2}, "e": [1, 2, 3, 4, 5]});
}
