//! Unit tests of filter parsing and matching, one group per operator. Expected results follow
//! MongoDB's jstests (null2.js, null_query_semantics.js, ...) where they exist.

use bson::{Bson, Decimal128, Document, doc};
use shoal_proto::ErrorCode;

use super::*;

fn m(filter: Document, doc: Document) -> bool {
    Filter::parse(&filter).unwrap_or_else(|e| panic!("{filter} should parse: {e}")).matches(&doc)
}

/// The ids of the documents a filter matches, from a list of `{_id: n, ...}` documents.
fn ids(filter: Document, docs: &[Document]) -> Vec<i32> {
    let f = Filter::parse(&filter).unwrap_or_else(|e| panic!("{filter} should parse: {e}"));
    docs.iter().filter(|d| f.matches(d)).map(|d| d.get_i32("_id").expect("test docs have int _id")).collect()
}

fn err(filter: Document) -> QueryError {
    Filter::parse(&filter).expect_err("filter should be refused")
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse::<Decimal128>().expect("valid decimal literal"))
}

#[test]
fn empty_filter_matches_everything() {
    assert!(m(doc! {}, doc! {"a": 1}));
    assert!(Filter::parse(&doc! {"$comment": "x"}).expect("parses").is_match_all());
}

#[test]
fn implicit_equality_with_arrays() {
    assert!(m(doc! {"a": 1}, doc! {"a": 1.0}));
    assert!(m(doc! {"a": 1}, doc! {"a": [3, 1]}));
    assert!(m(doc! {"a": [1, 2]}, doc! {"a": [1, 2]}));
    assert!(!m(doc! {"a": [1, 2]}, doc! {"a": [2, 1]}));
    assert!(m(doc! {"a": [1]}, doc! {"a": [[1], 2]}));
    assert!(!m(doc! {"a": 1}, doc! {"a": [[1]]}));
    assert!(m(doc! {"a": {"b": 1}}, doc! {"a": {"b": 1}}));
    assert!(!m(doc! {"a": {"b": 1}}, doc! {"a": {"b": 1, "c": 2}}));
    assert!(m(doc! {"a.b": 2}, doc! {"a": [{"b": 1}, {"b": [2, 3]}]}));
    assert!(m(doc! {"a.0.b": 1}, doc! {"a": [{"b": 1}]}));
    assert!(m(doc! {"a.1": 5}, doc! {"a": [4, 5]}));
    assert!(!m(doc! {"a": "1"}, doc! {"a": 1}));
    assert!(m(doc! {"a": dec("2.50")}, doc! {"a": 2.5}));
}

