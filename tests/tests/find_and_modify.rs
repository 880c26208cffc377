//! findAndModify through `find_one_and_update` (return old/new, upsert, sort, projection),
//! `find_one_and_replace` and `find_one_and_delete`, plus the raw command's reply shape
//! (`lastErrorObject {n, updatedExisting, upserted}`, `value`).

use bson::{Bson, doc};
use mongodb::options::ReturnDocument;
use shoal_tests::TestContext;
use shoal_tests::fixtures::{get, ids, seed};

const DB: &str = "find_and_modify";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_one_and_update_returns_old_or_new() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("update");
    seed(&c, [doc! {"_id": 1, "n": 1}]).await;

    let before = c.find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"n": 1}}).await.unwrap();
    assert_eq!(before, Some(doc! {"_id": 1, "n": 1}), "default returns the old document");

    let after = c
        .find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(after, Some(doc! {"_id": 1, "n": 3}));

    let none = c.find_one_and_update(doc! {"_id": 2}, doc! {"$inc": {"n": 1}}).await.unwrap();
    assert_eq!(none, None);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_one_and_update_with_sort_and_projection() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("update_sort");
    seed(&c, (1..=5).map(|i| doc! {"_id": i, "q": "job", "prio": i % 3, "taken": false})).await;
    // prio: 1,2,0,1,2 -> highest prio first, ties by _id descending: _id 5.
    let taken = c
        .find_one_and_update(doc! {"taken": false}, doc! {"$set": {"taken": true}})
        .sort(doc! {"prio": -1, "_id": -1})
        .projection(doc! {"prio": 1})
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(taken, Some(doc! {"_id": 5, "prio": 2}));
    assert_eq!(ids(&c, doc! {"taken": true}).await, [5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_one_and_update_upserts() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("update_upsert");
    let new = c
        .find_one_and_update(doc! {"_id": "a"}, doc! {"$set": {"v": 1}})
        .upsert(true)
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(new, Some(doc! {"_id": "a", "v": 1}));

    let old = c
        .find_one_and_update(doc! {"_id": "b"}, doc! {"$set": {"v": 2}})
        .upsert(true)
        .return_document(ReturnDocument::Before)
        .await
        .unwrap();
    assert_eq!(old, None, "an upsert that inserts has no old document");
    assert_eq!(get(&c, "b").await, doc! {"_id": "b", "v": 2});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_one_and_replace_returns_old_or_new_and_upserts() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("replace");
    seed(&c, [doc! {"_id": 1, "a": 1}]).await;
    let old = c.find_one_and_replace(doc! {"_id": 1}, doc! {"b": 2}).await.unwrap();
    assert_eq!(old, Some(doc! {"_id": 1, "a": 1}));
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "b": 2});

    let new =
        c.find_one_and_replace(doc! {"b": 2}, doc! {"c": 3}).return_document(ReturnDocument::After).await.unwrap();
    assert_eq!(new, Some(doc! {"_id": 1, "c": 3}));

    let upserted = c
        .find_one_and_replace(doc! {"_id": 2}, doc! {"d": 4})
        .upsert(true)
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(upserted, Some(doc! {"_id": 2, "d": 4}));

    let none = c.find_one_and_replace(doc! {"_id": 3}, doc! {"e": 5}).await.unwrap();
    assert_eq!(none, None);
    assert_eq!(ids(&c, doc! {}).await, [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_one_and_delete_removes_and_returns() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("delete");
    seed(&c, (1..=4).map(|i| doc! {"_id": i, "score": i * 10})).await;
    let removed = c.find_one_and_delete(doc! {"score": {"$gte": 20}}).sort(doc! {"score": -1}).await.unwrap();
    assert_eq!(removed, Some(doc! {"_id": 4, "score": 40}));
    let removed = c.find_one_and_delete(doc! {}).sort(doc! {"score": 1}).projection(doc! {"_id": 1}).await.unwrap();
    assert_eq!(removed, Some(doc! {"_id": 1}));
    assert_eq!(ids(&c, doc! {}).await, [2, 3]);
    let none = c.find_one_and_delete(doc! {"_id": 42}).await.unwrap();
    assert_eq!(none, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_find_and_modify_reply_shape() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("raw");
    seed(&c, [doc! {"_id": 1, "n": 0}]).await;
    let db = ctx.db();

    let reply = db
        .run_command(doc! {
            "findAndModify": "raw", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}, "new": true,
        })
        .await
        .unwrap();
    assert_eq!(reply.get_document("value").unwrap(), &doc! {"_id": 1, "n": 1});
    let leo = reply.get_document("lastErrorObject").unwrap();
    assert_eq!(leo.get("n").map(num), Some(1));
    assert!(leo.get_bool("updatedExisting").unwrap());

    let reply = db
        .run_command(doc! {
            "findAndModify": "raw", "query": {"_id": 2}, "update": {"$set": {"n": 5}},
            "upsert": true, "new": true,
        })
        .await
        .unwrap();
    assert_eq!(reply.get_document("value").unwrap(), &doc! {"_id": 2, "n": 5});
    let leo = reply.get_document("lastErrorObject").unwrap();
    assert!(!leo.get_bool("updatedExisting").unwrap());
    assert_eq!(leo.get("upserted"), Some(&Bson::Int32(2)));

    let reply = db.run_command(doc! {"findAndModify": "raw", "query": {"_id": 2}, "remove": true}).await.unwrap();
    assert_eq!(reply.get_document("value").unwrap(), &doc! {"_id": 2, "n": 5});
    assert_eq!(reply.get_document("lastErrorObject").unwrap().get("n").map(num), Some(1));

    let reply = db.run_command(doc! {"findAndModify": "raw", "query": {"_id": 2}, "remove": true}).await.unwrap();
    assert_eq!(reply.get("value"), Some(&Bson::Null));
    assert_eq!(reply.get_document("lastErrorObject").unwrap().get("n").map(num), Some(0));
}

fn num(b: &Bson) -> i64 {
    match b {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}
