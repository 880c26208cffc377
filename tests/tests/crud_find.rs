//! `find` beyond filters: projections (inclusion, exclusion, `_id` rules, `$slice`,
//! `$elemMatch`), multi-key sorts (nested fields, arrays, mixed types), skip/limit, getMore across
//! many batches, the raw cursor commands (`find`/`getMore`/`killCursors`, CursorNotFound 43), and
//! results larger than one gRPC message.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use futures::TryStreamExt;
use mongodb::Collection;
use shoal_tests::TestContext;
use shoal_tests::expect;
use shoal_tests::fixtures::{int_id, keys, seed};

const DB: &str = "crud_find";

async fn find_ids(find: mongodb::action::Find<'_, Document>) -> Vec<i64> {
    let docs: Vec<Document> = find.await.unwrap().try_collect().await.unwrap();
    docs.iter().map(int_id).collect()
}

async fn project_one(c: &Collection<Document>, projection: Document) -> Document {
    c.find_one(doc! {"_id": 1})
        .projection(projection.clone())
        .await
        .unwrap_or_else(|e| panic!("find_one with projection {projection}: {e:?}"))
        .expect("document 1 exists")
}

async fn projection_collection(ctx: &TestContext, name: &str) -> Collection<Document> {
    let c = ctx.coll(name);
    seed(
        &c,
        [doc! {
            "_id": 1,
            "a": 1,
            "b": {"c": 2, "d": 3},
            "arr": [1, 2, 3, 4, 5],
            "items": [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 2, "v": "c"}],
            "s": "x",
        }],
    )
    .await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_inclusion_and_id_rules() {
    let ctx = TestContext::shared(DB).await;
    let c = projection_collection(&ctx, "proj_inclusion").await;
    let p = project_one(&c, doc! {"a": 1}).await;
    assert_eq!(p, doc! {"_id": 1, "a": 1});
    assert_eq!(keys(&p), ["_id", "a"]);
    assert_eq!(project_one(&c, doc! {"a": 1, "_id": 0}).await, doc! {"a": 1});
    assert_eq!(project_one(&c, doc! {"b.c": 1}).await, doc! {"_id": 1, "b": {"c": 2}});
    assert_eq!(project_one(&c, doc! {"s": 1, "a": 1}).await, doc! {"_id": 1, "a": 1, "s": "x"});
    // Inclusion keeps the document's field order, not the projection's.
    assert_eq!(keys(&project_one(&c, doc! {"s": 1, "a": 1}).await), ["_id", "a", "s"]);
    assert_eq!(project_one(&c, doc! {"_id": 1}).await, doc! {"_id": 1});
    assert_eq!(project_one(&c, doc! {"missing": 1}).await, doc! {"_id": 1});
    assert_eq!(
        project_one(&c, doc! {"items.v": 1}).await,
        doc! {"_id": 1, "items": [{"v": "a"}, {"v": "b"}, {"v": "c"}]}
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_exclusion() {
    let ctx = TestContext::shared(DB).await;
    let c = projection_collection(&ctx, "proj_exclusion").await;
    assert_eq!(
        project_one(&c, doc! {"a": 0, "arr": 0, "items": 0}).await,
        doc! {"_id": 1, "b": {"c": 2, "d": 3}, "s": "x"}
    );
    assert_eq!(
        project_one(&c, doc! {"b.d": 0, "arr": 0, "items": 0}).await,
        doc! {"_id": 1, "a": 1, "b": {"c": 2}, "s": "x"}
    );
    let no_id = project_one(&c, doc! {"_id": 0}).await;
    assert_eq!(keys(&no_id), ["a", "b", "arr", "items", "s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_slice() {
    let ctx = TestContext::shared(DB).await;
    let c = projection_collection(&ctx, "proj_slice").await;
    let arr = |d: Document| d.get("arr").cloned().expect("arr is returned");
    assert_eq!(arr(project_one(&c, doc! {"arr": {"$slice": 2}}).await), bson::bson!([1, 2]));
    assert_eq!(arr(project_one(&c, doc! {"arr": {"$slice": -2}}).await), bson::bson!([4, 5]));
    assert_eq!(arr(project_one(&c, doc! {"arr": {"$slice": [1, 2]}}).await), bson::bson!([2, 3]));
    assert_eq!(arr(project_one(&c, doc! {"arr": {"$slice": [-3, 2]}}).await), bson::bson!([3, 4]));
    assert_eq!(arr(project_one(&c, doc! {"arr": {"$slice": 10}}).await), bson::bson!([1, 2, 3, 4, 5]));
    // $slice alone restricts nothing else.
    let all = project_one(&c, doc! {"arr": {"$slice": 1}}).await;
    assert_eq!(keys(&all), ["_id", "a", "b", "arr", "items", "s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_elem_match_returns_the_first_matching_element() {
    let ctx = TestContext::shared(DB).await;
    let c = projection_collection(&ctx, "proj_elem_match").await;
    assert_eq!(
        project_one(&c, doc! {"items": {"$elemMatch": {"k": 2}}}).await,
        doc! {"_id": 1, "items": [{"k": 2, "v": "b"}]}
    );
    assert_eq!(project_one(&c, doc! {"items": {"$elemMatch": {"k": 9}}}).await, doc! {"_id": 1});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_mixing_inclusion_and_exclusion_is_an_error() {
    let ctx = TestContext::shared(DB).await;
    let c = projection_collection(&ctx, "proj_mixed").await;
    let result = c.find_one(doc! {}).projection(doc! {"a": 1, "b": 0}).await;
    expect::command_error(result, 31254);
    let result = c.find_one(doc! {}).projection(doc! {"a": 0, "b": 1}).await;
    expect::command_error(result, 31253);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_on_several_keys_and_nested_fields() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("sort_multi");
    seed(
        &c,
        [
            doc! {"_id": 1, "a": 1, "b": "x", "n": {"x": 3}},
            doc! {"_id": 2, "a": 2, "b": "y", "n": {"x": 1}},
            doc! {"_id": 3, "a": 1, "b": "z", "n": {"x": 5}},
            doc! {"_id": 4, "a": 2, "b": "a", "n": {"x": 4}},
            doc! {"_id": 5, "a": 1, "b": "a", "n": {"x": 2}},
        ],
    )
    .await;
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"a": 1, "b": -1})).await, [3, 1, 5, 2, 4]);
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"b": 1, "a": 1})).await, [5, 4, 1, 2, 3]);
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"n.x": -1})).await, [3, 4, 1, 5, 2]);
    // Sorting on a field the projection drops still sorts by it.
    assert_eq!(find_ids(c.find(doc! {"a": 1}).sort(doc! {"n.x": 1}).projection(doc! {"n": 0})).await, [5, 1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_on_arrays_uses_min_ascending_and_max_descending() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("sort_arrays");
    seed(
        &c,
        [
            doc! {"_id": 1, "a": [1, 10]},
            doc! {"_id": 2, "a": 5},
            doc! {"_id": 3, "a": [3, 4]},
            doc! {"_id": 4},
            doc! {"_id": 5, "a": 7},
        ],
    )
    .await;
    // Keys ascending: 1, 5, 3, null (missing), 7.
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"a": 1})).await, [4, 1, 3, 2, 5]);
    // Keys descending: 10, 5, 4, null, 7.
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"a": -1})).await, [1, 5, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_across_types_follows_bson_type_order() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("sort_types");
    seed(
        &c,
        [
            doc! {"_id": 1, "v": "b"},
            doc! {"_id": 2, "v": 1.5},
            doc! {"_id": 3, "v": true},
            doc! {"_id": 4, "v": Bson::Null},
            doc! {"_id": 5, "v": {"x": 1}},
            doc! {"_id": 6, "v": ObjectId::new()},
            doc! {"_id": 7, "v": DateTime::from_millis(0)},
            doc! {"_id": 8, "v": "a"},
            doc! {"_id": 9, "v": 2i64},
            doc! {"_id": 10, "v": Bson::MinKey},
            doc! {"_id": 11, "v": Bson::MaxKey},
        ],
    )
    .await;
    // MinKey < null < numbers < strings < objects < ObjectId < bool < date < MaxKey.
    let ascending = [10, 4, 2, 9, 8, 1, 5, 6, 3, 7, 11];
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"v": 1})).await, ascending);
    let mut descending = ascending;
    descending.reverse();
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"v": -1})).await, descending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_and_limit() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("skip_limit");
    seed(&c, (0..20).map(|i| doc! {"_id": i})).await;
    let asc = doc! {"_id": 1};
    assert_eq!(find_ids(c.find(doc! {}).sort(asc.clone()).skip(5).limit(3)).await, [5, 6, 7]);
    assert_eq!(find_ids(c.find(doc! {}).sort(asc.clone()).skip(18).limit(5)).await, [18, 19]);
    assert_eq!(find_ids(c.find(doc! {}).sort(asc.clone()).skip(25)).await, Vec::<i64>::new());
    assert_eq!(find_ids(c.find(doc! {}).sort(asc.clone()).limit(0)).await.len(), 20);
    // A negative limit means "at most |n|, in a single batch".
    assert_eq!(find_ids(c.find(doc! {}).sort(asc.clone()).limit(-3)).await, [0, 1, 2]);
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"_id": -1}).skip(2).limit(2)).await, [17, 16]);
    assert_eq!(find_ids(c.find(doc! {"_id": {"$gte": 10}}).sort(asc).skip(1).limit(2)).await, [11, 12]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_more_across_many_small_batches() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("get_more");
    seed(&c, (0..1000).map(|i| doc! {"_id": i, "even": i % 2 == 0})).await;

    let all = find_ids(c.find(doc! {}).sort(doc! {"_id": 1}).batch_size(7)).await;
    assert_eq!(all, (0..1000).collect::<Vec<i64>>());

    let evens = find_ids(c.find(doc! {"even": true}).sort(doc! {"_id": -1}).batch_size(7)).await;
    assert_eq!(evens, (0..1000).rev().filter(|i| i % 2 == 0).collect::<Vec<i64>>());

    let limited = find_ids(c.find(doc! {}).sort(doc! {"_id": 1}).limit(100).batch_size(7)).await;
    assert_eq!(limited, (0..100).collect::<Vec<i64>>());

    // Several cursors open at once, advanced in turn.
    let mut a = c.find(doc! {}).sort(doc! {"_id": 1}).batch_size(3).await.unwrap();
    let mut b = c.find(doc! {}).sort(doc! {"_id": -1}).batch_size(5).await.unwrap();
    for i in 0..50 {
        assert_eq!(int_id(&a.try_next().await.unwrap().unwrap()), i);
        assert_eq!(int_id(&b.try_next().await.unwrap().unwrap()), 999 - i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_cursor_commands_and_cursor_not_found() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("raw_cursor");
    seed(&c, (0..10).map(|i| doc! {"_id": i})).await;
    let db = ctx.db();

    let reply =
        db.run_command(doc! {"find": "raw_cursor", "filter": {}, "sort": {"_id": 1}, "batchSize": 2}).await.unwrap();
    let cursor = reply.get_document("cursor").unwrap();
    let id = cursor.get_i64("id").expect("cursor.id is an int64");
    assert_ne!(id, 0, "more results remain: {reply}");
    assert_eq!(cursor.get_str("ns").unwrap(), format!("{DB}.raw_cursor"));
    let first: Vec<i64> =
        cursor.get_array("firstBatch").unwrap().iter().map(|d| int_id(d.as_document().unwrap())).collect();
    assert_eq!(first, [0, 1]);

    let reply = db.run_command(doc! {"getMore": id, "collection": "raw_cursor", "batchSize": 3}).await.unwrap();
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get_i64("id").unwrap(), id);
    let next: Vec<i64> =
        cursor.get_array("nextBatch").unwrap().iter().map(|d| int_id(d.as_document().unwrap())).collect();
    assert_eq!(next, [2, 3, 4]);

    let reply = db.run_command(doc! {"killCursors": "raw_cursor", "cursors": [id]}).await.unwrap();
    assert_eq!(reply.get_array("cursorsKilled").unwrap(), &vec![Bson::Int64(id)]);

    let result = db.run_command(doc! {"getMore": id, "collection": "raw_cursor"}).await;
    expect::command_error(result, 43);

    // A batch that holds everything closes the cursor at once.
    let reply = db.run_command(doc! {"find": "raw_cursor", "batchSize": 100}).await.unwrap();
    assert_eq!(reply.get_document("cursor").unwrap().get_i64("id").unwrap(), 0);
    let reply = db.run_command(doc! {"find": "raw_cursor", "limit": 3, "batchSize": 2}).await.unwrap();
    let cursor = reply.get_document("cursor").unwrap();
    let id = cursor.get_i64("id").unwrap();
    assert_ne!(id, 0);
    let reply = db.run_command(doc! {"getMore": id, "collection": "raw_cursor", "batchSize": 10}).await.unwrap();
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get_array("nextBatch").unwrap().len(), 1, "limit 3 caps the cursor");
    assert_eq!(cursor.get_i64("id").unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_larger_than_one_grpc_message() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("large_results");
    let payload = "y".repeat(1024 * 1024);
    seed(&c, (0..12).map(|i| doc! {"_id": i, "payload": payload.clone()})).await;
    let docs: Vec<Document> = c.find(doc! {}).sort(doc! {"_id": 1}).await.unwrap().try_collect().await.unwrap();
    assert_eq!(docs.len(), 12);
    for (i, d) in docs.iter().enumerate() {
        assert_eq!(int_id(d), i as i64);
        assert_eq!(d.get_str("payload").unwrap().len(), payload.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_sort_by_bytes_and_numbers_across_types() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("sort_strings_numbers");
    let dec = |s: &str| Bson::Decimal128(s.parse().unwrap());
    seed(
        &c,
        [
            doc! {"_id": 1, "s": "b", "n": 2i64},
            doc! {"_id": 2, "s": "a", "n": 1.5},
            doc! {"_id": 3, "s": "B", "n": dec("1.25")},
            doc! {"_id": 4, "s": "é", "n": 1},
            doc! {"_id": 5, "s": "Z", "n": f64::NAN},
            doc! {"_id": 6, "s": "ab", "n": f64::NEG_INFINITY},
        ],
    )
    .await;
    // No collation: UTF-8 byte order, so upper case before lower case before "é".
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"s": 1})).await, [3, 5, 2, 6, 1, 4]);
    // NaN sorts below every other number, -inf next.
    assert_eq!(find_ids(c.find(doc! {}).sort(doc! {"n": 1})).await, [5, 6, 4, 3, 2, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_accepts_the_options_drivers_send() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("find_options");
    seed(&c, (0..10).map(|i| doc! {"_id": i})).await;
    let found = find_ids(
        c.find(doc! {"_id": {"$gte": 5}})
            .sort(doc! {"_id": 1})
            .comment(Bson::String("from the tests".into()))
            .max_time(std::time::Duration::from_secs(30))
            .hint(mongodb::options::Hint::Keys(doc! {"_id": 1}))
            .allow_disk_use(true)
            .no_cursor_timeout(true),
    )
    .await;
    assert_eq!(found, [5, 6, 7, 8, 9]);
    // A hint naming an index the collection does not have is refused, never ignored.
    let natural = find_ids(c.find(doc! {}).hint(mongodb::options::Hint::Keys(doc! {"$natural": 1}))).await;
    assert_eq!(natural.len(), 10);
    let by_name = find_ids(c.find(doc! {}).hint(mongodb::options::Hint::Name("_id_".into()))).await;
    assert_eq!(by_name.len(), 10);
    let code =
        |e: mongodb::error::Error| expect::server_code(&e).unwrap_or_else(|| panic!("not a server error: {e:?}"));
    let missing = c.find(doc! {}).hint(mongodb::options::Hint::Keys(doc! {"a": 1})).await.map(|_| ());
    assert_eq!(missing.map_err(code).err(), Some(2));
    let update = c
        .update_one(doc! {"_id": 1}, doc! {"$set": {"x": 1}})
        .hint(mongodb::options::Hint::Name("a_1".into()))
        .await
        .map(|_| ());
    assert_eq!(update.map_err(code).err(), Some(2));
    let count = c.count_documents(doc! {}).hint(mongodb::options::Hint::Keys(doc! {"b": -1})).await.map(|_| ());
    assert_eq!(count.map_err(code).err(), Some(2));
}

/// maxTimeMS stops an operation that runs past it, on the router and on the shard itself, with
/// MaxTimeMSExpired (50); a bad value is refused (2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_time_ms_stops_long_operations_with_50() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("max_time");
    let docs: Vec<Document> = (0..20_000).map(|i| doc! {"_id": i, "v": i % 7, "pad": "x".repeat(100)}).collect();
    c.insert_many(docs).await.expect("seed");
    let code =
        |e: mongodb::error::Error| expect::server_code(&e).unwrap_or_else(|| panic!("not a server error: {e:?}"));
    // A full scan of 20,000 documents cannot finish in a millisecond.
    let slow = ctx.db().run_command(doc! {"count": "max_time", "query": {"v": 99}, "maxTimeMS": 1}).await;
    assert_eq!(slow.map_err(code).err(), Some(50), "through the router");
    let direct = shoal_tests::repl::member_command(
        &ctx.cluster().shard_addr().to_string(),
        DB,
        doc! {"count": "max_time", "query": {"v": 99}, "maxTimeMS": 1},
        false,
    )
    .await;
    let err = direct.expect_err("the shard stops its own scan").to_string();
    assert!(err.contains("(50)"), "{err}");
    let bad = ctx.db().run_command(doc! {"count": "max_time", "maxTimeMS": -5}).await;
    assert_eq!(bad.map_err(code).err(), Some(2));
    // A generous limit changes nothing.
    let n =
        ctx.db().run_command(doc! {"count": "max_time", "query": {"v": 3}, "maxTimeMS": 600_000}).await.expect("count");
    assert_eq!(n.get_i32("n").ok(), Some(2857));
}