#[test]
fn null_matches_missing_but_not_undefined() {
    let docs = [
        doc! {"_id": 1, "a": [{"b": 5}]},
        doc! {"_id": 2, "a": [{}]},
        doc! {"_id": 3, "a": []},
        doc! {"_id": 4, "a": [{}, {"b": 5}]},
        doc! {"_id": 5, "a": [5, {"b": 5}]},
    ];
    assert_eq!(ids(doc! {"a.b": null}, &docs), vec![2, 4]);
    assert_eq!(ids(doc! {"a.b": {"$in": [null]}}, &docs), vec![2, 4]);

    let docs = [
        doc! {"_id": 1, "a": {}},
        doc! {"_id": 2, "a": null},
        doc! {"_id": 3, "a": 4},
        doc! {"_id": 4, "a": {"b": null}},
        doc! {"_id": 5, "a": Bson::Undefined},
        doc! {"_id": 6},
        doc! {"_id": 7, "a": [null, 1]},
        doc! {"_id": 8, "a": [1, Bson::Undefined]},
    ];
    assert_eq!(ids(doc! {"a": null}, &docs), vec![2, 6, 7]);
    assert_eq!(ids(doc! {"a": {"$ne": null}}, &docs), vec![1, 3, 4, 5, 8]);
    assert_eq!(ids(doc! {"a": {"$gte": null}}, &docs), vec![2, 6, 7]);
    assert_eq!(ids(doc! {"a": {"$gt": null}}, &docs), Vec::<i32>::new());
    assert_eq!(ids(doc! {"a.b": null}, &docs), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(ids(doc! {"a.b": {"$exists": false}}, &docs), vec![1, 2, 3, 5, 6, 7, 8]);
    assert_eq!(ids(doc! {"a": {"$exists": false}}, &docs), vec![6]);
    assert_eq!(ids(doc! {"a": {"$nin": [null, 4]}}, &docs), vec![1, 4, 5, 8]);
}

#[test]
fn comparisons_stay_in_their_type_bracket() {
    assert!(m(doc! {"a": {"$gt": 5}}, doc! {"a": 6i64}));
    assert!(!m(doc! {"a": {"$gt": 5}}, doc! {"a": "6"}));
    assert!(!m(doc! {"a": {"$lt": 5}}, doc! {"a": null}));
    assert!(m(doc! {"a": {"$gte": 5, "$lte": 5}}, doc! {"a": dec("5.0")}));
    assert!(m(doc! {"a": {"$lt": "b"}}, doc! {"a": "a"}));
    assert!(!m(doc! {"a": {"$lt": "b"}}, doc! {"a": 1}));
    assert!(m(doc! {"a": {"$gt": 1, "$lt": 5}}, doc! {"a": [0, 10]}));
    assert!(!m(doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}}, doc! {"a": [0, 10]}));
    assert!(m(doc! {"a": {"$lt": [2]}}, doc! {"a": [1]}));
    assert!(m(doc! {"a": {"$gt": {"b": 1}}}, doc! {"a": {"b": 2}}));
    // MinKey and MaxKey operands compare with every bracket, missing fields included.
    assert!(m(doc! {"a": {"$lt": Bson::MaxKey}}, doc! {"a": "x"}));
    assert!(m(doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": {"b": 1}}));
    assert!(m(doc! {"a": {"$gt": Bson::MinKey}}, doc! {}));
    assert!(!m(doc! {"a": {"$lt": Bson::MinKey}}, doc! {"a": 1}));
    assert!(!m(doc! {"a": {"$eq": Bson::MaxKey}}, doc! {"a": 1}));
    assert!(m(doc! {"a": {"$lte": Bson::MaxKey}}, doc! {"a": Bson::MaxKey}));
}

#[test]
fn nan_compares_only_to_nan() {
    let nan = doc! {"a": f64::NAN};
    assert!(m(doc! {"a": f64::NAN}, nan.clone()));
    assert!(m(doc! {"a": dec("NaN")}, nan.clone()));
    assert!(m(doc! {"a": {"$gte": f64::NAN}}, nan.clone()));
    assert!(!m(doc! {"a": {"$lt": 0}}, nan.clone()));
    assert!(!m(doc! {"a": {"$gt": f64::NAN}}, doc! {"a": 1}));
    assert!(!m(doc! {"a": {"$lte": f64::NAN}}, doc! {"a": f64::NEG_INFINITY}));
}

#[test]
fn ne_and_nin_hold_when_no_value_matches() {
    assert!(m(doc! {"a": {"$ne": 1}}, doc! {}));
    assert!(m(doc! {"a": {"$ne": 1}}, doc! {"a": [2, 3]}));
    assert!(!m(doc! {"a": {"$ne": 1}}, doc! {"a": [2, 1]}));
    assert!(m(doc! {"a": {"$nin": [1, 2]}}, doc! {"a": 3}));
    assert!(!m(doc! {"a": {"$nin": [1, 2]}}, doc! {"a": [3, 2]}));
    assert!(m(doc! {"a": {"$nin": [1]}}, doc! {}));
}

#[test]
fn in_with_values_arrays_and_regexes() {
    assert!(m(doc! {"a": {"$in": [1, "x"]}}, doc! {"a": "x"}));
    assert!(m(doc! {"a": {"$in": [[1, 2]]}}, doc! {"a": [1, 2]}));
    assert!(m(doc! {"a": {"$in": [2]}}, doc! {"a": [1, 2]}));
    assert!(m(
        doc! {"a": {"$in": [Bson::RegularExpression(bson::Regex {
            pattern: "^x".try_into().expect("no NUL"),
            options: "".try_into().expect("no NUL"),
        })]}},
        doc! {"a": "xyz"}
    ));
    assert!(!m(doc! {"a": {"$in": []}}, doc! {"a": 1}));
    let e = err(doc! {"a": {"$in": 1}});
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::BadValue, "$in needs an array"));
    assert_eq!(err(doc! {"a": {"$nin": {"x": 1}}}).message, "$nin needs an array");
    assert_eq!(err(doc! {"a": {"$in": [{"$gt": 1}]}}).message, "cannot nest $ under $in");
}

