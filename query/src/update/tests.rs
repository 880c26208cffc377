//! Unit tests of update parsing and application, one group per operator, errors included.

use super::*;
use bson::{Timestamp, bson, doc};

const NOW_MS: i64 = 1_700_000_123_456;

fn ctx() -> UpdateContext {
    UpdateContext { now: DateTime::from_millis(NOW_MS), is_upsert_insert: false }
}

/// Applies `u` to `doc`, returning the result and whether it changed.
fn run(doc: Document, u: Document) -> (Document, bool) {
    let mut doc = doc;
    let changed = UpdateSpec::parse(&u).unwrap().apply(&mut doc, &ctx()).unwrap();
    (doc, changed)
}

fn upd(doc: Document, u: Document) -> Document {
    run(doc, u).0
}

fn apply_err(doc: Document, u: Document) -> QueryError {
    let mut d = doc.clone();
    let err = UpdateSpec::parse(&u).unwrap().apply(&mut d, &ctx()).unwrap_err();
    assert_eq!(d, doc, "a failed update must leave the document alone");
    err
}

fn parse_err(u: Document) -> QueryError {
    UpdateSpec::parse(&u).unwrap_err()
}

fn keys(d: &Document) -> Vec<&str> {
    d.keys().map(String::as_str).collect()
}

#[test]
fn set_creates_paths_and_reports_changes() {
    let (d, changed) = run(doc! {"_id": 1, "a": 1}, doc! {"$set": {"a": 1}});
    assert!(!changed);
    assert_eq!(d, doc! {"_id": 1, "a": 1});
    // Same value of another type is a change.
    let (d, changed) = run(doc! {"_id": 1, "a": 1}, doc! {"$set": {"a": 1.0}});
    assert!(changed);
    assert_eq!(d.get("a"), Some(&Bson::Double(1.0)));
    assert_eq!(upd(doc! {"_id": 1}, doc! {"$set": {"x.y.z": 1}}), doc! {"_id": 1, "x": {"y": {"z": 1}}});
}

#[test]
fn new_fields_are_created_in_path_order() {
    let d = upd(doc! {"_id": 1, "m": 0}, doc! {"$set": {"b": 1, "a": 1, "c.2": 1, "c.10": 1}});
    assert_eq!(keys(&d), vec!["_id", "m", "a", "b", "c"]);
    assert_eq!(d.get_document("c").map(|c| c.keys().cloned().collect::<Vec<_>>()).unwrap(), vec!["2", "10"]);
}

#[test]
fn numeric_components_index_and_pad_arrays() {
    assert_eq!(upd(doc! {"a": [1, 2]}, doc! {"$set": {"a.1": 9}}), doc! {"a": [1, 9]});
    assert_eq!(upd(doc! {"a": [1]}, doc! {"$set": {"a.3": 9}}), doc! {"a": [1, null, null, 9]});
    assert_eq!(upd(doc! {"a": [{"b": 1}]}, doc! {"$set": {"a.0.b": 2}}), doc! {"a": [{"b": 2}]});
    assert_eq!(upd(doc! {"a": []}, doc! {"$set": {"a.1.b": 2}}), doc! {"a": [null, {"b": 2}]});
    let err = apply_err(doc! {"a": [1]}, doc! {"$set": {"a.99999999": 1}});
    assert_eq!(err.code, ErrorCode::BadValue);
}

#[test]
fn paths_through_scalars_are_not_viable() {
    let err = apply_err(doc! {"_id": 1, "a": 1}, doc! {"$set": {"a.b": 1}});
    assert_eq!(err.code, ErrorCode::PathNotViable);
    assert_eq!(err.message, "Cannot create field 'b' in element {a: 1}");
    let err = apply_err(doc! {"a": [1, 2]}, doc! {"$set": {"a.x": 1}});
    assert_eq!(err.code, ErrorCode::PathNotViable);
    assert_eq!(err.message, "Cannot create field 'x' in element {a: [ 1, 2 ]}");
    let err = apply_err(doc! {"a": [1]}, doc! {"$inc": {"a.0.b": 1}});
    assert_eq!(err.message, "Cannot create field 'b' in element {0: 1}");
}

