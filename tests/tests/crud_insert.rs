//! Inserts through the router: single, bulk (one call of 100,000 documents), ordered and
//! unordered duplicate `_id`s (11000), BSON type fidelity, `_id` placement, large documents.

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DateTime, Decimal128, Document, Timestamp, doc, oid::ObjectId};
use shoal_tests::TestContext;
use shoal_tests::expect;
use shoal_tests::fixtures::{get, ids, keys};

const DB: &str = "crud_insert";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_one_with_explicit_id_is_readable() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("insert_one_explicit");
    let result = c.insert_one(doc! {"_id": 1, "name": "a", "n": 10}).await.unwrap();
    assert_eq!(result.inserted_id, Bson::Int32(1));
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "name": "a", "n": 10});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_one_without_id_gets_an_object_id() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("insert_one_generated");
    let result = c.insert_one(doc! {"name": "b"}).await.unwrap();
    let Bson::ObjectId(oid) = result.inserted_id else {
        panic!("inserted_id is not an ObjectId: {:?}", result.inserted_id)
    };
    let stored = get(&c, oid).await;
    assert_eq!(stored, doc! {"_id": oid, "name": "b"});
    assert_eq!(keys(&stored), ["_id", "name"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_moves_id_to_the_front() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("id_first");
    c.insert_one(doc! {"a": 1, "_id": 5, "b": 2}).await.unwrap();
    let stored = get(&c, 5).await;
    assert_eq!(keys(&stored), ["_id", "a", "b"], "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_many_small_batch() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("insert_many_small");
    let docs: Vec<Document> = (0..10).map(|i| doc! {"_id": i, "sq": i * i}).collect();
    let result = c.insert_many(docs).await.unwrap();
    assert_eq!(result.inserted_ids.len(), 10);
    for i in 0..10 {
        assert_eq!(result.inserted_ids[&(i as usize)], Bson::Int32(i));
    }
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 10);
    assert_eq!(get(&c, 7).await, doc! {"_id": 7, "sq": 49});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_many_one_hundred_thousand_documents_in_one_call() {
    const N: i32 = 100_000;
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("bulk_100k");
    let docs: Vec<Document> = (0..N).map(|i| doc! {"_id": i, "x": i % 10, "s": format!("doc-{i}")}).collect();
    let result = c.insert_many(docs).await.unwrap();
    assert_eq!(result.inserted_ids.len(), N as usize);

    assert_eq!(c.count_documents(doc! {}).await.unwrap(), N as u64);
    assert_eq!(c.estimated_document_count().await.unwrap(), N as u64);
    assert_eq!(c.count_documents(doc! {"x": 7}).await.unwrap(), (N / 10) as u64);
    assert_eq!(c.count_documents(doc! {"_id": {"$gte": N - 100}}).await.unwrap(), 100);
    assert_eq!(get(&c, N - 1).await, doc! {"_id": N - 1, "x": (N - 1) % 10, "s": format!("doc-{}", N - 1)});
    assert_eq!(get(&c, 0).await, doc! {"_id": 0, "x": 0, "s": "doc-0"});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_id_insert_one_is_error_11000() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("dup_one");
    c.insert_one(doc! {"_id": 1, "v": "first"}).await.unwrap();
    expect::write_error(c.insert_one(doc! {"_id": 1, "v": "second"}).await, 11000);
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "v": "first"});
    // The connection keeps serving after the error.
    c.insert_one(doc! {"_id": 2}).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_id_compares_numbers_across_types() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("dup_numeric");
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    // 1, 1i64 and 1.0 are the same _id to the unique _id index.
    expect::write_error(c.insert_one(doc! {"_id": 1i64}).await, 11000);
    expect::write_error(c.insert_one(doc! {"_id": 1.0}).await, 11000);
    // Different types that are not numerically equal are distinct.
    c.insert_one(doc! {"_id": "1"}).await.unwrap();
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_id_in_ordered_insert_many_stops_at_the_error() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("dup_ordered");
    let docs = vec![doc! {"_id": 1}, doc! {"_id": 2}, doc! {"_id": 2}, doc! {"_id": 3}];
    let errors = expect::insert_many_errors(c.insert_many(docs).await);
    assert_eq!(errors, [(2, 11000)]);
    assert_eq!(ids(&c, doc! {}).await, [1, 2], "ordered insert stops at index 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_ids_in_unordered_insert_many_are_all_reported() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("dup_unordered");
    c.insert_one(doc! {"_id": 12}).await.unwrap();
    let docs = vec![
        doc! {"_id": 10},
        doc! {"_id": 10},
        doc! {"_id": 11},
        doc! {"_id": 11},
        doc! {"_id": 12},
        doc! {"_id": 13},
    ];
    let errors = expect::insert_many_errors(c.insert_many(docs).ordered(false).await);
    assert_eq!(errors, [(1, 11000), (3, 11000), (4, 11000)]);
    assert_eq!(ids(&c, doc! {}).await, [10, 11, 12, 13]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bson_type_round_trips_exactly() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("bson_types");
    let oid = ObjectId::new();
    let original = doc! {
        "_id": 1,
        "int32": 42,
        "int64": 42i64,
        "double": 42.5,
        "neg_zero": -0.0,
        "string": "héllo wörld",
        "empty_string": "",
        "bool": true,
        "null": Bson::Null,
        "array": [1, "two", 3.0, [4], {"five": 5}],
        "empty_array": [],
        "doc": {"nested": {"deep": [1, 2]}},
        "empty_doc": {},
        "oid": oid,
        "date": DateTime::from_millis(1_700_000_000_123),
        "binary": Binary { subtype: BinarySubtype::Generic, bytes: vec![0, 1, 2, 255] },
        "uuid_binary": Binary { subtype: BinarySubtype::Uuid, bytes: vec![7; 16] },
        "decimal": "1234.5678".parse::<Decimal128>().unwrap(),
        "timestamp": Timestamp { time: 1_700_000_000, increment: 7 },
        "regex": Bson::RegularExpression(bson::Regex {
            pattern: "^a.*z$".try_into().unwrap(),
            options: "i".try_into().unwrap(),
        }),
        "min_key": Bson::MinKey,
        "max_key": Bson::MaxKey,
        "int64_max": i64::MAX,
        "int32_min": i32::MIN,
    };
    c.insert_one(original.clone()).await.unwrap();
    let stored = get(&c, 1).await;
    assert_eq!(stored, original);
    assert_eq!(keys(&stored), keys(&original), "field order is preserved");
    // Type, not just value: 42 stays an int32 and 42i64 an int64.
    assert_eq!(stored.get("int32"), Some(&Bson::Int32(42)));
    assert_eq!(stored.get("int64"), Some(&Bson::Int64(42)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_of_several_mebibytes_round_trip() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("large_docs");
    // Above gRPC's default 4 MiB message limit, below MongoDB's 16 MiB document limit.
    for (id, mib) in [(1, 1usize), (2, 5), (3, 15)] {
        let payload = "x".repeat(mib * 1024 * 1024);
        c.insert_one(doc! {"_id": id, "payload": payload.clone()})
            .await
            .unwrap_or_else(|e| panic!("inserting a {mib} MiB document: {e:?}"));
        let stored = get(&c, id).await;
        assert_eq!(stored.get_str("payload").unwrap().len(), payload.len());
    }
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_many_larger_than_one_message_is_split_by_the_driver() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("many_large");
    // 60 MiB in one call: the driver cuts it into messages of at most 48 MB.
    let payload = "z".repeat(1024 * 1024);
    let docs: Vec<Document> = (0..60).map(|i| doc! {"_id": i, "payload": payload.clone()}).collect();
    let result = c.insert_many(docs).await.unwrap();
    assert_eq!(result.inserted_ids.len(), 60);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 60);
    let last = get(&c, 59).await;
    assert_eq!(last.get_str("payload").unwrap().len(), payload.len());
}

/// `{_id, n: {n: {... {leaf: true}}}}` with `levels` documents below the top one.
fn nested(id: i32, levels: usize) -> Document {
    let mut inner = doc! {"leaf": true};
    for _ in 1..levels {
        inner = doc! {"n": inner};
    }
    doc! {"_id": id, "n": inner}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_is_stored_up_to_the_storage_depth_limit() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("nesting");
    // MongoDB stores up to 180 levels (BSONDepth 200 minus 20 for the system).
    let deep = nested(1, 150);
    c.insert_one(deep.clone()).await.unwrap();
    assert_eq!(get(&c, 1).await, deep);
    let path = format!("{}leaf", "n.".repeat(150));
    assert_eq!(ids(&c, doc! {path: true}).await, [1]);
    // Over it: Overflow (15), nothing stored.
    expect::write_error(c.insert_one(nested(2, 190)).await, 15);
    assert_eq!(ids(&c, doc! {}).await, [1]);
}