#[test]
fn logical_operators() {
    let d = doc! {"a": 1, "b": 2};
    assert!(m(doc! {"$and": [{"a": 1}, {"b": 2}]}, d.clone()));
    assert!(!m(doc! {"$and": [{"a": 1}, {"b": 3}]}, d.clone()));
    assert!(m(doc! {"$or": [{"a": 5}, {"b": 2}]}, d.clone()));
    assert!(!m(doc! {"$nor": [{"a": 5}, {"b": 2}]}, d.clone()));
    assert!(m(doc! {"$nor": [{"a": 5}, {"c": 2}]}, d.clone()));
    assert!(m(doc! {"$alwaysTrue": 1}, d.clone()));
    assert!(!m(doc! {"$alwaysFalse": 1}, d.clone()));
    for op in ["$and", "$or", "$nor"] {
        let e = err(doc! {op: []});
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::BadValue, "$and/$or/$nor must be a nonempty array"));
        assert_eq!(err(doc! {op: [1]}).code, ErrorCode::BadValue);
        assert_eq!(err(doc! {op: {"a": 1}}).code, ErrorCode::BadValue);
    }
}

#[test]
fn not_operator() {
    assert!(m(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3}));
    assert!(m(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": "x"}));
    assert!(m(doc! {"a": {"$not": {"$gt": 5}}}, doc! {}));
    assert!(!m(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": [1, 6]}));
    assert!(m(doc! {"a": {"$not": {"$gt": 1, "$lt": 5}}}, doc! {"a": 7}));
    assert!(!m(doc! {"a": {"$not": {"$gt": 1, "$lt": 5}}}, doc! {"a": 3}));
    let re = Bson::RegularExpression(bson::Regex {
        pattern: "^a".try_into().expect("no NUL"),
        options: "".try_into().expect("no NUL"),
    });
    assert!(m(doc! {"a": {"$not": re.clone()}}, doc! {"a": "bc"}));
    assert!(!m(doc! {"a": {"$not": re}}, doc! {"a": "abc"}));
    assert!(m(doc! {"a": {"$not": {"$regex": "^A", "$options": "i"}}}, doc! {"a": "bc"}));
    assert!(!m(doc! {"a": {"$not": {"$not": {"$gt": 5}}}}, doc! {"a": 3}));
    assert_eq!(err(doc! {"a": {"$not": {}}}).message, "$not cannot be empty");
    assert_eq!(err(doc! {"a": {"$not": 5}}).message, "$not needs a regex or a document");
}

#[test]
fn exists() {
    assert!(m(doc! {"a": {"$exists": true}}, doc! {"a": null}));
    assert!(m(doc! {"a": {"$exists": 1}}, doc! {"a": []}));
    assert!(!m(doc! {"a": {"$exists": true}}, doc! {"b": 1}));
    assert!(m(doc! {"a": {"$exists": false}}, doc! {"b": 1}));
    assert!(m(doc! {"a": {"$exists": 0}}, doc! {}));
    assert!(m(doc! {"a.b": {"$exists": true}}, doc! {"a": [{"c": 1}, {"b": 1}]}));
    assert!(!m(doc! {"a.b": {"$exists": true}}, doc! {"a": [1, 2]}));
    assert!(m(doc! {"a.b": {"$exists": false}}, doc! {"a": [1, 2]}));
}

#[test]
fn type_operator() {
    assert!(m(doc! {"a": {"$type": "string"}}, doc! {"a": "x"}));
    assert!(m(doc! {"a": {"$type": 2}}, doc! {"a": "x"}));
    assert!(m(doc! {"a": {"$type": 2.0}}, doc! {"a": "x"}));
    assert!(m(doc! {"a": {"$type": "number"}}, doc! {"a": dec("1")}));
    assert!(m(doc! {"a": {"$type": ["bool", "long"]}}, doc! {"a": 5i64}));
    assert!(m(doc! {"a": {"$type": "array"}}, doc! {"a": []}));
    assert!(m(doc! {"a": {"$type": "int"}}, doc! {"a": ["x", 1]}));
    assert!(m(doc! {"a": {"$type": "minKey"}}, doc! {"a": Bson::MinKey}));
    assert!(m(doc! {"a": {"$type": -1}}, doc! {"a": Bson::MinKey}));
    assert!(m(doc! {"a": {"$type": "null"}}, doc! {"a": null}));
    assert!(!m(doc! {"a": {"$type": "null"}}, doc! {}));
    assert!(!m(doc! {"a": {"$type": "double"}}, doc! {"a": 1}));
    assert_eq!(err(doc! {"a": {"$type": "foo"}}).message, "Unknown type name alias: foo");
    assert_eq!(err(doc! {"a": {"$type": 100}}).code, ErrorCode::BadValue);
    assert_eq!(err(doc! {"a": {"$type": 2.5}}).code, ErrorCode::BadValue);
    assert_eq!(err(doc! {"a": {"$type": []}}).code, ErrorCode::FailedToParse);
    assert_eq!(err(doc! {"a": {"$type": {"x": 1}}}).code, ErrorCode::TypeMismatch);
}

#[test]
fn regex_operator() {
    assert!(m(doc! {"a": {"$regex": "^ab"}}, doc! {"a": "abc"}));
    assert!(m(doc! {"a": {"$regex": "^AB", "$options": "i"}}, doc! {"a": "abc"}));
    assert!(m(doc! {"a": {"$options": "i", "$regex": "^AB"}}, doc! {"a": "abc"}));
    assert!(m(doc! {"a": {"$regex": "b"}}, doc! {"a": ["x", "abc"]}));
    assert!(m(doc! {"a": {"$regex": "b"}}, doc! {"a": Bson::Symbol("b".into())}));
    assert!(!m(doc! {"a": {"$regex": "1"}}, doc! {"a": 1}));
    let re = |p: &str, o: &str| {
        Bson::RegularExpression(bson::Regex {
            pattern: p.try_into().expect("no NUL"),
            options: o.try_into().expect("no NUL"),
        })
    };
    assert!(m(doc! {"a": re("^x$", "m")}, doc! {"a": "y\nx"}));
    assert!(m(doc! {"a": {"$regex": re("^X", "i")}}, doc! {"a": "xy"}));
    assert!(m(doc! {"a": {"$regex": re("^X", "i"), "$options": ""}}, doc! {"a": "xy"}));
    assert!(m(doc! {"a": {"$regex": re("^X", ""), "$options": "i"}}, doc! {"a": "xy"}));
    // A regex stored as a value matches the same regex, and $eq compares regex values.
    assert!(m(doc! {"a": re("^x", "")}, doc! {"a": re("^x", "")}));
    assert!(m(doc! {"a": {"$eq": re("^x", "")}}, doc! {"a": re("^x", "")}));
    assert!(!m(doc! {"a": {"$eq": re("^x", "")}}, doc! {"a": "xyz"}));
    assert_eq!(err(doc! {"a": {"$options": "i"}}).message, "$options needs a $regex");
    assert_eq!(err(doc! {"a": {"$regex": 5}}).message, "$regex has to be a string");
    assert_eq!(
        err(doc! {"a": {"$regex": re("x", "i"), "$options": "m"}}).message,
        "options set in both $regex and $options"
    );
    assert_eq!(err(doc! {"a": {"$regex": "x", "$options": "q"}}).message, "invalid flag in regex options: q");
    let e = err(doc! {"a": {"$regex": "(a)\\1"}});
    assert_eq!(e.code, ErrorCode::BadValue);
    assert!(e.message.starts_with("Regular expression is invalid"), "{}", e.message);
    assert_eq!(err(doc! {"a": {"$ne": re("x", "")}}).code, ErrorCode::BadValue);
}

#[test]
fn mod_operator() {
    assert!(m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5}));
    assert!(m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.9}));
    assert!(m(doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5}));
    assert!(m(doc! {"a": {"$mod": [4.5, 1]}}, doc! {"a": dec("9.99")}));
    assert!(m(doc! {"a": {"$mod": [-1, 0]}}, doc! {"a": i64::MIN}));
    assert!(!m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"}));
    assert!(!m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": f64::NAN}));
    assert!(!m(doc! {"a": {"$mod": [4, 0]}}, doc! {"a": 1e30}));
    assert!(m(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": [2, 9]}));
    assert_eq!(err(doc! {"a": {"$mod": 4}}).message, "malformed mod, needs to be an array");
    assert_eq!(err(doc! {"a": {"$mod": [4]}}).message, "malformed mod, not enough elements");
    assert_eq!(err(doc! {"a": {"$mod": [4, 1, 2]}}).message, "malformed mod, too many elements");
    assert_eq!(err(doc! {"a": {"$mod": ["4", 1]}}).message, "malformed mod, divisor not a number");
    assert_eq!(err(doc! {"a": {"$mod": [4, "1"]}}).message, "malformed mod, remainder not a number");
    assert_eq!(err(doc! {"a": {"$mod": [0, 1]}}).message, "divisor cannot be 0");
    assert_eq!(err(doc! {"a": {"$mod": [f64::NAN, 1]}}).code, ErrorCode::BadValue);
    assert_eq!(err(doc! {"a": {"$mod": [1e300, 1]}}).code, ErrorCode::BadValue);
}

#[test]
fn size_operator() {
    assert!(m(doc! {"a": {"$size": 2}}, doc! {"a": [1, [2, 3]]}));
    assert!(m(doc! {"a": {"$size": 0}}, doc! {"a": []}));
    assert!(m(doc! {"a": {"$size": 2.0}}, doc! {"a": [1, 2]}));
    assert!(!m(doc! {"a": {"$size": 2}}, doc! {"a": [[1, 2]]}));
    assert!(!m(doc! {"a": {"$size": 1}}, doc! {"a": 1}));
    assert!(m(doc! {"a.b": {"$size": 1}}, doc! {"a": [{"b": [1]}, {"b": 2}]}));
    assert_eq!(err(doc! {"a": {"$size": "2"}}).message, "$size needs a number");
    assert_eq!(err(doc! {"a": {"$size": -1}}).code, ErrorCode::BadValue);
    assert_eq!(err(doc! {"a": {"$size": 1.5}}).code, ErrorCode::BadValue);
}

#[test]
fn all_operator() {
    assert!(m(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]}));
    assert!(!m(doc! {"a": {"$all": [1, 4]}}, doc! {"a": [2, 3, 1]}));
    assert!(m(doc! {"a": {"$all": [1]}}, doc! {"a": 1}));
    assert!(m(doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [[1, 2], 3]}));
    assert!(!m(doc! {"a": {"$all": []}}, doc! {"a": [1]}));
    assert!(m(
        doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"c": 2}}]}},
        doc! {"a": [{"b": 1}, {"c": 2}]}
    ));
    assert_eq!(err(doc! {"a": {"$all": 1}}).message, "$all needs an array");
    assert_eq!(
        err(doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, 1]}}).message,
        "$all/$elemMatch has to be consistent"
    );
    assert_eq!(err(doc! {"a": {"$all": [{"$gt": 1}]}}).message, "no $ expressions in $all");
}

