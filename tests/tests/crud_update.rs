//! Every update operator through `update_one`, `update_many` and upserts: `$set $unset $inc $mul
//! $min $max $rename $setOnInsert $currentDate $push` (with `$each $slice $sort $position`)
//! `$addToSet $pop $pull $pullAll`; `replace_one`; matched/modified/upserted counts; numeric type
//! rules (int32 overflow promotes to int64, mixed types widen); field order of the result.

use bson::{Bson, Document, doc};
use mongodb::Collection;
use mongodb::results::UpdateResult;
use shoal_tests::TestContext;
use shoal_tests::expect;
use shoal_tests::fixtures::{get, ids, keys, seed};

const DB: &str = "crud_update";

/// Applies `update` to the document `_id: id` (which must exist) and returns the result.
async fn apply(c: &Collection<Document>, id: i32, update: Document) -> UpdateResult {
    let result = c
        .update_one(doc! {"_id": id}, update.clone())
        .await
        .unwrap_or_else(|e| panic!("update {update} on _id {id}: {e:?}"));
    assert_eq!(result.matched_count, 1, "update {update} matched nothing");
    result
}

/// Applies `update` and asserts it modified the document.
async fn modify(c: &Collection<Document>, id: i32, update: Document) {
    let result = apply(c, id, update.clone()).await;
    assert_eq!(result.modified_count, 1, "update {update} modified nothing");
}

