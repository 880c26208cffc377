//! Unit tests of pipelines: every stage, the expression operators, and the error cases.

use super::*;
use bson::{DateTime, bson, doc};

fn pipeline(stages: Bson) -> Pipeline {
    let Bson::Array(stages) = stages else { panic!("test pipelines are arrays") };
    Pipeline::parse(&stages).unwrap()
}

fn parse_err(stages: Bson) -> QueryError {
    let Bson::Array(stages) = stages else { panic!("test pipelines are arrays") };
    Pipeline::parse(&stages).unwrap_err()
}

fn run(stages: Bson, docs: Vec<Document>) -> Vec<Document> {
    pipeline(stages).run(docs.into_iter()).unwrap()
}

fn run_err(stages: Bson, docs: Vec<Document>) -> QueryError {
    pipeline(stages).run(docs.into_iter()).unwrap_err()
}

/// The value of one expression over one document, through `$project`.
fn eval(expr: Bson, d: Document) -> Option<Bson> {
    let out = run(bson!([{"$project": {"_id": 0, "v": expr}}]), vec![d]);
    out[0].get("v").cloned()
}

fn eval_err(expr: Bson, d: Document) -> QueryError {
    run_err(bson!([{"$project": {"_id": 0, "v": expr}}]), vec![d])
}

fn numbers(n: i32) -> Vec<Document> {
    (0..n).map(|i| doc! {"_id": i, "n": i, "g": i % 3}).collect()
}