#[test]
fn elem_match() {
    let d = doc! {"a": [{"b": 1, "c": 2}, {"b": 2, "c": 1}]};
    assert!(m(doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}}, d.clone()));
    assert!(!m(doc! {"a": {"$elemMatch": {"b": 1, "c": 1}}}, d.clone()));
    assert!(m(doc! {"a.b": 1, "a.c": 1}, d.clone()));
    assert!(m(doc! {"a": {"$elemMatch": {"$or": [{"b": 5}, {"c": 1}]}}}, d.clone()));
    assert!(m(doc! {"a": {"$elemMatch": {"$gte": 2, "$lt": 3}}}, doc! {"a": [1, 2.5]}));
    assert!(m(doc! {"a": {"$elemMatch": {"$ne": null}}}, doc! {"a": [[]]}));
    assert!(!m(doc! {"a": {"$elemMatch": {"$eq": null}}}, doc! {"a": null}));
    assert!(m(doc! {"a": {"$elemMatch": {"$not": {"$gt": 5}}}}, doc! {"a": [6, 3]}));
    assert!(!m(doc! {"a": {"$elemMatch": {"$not": {"$gt": 5}}}}, doc! {"a": [6, 7]}));
    assert!(m(doc! {"a": {"$elemMatch": {"$elemMatch": {"$gt": 1}}}}, doc! {"a": [[0], [2]]}));
    assert!(m(doc! {"a": {"$elemMatch": {"0": 5}}}, doc! {"a": [[5]]}));
    assert!(m(doc! {"a": {"$elemMatch": {}}}, doc! {"a": [{"x": 1}]}));
    assert!(!m(doc! {"a": {"$elemMatch": {}}}, doc! {"a": [1]}));
    assert!(m(doc! {"a.b": {"$elemMatch": {"$gt": 1}}}, doc! {"a": [{"b": [0, 2]}]}));
    assert_eq!(err(doc! {"a": {"$elemMatch": 1}}).message, "$elemMatch needs an Object");
}

