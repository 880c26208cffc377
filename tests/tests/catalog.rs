//! Databases and collections: `create_collection`, implicit creation by insert,
//! `list_collection_names`, `list_database_names`, dropping a collection, dropping a database.
//! Each test uses its own database so that listing assertions do not see other tests' data.

use bson::doc;
use shoal_tests::TestContext;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_collection_then_list_it() {
    let ctx = TestContext::shared("catalog_create").await;
    let db = ctx.db();
    db.create_collection("made").await.unwrap();
    let names = db.list_collection_names().await.unwrap();
    assert!(names.contains(&"made".to_string()), "{names:?}");
    assert_eq!(ctx.coll("made").count_documents(doc! {}).await.unwrap(), 0);
    let dbs = ctx.client().list_database_names().await.unwrap();
    assert!(dbs.contains(&"catalog_create".to_string()), "{dbs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_creates_collection_and_database_implicitly() {
    let ctx = TestContext::shared("catalog_implicit").await;
    let db = ctx.db();
    assert!(
        !ctx.client().list_database_names().await.unwrap().contains(&"catalog_implicit".to_string()),
        "database exists before any write"
    );
    ctx.coll("first").insert_one(doc! {"x": 1}).await.unwrap();
    ctx.coll("second").insert_one(doc! {"x": 2}).await.unwrap();
    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    assert_eq!(names, ["first", "second"]);
    let dbs = ctx.client().list_database_names().await.unwrap();
    assert!(dbs.contains(&"catalog_implicit".to_string()), "{dbs:?}");

    let filtered = db.list_collection_names().filter(doc! {"name": "second"}).await.unwrap();
    assert_eq!(filtered, ["second"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_collection_removes_it_and_its_data() {
    let ctx = TestContext::shared("catalog_drop_coll").await;
    let db = ctx.db();
    let keep = ctx.coll("keep");
    let gone = ctx.coll("gone");
    keep.insert_one(doc! {"_id": 1}).await.unwrap();
    gone.insert_many((0..100).map(|i| doc! {"_id": i})).await.unwrap();
    gone.drop().await.unwrap();
    assert_eq!(db.list_collection_names().await.unwrap(), ["keep"]);
    assert_eq!(gone.count_documents(doc! {}).await.unwrap(), 0);
    assert_eq!(gone.find_one(doc! {"_id": 1}).await.unwrap(), None);
    assert_eq!(keep.count_documents(doc! {}).await.unwrap(), 1);
    // Dropping what does not exist is not an error, and the name can be reused.
    gone.drop().await.unwrap();
    gone.insert_one(doc! {"_id": 1, "again": true}).await.unwrap();
    assert_eq!(gone.count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_database_removes_every_collection() {
    let ctx = TestContext::shared("catalog_drop_db").await;
    let db = ctx.db();
    for name in ["a", "b", "c"] {
        ctx.coll(name).insert_one(doc! {"name": name}).await.unwrap();
    }
    let other = ctx.client().database("catalog_drop_db_other");
    other.collection("x").insert_one(doc! {"_id": 1}).await.unwrap();

    db.drop().await.unwrap();
    let dbs = ctx.client().list_database_names().await.unwrap();
    assert!(!dbs.contains(&"catalog_drop_db".to_string()), "{dbs:?}");
    assert!(dbs.contains(&"catalog_drop_db_other".to_string()), "{dbs:?}");
    assert_eq!(db.list_collection_names().await.unwrap(), Vec::<String>::new());
    assert_eq!(ctx.coll("a").count_documents(doc! {}).await.unwrap(), 0);
    assert_eq!(other.collection::<bson::Document>("x").count_documents(doc! {}).await.unwrap(), 1);
    // The database can be used again.
    ctx.coll("a").insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(db.list_collection_names().await.unwrap(), ["a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_collection_name_in_two_databases_is_two_collections() {
    let ctx = TestContext::shared("catalog_ns_a").await;
    let a = ctx.coll("same");
    let b = ctx.client().database("catalog_ns_b").collection::<bson::Document>("same");
    a.insert_one(doc! {"_id": 1, "db": "a"}).await.unwrap();
    b.insert_one(doc! {"_id": 1, "db": "b"}).await.unwrap();
    assert_eq!(a.find_one(doc! {}).await.unwrap(), Some(doc! {"_id": 1, "db": "a"}));
    assert_eq!(b.find_one(doc! {}).await.unwrap(), Some(doc! {"_id": 1, "db": "b"}));
    b.drop().await.unwrap();
    assert_eq!(a.count_documents(doc! {}).await.unwrap(), 1);
}