#[test]
fn unset_removes_and_nulls_array_elements() {
    let (d, changed) = run(doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}}, doc! {"$unset": {"a": "", "b.c": 1}});
    assert!(changed);
    assert_eq!(d, doc! {"_id": 1, "b": {"d": 2}});
    assert_eq!(upd(doc! {"a": [1, 2, 3]}, doc! {"$unset": {"a.1": 1}}), doc! {"a": [1, null, 3]});
    let (d, changed) = run(doc! {"a": 1}, doc! {"$unset": {"x.y": 1, "a.b": 1}});
    assert!(!changed);
    assert_eq!(d, doc! {"a": 1});
}

#[test]
fn inc_type_promotion() {
    assert_eq!(upd(doc! {"a": 1}, doc! {"$inc": {"a": 2}}), doc! {"a": 3});
    assert_eq!(upd(doc! {}, doc! {"$inc": {"a": 2i64}}), doc! {"a": 2i64});
    assert_eq!(upd(doc! {"a": i32::MAX}, doc! {"$inc": {"a": 1}}), doc! {"a": i64::from(i32::MAX) + 1});
    assert_eq!(upd(doc! {"a": 1}, doc! {"$inc": {"a": 0.5}}), doc! {"a": 1.5});
    assert_eq!(upd(doc! {"a": 1i64}, doc! {"$inc": {"a": 1}}), doc! {"a": 2i64});
    let (_, changed) = run(doc! {"a": 1}, doc! {"$inc": {"a": 0}});
    assert!(!changed);
    let err = apply_err(doc! {"_id": 1, "a": i64::MAX}, doc! {"$inc": {"a": 1}});
    assert_eq!(err.code, ErrorCode::BadValue);
    assert_eq!(
        err.message,
        "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}"
    );
}

#[test]
fn inc_errors() {
    let err = apply_err(doc! {"_id": 1, "a": "x"}, doc! {"$inc": {"a": 1}});
    assert_eq!(err.code, ErrorCode::TypeMismatch);
    assert_eq!(
        err.message,
        "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string"
    );
    let err = parse_err(doc! {"$inc": {"a": "x"}});
    assert_eq!(err.code, ErrorCode::TypeMismatch);
    assert_eq!(err.message, "Cannot increment with non-numeric argument: {a: \"x\"}");
}

#[test]
fn mul_rules() {
    assert_eq!(upd(doc! {"a": 3}, doc! {"$mul": {"a": 2}}), doc! {"a": 6});
    assert_eq!(upd(doc! {}, doc! {"$mul": {"a": 2.5}}), doc! {"a": 0.0});
    assert_eq!(upd(doc! {}, doc! {"$mul": {"a": 2i64}}), doc! {"a": 0i64});
    assert_eq!(upd(doc! {"a": i32::MAX}, doc! {"$mul": {"a": 2}}), doc! {"a": i64::from(i32::MAX) * 2});
    assert_eq!(apply_err(doc! {"a": i64::MAX}, doc! {"$mul": {"a": 2}}).code, ErrorCode::BadValue);
    let err = apply_err(doc! {"_id": 1, "a": [1]}, doc! {"$mul": {"a": 2}});
    assert_eq!(err.code, ErrorCode::TypeMismatch);
    assert!(err.message.starts_with("Cannot apply $mul to a value of non-numeric type."));
    assert_eq!(parse_err(doc! {"$mul": {"a": null}}).code, ErrorCode::TypeMismatch);
}

#[test]
fn min_and_max() {
    assert_eq!(upd(doc! {"a": 5}, doc! {"$min": {"a": 3}}), doc! {"a": 3});
    assert_eq!(upd(doc! {"a": 5}, doc! {"$min": {"a": 7}}), doc! {"a": 5});
    assert_eq!(upd(doc! {"a": 5}, doc! {"$max": {"a": 7}}), doc! {"a": 7});
    assert_eq!(upd(doc! {}, doc! {"$max": {"a": 7}}), doc! {"a": 7});
    // Equal across numeric types: no change.
    let (_, changed) = run(doc! {"a": 5}, doc! {"$min": {"a": 5.0}});
    assert!(!changed);
    // Compared in the BSON order: a string is above every number.
    assert_eq!(upd(doc! {"a": 5}, doc! {"$max": {"a": "s"}}), doc! {"a": "s"});
}