#[test]
fn parse_errors() {
    let e = err(doc! {"a": {"$foo": 1}});
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::BadValue, "unknown operator: $foo"));
    assert_eq!(err(doc! {"a": {"$gt": 1, "b": 1}}).message, "unknown operator: b");
    assert_eq!(err(doc! {"$foo": 1}).message, "unknown top level operator: $foo");
    for op in ["$where", "$text"] {
        assert_eq!(err(doc! {op: "x"}).code, ErrorCode::NotImplemented, "{op}");
    }
    assert_eq!(err(doc! {"a": {"$near": [0, 0]}}).code, ErrorCode::NotImplemented);
    assert_eq!(err(doc! {"a": Bson::Undefined}).message, "cannot compare to undefined");
    assert_eq!(err(doc! {"a": {"$in": [Bson::Undefined]}}).code, ErrorCode::BadValue);
    // A document nested past the depth limit is refused, not a stack overflow.
    let mut deep = doc! {"a": 1};
    for _ in 0..200 {
        deep = doc! {"$and": [deep]};
    }
    assert_eq!(err(deep).code, ErrorCode::BadValue);
}

#[test]
fn dbref_objects_are_values() {
    assert!(m(doc! {"a": {"$ref": "c", "$id": 1}}, doc! {"a": {"$ref": "c", "$id": 1}}));
}

