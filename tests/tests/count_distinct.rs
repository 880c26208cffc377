//! Counting and distinct values: `count_documents` (the driver sends an aggregate),
//! `estimated_document_count` (the `count` command), the raw `count` command with query, skip and
//! limit, and `distinct` (arrays are flattened one level, dotted paths, filters).

use bson::{Bson, doc};
use shoal_tests::TestContext;
use shoal_tests::fixtures::seed;

const DB: &str = "count_distinct";

/// Distinct values in a canonical order (their debug text), since MongoDB leaves order open.
fn canonical(mut values: Vec<Bson>) -> Vec<Bson> {
    values.sort_by_key(|v| format!("{v:?}"));
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_documents_with_filter_skip_and_limit() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("count");
    seed(&c, (0..50).map(|i| doc! {"_id": i, "m": i % 5})).await;
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 50);
    assert_eq!(c.count_documents(doc! {"m": 0}).await.unwrap(), 10);
    assert_eq!(c.count_documents(doc! {"m": {"$in": [1, 2]}}).await.unwrap(), 20);
    assert_eq!(c.count_documents(doc! {}).skip(45).await.unwrap(), 5);
    assert_eq!(c.count_documents(doc! {}).limit(7).await.unwrap(), 7);
    assert_eq!(c.count_documents(doc! {"m": 0}).skip(8).limit(7).await.unwrap(), 2);
    assert_eq!(c.count_documents(doc! {"m": 9}).await.unwrap(), 0);
    assert_eq!(c.estimated_document_count().await.unwrap(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_of_a_missing_collection_are_zero() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("never_created");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 0);
    assert_eq!(c.estimated_document_count().await.unwrap(), 0);
    assert_eq!(c.distinct("a", doc! {}).await.unwrap(), Vec::<Bson>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_count_command() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("raw_count");
    seed(&c, (0..30).map(|i| doc! {"_id": i, "even": i % 2 == 0})).await;
    let n = |reply: bson::Document| match reply.get("n") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("count reply without integer n: {other:?} in {reply}"),
    };
    let db = ctx.db();
    assert_eq!(n(db.run_command(doc! {"count": "raw_count"}).await.unwrap()), 30);
    assert_eq!(n(db.run_command(doc! {"count": "raw_count", "query": {"even": true}}).await.unwrap()), 15);
    assert_eq!(
        n(db.run_command(doc! {"count": "raw_count", "query": {"even": true}, "skip": 10, "limit": 3}).await.unwrap()),
        3
    );
    assert_eq!(n(db.run_command(doc! {"count": "raw_count", "skip": 28}).await.unwrap()), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_flattens_arrays_and_keeps_null() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("distinct");
    seed(
        &c,
        [
            doc! {"_id": 1, "a": 1, "n": {"x": 1}},
            doc! {"_id": 2, "a": [1, 2], "n": {"x": 2}},
            doc! {"_id": 3, "a": 3, "n": [{"x": 3}, {"x": 1}]},
            doc! {"_id": 4, "a": "x"},
            doc! {"_id": 5},
            doc! {"_id": 6, "a": Bson::Null},
            doc! {"_id": 7, "a": 3},
        ],
    )
    .await;
    assert_eq!(
        canonical(c.distinct("a", doc! {}).await.unwrap()),
        canonical(vec![Bson::Int32(1), Bson::Int32(2), Bson::Int32(3), Bson::String("x".into()), Bson::Null,])
    );
    assert_eq!(
        canonical(c.distinct("a", doc! {"a": {"$type": "number"}}).await.unwrap()),
        canonical(vec![Bson::Int32(1), Bson::Int32(2), Bson::Int32(3)])
    );
    assert_eq!(
        canonical(c.distinct("n.x", doc! {}).await.unwrap()),
        canonical(vec![Bson::Int32(1), Bson::Int32(2), Bson::Int32(3)])
    );
    assert_eq!(c.distinct("a", doc! {"_id": {"$gt": 100}}).await.unwrap(), Vec::<Bson>::new());
    assert_eq!(c.distinct("missing", doc! {}).await.unwrap(), Vec::<Bson>::new());
}