#[test]
fn rename_moves_values() {
    let d = upd(doc! {"_id": 1, "a": 1, "z": 0}, doc! {"$rename": {"a": "b.c"}});
    assert_eq!(d, doc! {"_id": 1, "z": 0, "b": {"c": 1}});
    let (d, changed) = run(doc! {"_id": 1}, doc! {"$rename": {"a": "b"}});
    assert!(!changed);
    assert_eq!(d, doc! {"_id": 1});
    // Swapping two fields in one update reads both before writing.
    let d = upd(doc! {"a": 1, "b": 2}, doc! {"$rename": {"a": "t"}, "$set": {"x": 0}});
    assert_eq!(d, doc! {"b": 2, "t": 1, "x": 0});
}

#[test]
fn rename_errors() {
    let err = apply_err(doc! {"_id": 1, "a": [{"b": 1}]}, doc! {"$rename": {"a.b": "c"}});
    assert_eq!(err.code, ErrorCode::BadValue);
    assert_eq!(
        err.message,
        "The source field cannot be an array element, 'a.b' in doc with _id: 1 has an array field called 'a'"
    );
    let err = apply_err(doc! {"_id": 1, "a": 1, "c": []}, doc! {"$rename": {"a": "c.d"}});
    assert!(err.message.starts_with("The destination field cannot be an array element"));
    assert_eq!(parse_err(doc! {"$rename": {"a": 1}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$rename": {"a": "a"}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$rename": {"a": "a.b"}}).code, ErrorCode::BadValue);
    let err = apply_err(doc! {"_id": 1, "a": 2}, doc! {"$rename": {"a": "_id"}});
    assert_eq!(err.code, ErrorCode::ImmutableField);
}

#[test]
fn set_on_insert_only_on_upsert_inserts() {
    let (d, changed) = run(doc! {"_id": 1}, doc! {"$setOnInsert": {"a": 1}});
    assert!(!changed);
    assert_eq!(d, doc! {"_id": 1});
    let spec = UpdateSpec::parse(&doc! {"$setOnInsert": {"a": 1}, "$set": {"b": 2}}).unwrap();
    let inserted = upsert_document(&doc! {"_id": 5}, &spec, &ctx()).unwrap();
    assert_eq!(inserted, doc! {"_id": 5, "a": 1, "b": 2});
}

#[test]
fn current_date_uses_the_given_time() {
    let d = upd(doc! {}, doc! {"$currentDate": {"a": true, "b": {"$type": "date"}, "c": {"$type": "timestamp"}}});
    assert_eq!(d.get("a"), Some(&Bson::DateTime(DateTime::from_millis(NOW_MS))));
    assert_eq!(d.get("b"), Some(&Bson::DateTime(DateTime::from_millis(NOW_MS))));
    assert_eq!(d.get("c"), Some(&Bson::Timestamp(Timestamp { time: (NOW_MS / 1000) as u32, increment: 1 })));
    assert_eq!(parse_err(doc! {"$currentDate": {"a": {"$type": "x"}}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$currentDate": {"a": 1}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$currentDate": {"a": {"$typo": "date"}}}).code, ErrorCode::BadValue);
}