#[test]
fn id_equality_finds_point_lookups() {
    assert_eq!(id_equality(&doc! {"_id": 5, "a": 1}), Some(&Bson::Int32(5)));
    assert_eq!(id_equality(&doc! {"_id": {"$eq": "x"}}), Some(&Bson::String("x".into())));
    assert_eq!(id_equality(&doc! {"$and": [{"a": 1}, {"_id": 7}]}), Some(&Bson::Int32(7)));
    assert_eq!(id_equality(&doc! {"_id": {"k": 1}}), Some(&Bson::Document(doc! {"k": 1})));
    assert_eq!(id_equality(&doc! {"_id": {"$gt": 5}}), None);
    assert_eq!(id_equality(&doc! {"_id": {"$eq": 5, "$ne": 6}}), None);
    assert_eq!(id_equality(&doc! {"$or": [{"_id": 1}, {"_id": 2}]}), None);
    assert_eq!(id_equality(&doc! {"a": 1}), None);
}

#[test]
fn id_range_brackets_one_sided_bounds() {
    use crate::keystring::encode;
    let r = id_range(&doc! {"_id": {"$gt": 5, "$lte": 10}}).expect("constrained");
    assert!(!r.contains(&encode(&Bson::Int32(5))));
    assert!(r.contains(&encode(&Bson::Double(5.5))));
    assert!(r.contains(&encode(&Bson::Int64(10))));
    assert!(!r.contains(&encode(&Bson::Int32(11))));
    let r = id_range(&doc! {"_id": {"$gte": 5}}).expect("constrained");
    assert!(r.contains(&encode(&Bson::Double(f64::INFINITY))));
    assert!(!r.contains(&encode(&Bson::String("a".into()))));
    let r = id_range(&doc! {"_id": {"$lt": "m"}}).expect("constrained");
    assert!(r.contains(&encode(&Bson::String(String::new()))));
    assert!(!r.contains(&encode(&Bson::Int32(1))));
    assert!(id_range(&doc! {"_id": {"$gt": 5}, "$and": [{"_id": {"$lt": "a"}}]}).expect("constrained").is_empty());
    assert!(!id_range(&doc! {"_id": 3}).expect("constrained").is_empty());
    let r = id_range(&doc! {"_id": {"$gt": Bson::MinKey}}).expect("constrained");
    assert!(r.contains(&encode(&Bson::Boolean(true))));
    assert!(!r.contains(&encode(&Bson::MinKey)));
    assert_eq!(id_range(&doc! {"a": {"$gt": 1}}), None);
    assert_eq!(id_range(&doc! {"_id": {"$in": [1, 2]}}), None);
}