#[test]
fn parse_errors() {
    let err = parse_err(bson!([{"$foo": {}}]));
    assert_eq!(err.code, ErrorCode::Location40324);
    assert_eq!(err.message, "Unrecognized pipeline stage name: '$foo'");
    assert_eq!(parse_err(bson!([1])).code, ErrorCode::TypeMismatch);
    assert_eq!(parse_err(bson!([{"$limit": 1, "$skip": 1}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{"$match": 1}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{"$project": 1}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{"$project": {}}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$addFields": "x"}])).code, ErrorCode::FailedToParse);
}

#[test]
fn match_and_leading_match() {
    let p = pipeline(bson!([{"$match": {"g": 1}}, {"$project": {"n": 1}}]));
    assert_eq!(p.leading_match(), Some(&doc! {"g": 1}));
    assert_eq!(p.run(numbers(6).into_iter()).unwrap(), vec![doc! {"_id": 1, "n": 1}, doc! {"_id": 4, "n": 4}]);
    // The caller filtered already: only the rest runs.
    let pre = numbers(2).into_iter().filter(|d| d.get_i32("g").ok() == Some(1));
    assert_eq!(p.run_after_leading_match(pre).unwrap(), vec![doc! {"_id": 1, "n": 1}]);
    assert_eq!(pipeline(bson!([{"$limit": 1}])).leading_match(), None);
    assert_eq!(format!("{p:?}"), "[\"$match\", \"$project\"]");
}

#[test]
fn limit_and_skip() {
    assert_eq!(run(bson!([{"$skip": 2}, {"$limit": 2}]), numbers(10)), numbers(4)[2..].to_vec());
    assert_eq!(run(bson!([{"$skip": 20}]), numbers(10)), Vec::<Document>::new());
    assert_eq!(run(bson!([{"$limit": 3.0}]), numbers(10)).len(), 3);
    assert_eq!(run(bson!([{"$limit": 3i64}]), numbers(10)).len(), 3);
    assert_eq!(parse_err(bson!([{"$limit": 0}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$limit": -1}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$limit": 1.5}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$limit": "1"}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{"$skip": -1}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$skip": "x"}])).code, ErrorCode::FailedToParse);
    assert_eq!(run(bson!([{"$skip": 0}]), numbers(2)).len(), 2);
}

#[test]
fn limit_stops_pulling_input() {
    let mut pulled = 0;
    let input = (0..1_000_000).map(|i| {
        pulled += 1;
        doc! {"n": i}
    });
    let out = pipeline(bson!([{"$project": {"n": 1}}, {"$limit": 2}])).run(input).unwrap();
    assert_eq!(out.len(), 2);
    assert!(pulled <= 3, "pulled {pulled}");
}

#[test]
fn sort_stage() {
    let out = run(bson!([{"$sort": {"g": -1, "n": 1}}, {"$project": {"_id": 1}}]), numbers(6));
    let ids: Vec<i32> = out.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    assert_eq!(ids, vec![2, 5, 1, 4, 0, 3]);
    assert_eq!(parse_err(bson!([{"$sort": 1}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{"$sort": {}}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$sort": {"a": 2}}])).code, ErrorCode::BadValue);
}

#[test]
fn sort_then_limit_keeps_top_k() {
    let docs = numbers(100);
    let out = run(bson!([{"$sort": {"n": -1}}, {"$limit": 3}]), docs.clone());
    assert_eq!(out.iter().map(|d| d.get_i32("n").unwrap()).collect::<Vec<_>>(), vec![99, 98, 97]);
    let out = run(bson!([{"$sort": {"n": -1}}, {"$skip": 2}, {"$limit": 2}]), docs);
    assert_eq!(out.iter().map(|d| d.get_i32("n").unwrap()).collect::<Vec<_>>(), vec![97, 96]);
}

#[test]
fn memory_limit_for_sort_and_group() {
    let docs: Vec<Document> = (0..100).map(|i| doc! {"_id": i, "pad": "x".repeat(100)}).collect();
    let sort = pipeline(bson!([{"$sort": {"_id": 1}}])).with_memory_limit_bytes(5_000);
    let err = sort.run(docs.clone().into_iter()).unwrap_err();
    assert_eq!(err.code, ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed);
    let sort = sort.with_allow_disk_use(true);
    assert_eq!(sort.run(docs.clone().into_iter()).unwrap().len(), 100);
    // Top-k holds only k documents, so it fits.
    let topk = pipeline(bson!([{"$sort": {"_id": 1}}, {"$limit": 2}])).with_memory_limit_bytes(5_000);
    assert_eq!(topk.run(docs.clone().into_iter()).unwrap().len(), 2);
    let group = pipeline(bson!([{"$group": {"_id": null, "all": {"$push": "$pad"}}}])).with_memory_limit_bytes(5_000);
    let err = group.run(docs.clone().into_iter()).unwrap_err();
    assert_eq!(err.code, ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed);
    assert!(group.with_allow_disk_use(true).run(docs.clone().into_iter()).is_ok());
    // allowDiskUse raises the bound, but Shoal does not spill: past it, a clear error.
    let tiny = pipeline(bson!([{"$sort": {"_id": 1}}])).with_memory_limit_bytes(500).with_allow_disk_use(true);
    assert_eq!(tiny.run(docs.into_iter()).unwrap_err().code, ErrorCode::ExceededMemoryLimit);
}

#[test]
fn count_stage() {
    assert_eq!(run(bson!([{"$count": "total"}]), numbers(7)), vec![doc! {"total": 7}]);
    assert_eq!(run(bson!([{"$count": "total"}]), vec![]), Vec::<Document>::new());
    for bad in [bson!(""), bson!("$x"), bson!("a.b"), bson!(1)] {
        assert_eq!(parse_err(bson!([{"$count": bad.clone()}])).code, ErrorCode::BadValue, "{bad}");
    }
}

#[test]
fn count_documents_as_drivers_send_it() {
    let stages = bson!([
        {"$match": {"g": 0}},
        {"$skip": 1},
        {"$limit": 10},
        {"$group": {"_id": 1, "n": {"$sum": 1}}}
    ]);
    assert_eq!(run(stages.clone(), numbers(10)), vec![doc! {"_id": 1, "n": 3}]);
    assert_eq!(run(stages, vec![]), Vec::<Document>::new());
    let all = bson!([{"$match": {}}, {"$group": {"_id": 1, "n": {"$sum": 1}}}]);
    assert_eq!(run(all, numbers(10)), vec![doc! {"_id": 1, "n": 10}]);
}

#[test]
fn unwind_string_form() {
    let docs = vec![
        doc! {"_id": 1, "a": [1, 2]},
        doc! {"_id": 2, "a": []},
        doc! {"_id": 3, "a": null},
        doc! {"_id": 4},
        doc! {"_id": 5, "a": 7},
    ];
    assert_eq!(
        run(bson!([{"$unwind": "$a"}]), docs),
        vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 1, "a": 2}, doc! {"_id": 5, "a": 7}]
    );
    let nested = vec![doc! {"x": {"a": [1, 2]}}];
    assert_eq!(run(bson!([{"$unwind": "$x.a"}]), nested), vec![doc! {"x": {"a": 1}}, doc! {"x": {"a": 2}}]);
    // No traversal of arrays on the way.
    assert_eq!(run(bson!([{"$unwind": "$x.a"}]), vec![doc! {"x": [{"a": [1]}]}]), Vec::<Document>::new());
}

#[test]
fn unwind_document_form() {
    let docs =
        vec![doc! {"_id": 1, "a": ["x", "y"]}, doc! {"_id": 2, "a": []}, doc! {"_id": 3, "a": null}, doc! {"_id": 4}];
    let out =
        run(bson!([{"$unwind": {"path": "$a", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}}]), docs);
    assert_eq!(
        out,
        vec![
            doc! {"_id": 1, "a": "x", "i": 0i64},
            doc! {"_id": 1, "a": "y", "i": 1i64},
            doc! {"_id": 2, "i": null},
            doc! {"_id": 3, "a": null, "i": null},
            doc! {"_id": 4, "i": null},
        ]
    );
}

#[test]
fn unwind_errors() {
    for bad in [
        bson!("a"),
        bson!(1),
        bson!({}),
        bson!({"path": 1}),
        bson!({"path": "$a", "x": 1}),
        bson!({"path": "$a", "includeArrayIndex": "$i"}),
        bson!({"path": "$a", "includeArrayIndex": ""}),
        bson!({"path": "$a", "preserveNullAndEmptyArrays": 1}),
    ] {
        assert_eq!(parse_err(bson!([{"$unwind": bad.clone()}])).code, ErrorCode::FailedToParse, "{bad}");
    }
}

#[test]
fn group_accumulators() {
    let docs = vec![
        doc! {"k": "a", "v": 1, "s": "x"},
        doc! {"k": "b", "v": 2.5, "s": "y"},
        doc! {"k": "a", "v": 3, "s": "x"},
        doc! {"k": "a", "s": "z"},
    ];
    let out = run(
        bson!([{"$group": {
            "_id": "$k",
            "sum": {"$sum": "$v"},
            "avg": {"$avg": "$v"},
            "min": {"$min": "$v"},
            "max": {"$max": "$v"},
            "first": {"$first": "$v"},
            "last": {"$last": "$v"},
            "push": {"$push": "$v"},
            "set": {"$addToSet": "$s"},
            "n": {"$count": {}},
        }}]),
        docs,
    );
    assert_eq!(
        out,
        vec![
            doc! {"_id": "a", "sum": 4, "avg": 2.0, "min": 1, "max": 3, "first": 1, "last": null,
            "push": [1, 3], "set": ["x", "z"], "n": 3},
            doc! {"_id": "b", "sum": 2.5, "avg": 2.5, "min": 2.5, "max": 2.5, "first": 2.5, "last": 2.5,
            "push": [2.5], "set": ["y"], "n": 1},
        ]
    );
}

#[test]
fn group_keys_compare_by_value() {
    let docs = vec![doc! {"k": 1}, doc! {"k": 1.0}, doc! {"k": 1i64}, doc! {"k": null}, doc! {}];
    let out = run(bson!([{"$group": {"_id": "$k", "n": {"$sum": 1}}}]), docs);
    assert_eq!(out, vec![doc! {"_id": 1, "n": 3}, doc! {"_id": null, "n": 2}]);
    let docs = vec![doc! {"a": 1, "b": 2}, doc! {"a": 1, "b": 2}, doc! {"a": 1}];
    let out = run(bson!([{"$group": {"_id": {"a": "$a", "b": "$b"}, "n": {"$sum": 1}}}]), docs);
    assert_eq!(out, vec![doc! {"_id": {"a": 1, "b": 2}, "n": 2}, doc! {"_id": {"a": 1}, "n": 1}]);
}

#[test]
fn group_sum_widens() {
    let docs = vec![doc! {"v": i32::MAX}, doc! {"v": 1}];
    assert_eq!(
        run(bson!([{"$group": {"_id": null, "s": {"$sum": "$v"}}}]), docs),
        vec![doc! {"_id": null, "s": i64::from(i32::MAX) + 1}]
    );
    let docs = vec![doc! {"v": i64::MAX}, doc! {"v": 1}];
    let out = run(bson!([{"$group": {"_id": null, "s": {"$sum": "$v"}}}]), docs);
    assert!(matches!(out[0].get("s"), Some(Bson::Double(_))));
    let out = run(bson!([{"$group": {"_id": null, "s": {"$sum": "$v"}, "a": {"$avg": "$v"}}}]), vec![doc! {"v": "x"}]);
    assert_eq!(out, vec![doc! {"_id": null, "s": 0, "a": null}]);
}

#[test]
fn group_errors() {
    let err = parse_err(bson!([{"$group": {"n": {"$sum": 1}}}]));
    assert_eq!(err.code, ErrorCode::Location15955);
    assert_eq!(err.message, "a group specification must include an _id");
    let err = parse_err(bson!([{"$group": {"_id": null, "n": {"$foo": 1}}}]));
    assert_eq!(err.code, ErrorCode::Location15952);
    assert_eq!(err.message, "unknown group operator '$foo'");
    // Server-side JavaScript is refused as not built yet, not as unknown.
    let err = parse_err(bson!([{"$group": {"_id": null, "n": {"$accumulator": {}}}}]));
    assert_eq!(err.code, ErrorCode::NotImplemented);
    let err =
        parse_err(bson!([{"$project": {"x": {"$function": {"body": "function() {}", "args": [], "lang": "js"}}}}]));
    assert_eq!(err.code, ErrorCode::NotImplemented);
    for bad in [
        bson!({"_id": null, "n": 1}),
        bson!({"_id": null, "n": {"$sum": 1, "$avg": 1}}),
        bson!({"_id": null, "n": {"$sum": [1, 2]}}),
        bson!({"_id": null, "a.b": {"$sum": 1}}),
        bson!({"_id": null, "n": {"$count": 1}}),
    ] {
        assert_eq!(parse_err(bson!([{"$group": bad.clone()}])).code, ErrorCode::BadValue, "{bad}");
    }
    assert_eq!(parse_err(bson!([{"$group": 1}])).code, ErrorCode::FailedToParse);
}

#[test]
fn add_fields_set_and_unset_stages() {
    let docs = vec![doc! {"_id": 1, "a": 2, "b": 3}];
    assert_eq!(
        run(bson!([{"$addFields": {"c": {"$multiply": ["$a", "$b"]}}}, {"$set": {"a": "$$REMOVE"}}]), docs.clone()),
        vec![doc! {"_id": 1, "b": 3, "c": 6}]
    );
    assert_eq!(run(bson!([{"$unset": "a"}]), docs.clone()), vec![doc! {"_id": 1, "b": 3}]);
    assert_eq!(run(bson!([{"$unset": ["a", "_id"]}]), docs), vec![doc! {"b": 3}]);
    assert_eq!(parse_err(bson!([{"$unset": 1}])).code, ErrorCode::FailedToParse);
    assert_eq!(parse_err(bson!([{"$unset": [1]}])).code, ErrorCode::FailedToParse);
}

#[test]
fn arithmetic_operators() {
    let d = doc! {"i": 2, "l": 3i64, "f": 0.5, "s": "x", "t": DateTime::from_millis(1000)};
    assert_eq!(eval(bson!({"$add": ["$i", "$l"]}), d.clone()), Some(bson!(5i64)));
    assert_eq!(eval(bson!({"$add": ["$i", "$f"]}), d.clone()), Some(bson!(2.5)));
    assert_eq!(eval(bson!({"$add": [i32::MAX, 1]}), d.clone()), Some(bson!(i64::from(i32::MAX) + 1)));
    assert_eq!(eval(bson!({"$add": ["$t", 500]}), d.clone()), Some(Bson::DateTime(DateTime::from_millis(1500))));
    assert_eq!(eval(bson!({"$add": ["$i", "$nope"]}), d.clone()), Some(Bson::Null));
    assert_eq!(eval(bson!({"$add": []}), d.clone()), Some(bson!(0)));
    assert_eq!(eval(bson!({"$subtract": ["$i", "$f"]}), d.clone()), Some(bson!(1.5)));
    assert_eq!(eval(bson!({"$subtract": ["$t", "$t"]}), d.clone()), Some(bson!(0i64)));
    assert_eq!(eval(bson!({"$subtract": ["$t", 1]}), d.clone()), Some(Bson::DateTime(DateTime::from_millis(999))));
    assert_eq!(eval(bson!({"$multiply": ["$i", "$l", 2]}), d.clone()), Some(bson!(12i64)));
    assert_eq!(eval(bson!({"$multiply": ["$i", null]}), d.clone()), Some(Bson::Null));
    assert_eq!(eval(bson!({"$divide": ["$i", 4]}), d.clone()), Some(bson!(0.5)));
    assert_eq!(eval(bson!({"$divide": [null, 4]}), d.clone()), Some(Bson::Null));
    assert_eq!(eval_err(bson!({"$add": ["$s", 1]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$add": ["$t", "$t"]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$subtract": ["$s", 1]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$multiply": ["$s", 1]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$divide": ["$s", 1]}), d.clone()).code, ErrorCode::TypeMismatch);
    let err = eval_err(bson!({"$divide": [1, 0]}), d);
    assert_eq!(err.message, "can't $divide by zero");
    assert_eq!(parse_err(bson!([{"$project": {"v": {"$subtract": [1]}}}])).code, ErrorCode::BadValue);
}

#[test]
fn string_operators() {
    let d = doc! {"a": "Hello", "n": 5};
    assert_eq!(eval(bson!({"$concat": ["$a", " ", "world"]}), d.clone()), Some(bson!("Hello world")));
    assert_eq!(eval(bson!({"$concat": ["$a", "$nope"]}), d.clone()), Some(Bson::Null));
    assert_eq!(eval_err(bson!({"$concat": ["$a", "$n"]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval(bson!({"$toUpper": "$a"}), d.clone()), Some(bson!("HELLO")));
    assert_eq!(eval(bson!({"$toLower": ["$a"]}), d.clone()), Some(bson!("hello")));
    assert_eq!(eval(bson!({"$toLower": "$nope"}), d.clone()), Some(bson!("")));
    assert_eq!(eval(bson!({"$toUpper": "$n"}), d.clone()), Some(bson!("5")));
    assert_eq!(eval_err(bson!({"$toUpper": [[1]]}), d).code, ErrorCode::TypeMismatch);
}

#[test]
fn conditional_operators() {
    let d = doc! {"a": 5, "z": 0, "n": null};
    assert_eq!(eval(bson!({"$cond": [{"$gt": ["$a", 3]}, "big", "small"]}), d.clone()), Some(bson!("big")));
    assert_eq!(eval(bson!({"$cond": {"if": "$z", "then": 1, "else": 2}}), d.clone()), Some(bson!(2)));
    assert_eq!(eval(bson!({"$cond": ["$nope", 1, "$nope"]}), d.clone()), None);
    assert_eq!(eval(bson!({"$ifNull": ["$n", "$nope", "dflt"]}), d.clone()), Some(bson!("dflt")));
    assert_eq!(eval(bson!({"$ifNull": ["$a", "dflt"]}), d.clone()), Some(bson!(5)));
    assert_eq!(parse_err(bson!([{"$project": {"v": {"$ifNull": ["$a"]}}}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$project": {"v": {"$cond": [1, 2]}}}])).code, ErrorCode::BadValue);
}

#[test]
fn comparison_and_boolean_operators() {
    let d = doc! {"a": 5, "b": 5.0, "s": "x", "n": null};
    let t = Some(bson!(true));
    let f = Some(bson!(false));
    assert_eq!(eval(bson!({"$eq": ["$a", "$b"]}), d.clone()), t);
    assert_eq!(eval(bson!({"$ne": ["$a", "$s"]}), d.clone()), t);
    assert_eq!(eval(bson!({"$gt": ["$s", "$a"]}), d.clone()), t);
    assert_eq!(eval(bson!({"$gte": ["$a", 5]}), d.clone()), t);
    assert_eq!(eval(bson!({"$lt": ["$a", 5]}), d.clone()), f);
    assert_eq!(eval(bson!({"$lte": ["$a", 5]}), d.clone()), t);
    // Missing is not null in aggregation comparisons, and sorts below it.
    assert_eq!(eval(bson!({"$eq": ["$nope", null]}), d.clone()), f);
    assert_eq!(eval(bson!({"$lt": ["$nope", "$n"]}), d.clone()), t);
    assert_eq!(eval(bson!({"$and": [1, "$a", true]}), d.clone()), t);
    assert_eq!(eval(bson!({"$and": [1, "$n"]}), d.clone()), f);
    assert_eq!(eval(bson!({"$and": []}), d.clone()), t);
    assert_eq!(eval(bson!({"$or": [0, "$nope", "$s"]}), d.clone()), t);
    assert_eq!(eval(bson!({"$or": []}), d.clone()), f);
    assert_eq!(eval(bson!({"$not": ["$n"]}), d.clone()), t);
    assert_eq!(eval(bson!({"$not": [[]]}), d), f);
}

#[test]
fn array_and_type_operators() {
    let d = doc! {"a": [10, 20, 30], "s": "x"};
    assert_eq!(eval(bson!({"$size": "$a"}), d.clone()), Some(bson!(3)));
    assert_eq!(eval_err(bson!({"$size": "$s"}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$size": "$nope"}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval(bson!({"$arrayElemAt": ["$a", 1]}), d.clone()), Some(bson!(20)));
    assert_eq!(eval(bson!({"$arrayElemAt": ["$a", -1]}), d.clone()), Some(bson!(30)));
    assert_eq!(eval(bson!({"$arrayElemAt": ["$a", 5]}), d.clone()), None);
    assert_eq!(eval(bson!({"$arrayElemAt": ["$nope", 0]}), d.clone()), Some(Bson::Null));
    assert_eq!(eval_err(bson!({"$arrayElemAt": ["$s", 0]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$arrayElemAt": ["$a", "x"]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval_err(bson!({"$arrayElemAt": ["$a", 1.5]}), d.clone()).code, ErrorCode::BadValue);
    assert_eq!(eval(bson!({"$in": [20.0, "$a"]}), d.clone()), Some(bson!(true)));
    assert_eq!(eval(bson!({"$in": [21, "$a"]}), d.clone()), Some(bson!(false)));
    assert_eq!(eval_err(bson!({"$in": [1, "$s"]}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(eval(bson!({"$type": "$a"}), d.clone()), Some(bson!("array")));
    assert_eq!(eval(bson!({"$type": "$nope"}), d.clone()), Some(bson!("missing")));
    assert_eq!(eval(bson!({"$type": 1i64}), d), Some(bson!("long")));
}

#[test]
fn unknown_expression_operator() {
    let err = parse_err(bson!([{"$project": {"v": {"$foo": 1}}}]));
    assert_eq!(err.code, ErrorCode::InvalidPipelineOperator);
    assert_eq!(err.message, "Unrecognized expression '$foo'");
    let err = parse_err(bson!([{"$group": {"_id": {"$foo": 1}}}]));
    assert_eq!(err.code, ErrorCode::InvalidPipelineOperator);
}

#[test]
fn errors_after_skip_are_not_swallowed() {
    let stages = bson!([{"$project": {"v": {"$size": "$a"}}}, {"$skip": 1}]);
    assert_eq!(run_err(stages, vec![doc! {"a": 1}, doc! {"a": [1]}]).code, ErrorCode::TypeMismatch);
}

#[test]
fn replace_root_sort_by_count_and_new_accumulators() {
    let docs = vec![
        doc! {"_id": 1, "k": "a", "v": 2, "o": {"x": 1}},
        doc! {"_id": 2, "k": "b", "v": 4, "o": {"y": 2}},
        doc! {"_id": 3, "k": "a", "v": 4, "o": {"x": 3}},
    ];
    assert_eq!(
        run(bson!([{"$replaceRoot": {"newRoot": "$o"}}]), docs.clone()),
        vec![doc! {"x": 1}, doc! {"y": 2}, doc! {"x": 3}]
    );
    assert_eq!(run(bson!([{"$replaceWith": {"id": "$_id"}}, {"$limit": 1}]), docs.clone()), vec![doc! {"id": 1}]);
    assert_eq!(run_err(bson!([{"$replaceWith": "$k"}]), docs.clone()).code, ErrorCode::Location40228);
    assert_eq!(
        run(bson!([{"$sortByCount": "$k"}]), docs.clone()),
        vec![doc! {"_id": "a", "count": 2}, doc! {"_id": "b", "count": 1}]
    );
    assert_eq!(parse_err(bson!([{"$sortByCount": "k"}])).code, ErrorCode::BadValue);
    let out = run(
        bson!([{"$group": {"_id": null, "pop": {"$stdDevPop": "$v"}, "samp": {"$stdDevSamp": "$v"}, "m": {"$mergeObjects": "$o"}}}]),
        docs,
    );
    let g = &out[0];
    assert!((g.get_f64("pop").unwrap() - 0.942_809_041_582_063_4).abs() < 1e-12);
    assert!((g.get_f64("samp").unwrap() - 1.154_700_538_379_251_5).abs() < 1e-12);
    assert_eq!(g.get_document("m").unwrap(), &doc! {"x": 3, "y": 2});
    let one = run(bson!([{"$group": {"_id": null, "s": {"$stdDevSamp": "$v"}}}]), vec![doc! {"v": 1}]);
    assert_eq!(one[0].get("s"), Some(&Bson::Null), "one value has no sample deviation");
}

#[test]
fn conversion_string_date_and_switch_expressions() {
    let d = doc! {"n": 7, "s": "Shoal", "t": DateTime::from_millis(1_709_251_199_123), "x": 2.5};
    assert_eq!(eval(bson!({"$mod": ["$n", 4]}), d.clone()), Some(Bson::Int32(3)));
    assert_eq!(eval(bson!({"$substr": ["$s", 1, 3]}), d.clone()), Some(Bson::String("hoa".into())));
    assert_eq!(eval(bson!({"$toString": "$n"}), d.clone()), Some(Bson::String("7".into())));
    assert_eq!(eval(bson!({"$toInt": "$x"}), d.clone()), Some(Bson::Int32(2)));
    assert_eq!(eval(bson!({"$year": "$t"}), d.clone()), Some(Bson::Int32(2024)));
    assert_eq!(eval(bson!({"$month": "$t"}), d.clone()), Some(Bson::Int32(2)));
    assert_eq!(eval(bson!({"$dayOfMonth": {"date": "$t", "timezone": "UTC"}}), d.clone()), Some(Bson::Int32(29)));
    assert_eq!(
        eval(bson!({"$dateToString": {"date": "$t", "format": "%Y-%m-%d"}}), d.clone()),
        Some(Bson::String("2024-02-29".into()))
    );
    assert_eq!(
        eval(bson!({"$dateToString": {"date": "$t"}}), d.clone()),
        Some(Bson::String("2024-02-29T23:59:59.123Z".into()))
    );
    assert_eq!(
        eval(
            bson!({"$switch": {"branches": [{"case": {"$gt": ["$n", 10]}, "then": "big"}, {"case": {"$gt": ["$n", 5]}, "then": "mid"}], "default": "small"}}),
            d.clone()
        ),
        Some(Bson::String("mid".into()))
    );
    assert_eq!(
        eval_err(bson!({"$switch": {"branches": [{"case": false, "then": 1}]}}), d.clone()).code,
        ErrorCode::BadValue
    );
    // With a timezone the default format has no `Z`: the time is local.
    assert_eq!(
        eval(bson!({"$dateToString": {"date": "$t", "timezone": "Europe/Paris"}}), d.clone()),
        Some(Bson::String("2024-03-01T00:59:59.123".into()))
    );
    assert_eq!(parse_err(bson!([{"$project": {"a": {"$switch": {"branches": []}}}}])).code, ErrorCode::FailedToParse);
}

#[test]
fn facet_bucket_and_sample() {
    let docs: Vec<Document> = (1..=10).map(|i| doc! {"_id": i, "v": i * 10}).collect();
    let out = run(
        bson!([{"$facet": {
            "small": [{"$match": {"v": {"$lt": 30}}}, {"$project": {"_id": 1}}],
            "total": [{"$count": "n"}],
        }}]),
        docs.clone(),
    );
    assert_eq!(out, vec![doc! {"small": [{"_id": 1}, {"_id": 2}], "total": [{"n": 10}]}]);
    assert_eq!(parse_err(bson!([{"$facet": {"x": [{"$facet": {"y": []}}]}}])).code, ErrorCode::BadValue);
    assert_eq!(parse_err(bson!([{"$facet": {}}])).code, ErrorCode::BadValue);

    let out = run(
        bson!([{"$bucket": {"groupBy": "$v", "boundaries": [0, 25, 60], "default": "other", "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}]),
        docs.clone(),
    );
    assert_eq!(
        out,
        vec![
            doc! {"_id": 0, "n": 2, "ids": [1, 2]},
            doc! {"_id": 25, "n": 3, "ids": [3, 4, 5]},
            doc! {"_id": "other", "n": 5, "ids": [6, 7, 8, 9, 10]},
        ]
    );
    let counts = run(bson!([{"$bucket": {"groupBy": "$v", "boundaries": [0, 1000]}}]), docs.clone());
    assert_eq!(counts, vec![doc! {"_id": 0, "count": 10}]);
    // No default and a value outside the boundaries: MongoDB's $switch error.
    assert_eq!(
        run_err(bson!([{"$bucket": {"groupBy": "$v", "boundaries": [0, 50]}}]), docs.clone()).code,
        ErrorCode::BadValue
    );
    assert_eq!(parse_err(bson!([{"$bucket": {"groupBy": "$v", "boundaries": [5, 1]}}])).code, ErrorCode::BadValue);
    assert_eq!(
        parse_err(bson!([{"$bucket": {"groupBy": "$v", "boundaries": [0, 10], "default": 5}}])).code,
        ErrorCode::BadValue
    );

    let sample = run(bson!([{"$sample": {"size": 3}}]), docs.clone());
    assert_eq!(sample.len(), 3);
    let mut ids: Vec<i32> = sample.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "without replacement");
    assert_eq!(run(bson!([{"$sample": {"size": 50}}]), docs).len(), 10);
    assert_eq!(parse_err(bson!([{"$sample": {"size": -1}}])).code, ErrorCode::BadValue);
}

#[test]
fn let_map_and_filter_bind_variables() {
    let d = doc! {"xs": [1, 2, 3, 4], "k": 10, "items": [{"n": 1}, {"n": 5}]};
    assert_eq!(
        eval(bson!({"$map": {"input": "$xs", "as": "x", "in": {"$multiply": ["$$x", "$k"]}}}), d.clone()),
        Some(bson!([10, 20, 30, 40]))
    );
    assert_eq!(eval(bson!({"$map": {"input": "$items", "in": "$$this.n"}}), d.clone()), Some(bson!([1, 5])));
    assert_eq!(
        eval(bson!({"$filter": {"input": "$xs", "cond": {"$gt": ["$$this", 2]}}}), d.clone()),
        Some(bson!([3, 4]))
    );
    assert_eq!(
        eval(bson!({"$filter": {"input": "$xs", "as": "v", "cond": {"$gt": ["$$v", 1]}, "limit": 2}}), d.clone()),
        Some(bson!([2, 3]))
    );
    assert_eq!(eval(bson!({"$filter": {"input": "$missing", "cond": true}}), d.clone()), Some(Bson::Null));
    assert_eq!(
        eval(bson!({"$let": {"vars": {"a": "$k", "b": 5}, "in": {"$add": ["$$a", "$$b"]}}}), d.clone()),
        Some(Bson::Int32(15))
    );
    // Nested scopes see outer variables; an unbound name fails (17276).
    assert_eq!(
        eval(
            bson!({"$let": {"vars": {"m": 100}, "in": {"$map": {"input": "$xs", "in": {"$add": ["$$this", "$$m"]}}}}}),
            d.clone()
        ),
        Some(bson!([101, 102, 103, 104]))
    );
    assert_eq!(eval_err(bson!({"$add": ["$$nope", 1]}), d.clone()).code, ErrorCode::Location17276);
    assert_eq!(eval_err(bson!({"$map": {"input": "$k", "in": 1}}), d.clone()).code, ErrorCode::TypeMismatch);
    assert_eq!(
        parse_err(bson!([{"$project": {"a": {"$map": {"input": "$xs", "as": "Bad", "in": 1}}}}])).code,
        ErrorCode::FailedToParse
    );
}

#[test]
fn let_variables_reach_every_stage() {
    let lets = doc! {"two": 2, "label": {"$concat": ["a", "b"]}};
    let p = Pipeline::parse(
        bson!([
            {"$set": {"d": {"$multiply": ["$v", "$$two"]}}},
            {"$group": {"_id": "$$label", "s": {"$sum": "$d"}}},
            {"$facet": {"f": [{"$replaceWith": {"tag": "$$label", "s": "$s"}}]}},
        ])
        .as_array()
        .unwrap(),
    )
    .unwrap()
    .with_let(Some(&lets))
    .unwrap();
    let out = p.run(vec![doc! {"v": 1}, doc! {"v": 4}].into_iter()).unwrap();
    assert_eq!(out, vec![doc! {"f": [{"tag": "ab", "s": 10}]}]);
    let bad = Pipeline::parse(&[]).unwrap().with_let(Some(&doc! {"Bad": 1}));
    assert_eq!(bad.err().map(|e| e.code), Some(ErrorCode::Location16867));
}
