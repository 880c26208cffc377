use bson::{Bson, Document, bson, doc};
use shoal_proto::ErrorCode;

use crate::aggregate::Pipeline;

fn run(stage: Bson, docs: Vec<Document>) -> crate::error::Result<Vec<Document>> {
    Pipeline::parse(&[stage])?.run(docs.into_iter())
}

fn sales() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "s": "A", "t": 1, "q": 5},
        doc! {"_id": 2, "s": "B", "t": 1, "q": 2},
        doc! {"_id": 3, "s": "A", "t": 2, "q": 7},
        doc! {"_id": 4, "s": "A", "t": 4, "q": 1},
        doc! {"_id": 5, "s": "B", "t": 3, "q": 4},
    ]
}

fn field(out: &[Document], f: &str) -> Vec<Bson> {
    out.iter().map(|d| d.get(f).cloned().unwrap_or(Bson::Null)).collect()
}

#[test]
fn running_sum_per_partition_in_sort_order() {
    let out = run(
        bson!({"$setWindowFields": {"partitionBy": "$s", "sortBy": {"t": 1},
            "output": {"run": {"$sum": "$q", "window": {"documents": ["unbounded", "current"]}}}}}),
        sales(),
    )
    .unwrap();
    assert_eq!(field(&out, "_id"), vec![bson!(1), bson!(3), bson!(4), bson!(2), bson!(5)]);
    assert_eq!(field(&out, "run"), vec![bson!(5), bson!(12), bson!(13), bson!(2), bson!(6)]);
}

#[test]
fn sliding_document_windows() {
    let docs: Vec<Document> = (1..=5).map(|i| doc! {"t": i, "v": i * 10}).collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {
            "avg": {"$avg": "$v", "window": {"documents": [-1, 1]}},
            "min": {"$min": "$v", "window": {"documents": [-1, 0]}},
            "max": {"$max": "$v", "window": {"documents": [0, "unbounded"]}},
            "n": {"$count": {}, "window": {"documents": [-2, 0]}},
            "push": {"$push": "$v", "window": {"documents": [-1, "current"]}},
            "first": {"$first": "$v", "window": {"documents": [1, 2]}},
            "last": {"$last": "$v"}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(field(&out, "avg"), vec![bson!(15.0), bson!(20.0), bson!(30.0), bson!(40.0), bson!(45.0)]);
    assert_eq!(field(&out, "min"), vec![bson!(10), bson!(10), bson!(20), bson!(30), bson!(40)]);
    assert_eq!(field(&out, "max"), vec![bson!(50); 5]);
    assert_eq!(field(&out, "n"), vec![bson!(1), bson!(2), bson!(3), bson!(3), bson!(3)]);
    assert_eq!(out[2].get("push"), Some(&bson!([20, 30])));
    assert_eq!(field(&out, "first"), vec![bson!(20), bson!(30), bson!(40), bson!(50), Bson::Null]);
    assert_eq!(field(&out, "last"), vec![bson!(50); 5]);
}

#[test]
fn range_windows_over_numbers_and_dates() {
    let docs: Vec<Document> = [1, 2, 4, 7, 8].iter().map(|i| doc! {"t": *i, "v": 1}).collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1},
            "output": {"n": {"$sum": "$v", "window": {"range": [-2, "current"]}}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(field(&out, "n"), vec![bson!(1), bson!(2), bson!(2), bson!(1), bson!(2)]);
    let day = 86_400_000i64;
    let docs: Vec<Document> =
        [0, 1, 3].iter().map(|d| doc! {"t": bson::DateTime::from_millis(d * day), "v": 1}).collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1},
            "output": {"n": {"$sum": "$v", "window": {"range": [-1, 0], "unit": "day"}}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(field(&out, "n"), vec![bson!(1), bson!(2), bson!(1)]);
}

#[test]
fn rank_dense_rank_document_number_and_shift() {
    let docs: Vec<Document> = [10, 20, 20, 30].iter().map(|v| doc! {"v": *v}).collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"v": -1}, "output": {
            "rank": {"$rank": {}}, "dense": {"$denseRank": {}}, "num": {"$documentNumber": {}},
            "prev": {"$shift": {"output": "$v", "by": -1, "default": "none"}}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(field(&out, "rank"), vec![bson!(1), bson!(2), bson!(2), bson!(4)]);
    assert_eq!(field(&out, "dense"), vec![bson!(1), bson!(2), bson!(2), bson!(3)]);
    assert_eq!(field(&out, "num"), vec![bson!(1), bson!(2), bson!(3), bson!(4)]);
    assert_eq!(field(&out, "prev"), vec![bson!("none"), bson!(30), bson!(20), bson!(20)]);
}

#[test]
fn std_dev_add_to_set_derivative_and_integral() {
    let docs: Vec<Document> = [(0, 0), (1, 2), (2, 4), (3, 4)].iter().map(|(t, v)| doc! {"t": *t, "v": *v}).collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {
            "sd": {"$stdDevPop": "$v"},
            "sds": {"$stdDevSamp": "$v", "window": {"documents": ["current", "current"]}},
            "set": {"$addToSet": "$v"},
            "d": {"$derivative": {"input": "$v"}, "window": {"documents": [-1, 0]}},
            "i": {"$integral": {"input": "$v"}, "window": {"documents": ["unbounded", "current"]}}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(out[0].get("sd"), Some(&Bson::Double(((1.5f64 * 1.5 * 2.0 + 0.25 + 6.25) / 4.0).sqrt())));
    assert_eq!(out[0].get("sds"), Some(&Bson::Null));
    assert_eq!(out[0].get("set"), Some(&bson!([0, 2, 4])));
    assert_eq!(field(&out, "d"), vec![Bson::Null, bson!(2.0), bson!(2.0), bson!(0.0)]);
    assert_eq!(field(&out, "i"), vec![bson!(0.0), bson!(1.0), bson!(4.0), bson!(8.0)]);
}

#[test]
fn dotted_output_and_no_partition() {
    let out = run(bson!({"$setWindowFields": {"output": {"a.total": {"$sum": "$q"}}}}), sales()).unwrap();
    assert_eq!(out[0].get_document("a").unwrap(), &doc! {"total": 19});
}

#[test]
fn bad_specs_are_refused() {
    let cases = [
        bson!({"$setWindowFields": 1}),
        bson!({"$setWindowFields": {}}),
        bson!({"$setWindowFields": {"output": {}, "bogus": 1}}),
        bson!({"$setWindowFields": {"output": {"a": 1}}}),
        bson!({"$setWindowFields": {"output": {"a": {"$bogus": "$x"}}}}),
        bson!({"$setWindowFields": {"output": {"a": {"$sum": "$x", "window": {"documents": [-1, 0]}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$sum": "$x", "window": {"documents": [1, 0]}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$sum": "$x", "window": {"documents": [0.5, 1]}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$sum": "$x", "window": {"documents": [0]}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$sum": "$x",
            "window": {"documents": [0, 1], "range": [0, 1]}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1, "u": 1}, "output": {"a": {"$sum": "$x", "window": {"range": [0, 1]}}}}}),
        bson!({"$setWindowFields": {"output": {"a": {"$rank": {}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$rank": {}, "window": {"documents": [0, 1]}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$shift": {"output": "$x"}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$derivative": {"input": "$x"}}}}}),
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$sum": "$x",
            "window": {"range": [0, 1], "unit": "fortnight"}}}}}),
    ];
    for c in cases {
        assert!(Pipeline::parse(std::slice::from_ref(&c)).is_err(), "{c}");
    }
    let err = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1}, "output": {"a": {"$sum": "$q", "window": {"range": [-1, 0]}}}}}),
        vec![doc! {"t": "x", "q": 1}],
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadValue);
    let err =
        run(bson!({"$setWindowFields": {"partitionBy": "$a", "output": {"n": {"$count": {}}}}}), vec![doc! {"a": [1]}])
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::TypeMismatch);
}