#[test]
fn equality_fields_seed_upserts() {
    let got = equality_fields(&doc! {
        "a": 1, "b.c": 2, "$and": [{"d": 3}], "e": {"$gt": 1}, "f": {"$eq": 4},
        "g": {"$in": [5]}, "h": {"$in": [5, 6]}, "$or": [{"i": 7}],
    })
    .expect("no conflicts");
    assert_eq!(got, doc! {"a": 1, "b": {"c": 2}, "d": 3, "f": 4, "g": 5, "i": 7});
    let e = equality_fields(&doc! {"a": 1, "$and": [{"a": 2}]}).expect_err("twice");
    assert_eq!(e.code, ErrorCode::NotSingleValueField);
    let e = equality_fields(&doc! {"a": 1, "a.b": 2}).expect_err("prefix");
    assert_eq!(e.code, ErrorCode::NotSingleValueField);
    assert_eq!(equality_fields(&doc! {"a.b": 1, "a.c": 2}).expect("siblings"), doc! {"a": {"b": 1, "c": 2}});
}

#[test]
fn expr_compares_fields_of_one_document() {
    let docs = [doc! {"_id": 1, "a": 5, "b": 3}, doc! {"_id": 2, "a": 1, "b": 3}, doc! {"_id": 3, "a": 2}];
    assert_eq!(ids(doc! {"$expr": {"$gt": ["$a", "$b"]}}, &docs), vec![1, 3]);
    assert_eq!(ids(doc! {"$expr": {"$eq": [{"$add": ["$a", 1]}, "$b"]}}, &docs), Vec::<i32>::new());
    // Truthiness: a missing field, null and 0 are false; anything else (a string, []) is true.
    assert_eq!(ids(doc! {"$expr": "$b"}, &docs), vec![1, 2]);
    assert_eq!(ids(doc! {"$expr": {"$subtract": ["$a", 1]}}, &docs), vec![1, 3]);
    assert_eq!(ids(doc! {"$expr": []}, &docs), vec![1, 2, 3]);
    assert_eq!(ids(doc! {"$expr": "$$ROOT.b"}, &docs), vec![1, 2]);
    assert_eq!(ids(doc! {"a": {"$lt": 5}, "$or": [{"$expr": {"$eq": ["$a", 2]}}, {"b": 3}]}, &docs), vec![2, 3]);
    assert_eq!(ids(doc! {"$nor": [{"$expr": "$b"}]}, &docs), vec![3]);
}

#[test]
fn expr_errors_propagate_through_try_matches() {
    let f = Filter::parse(&doc! {"$expr": {"$gt": [{"$divide": ["$a", "$b"]}, 1]}}).unwrap();
    assert_eq!(f.try_matches(&doc! {"a": 4, "b": 2}), Ok(true));
    let e = f.try_matches(&doc! {"a": 4, "b": 0}).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadValue);
    assert!(!f.matches(&doc! {"a": 4, "b": 0}));
    // Short-circuits as MongoDB's $and does: the first false child ends evaluation.
    let f = Filter::parse(&doc! {"$and": [{"a": 1}, {"$expr": {"$divide": [1, 0]}}]}).unwrap();
    assert_eq!(f.try_matches(&doc! {"a": 2}), Ok(false));
    assert!(f.try_matches(&doc! {"a": 1}).is_err());
    let undefined = Filter::parse(&doc! {"$expr": "$$nope"}).unwrap();
    assert_eq!(undefined.try_matches(&doc! {}).unwrap_err().code, ErrorCode::Location17276);
}

#[test]
fn expr_sees_let_variables() {
    let vars = crate::vars::LetVars::parse(Some(&doc! {"lim": 3, "name": {"$toUpper": "x"}})).unwrap();
    let f = Filter::parse(&doc! {"$expr": {"$and": [{"$gt": ["$a", "$$lim"]}, {"$eq": ["$n", "$$name"]}]}})
        .unwrap()
        .with_vars(&vars);
    assert_eq!(f.try_matches(&doc! {"a": 4, "n": "X"}), Ok(true));
    assert_eq!(f.try_matches(&doc! {"a": 3, "n": "X"}), Ok(false));
    let nested = Filter::parse(&doc! {"$or": [{"$expr": "$$lim"}]}).unwrap().with_vars(&vars);
    assert_eq!(nested.try_matches(&doc! {}), Ok(true));
}

#[test]
fn expr_parse_errors() {
    assert_eq!(err(doc! {"$expr": {"$nope": 1}}).code, ErrorCode::InvalidPipelineOperator);
    assert_eq!(err(doc! {"a": {"$elemMatch": {"$expr": true}}}).code, ErrorCode::BadValue);
    assert_eq!(err(doc! {"a": {"$expr": true}}).code, ErrorCode::BadValue);
}