/// Applies `update` and asserts it was a no-op (matched, not modified).
async fn no_op(c: &Collection<Document>, id: i32, update: Document) {
    let result = apply(c, id, update.clone()).await;
    assert_eq!(result.modified_count, 0, "update {update} should change nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_overwrites_creates_and_pads_arrays() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("set");
    seed(&c, [doc! {"_id": 1, "a": 1, "b": {"c": 1}, "arr": [1, 2]}]).await;
    modify(&c, 1, doc! {"$set": {"a": 2}}).await;
    modify(&c, 1, doc! {"$set": {"new": "x"}}).await;
    modify(&c, 1, doc! {"$set": {"b.d": 2}}).await;
    modify(&c, 1, doc! {"$set": {"n.m.k": 1}}).await;
    modify(&c, 1, doc! {"$set": {"arr.1": 9}}).await;
    modify(&c, 1, doc! {"$set": {"arr.4": 5}}).await;
    no_op(&c, 1, doc! {"$set": {"a": 2}}).await;
    let d = get(&c, 1).await;
    assert_eq!(
        d,
        doc! {
            "_id": 1, "a": 2, "b": {"c": 1, "d": 2},
            "arr": [1, 9, Bson::Null, Bson::Null, 5],
            "new": "x", "n": {"m": {"k": 1}},
        }
    );
    // An existing field keeps its place; new fields go at the end.
    assert_eq!(keys(&d), ["_id", "a", "b", "arr", "new", "n"]);
    assert_eq!(keys(d.get_document("b").unwrap()), ["c", "d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_on_array_of_documents_by_index() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("set_array_docs");
    seed(&c, [doc! {"_id": 1, "items": [{"k": 1}, {"k": 2}]}]).await;
    modify(&c, 1, doc! {"$set": {"items.1.v": 9, "items.0.k": 0}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "items": [{"k": 0}, {"k": 2, "v": 9}]});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_fields_of_one_update_are_added_in_lexicographic_order() {
    // MongoDB 5.0+: "update operators process document fields with string-based names in
    // lexicographic order".
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("set_order");
    seed(&c, [doc! {"_id": 1, "m": 0}]).await;
    modify(&c, 1, doc! {"$set": {"z": 1, "b": 2, "y": 3}}).await;
    assert_eq!(keys(&get(&c, 1).await), ["_id", "m", "b", "y", "z"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unset_removes_fields_and_nulls_array_elements() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("unset");
    seed(&c, [doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [1, 2, 3]}]).await;
    modify(&c, 1, doc! {"$unset": {"a": "", "b.c": 1, "arr.0": true}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "b": {"d": 2}, "arr": [Bson::Null, 2, 3]});
    no_op(&c, 1, doc! {"$unset": {"missing": ""}}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inc_keeps_or_widens_numeric_types() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("inc");
    seed(&c, [doc! {"_id": 1, "i": 1, "l": 1i64, "d": 1.5, "max": i32::MAX, "n": {"v": 1}}]).await;
    modify(&c, 1, doc! {"$inc": {"i": 2, "l": 2, "d": 1, "max": 1, "n.v": -5, "new": 5}}).await;
    let d = get(&c, 1).await;
    assert_eq!(d.get("i"), Some(&Bson::Int32(3)));
    assert_eq!(d.get("l"), Some(&Bson::Int64(3)));
    assert_eq!(d.get("d"), Some(&Bson::Double(2.5)));
    assert_eq!(d.get("max"), Some(&Bson::Int64(2_147_483_648)), "int32 overflow promotes");
    assert_eq!(d.get_document("n").unwrap().get("v"), Some(&Bson::Int32(-4)));
    assert_eq!(d.get("new"), Some(&Bson::Int32(5)));

    modify(&c, 1, doc! {"$inc": {"i": 1i64, "l": 0.5}}).await;
    let d = get(&c, 1).await;
    assert_eq!(d.get("i"), Some(&Bson::Int64(4)));
    assert_eq!(d.get("l"), Some(&Bson::Double(3.5)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inc_with_update_many() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("inc_many");
    seed(&c, (0..6).map(|i| doc! {"_id": i, "g": i % 2, "hits": 0})).await;
    let result = c.update_many(doc! {"g": 1}, doc! {"$inc": {"hits": 1}}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (3, 3));
    assert_eq!(ids(&c, doc! {"hits": 1}).await, [1, 3, 5]);
    assert_eq!(ids(&c, doc! {"hits": 0}).await, [0, 2, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mul_keeps_or_widens_numeric_types() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("mul");
    seed(&c, [doc! {"_id": 1, "a": 5, "b": 2.5, "c": 3i64, "big": 10}]).await;
    modify(&c, 1, doc! {"$mul": {"a": 2, "b": 2, "c": 2, "big": i32::MAX, "zi": 3, "zd": 1.5}}).await;
    let d = get(&c, 1).await;
    assert_eq!(d.get("a"), Some(&Bson::Int32(10)));
    assert_eq!(d.get("b"), Some(&Bson::Double(5.0)));
    assert_eq!(d.get("c"), Some(&Bson::Int64(6)));
    assert_eq!(d.get("big"), Some(&Bson::Int64(21_474_836_470)), "int32 overflow promotes");
    // A missing field becomes a zero of the multiplier's type.
    assert_eq!(d.get("zi"), Some(&Bson::Int32(0)));
    assert_eq!(d.get("zd"), Some(&Bson::Double(0.0)));
    modify(&c, 1, doc! {"$mul": {"a": 1.5}}).await;
    assert_eq!(get(&c, 1).await.get("a"), Some(&Bson::Double(15.0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_and_max_compare_in_bson_order() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("min_max");
    seed(&c, [doc! {"_id": 1, "lo": 5, "hi": 5}]).await;
    modify(&c, 1, doc! {"$min": {"lo": 3}, "$max": {"hi": 7}}).await;
    no_op(&c, 1, doc! {"$min": {"lo": 4}, "$max": {"hi": 6}}).await;
    modify(&c, 1, doc! {"$min": {"new_lo": 1}, "$max": {"new_hi": 2}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "lo": 3, "hi": 7, "new_hi": 2, "new_lo": 1});
    // Across types: null < numbers < strings.
    modify(&c, 1, doc! {"$min": {"lo": Bson::Null}, "$max": {"hi": "str"}}).await;
    let d = get(&c, 1).await;
    assert_eq!(d.get("lo"), Some(&Bson::Null));
    assert_eq!(d.get("hi"), Some(&Bson::String("str".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_moves_fields() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("rename");
    seed(&c, [doc! {"_id": 1, "a": 1, "b": 2, "n": {"x": 1}}]).await;
    modify(&c, 1, doc! {"$rename": {"a": "z"}}).await;
    let d = get(&c, 1).await;
    assert_eq!(d, doc! {"_id": 1, "b": 2, "n": {"x": 1}, "z": 1});
    assert_eq!(keys(&d), ["_id", "b", "n", "z"]);
    modify(&c, 1, doc! {"$rename": {"n.x": "n.y"}}).await;
    no_op(&c, 1, doc! {"$rename": {"missing": "q"}}).await;
    // Onto an existing field: overwrites it.
    modify(&c, 1, doc! {"$rename": {"b": "z"}}).await;
    let d = get(&c, 1).await;
    assert_eq!(d, doc! {"_id": 1, "n": {"y": 1}, "z": 2});
    modify(&c, 1, doc! {"$rename": {"z": "deep.er"}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "n": {"y": 1}, "deep": {"er": 2}});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_on_insert_applies_only_when_inserting() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("set_on_insert");
    let update = doc! {"$set": {"a": 1}, "$setOnInsert": {"created": true}};
    let result = c.update_one(doc! {"_id": 5}, update.clone()).upsert(true).await.unwrap();
    assert_eq!(result.upserted_id, Some(Bson::Int32(5)));
    assert_eq!((result.matched_count, result.modified_count), (0, 0));
    assert_eq!(get(&c, 5).await, doc! {"_id": 5, "a": 1, "created": true});

    let result = c
        .update_one(doc! {"_id": 5}, doc! {"$set": {"a": 2}, "$setOnInsert": {"created": false, "other": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(result.upserted_id, None);
    assert_eq!((result.matched_count, result.modified_count), (1, 1));
    assert_eq!(get(&c, 5).await, doc! {"_id": 5, "a": 2, "created": true});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_date_sets_dates_and_timestamps() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("current_date");
    seed(&c, [doc! {"_id": 1, "d": 0}]).await;
    modify(&c, 1, doc! {"$currentDate": {"d": true, "ts": {"$type": "timestamp"}, "d2": {"$type": "date"}}}).await;
    let d = get(&c, 1).await;
    const JAN_2020_MS: i64 = 1_577_836_800_000;
    match (d.get("d"), d.get("ts"), d.get("d2")) {
        (Some(Bson::DateTime(a)), Some(Bson::Timestamp(t)), Some(Bson::DateTime(b))) => {
            assert!(a.timestamp_millis() > JAN_2020_MS, "{d}");
            assert!(b.timestamp_millis() > JAN_2020_MS, "{d}");
            assert!(i64::from(t.time) * 1000 > JAN_2020_MS, "{d}");
        }
        _ => panic!("expected date, timestamp, date in {d}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_plain_values() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("push");
    seed(&c, [doc! {"_id": 1, "arr": [1, 2, 3]}]).await;
    modify(&c, 1, doc! {"$push": {"arr": 4, "fresh": "a"}}).await;
    // An array argument without $each is pushed as one element.
    modify(&c, 1, doc! {"$push": {"arr": [5, 6]}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "arr": [1, 2, 3, 4, [5, 6]], "fresh": ["a"]});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_with_each_position_sort_and_slice() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("push_modifiers");
    seed(
        &c,
        [
            doc! {"_id": 1, "arr": [1, 2, 3]},
            doc! {"_id": 2, "s": [{"n": "a", "v": 3}, {"n": "b", "v": 1}]},
            doc! {"_id": 3, "arr": [3, 1, 2]},
        ],
    )
    .await;
    let arr = |d: Document| d.get("arr").cloned().unwrap();
    let steps = [
        (doc! {"$each": [4, 5]}, bson::bson!([1, 2, 3, 4, 5])),
        (doc! {"$each": [0], "$position": 0}, bson::bson!([0, 1, 2, 3, 4, 5])),
        (doc! {"$each": [9], "$position": -1}, bson::bson!([0, 1, 2, 3, 4, 9, 5])),
        (doc! {"$each": [], "$sort": 1}, bson::bson!([0, 1, 2, 3, 4, 5, 9])),
        (doc! {"$each": [10, 11], "$slice": -3}, bson::bson!([9, 10, 11])),
        (doc! {"$each": [1], "$slice": 2}, bson::bson!([9, 10])),
        (doc! {"$each": [], "$slice": 0}, bson::bson!([])),
    ];
    for (modifiers, expected) in steps {
        apply(&c, 1, doc! {"$push": {"arr": modifiers.clone()}}).await;
        assert_eq!(arr(get(&c, 1).await), expected, "after $push {modifiers}");
    }

    modify(&c, 2, doc! {"$push": {"s": {"$each": [{"n": "c", "v": 2}], "$sort": {"v": -1}, "$slice": 2}}}).await;
    assert_eq!(get(&c, 2).await, doc! {"_id": 2, "s": [{"n": "a", "v": 3}, {"n": "c", "v": 2}]});

    modify(&c, 3, doc! {"$push": {"arr": {"$each": [5], "$sort": -1}}}).await;
    assert_eq!(arr(get(&c, 3).await), bson::bson!([5, 3, 2, 1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_to_set_adds_only_missing_values() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("add_to_set");
    seed(&c, [doc! {"_id": 1, "tags": ["a", "b"]}]).await;
    modify(&c, 1, doc! {"$addToSet": {"tags": "c"}}).await;
    no_op(&c, 1, doc! {"$addToSet": {"tags": "a"}}).await;
    modify(&c, 1, doc! {"$addToSet": {"tags": {"$each": ["b", "d", "d", "e"]}}}).await;
    modify(&c, 1, doc! {"$addToSet": {"fresh": 1, "objs": {"x": 1}}}).await;
    no_op(&c, 1, doc! {"$addToSet": {"objs": {"x": 1}}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "tags": ["a", "b", "c", "d", "e"], "fresh": [1], "objs": [{"x": 1}]});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_removes_first_or_last() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("pop");
    seed(&c, [doc! {"_id": 1, "arr": [1, 2, 3, 4]}, doc! {"_id": 2, "arr": []}]).await;
    modify(&c, 1, doc! {"$pop": {"arr": 1}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "arr": [1, 2, 3]});
    modify(&c, 1, doc! {"$pop": {"arr": -1}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "arr": [2, 3]});
    no_op(&c, 2, doc! {"$pop": {"arr": 1}}).await;
    no_op(&c, 2, doc! {"$pop": {"missing": 1}}).await;
    assert_eq!(get(&c, 2).await, doc! {"_id": 2, "arr": []});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_by_value_condition_and_document_query() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("pull");
    seed(
        &c,
        [doc! {
            "_id": 1,
            "arr": [1, 2, 3, 4, 5, 2],
            "items": [{"k": 1, "v": 1}, {"k": 2, "v": 2}, {"k": 1, "v": 3}],
            "nested": [[1, 2], [3], [2, 1]],
        }],
    )
    .await;
    modify(&c, 1, doc! {"$pull": {"arr": 2}}).await;
    modify(&c, 1, doc! {"$pull": {"arr": {"$gte": 4}}}).await;
    // A document condition is a query on each element: {k: 1} matches {k: 1, v: ...}.
    modify(&c, 1, doc! {"$pull": {"items": {"k": 1}}}).await;
    // An array value removes only exactly equal arrays.
    modify(&c, 1, doc! {"$pull": {"nested": [1, 2]}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "arr": [1, 3], "items": [{"k": 2, "v": 2}], "nested": [[3], [2, 1]]});
    modify(&c, 1, doc! {"$pull": {"arr": {"$in": [1]}}}).await;
    no_op(&c, 1, doc! {"$pull": {"arr": 42}}).await;
    assert_eq!(get(&c, 1).await.get("arr"), Some(&bson::bson!([3])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_all_removes_every_listed_value() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("pull_all");
    seed(&c, [doc! {"_id": 1, "arr": [0, 5, 5, 1, 0, 2]}]).await;
    modify(&c, 1, doc! {"$pullAll": {"arr": [0, 5]}}).await;
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "arr": [1, 2]});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_one_changes_exactly_one_match() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("update_one_single");
    seed(&c, (0..3).map(|i| doc! {"_id": i, "g": 1})).await;
    let result = c.update_one(doc! {"g": 1}, doc! {"$set": {"hit": true}}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (1, 1));
    assert_eq!(c.count_documents(doc! {"hit": true}).await.unwrap(), 1);
    let result = c.update_one(doc! {"g": 9}, doc! {"$set": {"hit": true}}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (0, 0));
    assert_eq!(result.upserted_id, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_many_counts_matched_and_modified() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("update_many");
    seed(&c, (0..5).map(|i| doc! {"_id": i, "g": i % 2, "v": 0})).await;
    c.update_one(doc! {"_id": 2}, doc! {"$set": {"v": 1}}).await.unwrap();
    let result = c.update_many(doc! {"g": 0}, doc! {"$set": {"v": 1}}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (3, 2));
    let result = c.update_many(doc! {"g": 0}, doc! {"$set": {"v": 1}}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (3, 0));
    assert_eq!(ids(&c, doc! {"v": 1}).await, [0, 2, 4]);

    let result = c.update_many(doc! {"g": 7}, doc! {"$set": {"v": 7}}).upsert(true).await.unwrap();
    assert_eq!(result.matched_count, 0);
    assert!(matches!(result.upserted_id, Some(Bson::ObjectId(_))), "{result:?}");
    assert_eq!(c.count_documents(doc! {"g": 7, "v": 7}).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_builds_the_document_from_equality_conditions() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("upsert");
    let result = c
        .update_one(doc! {"_id": 100, "k": "x"}, doc! {"$set": {"v": 1}, "$setOnInsert": {"c": true}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(result.upserted_id, Some(Bson::Int32(100)));
    let d = get(&c, 100).await;
    assert_eq!(d, doc! {"_id": 100, "k": "x", "v": 1, "c": true});
    assert_eq!(keys(&d)[0], "_id");

    // Only equality conditions are copied; the _id is generated.
    let result = c.update_one(doc! {"k": "y", "n": {"$gt": 5}}, doc! {"$set": {"v": 2}}).upsert(true).await.unwrap();
    let Some(Bson::ObjectId(oid)) = result.upserted_id else { panic!("expected a generated ObjectId: {result:?}") };
    assert_eq!(get(&c, oid).await, doc! {"_id": oid, "k": "y", "v": 2});

    // Equalities inside $and and dotted equalities are copied too.
    c.update_one(doc! {"$and": [{"a": 1}, {"b": 2}]}, doc! {"$inc": {"cnt": 1}}).upsert(true).await.unwrap();
    let d = c.find_one(doc! {"a": 1}).await.unwrap().unwrap();
    assert_eq!(d.get("b"), Some(&Bson::Int32(2)));
    assert_eq!(d.get("cnt"), Some(&Bson::Int32(1)));
    c.update_one(doc! {"n.x": 1}, doc! {"$set": {"y": 1}}).upsert(true).await.unwrap();
    let d = c.find_one(doc! {"y": 1}).await.unwrap().unwrap();
    assert_eq!(d.get_document("n").unwrap(), &doc! {"x": 1});

    // $eq is an equality too, also for _id.
    let result = c.update_one(doc! {"_id": {"$eq": 200}}, doc! {"$set": {"eq": true}}).upsert(true).await.unwrap();
    assert_eq!(result.upserted_id, Some(Bson::Int32(200)));
    assert_eq!(get(&c, 200).await, doc! {"_id": 200, "eq": true});

    // The update applies on top of the seeded equality.
    c.update_one(doc! {"k": "z", "cnt": 5}, doc! {"$inc": {"cnt": 1}}).upsert(true).await.unwrap();
    assert_eq!(c.count_documents(doc! {"k": "z", "cnt": 6}).await.unwrap(), 1);

    // An upsert that matches updates in place.
    let result = c.update_one(doc! {"_id": 100}, doc! {"$set": {"v": 3}}).upsert(true).await.unwrap();
    assert_eq!(result.upserted_id, None);
    assert_eq!((result.matched_count, result.modified_count), (1, 1));
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_one_replaces_everything_but_id() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("replace");
    seed(&c, [doc! {"_id": 1, "a": 1, "b": 2}]).await;
    let result = c.replace_one(doc! {"_id": 1}, doc! {"c": 3}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (1, 1));
    let d = get(&c, 1).await;
    assert_eq!(d, doc! {"_id": 1, "c": 3});
    assert_eq!(keys(&d), ["_id", "c"]);

    // The same _id in the replacement is allowed.
    let result = c.replace_one(doc! {"c": 3}, doc! {"_id": 1, "d": 4}).await.unwrap();
    assert_eq!(result.modified_count, 1);
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "d": 4});

    let result = c.replace_one(doc! {"_id": 2}, doc! {"e": 5}).upsert(true).await.unwrap();
    assert_eq!(result.upserted_id, Some(Bson::Int32(2)));
    assert_eq!(get(&c, 2).await, doc! {"_id": 2, "e": 5});

    // A replacement upsert takes nothing from the filter but _id.
    let result = c.replace_one(doc! {"x": 5}, doc! {"x": 6, "y": 1}).upsert(true).await.unwrap();
    let Some(Bson::ObjectId(oid)) = result.upserted_id else { panic!("expected a generated ObjectId: {result:?}") };
    assert_eq!(get(&c, oid).await, doc! {"_id": oid, "x": 6, "y": 1});

    let result = c.replace_one(doc! {"_id": 99}, doc! {"z": 1}).await.unwrap();
    assert_eq!((result.matched_count, result.modified_count), (0, 0));
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positional_all_and_filtered_updates_with_array_filters() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("positional");
    seed(
        &c,
        [
            doc! {"_id": 1, "grades": [95, 80, 100], "items": [{"k": "a", "n": 1}, {"k": "b", "n": 2}]},
            doc! {"_id": 2, "grades": [50, 92], "items": []},
        ],
    )
    .await;
    modify(&c, 1, doc! {"$inc": {"grades.$[]": 1}}).await;
    assert_eq!(
        get(&c, 1).await.get_array("grades").unwrap(),
        &vec![Bson::Int32(96), Bson::Int32(81), Bson::Int32(101)]
    );
    // update_many with arrayFilters: every document, only the selected elements.
    let r = c
        .update_many(doc! {}, doc! {"$set": {"grades.$[high]": 100}})
        .array_filters(vec![doc! {"high": {"$gte": 90}}])
        .await
        .expect("update_many with arrayFilters");
    assert_eq!((r.matched_count, r.modified_count), (2, 2));
    assert_eq!(get(&c, 2).await.get_array("grades").unwrap(), &vec![Bson::Int32(50), Bson::Int32(100)]);
    let r = c
        .update_one(doc! {"_id": 1}, doc! {"$mul": {"items.$[it].n": 10}})
        .array_filters(vec![doc! {"it.k": "b"}])
        .await
        .expect("update_one");
    assert_eq!(r.modified_count, 1);
    let items = get(&c, 1).await.get_array("items").unwrap().clone();
    assert_eq!(items, vec![Bson::Document(doc! {"k": "a", "n": 1}), Bson::Document(doc! {"k": "b", "n": 20})]);
    // findAndModify too.
    let after = c
        .find_one_and_update(doc! {"_id": 1}, doc! {"$set": {"items.$[x].k": "z"}})
        .array_filters(vec![doc! {"x.n": {"$gt": 5}}])
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .expect("findAndModify")
        .expect("a document");
    assert_eq!(after.get_array("items").unwrap()[1], Bson::Document(doc! {"k": "z", "n": 20}));
    // The positional `$`: the element the query matched.
    let r = c.update_one(doc! {"_id": 2, "grades": 100}, doc! {"$set": {"grades.$": 99}}).await.expect("$ update");
    assert_eq!(r.modified_count, 1);
    assert_eq!(get(&c, 2).await.get_array("grades").unwrap(), &vec![Bson::Int32(50), Bson::Int32(99)]);
    let no_position = c.update_one(doc! {"_id": 2}, doc! {"$set": {"grades.$": 0}}).await;
    assert!(no_position.is_err(), "a query without the array gives `$` no position");
    // Bad input: an unused filter, a missing one, a non-array target — MongoDB's codes.
    let code =
        |e: mongodb::error::Error| expect::server_code(&e).unwrap_or_else(|| panic!("not a server error: {e:?}"));
    let unused =
        c.update_one(doc! {"_id": 1}, doc! {"$set": {"grades.$[]": 0}}).array_filters(vec![doc! {"u": 1}]).await;
    assert_eq!(unused.map_err(code).err(), Some(9), "FailedToParse");
    let missing = c.update_one(doc! {"_id": 1}, doc! {"$set": {"grades.$[m]": 0}}).await;
    assert_eq!(missing.map_err(code).err(), Some(2), "BadValue");
    let not_array = c.update_one(doc! {"_id": 1}, doc! {"$set": {"items.0.k.$[]": 0}}).await;
    assert_eq!(not_array.map_err(code).err(), Some(2), "BadValue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_given_as_a_pipeline() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("pipeline");
    seed(&c, [doc! {"_id": 1, "a": 2, "b": 3}, doc! {"_id": 2, "a": 10, "b": 1}]).await;
    let pipeline = vec![doc! {"$set": {"total": {"$add": ["$a", "$b"]}}}, doc! {"$unset": "b"}];
    let r = c.update_many(doc! {}, pipeline).await.expect("pipeline update_many");
    assert_eq!((r.matched_count, r.modified_count), (2, 2));
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "a": 2, "total": 5});
    assert_eq!(get(&c, 2).await, doc! {"_id": 2, "a": 10, "total": 11});
    // findAndModify and upserts take pipelines too.
    let after = c
        .find_one_and_update(doc! {"_id": 1}, vec![doc! {"$set": {"a": {"$multiply": ["$a", 100]}}}])
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .expect("findAndModify")
        .expect("a document");
    assert_eq!(after.get_i32("a").ok(), Some(200));
    c.update_one(doc! {"_id": 3}, vec![doc! {"$set": {"new": true}}]).upsert(true).await.expect("upsert");
    assert_eq!(get(&c, 3).await, doc! {"_id": 3, "new": true});
    // Stages an update may not use, and `_id` changes, are refused with MongoDB's codes.
    let code =
        |e: mongodb::error::Error| expect::server_code(&e).unwrap_or_else(|| panic!("not a server error: {e:?}"));
    let group = c.update_one(doc! {"_id": 1}, vec![doc! {"$group": {"_id": "$a"}}]).await;
    assert_eq!(group.map_err(code).err(), Some(72));
    let id = c.update_one(doc! {"_id": 1}, vec![doc! {"$set": {"_id": 9}}]).await;
    assert_eq!(id.map_err(code).err(), Some(66));
}
