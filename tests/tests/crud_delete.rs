//! `delete_one` and `delete_many`: counts, which documents remain, no-op deletes, deleting from a
//! collection that does not exist, and delete-then-reinsert of the same `_id`.

use bson::doc;
use shoal_tests::TestContext;
use shoal_tests::fixtures::{ids, seed};

const DB: &str = "crud_delete";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_one_removes_a_single_match() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("delete_one");
    seed(&c, (0..5).map(|i| doc! {"_id": i, "g": i % 2})).await;
    let result = c.delete_one(doc! {"g": 0}).await.unwrap();
    assert_eq!(result.deleted_count, 1);
    assert_eq!(c.count_documents(doc! {"g": 0}).await.unwrap(), 2);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 4);

    let result = c.delete_one(doc! {"_id": 3}).await.unwrap();
    assert_eq!(result.deleted_count, 1);
    assert!(!ids(&c, doc! {}).await.contains(&3));

    let result = c.delete_one(doc! {"_id": 3}).await.unwrap();
    assert_eq!(result.deleted_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_many_removes_every_match() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("delete_many");
    seed(&c, (0..10).map(|i| doc! {"_id": i, "v": i})).await;
    let result = c.delete_many(doc! {"v": {"$gte": 6}}).await.unwrap();
    assert_eq!(result.deleted_count, 4);
    assert_eq!(ids(&c, doc! {}).await, [0, 1, 2, 3, 4, 5]);

    let result = c.delete_many(doc! {"$or": [{"v": 1}, {"v": 3}]}).await.unwrap();
    assert_eq!(result.deleted_count, 2);
    assert_eq!(ids(&c, doc! {}).await, [0, 2, 4, 5]);

    let result = c.delete_many(doc! {"v": 100}).await.unwrap();
    assert_eq!(result.deleted_count, 0);

    let result = c.delete_many(doc! {}).await.unwrap();
    assert_eq!(result.deleted_count, 4);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_many_of_many_documents() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("delete_many_large");
    seed(&c, (0..5000).map(|i| doc! {"_id": i, "odd": i % 2 == 1})).await;
    let result = c.delete_many(doc! {"odd": true}).await.unwrap();
    assert_eq!(result.deleted_count, 2500);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 2500);
    assert_eq!(c.count_documents(doc! {"odd": true}).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_from_missing_collection_is_a_no_op() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("never_created");
    assert_eq!(c.delete_one(doc! {"_id": 1}).await.unwrap().deleted_count, 0);
    assert_eq!(c.delete_many(doc! {}).await.unwrap().deleted_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_id_can_be_inserted_again() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("reinsert");
    c.insert_one(doc! {"_id": 1, "v": "old"}).await.unwrap();
    c.delete_one(doc! {"_id": 1}).await.unwrap();
    c.insert_one(doc! {"_id": 1, "v": "new"}).await.unwrap();
    let d = c.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(d, doc! {"_id": 1, "v": "new"});
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
}