#[test]
fn collation_changes_string_comparisons_only() {
    use crate::collation::Collation;
    let ci = Collation::parse(&doc! {"locale": "en", "strength": 2}).unwrap();
    let base = Collation::parse(&doc! {"locale": "en", "strength": 1}).unwrap();
    let docs = [
        doc! {"_id": 1, "s": "apple"},
        doc! {"_id": 2, "s": "APPLE"},
        doc! {"_id": 3, "s": "Äpple"},
        doc! {"_id": 4, "s": ["x", "Banana"]},
        doc! {"_id": 5, "s": 7},
        doc! {"_id": 6, "s": {"t": "APPLE"}},
    ];
    let with = |filter: Document, c: Collation| -> Vec<i32> {
        let f = Filter::parse(&filter).unwrap().with_collation(c).unwrap();
        docs.iter().filter(|d| f.matches(d)).map(|d| d.get_i32("_id").unwrap()).collect()
    };
    assert_eq!(with(doc! {"s": "Apple"}, Collation::Simple), Vec::<i32>::new());
    assert_eq!(with(doc! {"s": "Apple"}, ci), vec![1, 2]);
    assert_eq!(with(doc! {"s": "Apple"}, base), vec![1, 2, 3]);
    assert_eq!(with(doc! {"s": {"$in": ["banana", 7]}}, ci), vec![4, 5]);
    assert_eq!(with(doc! {"s": {"$nin": ["APPLE"]}}, ci), vec![3, 4, 5, 6]);
    assert_eq!(with(doc! {"s": {"$ne": "apple"}}, base), vec![4, 5, 6]);
    assert_eq!(with(doc! {"s": {"$gt": "b", "$lt": "c"}}, ci), vec![4]);
    assert_eq!(with(doc! {"s": {"t": "apple"}}, ci), vec![6]);
    assert_eq!(with(doc! {"s": {"$elemMatch": {"$eq": "BANANA"}}}, ci), vec![4]);
    // $regex stays binary, as in MongoDB.
    assert_eq!(with(doc! {"s": {"$regex": "^apple"}}, ci), vec![1]);
    let expr = Filter::parse(&doc! {"$expr": true}).unwrap().with_collation(ci).unwrap_err();
    assert_eq!(expr.code, ErrorCode::NotImplemented);
}

mod equivalences {
    //! `$expr` and `$jsonSchema` against the plain operators they coincide with on numbers.
    use bson::doc;
    use proptest::prelude::*;

    use crate::filter::Filter;

    fn number() -> impl Strategy<Value = bson::Bson> {
        prop_oneof![
            (-5i32..5).prop_map(bson::Bson::Int32),
            (-5i64..5).prop_map(bson::Bson::Int64),
            (-10i32..10).prop_map(|h| bson::Bson::Double(f64::from(h) / 2.0)),
        ]
    }

    proptest! {
        #[test]
        fn expr_comparisons_equal_field_operators_on_numbers(a in number(), c in number(), op in 0usize..5) {
            let (agg, query) = [("$gt", "$gt"), ("$gte", "$gte"), ("$lt", "$lt"), ("$lte", "$lte"), ("$eq", "$eq")][op];
            let d = doc! {"a": a};
            let via_expr = Filter::parse(&doc! {"$expr": {agg: ["$a", c.clone()]}}).unwrap().try_matches(&d).unwrap();
            let via_field = Filter::parse(&doc! {"a": {query: c}}).unwrap().matches(&d);
            prop_assert_eq!(via_expr, via_field);
        }

        #[test]
        fn schema_bounds_equal_range_operators(a in number(), lo in number(), hi in number(), exclusive in any::<bool>()) {
            let d = doc! {"a": a};
            let schema = doc! {"$jsonSchema": {"properties": {"a": {
                "minimum": lo.clone(), "exclusiveMinimum": exclusive, "maximum": hi.clone(),
            }}}};
            let low = if exclusive { "$gt" } else { "$gte" };
            let range = doc! {"a": {low: lo, "$lte": hi}};
            prop_assert_eq!(Filter::parse(&schema).unwrap().matches(&d), Filter::parse(&range).unwrap().matches(&d));
        }
    }
}
