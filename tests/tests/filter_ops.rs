//! Every query filter operator through `find`: `$eq $ne $gt $gte $lt $lte $in $nin $and $or $nor
//! $not $exists $type $regex $mod $all $elemMatch $size`, dotted paths, MongoDB's array semantics
//! (a predicate on an array matches if the array or any element matches), null versus missing.
//!
//! Each test seeds a small collection with integer `_id`s and asserts the exact `_id`s returned.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use shoal_tests::TestContext;
use shoal_tests::fixtures::{ids, seed};

const DB: &str = "filter_ops";

fn re(pattern: &str, options: &str) -> Bson {
    Bson::RegularExpression(bson::Regex { pattern: pattern.try_into().unwrap(), options: options.try_into().unwrap() })
}

async fn seeded(ctx: &TestContext, name: &str, docs: Vec<Document>) -> mongodb::Collection<Document> {
    let c = ctx.coll(name);
    seed(&c, docs).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eq_matches_scalars_array_elements_and_whole_arrays() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "eq",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": [1, 2]},
            doc! {"_id": 3, "a": [2, 3]},
            doc! {"_id": 4, "a": [[1]]},
            doc! {"_id": 5},
            doc! {"_id": 6, "a": [2, 1]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": 1}).await, [1, 2, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$eq": 2}}).await, [2, 3, 6]);
    // Whole-array equality is order-sensitive.
    assert_eq!(ids(&c, doc! {"a": [1, 2]}).await, [2]);
    // [1] equals the element [1] of [[1]]; nested arrays are not searched further.
    assert_eq!(ids(&c, doc! {"a": [1]}).await, [4]);
    // Numbers compare across types.
    assert_eq!(ids(&c, doc! {"a": 3i64}).await, [3]);
    assert_eq!(ids(&c, doc! {"a": 3.0}).await, [3]);
    assert_eq!(ids(&c, doc! {"_id": 4}).await, [4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eq_on_embedded_documents_is_field_order_sensitive() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "eq_doc",
        vec![
            doc! {"_id": 1, "n": {"x": 1, "y": 2}},
            doc! {"_id": 2, "n": {"y": 2, "x": 1}},
            doc! {"_id": 3, "n": {"x": 1}},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"n": {"x": 1, "y": 2}}).await, [1]);
    assert_eq!(ids(&c, doc! {"n": {"y": 2, "x": 1}}).await, [2]);
    assert_eq!(ids(&c, doc! {"n.x": 1}).await, [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comparison_operators_bracket_by_type_and_match_any_element() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "cmp",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": 2i64},
            doc! {"_id": 3, "a": 2.5},
            doc! {"_id": 4, "a": 3},
            doc! {"_id": 5, "a": "3"},
            doc! {"_id": 6, "a": Bson::Null},
            doc! {"_id": 7},
            doc! {"_id": 8, "a": [0, 10]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$gt": 2}}).await, [3, 4, 8]);
    assert_eq!(ids(&c, doc! {"a": {"$gte": 2}}).await, [2, 3, 4, 8]);
    assert_eq!(ids(&c, doc! {"a": {"$lt": 2}}).await, [1, 8]);
    assert_eq!(ids(&c, doc! {"a": {"$lte": 2}}).await, [1, 2, 8]);
    assert_eq!(ids(&c, doc! {"a": {"$gt": 2.4}}).await, [3, 4, 8]);
    assert_eq!(ids(&c, doc! {"a": {"$lt": 10i64}}).await, [1, 2, 3, 4, 8]);
    // Each bound may be met by a different element of the array.
    assert_eq!(ids(&c, doc! {"a": {"$gt": 3, "$lt": 5}}).await, [8]);
    // Strings only compare with strings.
    assert_eq!(ids(&c, doc! {"a": {"$gte": "3"}}).await, [5]);
    assert_eq!(ids(&c, doc! {"a": {"$lt": "3"}}).await, Vec::<i64>::new());
    assert_eq!(ids(&c, doc! {"a": {"$eq": 2}}).await, [2]);
    assert_eq!(ids(&c, doc! {"a": {"$ne": 2}}).await, [1, 3, 4, 5, 6, 7, 8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ne_excludes_arrays_containing_the_value_and_includes_missing() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "ne",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": [1, 2]},
            doc! {"_id": 3, "a": [2, 3]},
            doc! {"_id": 4, "a": [[1]]},
            doc! {"_id": 5},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$ne": 1}}).await, [3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_and_nin() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "in_nin",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": 2},
            doc! {"_id": 3, "a": [3, 4]},
            doc! {"_id": 4, "a": Bson::Null},
            doc! {"_id": 5},
            doc! {"_id": 6, "a": "x"},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$in": [1, 3]}}).await, [1, 3]);
    assert_eq!(ids(&c, doc! {"a": {"$in": [Bson::Null]}}).await, [4, 5]);
    assert_eq!(ids(&c, doc! {"a": {"$in": [re("^x", "")]}}).await, [6]);
    assert_eq!(ids(&c, doc! {"a": {"$in": []}}).await, Vec::<i64>::new());
    assert_eq!(ids(&c, doc! {"a": {"$nin": [1, 3]}}).await, [2, 4, 5, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$nin": [Bson::Null]}}).await, [1, 2, 3, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$nin": []}}).await, [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn and_or_nor_and_implicit_and() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "logical",
        vec![
            doc! {"_id": 1, "a": 1, "b": 1},
            doc! {"_id": 2, "a": 1, "b": 2},
            doc! {"_id": 3, "a": 2, "b": 1},
            doc! {"_id": 4, "a": 2, "b": 2},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"$and": [{"a": 1}, {"b": 2}]}).await, [2]);
    assert_eq!(ids(&c, doc! {"$or": [{"a": 1}, {"b": 1}]}).await, [1, 2, 3]);
    assert_eq!(ids(&c, doc! {"$nor": [{"a": 1}, {"b": 1}]}).await, [4]);
    assert_eq!(ids(&c, doc! {"$or": [{"$and": [{"a": 2}, {"b": 2}]}, {"a": 1, "b": 1}]}).await, [1, 4]);
    assert_eq!(ids(&c, doc! {"a": 1, "b": {"$gt": 1}}).await, [2]);
    assert_eq!(ids(&c, doc! {"a": {"$gte": 1, "$lte": 1}}).await, [1, 2]);
    assert_eq!(ids(&c, doc! {"$or": [{"a": 2}], "$nor": [{"b": 2}]}).await, [3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_inverts_including_missing_fields() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "not",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": 2},
            doc! {"_id": 3},
            doc! {"_id": 4, "a": "s"},
            doc! {"_id": 5, "a": [1, 3]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$not": {"$gt": 1}}}).await, [1, 3, 4]);
    assert_eq!(ids(&c, doc! {"a": {"$not": {"$in": [1, 2]}}}).await, [3, 4]);
    assert_eq!(ids(&c, doc! {"a": {"$not": re("^s", "")}}).await, [1, 2, 3, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exists_on_top_level_and_dotted_paths() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "exists",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": Bson::Null},
            doc! {"_id": 3},
            doc! {"_id": 4, "a": {"b": 1}},
            doc! {"_id": 5, "a": [{"b": 2}, {"c": 1}]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$exists": true}}).await, [1, 2, 4, 5]);
    assert_eq!(ids(&c, doc! {"a": {"$exists": false}}).await, [3]);
    assert_eq!(ids(&c, doc! {"a.b": {"$exists": true}}).await, [4, 5]);
    assert_eq!(ids(&c, doc! {"a.c": {"$exists": true}}).await, [5]);
    assert_eq!(ids(&c, doc! {"a.b": {"$exists": false}}).await, [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_by_alias_number_and_list() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "type",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": 1i64},
            doc! {"_id": 3, "a": 1.5},
            doc! {"_id": 4, "a": "s"},
            doc! {"_id": 5, "a": Bson::Null},
            doc! {"_id": 6, "a": [1, "x"]},
            doc! {"_id": 7, "a": {}},
            doc! {"_id": 8, "a": false},
            doc! {"_id": 9, "a": ObjectId::new()},
            doc! {"_id": 10, "a": DateTime::from_millis(0)},
            doc! {"_id": 11},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$type": "string"}}).await, [4, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$type": 2}}).await, [4, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "number"}}).await, [1, 2, 3, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "int"}}).await, [1, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "long"}}).await, [2]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "double"}}).await, [3]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "array"}}).await, [6]);
    assert_eq!(ids(&c, doc! {"a": {"$type": 4}}).await, [6]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "null"}}).await, [5]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "object"}}).await, [7]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "objectId"}}).await, [9]);
    assert_eq!(ids(&c, doc! {"a": {"$type": ["bool", "date"]}}).await, [8, 10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_with_options_and_array_elements() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "regex",
        vec![
            doc! {"_id": 1, "s": "apple"},
            doc! {"_id": 2, "s": "Apricot"},
            doc! {"_id": 3, "s": "banana"},
            doc! {"_id": 4, "s": ["cherry", "avocado"]},
            doc! {"_id": 5, "s": 42},
            doc! {"_id": 6},
            doc! {"_id": 7, "s": "line1\nappend"},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"s": {"$regex": "^a"}}).await, [1, 4]);
    assert_eq!(ids(&c, doc! {"s": {"$regex": "^a", "$options": "i"}}).await, [1, 2, 4]);
    assert_eq!(ids(&c, doc! {"s": re("^a", "m")}).await, [1, 4, 7]);
    assert_eq!(ids(&c, doc! {"s": re("an", "")}).await, [3]);
    assert_eq!(ids(&c, doc! {"s": {"$regex": re("^A", "")}}).await, [2]);
    assert_eq!(ids(&c, doc! {"s": {"$regex": "e$"}}).await, [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mod_uses_truncated_remainder() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "mod",
        vec![
            doc! {"_id": 1, "a": 0},
            doc! {"_id": 2, "a": 4},
            doc! {"_id": 3, "a": 5},
            doc! {"_id": 4, "a": -4},
            doc! {"_id": 5, "a": "x"},
            doc! {"_id": 6, "a": [1, 8]},
            doc! {"_id": 7, "a": -5i64},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$mod": [4, 0]}}).await, [1, 2, 4, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$mod": [4, 1]}}).await, [3, 6]);
    // -5 % 4 == -1 (sign of the dividend), as in C++ and Rust `%`.
    assert_eq!(ids(&c, doc! {"a": {"$mod": [4, -1]}}).await, [7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_requires_every_value() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "all",
        vec![
            doc! {"_id": 1, "tags": ["a", "b", "c"]},
            doc! {"_id": 2, "tags": ["a", "c"]},
            doc! {"_id": 3, "tags": ["b"]},
            doc! {"_id": 4, "tags": "a"},
            doc! {"_id": 5, "tags": [["a", "b"]]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"tags": {"$all": ["a", "c"]}}).await, [1, 2]);
    assert_eq!(ids(&c, doc! {"tags": {"$all": ["a"]}}).await, [1, 2, 4]);
    assert_eq!(ids(&c, doc! {"tags": {"$all": [["a", "b"]]}}).await, [5]);
    assert_eq!(ids(&c, doc! {"tags": {"$all": []}}).await, Vec::<i64>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elem_match_requires_one_element_to_meet_all_conditions() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "elem_match",
        vec![
            doc! {"_id": 1, "r": [{"p": "x", "s": 5}, {"p": "y", "s": 9}], "n": [1, 5, 10]},
            doc! {"_id": 2, "r": [{"p": "x", "s": 9}], "n": [2, 3]},
            doc! {"_id": 3, "r": [{"p": "x", "s": 1}, {"p": "y", "s": 9}], "n": 5},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"r": {"$elemMatch": {"p": "x", "s": {"$gte": 5}}}}).await, [1, 2]);
    // Without $elemMatch the conditions may be met by different elements.
    assert_eq!(ids(&c, doc! {"r.p": "x", "r.s": {"$gte": 8}}).await, [1, 2, 3]);
    // On scalars in an array; a non-array field never matches $elemMatch.
    assert_eq!(ids(&c, doc! {"n": {"$elemMatch": {"$gt": 4, "$lt": 6}}}).await, [1]);
    assert_eq!(ids(&c, doc! {"r": {"$all": [{"$elemMatch": {"p": "x"}}, {"$elemMatch": {"p": "y"}}]}}).await, [1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_matches_array_length_only() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "size",
        vec![
            doc! {"_id": 1, "a": []},
            doc! {"_id": 2, "a": [1]},
            doc! {"_id": 3, "a": [1, 2]},
            doc! {"_id": 4, "a": "ab"},
            doc! {"_id": 5},
            doc! {"_id": 6, "a": [[1, 2]]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": {"$size": 0}}).await, [1]);
    assert_eq!(ids(&c, doc! {"a": {"$size": 1}}).await, [2, 6]);
    assert_eq!(ids(&c, doc! {"a": {"$size": 2}}).await, [3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotted_paths_traverse_documents_arrays_and_indexes() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "dotted",
        vec![
            doc! {"_id": 1, "a": {"b": {"c": 1}}},
            doc! {"_id": 2, "a": {"b": [{"c": 1}, {"c": 2}]}},
            doc! {"_id": 3, "a": [{"b": {"c": 2}}, {"b": {"c": 3}}]},
            doc! {"_id": 4, "a": {"b": 1}},
            doc! {"_id": 5, "a": [1, 2]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a.b.c": 1}).await, [1, 2]);
    assert_eq!(ids(&c, doc! {"a.b.c": 2}).await, [2, 3]);
    assert_eq!(ids(&c, doc! {"a.b.c": {"$gt": 2}}).await, [3]);
    assert_eq!(ids(&c, doc! {"a.b": {"c": 1}}).await, [1, 2]);
    assert_eq!(ids(&c, doc! {"a.0.b.c": 2}).await, [3]);
    assert_eq!(ids(&c, doc! {"a.b.1.c": 2}).await, [2]);
    assert_eq!(ids(&c, doc! {"a.1": 2}).await, [5]);
    assert_eq!(ids(&c, doc! {"a.b": 1}).await, [4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_matches_null_and_missing() {
    let ctx = TestContext::shared(DB).await;
    let c = seeded(
        &ctx,
        "null",
        vec![
            doc! {"_id": 1, "a": Bson::Null},
            doc! {"_id": 2},
            doc! {"_id": 3, "a": 1},
            doc! {"_id": 4, "a": [Bson::Null, 1]},
            doc! {"_id": 5, "a": [1]},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": Bson::Null}).await, [1, 2, 4]);
    assert_eq!(ids(&c, doc! {"a": {"$ne": Bson::Null}}).await, [3, 5]);
    assert_eq!(ids(&c, doc! {"a": {"$exists": true}}).await, [1, 3, 4, 5]);
    assert_eq!(ids(&c, doc! {"a": {"$type": "null"}}).await, [1, 4]);

    let d = seeded(
        &ctx,
        "null_dotted",
        vec![
            doc! {"_id": 1, "a": {"b": Bson::Null}},
            doc! {"_id": 2, "a": {}},
            doc! {"_id": 3, "a": 1},
            doc! {"_id": 4},
            doc! {"_id": 5, "a": {"b": 2}},
        ],
    )
    .await;
    assert_eq!(ids(&d, doc! {"a.b": Bson::Null}).await, [1, 2, 3, 4]);
    assert_eq!(ids(&d, doc! {"a.b": {"$ne": Bson::Null}}).await, [5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_on_missing_collection_returns_nothing() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("never_created");
    assert_eq!(ids(&c, doc! {"a": 1}).await, Vec::<i64>::new());
    assert_eq!(ids(&c, doc! {}).await, Vec::<i64>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_compare_across_int_long_double_and_decimal() {
    let ctx = TestContext::shared(DB).await;
    let dec = |s: &str| Bson::Decimal128(s.parse().unwrap());
    let c = seeded(
        &ctx,
        "numeric_types",
        vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": 1.0},
            doc! {"_id": 3, "a": 1i64},
            doc! {"_id": 4, "a": dec("1.0")},
            doc! {"_id": 5, "a": dec("1.5")},
            doc! {"_id": 6, "a": f64::NAN},
            doc! {"_id": 7, "a": f64::NEG_INFINITY},
            doc! {"_id": 8, "a": 9_007_199_254_740_993i64},
        ],
    )
    .await;
    assert_eq!(ids(&c, doc! {"a": 1}).await, [1, 2, 3, 4]);
    assert_eq!(ids(&c, doc! {"a": dec("1")}).await, [1, 2, 3, 4]);
    assert_eq!(ids(&c, doc! {"a": {"$gt": 1.2, "$lt": 2}}).await, [5]);
    assert_eq!(ids(&c, doc! {"a": {"$gt": dec("1.2")}}).await, [5, 8]);
    // NaN equals NaN in queries, and is not greater or less than any number.
    assert_eq!(ids(&c, doc! {"a": f64::NAN}).await, [6]);
    assert_eq!(ids(&c, doc! {"a": {"$lt": 0}}).await, [7]);
    // 2^53 + 1 is exact as an int64 and must not be rounded through a double.
    assert_eq!(ids(&c, doc! {"a": 9_007_199_254_740_993i64}).await, [8]);
    assert_eq!(ids(&c, doc! {"a": 9_007_199_254_740_992i64}).await, Vec::<i64>::new());
}