#[test]
fn push_plain_and_with_modifiers() {
    assert_eq!(upd(doc! {}, doc! {"$push": {"a": 1}}), doc! {"a": [1]});
    assert_eq!(upd(doc! {"a": [1]}, doc! {"$push": {"a": [2]}}), doc! {"a": [1, [2]]});
    assert_eq!(upd(doc! {"a": [1]}, doc! {"$push": {"a": {"$each": [2, 3]}}}), doc! {"a": [1, 2, 3]});
    assert_eq!(upd(doc! {"a": [1, 2]}, doc! {"$push": {"a": {"$each": [9], "$position": 1}}}), doc! {"a": [1, 9, 2]});
    assert_eq!(upd(doc! {"a": [1, 2]}, doc! {"$push": {"a": {"$each": [9], "$position": -1}}}), doc! {"a": [1, 9, 2]});
    assert_eq!(upd(doc! {"a": [1, 2]}, doc! {"$push": {"a": {"$each": [9], "$position": 100}}}), doc! {"a": [1, 2, 9]});
    assert_eq!(
        upd(doc! {"a": [5, 1]}, doc! {"$push": {"a": {"$each": [3, 4], "$sort": 1, "$slice": 3}}}),
        doc! {"a": [1, 3, 4]}
    );
    assert_eq!(
        upd(doc! {"a": [5, 1]}, doc! {"$push": {"a": {"$each": [3], "$sort": -1, "$slice": -2}}}),
        doc! {"a": [3, 1]}
    );
    assert_eq!(
        upd(doc! {"a": [{"s": 2}, {"s": 1}]}, doc! {"$push": {"a": {"$each": [{"s": 0}], "$sort": {"s": 1}}}}),
        doc! {"a": [{"s": 0}, {"s": 1}, {"s": 2}]}
    );
    let (_, changed) = run(doc! {"a": [1]}, doc! {"$push": {"a": {"$each": []}}});
    assert!(!changed);
}

#[test]
fn push_errors() {
    let err = apply_err(doc! {"_id": 1, "a": 1}, doc! {"$push": {"a": 2}});
    assert_eq!(err.code, ErrorCode::BadValue);
    assert_eq!(err.message, "The field 'a' must be an array but is of type int in document {_id: 1}");
    for bad in [
        doc! {"$push": {"a": {"$each": 1}}},
        doc! {"$push": {"a": {"$each": [1], "$slice": "x"}}},
        doc! {"$push": {"a": {"$each": [1], "$position": 1.5}}},
        doc! {"$push": {"a": {"$each": [1], "$sort": 2}}},
        doc! {"$push": {"a": {"$each": [1], "$sort": {}}}},
        doc! {"$push": {"a": {"$each": [1], "$sort": {"x": 0}}}},
        doc! {"$push": {"a": {"$each": [1], "$bogus": 1}}},
    ] {
        assert_eq!(parse_err(bad.clone()).code, ErrorCode::BadValue, "{bad}");
    }
}

