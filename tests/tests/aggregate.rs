//! `aggregate` with each stage of the issue: `$match $project $addFields $sort $limit $skip
//! $count $unwind $group`, and `$group` accumulators `$sum $avg $min $max $first $last $push
//! $addToSet`; cursors over many batches; unknown stages (40324).
//!
//! Accumulator results are compared as numbers, not by BSON numeric type, which MongoDB leaves to
//! the implementation in places (e.g. `$sum` widening).

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use shoal_tests::TestContext;
use shoal_tests::expect;
use shoal_tests::fixtures::{int_id, num, seed};

const DB: &str = "aggregate";

async fn run(c: &Collection<Document>, pipeline: Vec<Document>) -> Vec<Document> {
    c.aggregate(pipeline.clone())
        .await
        .unwrap_or_else(|e| panic!("aggregate {pipeline:?}: {e:?}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("iterating aggregate {pipeline:?}: {e:?}"))
}

fn id_list(docs: &[Document]) -> Vec<i64> {
    docs.iter().map(int_id).collect()
}

/// Seven sales, with a missing `qty`, empty/null/scalar/missing `tags`.
async fn sales(ctx: &TestContext, name: &str) -> Collection<Document> {
    let c = ctx.coll(name);
    seed(
        &c,
        [
            doc! {"_id": 1, "item": "apple", "region": "north", "qty": 5, "price": 1.5, "tags": ["fruit", "red"]},
            doc! {"_id": 2, "item": "pear", "region": "south", "qty": 3, "price": 2.0, "tags": ["fruit"]},
            doc! {"_id": 3, "item": "apple", "region": "south", "qty": 7, "price": 1.25, "tags": []},
            doc! {"_id": 4, "item": "kale", "region": "north", "qty": 2, "price": 3.0, "tags": ["veg", "green"]},
            doc! {"_id": 5, "item": "plum", "region": "east", "price": 4.0, "tags": Bson::Null},
            doc! {"_id": 6, "item": "fig", "region": "east", "qty": 4, "price": 5.0, "tags": "dried"},
            doc! {"_id": 7, "item": "kiwi", "region": "north", "qty": 1, "price": 0.5},
        ],
    )
    .await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_pipeline_and_match() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "match").await;
    assert_eq!(run(&c, vec![]).await.len(), 7);
    let docs = run(&c, vec![doc! {"$match": {"region": "north"}}, doc! {"$sort": {"_id": 1}}]).await;
    assert_eq!(id_list(&docs), [1, 4, 7]);
    let docs = run(&c, vec![doc! {"$match": {"qty": {"$gte": 3}, "tags": "fruit"}}, doc! {"$sort": {"_id": 1}}]).await;
    assert_eq!(id_list(&docs), [1, 2]);
    let docs = run(&c, vec![doc! {"$match": {"_id": 3}}]).await;
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].get_str("item").unwrap(), "apple");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_inclusion_exclusion_and_renaming() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "project").await;
    let sorted = doc! {"$sort": {"_id": 1}};
    let docs = run(&c, vec![sorted.clone(), doc! {"$project": {"item": 1, "qty": 1}}]).await;
    assert_eq!(docs[0], doc! {"_id": 1, "item": "apple", "qty": 5});
    assert_eq!(docs[4], doc! {"_id": 5, "item": "plum"}, "missing fields stay missing");

    let docs = run(&c, vec![sorted.clone(), doc! {"$project": {"_id": 0, "item": 1}}]).await;
    assert_eq!(docs[1], doc! {"item": "pear"});

    let docs = run(&c, vec![sorted.clone(), doc! {"$project": {"tags": 0, "price": 0, "region": 0}}]).await;
    assert_eq!(docs[0], doc! {"_id": 1, "item": "apple", "qty": 5});

    let docs = run(&c, vec![sorted, doc! {"$project": {"_id": 0, "name": "$item", "where": "$region"}}]).await;
    assert_eq!(docs[2], doc! {"name": "apple", "where": "south"});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_fields_sets_literals_and_paths() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "add_fields").await;
    let docs = run(
        &c,
        vec![
            doc! {"$match": {"_id": 1}},
            doc! {"$project": {"tags": 0}},
            doc! {"$addFields": {"one": 1, "where": "$region", "qty": "$price"}},
        ],
    )
    .await;
    assert_eq!(
        docs,
        [doc! {
            "_id": 1, "item": "apple", "region": "north", "qty": 1.5, "price": 1.5,
            "one": 1, "where": "north",
        }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_skip_and_limit_stages() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "sort_skip_limit").await;
    let docs = run(&c, vec![doc! {"$sort": {"region": 1, "qty": -1}}]).await;
    assert_eq!(id_list(&docs), [6, 5, 1, 4, 7, 3, 2]);
    let docs = run(&c, vec![doc! {"$sort": {"_id": 1}}, doc! {"$skip": 2}, doc! {"$limit": 3}]).await;
    assert_eq!(id_list(&docs), [3, 4, 5]);
    let docs = run(&c, vec![doc! {"$sort": {"_id": 1}}, doc! {"$limit": 3}, doc! {"$skip": 1}]).await;
    assert_eq!(id_list(&docs), [2, 3]);
    let docs = run(&c, vec![doc! {"$sort": {"price": -1}}, doc! {"$limit": 1}]).await;
    assert_eq!(id_list(&docs), [6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_stage() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "count").await;
    let docs = run(&c, vec![doc! {"$match": {"region": "north"}}, doc! {"$count": "n"}]).await;
    assert_eq!(docs.len(), 1);
    assert_eq!(num(docs[0].get("n")), 3.0);
    assert_eq!(docs[0].keys().collect::<Vec<_>>(), ["n"]);
    let docs = run(&c, vec![doc! {"$match": {"region": "west"}}, doc! {"$count": "n"}]).await;
    assert_eq!(docs, Vec::<Document>::new(), "$count of nothing outputs no document");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwind_drops_empty_null_and_missing_and_wraps_scalars() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "unwind").await;
    let docs =
        run(&c, vec![doc! {"$sort": {"_id": 1}}, doc! {"$unwind": "$tags"}, doc! {"$project": {"tags": 1}}]).await;
    assert_eq!(
        docs,
        [
            doc! {"_id": 1, "tags": "fruit"},
            doc! {"_id": 1, "tags": "red"},
            doc! {"_id": 2, "tags": "fruit"},
            doc! {"_id": 4, "tags": "veg"},
            doc! {"_id": 4, "tags": "green"},
            doc! {"_id": 6, "tags": "dried"},
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwind_with_preserve_and_array_index() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "unwind_preserve").await;
    let docs = run(
        &c,
        vec![
            doc! {"$sort": {"_id": 1}},
            doc! {"$unwind": {
                "path": "$tags", "preserveNullAndEmptyArrays": true, "includeArrayIndex": "idx",
            }},
        ],
    )
    .await;
    let pairs: Vec<(i64, Option<Bson>)> = docs.iter().map(|d| (int_id(d), d.get("idx").cloned())).collect();
    let i = |n: i64| Some(Bson::Int64(n));
    let null = Some(Bson::Null);
    assert_eq!(
        pairs,
        [
            (1, i(0)),
            (1, i(1)),
            (2, i(0)),
            (3, null.clone()),
            (4, i(0)),
            (4, i(1)),
            (5, null.clone()),
            (6, null.clone()),
            (7, null),
        ]
    );
    assert_eq!(docs[6].get("tags"), Some(&Bson::Null), "a null is preserved as null");
    assert_eq!(docs[8].get("tags"), None, "a missing field stays missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_sum_avg_min_max_by_key() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "group_numeric").await;
    let docs = run(
        &c,
        vec![
            doc! {"$group": {
                "_id": "$region",
                "total": {"$sum": "$qty"},
                "count": {"$sum": 1},
                "avg_price": {"$avg": "$price"},
                "avg_qty": {"$avg": "$qty"},
                "min_qty": {"$min": "$qty"},
                "max_qty": {"$max": "$qty"},
            }},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    let regions: Vec<&str> = docs.iter().map(|d| d.get_str("_id").unwrap()).collect();
    assert_eq!(regions, ["east", "north", "south"]);
    let row = |d: &Document| {
        [
            num(d.get("total")),
            num(d.get("count")),
            num(d.get("avg_price")),
            num(d.get("avg_qty")),
            num(d.get("min_qty")),
            num(d.get("max_qty")),
        ]
    };
    // Missing qty (plum) is ignored by $sum, $avg, $min and $max.
    assert_eq!(row(&docs[0]), [4.0, 2.0, 4.5, 4.0, 4.0, 4.0]);
    assert_eq!(row(&docs[1]), [8.0, 3.0, 5.0 / 3.0, 8.0 / 3.0, 1.0, 5.0]);
    assert_eq!(row(&docs[2]), [10.0, 2.0, 1.625, 5.0, 3.0, 7.0]);
    assert!(matches!(docs[0].get("avg_qty"), Some(Bson::Double(_))), "$avg is a double");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_first_last_push_add_to_set() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "group_arrays").await;
    let docs = run(
        &c,
        vec![
            doc! {"$sort": {"_id": 1}},
            doc! {"$group": {
                "_id": "$region",
                "first": {"$first": "$item"},
                "last": {"$last": "$item"},
                "items": {"$push": "$item"},
                "qtys": {"$push": "$qty"},
                "uniq": {"$addToSet": "$item"},
            }},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    let sorted_strings = |v: &Bson| {
        let mut s: Vec<String> =
            v.as_array().expect("an array").iter().map(|x| x.as_str().expect("a string").to_string()).collect();
        s.sort();
        s
    };
    let expected = [
        ("east", "plum", "fig", bson::bson!(["plum", "fig"]), bson::bson!([4])),
        ("north", "apple", "kiwi", bson::bson!(["apple", "kale", "kiwi"]), bson::bson!([5, 2, 1])),
        ("south", "pear", "apple", bson::bson!(["pear", "apple"]), bson::bson!([3, 7])),
    ];
    assert_eq!(docs.len(), 3);
    for (d, (region, first, last, items, qtys)) in docs.iter().zip(expected) {
        assert_eq!(d.get_str("_id").unwrap(), region);
        assert_eq!(d.get_str("first").unwrap(), first, "{d}");
        assert_eq!(d.get_str("last").unwrap(), last, "{d}");
        assert_eq!(d.get("items"), Some(&items), "{d}");
        // $push skips a missing value (plum has no qty).
        assert_eq!(d.get("qtys"), Some(&qtys), "{d}");
        assert_eq!(sorted_strings(d.get("uniq").unwrap()), sorted_strings(&items), "{d}");
    }

    let all = run(
        &c,
        vec![doc! {"$group": {"_id": Bson::Null, "uniq": {"$addToSet": "$item"}, "qty": {"$sum": "$qty"}, "n": {"$sum": 1}}}],
    )
    .await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].get("_id"), Some(&Bson::Null));
    assert_eq!(sorted_strings(all[0].get("uniq").unwrap()), ["apple", "fig", "kale", "kiwi", "pear", "plum"]);
    assert_eq!(num(all[0].get("qty")), 22.0);
    assert_eq!(num(all[0].get("n")), 7.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_by_compound_key() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "group_compound").await;
    let docs = run(
        &c,
        vec![
            doc! {"$group": {"_id": {"r": "$region", "i": "$item"}, "qty": {"$sum": "$qty"}}},
            doc! {"$sort": {"_id.r": 1, "_id.i": 1}},
        ],
    )
    .await;
    let keys: Vec<(String, String, f64)> = docs
        .iter()
        .map(|d| {
            let k = d.get_document("_id").unwrap();
            (k.get_str("r").unwrap().to_string(), k.get_str("i").unwrap().to_string(), num(d.get("qty")))
        })
        .collect();
    let expected: Vec<(String, String, f64)> = [
        ("east", "fig", 4.0),
        ("east", "plum", 0.0),
        ("north", "apple", 5.0),
        ("north", "kale", 2.0),
        ("north", "kiwi", 1.0),
        ("south", "apple", 7.0),
        ("south", "pear", 3.0),
    ]
    .into_iter()
    .map(|(r, i, q)| (r.to_string(), i.to_string(), q))
    .collect();
    assert_eq!(keys, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stages_compose() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "compose").await;
    let docs = run(
        &c,
        vec![
            doc! {"$match": {"qty": {"$gte": 2}}},
            doc! {"$unwind": "$tags"},
            doc! {"$group": {"_id": "$tags", "n": {"$sum": 1}}},
            doc! {"$sort": {"n": -1, "_id": 1}},
            doc! {"$limit": 2},
        ],
    )
    .await;
    let rows: Vec<(&str, f64)> = docs.iter().map(|d| (d.get_str("_id").unwrap(), num(d.get("n")))).collect();
    assert_eq!(rows, [("fruit", 2.0), ("dried", 1.0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_cursor_across_many_batches() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("batches");
    seed(&c, (0..300).map(|i| doc! {"_id": i, "m": i % 3})).await;
    let docs: Vec<Document> = c
        .aggregate(vec![doc! {"$match": {"m": 0}}, doc! {"$sort": {"_id": -1}}])
        .batch_size(7)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(id_list(&docs), (0..300).rev().filter(|i| i % 3 == 0).collect::<Vec<i64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_on_missing_collection_is_empty() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("never_created");
    assert_eq!(run(&c, vec![doc! {"$match": {}}]).await, Vec::<Document>::new());
    assert_eq!(run(&c, vec![doc! {"$count": "n"}]).await, Vec::<Document>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_stage_is_error_40324() {
    let ctx = TestContext::shared(DB).await;
    let c = sales(&ctx, "unknown_stage").await;
    let result = c.aggregate(vec![doc! {"$frobnicate": {}}]).await;
    expect::command_error(result, 40324);
    // The client and the router keep serving.
    assert_eq!(run(&c, vec![doc! {"$count": "n"}]).await.len(), 1);
}

/// The stages and expressions added for issue 8 so far, through the driver: `$replaceRoot`,
/// `$replaceWith`, `$sortByCount`, `$stdDevPop`, `$mergeObjects`, `$switch`, `$dateToString`,
/// `$toString`, `$mod`, `$substr`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_root_sort_by_count_and_more_expressions() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("more_stages");
    let at = bson::DateTime::from_millis(1_709_251_199_123);
    seed(
        &c,
        [
            doc! {"_id": 1, "k": "a", "v": 2, "o": {"x": 1}, "t": at},
            doc! {"_id": 2, "k": "b", "v": 4, "o": {"y": 2}, "t": at},
            doc! {"_id": 3, "k": "a", "v": 4, "o": {"x": 3}, "t": at},
        ],
    )
    .await;
    let roots = run(&c, vec![doc! {"$sort": {"_id": 1}}, doc! {"$replaceRoot": {"newRoot": "$o"}}]).await;
    assert_eq!(roots, vec![doc! {"x": 1}, doc! {"y": 2}, doc! {"x": 3}]);
    let counts = run(&c, vec![doc! {"$sortByCount": "$k"}]).await;
    assert_eq!(counts, vec![doc! {"_id": "a", "count": 2}, doc! {"_id": "b", "count": 1}]);
    let g = run(
        &c,
        vec![
            doc! {"$sort": {"_id": 1}},
            doc! {"$group": {"_id": null, "sd": {"$stdDevPop": "$v"}, "m": {"$mergeObjects": "$o"}}},
        ],
    )
    .await;
    assert!((g[0].get_f64("sd").expect("sd") - 0.942_809_041_582_063_4).abs() < 1e-9);
    assert_eq!(g[0].get_document("m").expect("m"), &doc! {"x": 3, "y": 2});
    let shaped = run(
        &c,
        vec![
            doc! {"$match": {"_id": 2}},
            doc! {"$replaceWith": {
                "size": {"$switch": {"branches": [{"case": {"$gte": ["$v", 4]}, "then": "big"}], "default": "small"}},
                "day": {"$dateToString": {"date": "$t", "format": "%Y-%m-%d"}},
                "label": {"$concat": [{"$toString": "$v"}, "-", {"$substr": ["$k", 0, 1]}]},
                "odd": {"$mod": ["$v", 3]},
            }},
        ],
    )
    .await;
    assert_eq!(shaped, vec![doc! {"size": "big", "day": "2024-02-29", "label": "4-b", "odd": 1}]);
    let facets = run(
        &c,
        vec![doc! {"$facet": {
            "byKey": [{"$sortByCount": "$k"}],
            "buckets": [{"$bucket": {"groupBy": "$v", "boundaries": [0, 3, 10]}}],
            "some": [{"$sample": {"size": 2}}, {"$count": "n"}],
        }}],
    )
    .await;
    assert_eq!(
        facets,
        vec![doc! {
            "byKey": [{"_id": "a", "count": 2}, {"_id": "b", "count": 1}],
            "buckets": [{"_id": 0, "count": 1}, {"_id": 3, "count": 2}],
            "some": [{"n": 2}],
        }]
    );
    let bad = c.aggregate(vec![doc! {"$replaceWith": "$k"}]).await;
    let code = match bad.map(|_| ()).map_err(|e| *e.kind) {
        Err(mongodb::error::ErrorKind::Command(c)) => c.code,
        other => panic!("expected a command error, got {other:?}"),
    };
    assert_eq!(code, 40228);
}