#[test]
fn memory_limit_is_enforced() {
    let docs: Vec<Document> = (0..100).map(|i| doc! {"t": i, "pad": "x".repeat(100)}).collect();
    let p = Pipeline::parse(&[bson!({"$setWindowFields": {"sortBy": {"t": 1},
        "output": {"all": {"$push": "$pad", "window": {"documents": ["unbounded", "current"]}}}}})])
    .unwrap()
    .with_memory_limit_bytes(100_000);
    let err = p.run(docs.into_iter()).unwrap_err();
    assert_eq!(err.code, ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed);
}

#[test]
fn range_current_is_the_position_and_months_are_calendar() {
    let docs: Vec<Document> = [1, 1, 2].iter().map(|t| doc! {"t": *t, "v": 1}).collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1},
            "output": {"n": {"$sum": "$v", "window": {"range": ["unbounded", "current"]}}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(field(&out, "n"), vec![bson!(1), bson!(2), bson!(3)]);
    // 2024-01-31, 2024-02-29, 2024-04-30: a month back from Feb 29 is Jan 29, from Apr 30 Mar 30.
    let day = 86_400_000i64;
    let jan31 = 1_706_659_200_000i64;
    let docs: Vec<Document> = [jan31, jan31 + 29 * day, jan31 + 90 * day]
        .iter()
        .map(|ms| doc! {"t": bson::DateTime::from_millis(*ms), "v": 1})
        .collect();
    let out = run(
        bson!({"$setWindowFields": {"sortBy": {"t": 1},
            "output": {"n": {"$sum": "$v", "window": {"range": [-1, 0], "unit": "month"}}}}}),
        docs,
    )
    .unwrap();
    assert_eq!(field(&out, "n"), vec![bson!(1), bson!(2), bson!(1)]);
    let desc = bson!({"$setWindowFields": {"sortBy": {"t": -1},
        "output": {"n": {"$sum": "$v", "window": {"range": [-1, 0]}}}}});
    assert_eq!(Pipeline::parse(&[desc]).unwrap_err().code, ErrorCode::BadValue);
}