#[test]
fn add_to_set() {
    assert_eq!(upd(doc! {"a": [1, 2]}, doc! {"$addToSet": {"a": 2}}), doc! {"a": [1, 2]});
    assert_eq!(upd(doc! {"a": [1, 2]}, doc! {"$addToSet": {"a": 2.0}}), doc! {"a": [1, 2]});
    assert_eq!(upd(doc! {}, doc! {"$addToSet": {"a": {"$each": [1, 1, 3]}}}), doc! {"a": [1, 3]});
    assert_eq!(upd(doc! {"a": []}, doc! {"$addToSet": {"a": {"b": 1}}}), doc! {"a": [{"b": 1}]});
    let err = apply_err(doc! {"a": 1}, doc! {"$addToSet": {"a": 2}});
    assert_eq!(err.message, "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int");
    assert_eq!(parse_err(doc! {"$addToSet": {"a": {"$each": 1}}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$addToSet": {"a": {"$each": [1], "x": 1}}}).code, ErrorCode::BadValue);
}

#[test]
fn pop() {
    assert_eq!(upd(doc! {"a": [1, 2, 3]}, doc! {"$pop": {"a": 1}}), doc! {"a": [1, 2]});
    assert_eq!(upd(doc! {"a": [1, 2, 3]}, doc! {"$pop": {"a": -1i64}}), doc! {"a": [2, 3]});
    let (_, changed) = run(doc! {"a": []}, doc! {"$pop": {"a": 1}});
    assert!(!changed);
    let (_, changed) = run(doc! {}, doc! {"$pop": {"a": 1}});
    assert!(!changed);
    let err = apply_err(doc! {"a": {"b": 1}}, doc! {"$pop": {"a.b": 1}});
    assert_eq!(err.code, ErrorCode::TypeMismatch);
    assert_eq!(err.message, "Path 'a.b' contains an element of non-array type 'int'");
    assert_eq!(parse_err(doc! {"$pop": {"a": 2}}).code, ErrorCode::FailedToParse);
}

#[test]
fn pull_by_value() {
    assert_eq!(upd(doc! {"a": [1, 2, 1.0, 3]}, doc! {"$pull": {"a": 1}}), doc! {"a": [2, 3]});
    assert_eq!(upd(doc! {"a": [[1], [2]]}, doc! {"$pull": {"a": [1]}}), doc! {"a": [[2]]});
    let (_, changed) = run(doc! {"a": [2]}, doc! {"$pull": {"a": 1}});
    assert!(!changed);
    assert_eq!(apply_err(doc! {"a": 1}, doc! {"$pull": {"a": 1}}).code, ErrorCode::BadValue);
}

#[test]
fn pull_by_condition() {
    assert_eq!(upd(doc! {"a": [1, 5, 7, 3]}, doc! {"$pull": {"a": {"$gte": 5}}}), doc! {"a": [1, 3]});
    assert_eq!(
        upd(doc! {"a": [{"b": 1, "c": 1}, {"b": 2}, 5]}, doc! {"$pull": {"a": {"b": 1}}}),
        doc! {"a": [{"b": 2}, 5]}
    );
    assert_eq!(
        upd(
            doc! {"a": ["apple", "kiwi"]},
            doc! {"$pull": {"a": bson::Regex { pattern: "^a".try_into().unwrap(), options: "".try_into().unwrap() }}}
        ),
        doc! {"a": ["kiwi"]}
    );
}

#[test]
fn pull_all() {
    assert_eq!(upd(doc! {"a": [1, 2, 3, 2]}, doc! {"$pullAll": {"a": [2, 3]}}), doc! {"a": [1]});
    assert_eq!(parse_err(doc! {"$pullAll": {"a": 1}}).code, ErrorCode::BadValue);
    assert_eq!(apply_err(doc! {"a": 1}, doc! {"$pullAll": {"a": [1]}}).code, ErrorCode::BadValue);
}

#[test]
fn parse_errors() {
    let err = parse_err(doc! {"$foo": {"a": 1}});
    assert_eq!(err.code, ErrorCode::FailedToParse);
    assert_eq!(
        err.message,
        "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array"
    );
    assert_eq!(parse_err(doc! {"$set": {"a": 1}, "b": 1}).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(doc! {"$set": 1}).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(doc! {"$set": {"": 1}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$set": {"a..b": 1}}).code, ErrorCode::BadValue);
    assert_eq!(parse_err(doc! {"$set": {"a.$.b.$": 1}}).code, ErrorCode::BadValue, "one $ per path");
    assert_eq!(parse_err(doc! {"$set": {"a.$[B]": 1}}).code, ErrorCode::BadValue, "identifiers start lowercase");
    assert_eq!(parse_err(doc! {"$set": {"a.$b": 1}}).code, ErrorCode::DollarPrefixedFieldName);
    assert!(UpdateSpec::parse_value(&bson!([{"$set": {"a": 1}}])).is_ok(), "a pipeline update");
    assert_eq!(UpdateSpec::parse_value(&bson!([{"$group": {"_id": 1}}])).unwrap_err().code, ErrorCode::InvalidOptions);
    assert_eq!(UpdateSpec::parse_value(&bson!(1)).unwrap_err().code, ErrorCode::FailedToParse);
    // Empty operator documents are accepted (MongoDB 5.0+).
    assert!(UpdateSpec::parse(&doc! {"$set": {}}).is_ok());
}

#[test]
fn conflicting_paths() {
    let err = parse_err(doc! {"$set": {"a": 1}, "$inc": {"a": 1}});
    assert_eq!(err.code, ErrorCode::ConflictingUpdateOperators);
    assert_eq!(err.message, "Updating the path 'a' would create a conflict at 'a'");
    let err = parse_err(doc! {"$set": {"a": 1}, "$unset": {"a.b": 1}});
    assert_eq!(err.message, "Updating the path 'a.b' would create a conflict at 'a'");
    let err = parse_err(doc! {"$set": {"a.b": 1}, "$unset": {"a": 1}});
    assert_eq!(err.message, "Updating the path 'a' would create a conflict at 'a'");
    assert_eq!(parse_err(doc! {"$rename": {"a": "b"}, "$set": {"b": 1}}).code, ErrorCode::ConflictingUpdateOperators);
    assert!(UpdateSpec::parse(&doc! {"$set": {"a.b": 1, "a.c": 1, "ab": 1}}).is_ok());
}

#[test]
fn id_is_immutable() {
    let err = apply_err(doc! {"_id": 1, "a": 1}, doc! {"$set": {"_id": 2}});
    assert_eq!(err.code, ErrorCode::ImmutableField);
    assert_eq!(err.message, "Performing an update on the path '_id' would modify the immutable field '_id'");
    let err = apply_err(doc! {"_id": {"x": 1}}, doc! {"$set": {"_id.x": 2}});
    assert_eq!(err.message, "Performing an update on the path '_id.x' would modify the immutable field '_id'");
    assert_eq!(apply_err(doc! {"_id": 1}, doc! {"$unset": {"_id": 1}}).code, ErrorCode::ImmutableField);
    // Setting the same value is fine.
    let (_, changed) = run(doc! {"_id": 1}, doc! {"$set": {"_id": 1}});
    assert!(!changed);
}

#[test]
fn replacement() {
    let (d, changed) = run(doc! {"_id": 1, "a": 1}, doc! {"b": 2});
    assert!(changed);
    assert_eq!(d, doc! {"_id": 1, "b": 2});
    assert_eq!(upd(doc! {"_id": 1, "a": 1}, doc! {}), doc! {"_id": 1});
    let d = upd(doc! {"_id": 1, "a": 1}, doc! {"b": 2, "_id": 1});
    assert_eq!(keys(&d), vec!["_id", "b"]);
    let (_, changed) = run(doc! {"_id": 1, "a": 1}, doc! {"a": 1});
    assert!(!changed);
    // Reordering fields is a change.
    let (_, changed) = run(doc! {"_id": 1, "a": 1, "b": 1}, doc! {"b": 1, "a": 1});
    assert!(changed);
    let err = apply_err(doc! {"_id": 1}, doc! {"_id": 2});
    assert_eq!(err.code, ErrorCode::ImmutableField);
    let err = parse_err(doc! {"a": 1, "$set": {"b": 1}});
    assert_eq!(err.code, ErrorCode::DollarPrefixedFieldName);
    assert!(UpdateSpec::parse(&doc! {}).unwrap().is_replacement());
}

#[test]
fn upserts() {
    let spec = UpdateSpec::parse(&doc! {"$inc": {"n": 1}, "$set": {"a.c": 2}}).unwrap();
    let d = upsert_document(&doc! {"a.b": 1, "_id": 7}, &spec, &ctx()).unwrap();
    assert_eq!(d, doc! {"_id": 7, "a": {"b": 1, "c": 2}, "n": 1});
    assert_eq!(keys(&d)[0], "_id");
    // Replacement keeps only the seed's _id.
    let spec = UpdateSpec::parse(&doc! {"x": 1}).unwrap();
    let d = upsert_document(&doc! {"q": 1, "_id": 3}, &spec, &ctx()).unwrap();
    assert_eq!(d, doc! {"_id": 3, "x": 1});
    let d = upsert_document(&doc! {"q": 1}, &spec, &ctx()).unwrap();
    assert_eq!(d, doc! {"x": 1});
    // _id set by the update itself when the query has none, and moved first.
    let spec = UpdateSpec::parse(&doc! {"$set": {"_id": 9, "a": 1}}).unwrap();
    let d = upsert_document(&doc! {"b": 1}, &spec, &ctx()).unwrap();
    assert_eq!(keys(&d), vec!["_id", "b", "a"]);
    // A different _id than the query's is refused.
    let spec = UpdateSpec::parse(&doc! {"$set": {"_id": 2}}).unwrap();
    assert_eq!(upsert_document(&doc! {"_id": 1}, &spec, &ctx()).unwrap_err().code, ErrorCode::ImmutableField);
    let spec = UpdateSpec::parse(&doc! {"$set": {"_id": [1]}}).unwrap();
    assert_eq!(upsert_document(&doc! {}, &spec, &ctx()).unwrap_err().code, ErrorCode::InvalidIdField);
}

#[test]
fn modified_paths_list_both_rename_sides() {
    let spec = UpdateSpec::parse(&doc! {"$rename": {"a": "z"}, "$set": {"m.n": 1}}).unwrap();
    assert_eq!(spec.modified_paths(), vec!["a", "m.n", "z"]);
}

fn with_filters(doc: Document, u: Document, filters: Vec<Document>) -> Result<Document> {
    let mut doc = doc;
    UpdateSpec::parse_with_filters(&u, &filters)?.apply(&mut doc, &ctx())?;
    Ok(doc)
}

#[test]
fn all_positional_updates_every_element() {
    let d = upd(doc! {"_id": 1, "a": [1, 2, 3]}, doc! {"$inc": {"a.$[]": 10}});
    assert_eq!(d, doc! {"_id": 1, "a": [11, 12, 13]});
    let d = upd(
        doc! {"_id": 1, "g": [{"s": 1, "t": [1, 2]}, {"s": 2, "t": [3]}]},
        doc! {"$set": {"g.$[].new": true}, "$inc": {"g.$[].t.$[]": 1}},
    );
    assert_eq!(d, doc! {"_id": 1, "g": [{"s": 1, "t": [2, 3], "new": true}, {"s": 2, "t": [4], "new": true}]});
    // An empty array: nothing to do.
    let (d, changed) = run(doc! {"_id": 1, "a": []}, doc! {"$set": {"a.$[]": 0}});
    assert_eq!((d, changed), (doc! {"_id": 1, "a": []}, false));
    // Not an array, or missing: MongoDB's BadValue.
    let err = apply_err(doc! {"_id": 1, "a": 5}, doc! {"$set": {"a.$[]": 0}});
    assert_eq!(err.code, ErrorCode::BadValue);
    assert!(err.message.contains("must exist in the document"), "{}", err.message);
    assert_eq!(apply_err(doc! {"_id": 1}, doc! {"$set": {"a.$[]": 0}}).code, ErrorCode::BadValue);
}

#[test]
fn filtered_positional_updates_what_array_filters_select() {
    let d = with_filters(
        doc! {"_id": 1, "grades": [95, 80, 100, 70]},
        doc! {"$set": {"grades.$[high]": 100}},
        vec![doc! {"high": {"$gte": 90}}],
    )
    .unwrap();
    assert_eq!(d, doc! {"_id": 1, "grades": [100, 80, 100, 70]});
    let d = with_filters(
        doc! {"_id": 1, "items": [{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}]},
        doc! {"$mul": {"items.$[it].n": 10}},
        vec![doc! {"it.k": "a"}],
    )
    .unwrap();
    assert_eq!(d, doc! {"_id": 1, "items": [{"k": "a", "n": 10}, {"k": "b", "n": 2}, {"k": "a", "n": 30}]});
    // Nested identifiers, each with its filter.
    let d = with_filters(
        doc! {"_id": 1, "m": [{"x": 1, "v": [1, 5]}, {"x": 2, "v": [5, 6]}]},
        doc! {"$set": {"m.$[o].v.$[i]": 0}},
        vec![doc! {"o.x": 2}, doc! {"i": 5}],
    )
    .unwrap();
    assert_eq!(d, doc! {"_id": 1, "m": [{"x": 1, "v": [1, 5]}, {"x": 2, "v": [0, 6]}]});
}

#[test]
fn array_filters_are_checked_against_the_paths() {
    let parse = |u: Document, f: Vec<Document>| UpdateSpec::parse_with_filters(&u, &f).map(|_| ()).unwrap_err().code;
    assert_eq!(parse(doc! {"$set": {"a.$[x]": 1}}, vec![]), ErrorCode::BadValue, "no filter for x");
    assert_eq!(parse(doc! {"$set": {"a.$[]": 1}}, vec![doc! {"x": 1}]), ErrorCode::FailedToParse, "x unused");
    assert_eq!(
        parse(doc! {"$set": {"a.$[x]": 1}}, vec![doc! {"x": 1}, doc! {"x": 2}]),
        ErrorCode::FailedToParse,
        "x twice"
    );
    assert_eq!(parse(doc! {"$set": {"a.$[x]": 1}}, vec![doc! {"x": 1, "y": 2}]), ErrorCode::FailedToParse);
    assert_eq!(parse(doc! {"a": 1}, vec![doc! {"x": 1}]), ErrorCode::FailedToParse, "replacement");
    assert_eq!(parse(doc! {"$rename": {"a.$[]": "b"}}, vec![]), ErrorCode::BadValue);
}

#[test]
fn the_positional_operator_takes_the_element_the_query_matched() {
    let matched = |d: Document, q: Document, u: Document| -> Result<Document> {
        let mut d = d;
        let filter = Filter::parse(&q)?;
        UpdateSpec::parse(&u)?.apply_matched(&mut d, &ctx(), Some(&filter))?;
        Ok(d)
    };
    let d = matched(doc! {"_id": 1, "g": [80, 90, 100]}, doc! {"g": 90}, doc! {"$set": {"g.$": 0}}).unwrap();
    assert_eq!(d, doc! {"_id": 1, "g": [80, 0, 100]});
    let d = matched(
        doc! {"_id": 1, "items": [{"k": "a", "n": 1}, {"k": "b", "n": 2}]},
        doc! {"items.k": "b"},
        doc! {"$inc": {"items.$.n": 5}},
    )
    .unwrap();
    assert_eq!(d, doc! {"_id": 1, "items": [{"k": "a", "n": 1}, {"k": "b", "n": 7}]});
    let d =
        matched(doc! {"_id": 1, "g": [1, 5, 9]}, doc! {"_id": 1, "g": {"$gt": 4}}, doc! {"$set": {"g.$": 4}}).unwrap();
    assert_eq!(d, doc! {"_id": 1, "g": [1, 4, 9]}, "the first element that matched");
    // A query that says nothing about the array has no position.
    let err = matched(doc! {"_id": 1, "g": [1]}, doc! {"_id": 1}, doc! {"$set": {"g.$": 0}}).unwrap_err();
    assert_eq!(err.code, ErrorCode::BadValue);
    assert!(err.message.contains("did not find the match"), "{}", err.message);
    // Without a query (an upsert's insert), neither.
    let mut d = doc! {"_id": 1, "g": [1]};
    assert_eq!(
        UpdateSpec::parse(&doc! {"$set": {"g.$": 0}}).unwrap().apply(&mut d, &ctx()).unwrap_err().code,
        ErrorCode::BadValue
    );
}

#[test]
fn pipeline_updates_run_the_stages_and_keep_the_id() {
    let spec = UpdateSpec::parse_value(&bson!([
        {"$set": {"total": {"$add": ["$a", "$b"]}, "tag": "x"}},
        {"$unset": "b"},
    ]))
    .unwrap();
    let mut d = doc! {"_id": 1, "a": 2, "b": 3};
    assert!(spec.apply(&mut d, &ctx()).unwrap());
    assert_eq!(d, doc! {"_id": 1, "a": 2, "total": 5, "tag": "x"});
    let same = UpdateSpec::parse_value(&bson!([{"$set": {"tag": "x"}}])).unwrap();
    assert!(!same.apply(&mut d.clone(), &ctx()).unwrap(), "an update that changes nothing reports so");
    // `_id` may not change; a $project that drops it keeps it.
    let change_id = UpdateSpec::parse_value(&bson!([{"$set": {"_id": 2}}])).unwrap();
    assert_eq!(change_id.apply(&mut doc! {"_id": 1}, &ctx()).unwrap_err().code, ErrorCode::ImmutableField);
    let project = UpdateSpec::parse_value(&bson!([{"$project": {"a": 1, "_id": 0}}])).unwrap();
    let mut d = doc! {"_id": 1, "a": 1, "b": 2};
    project.apply(&mut d, &ctx()).unwrap();
    assert_eq!(d, doc! {"_id": 1, "a": 1});
    // An upsert seeds the document from the query, then runs the pipeline.
    let up = upsert_document(&doc! {"_id": 7, "k": 1}, &spec, &ctx()).unwrap();
    assert_eq!(up, doc! {"_id": 7, "k": 1, "total": Bson::Null, "tag": "x"}, "$add of missing fields is null");
}
