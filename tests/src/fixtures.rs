//! Small data helpers shared by the CRUD tests: seed a collection, read back `_id`s in order.
//!
//! Test datasets use small integer `_id`s so that an assertion reads as the list of documents a
//! query must return, e.g. `assert_eq!(ids(&c, doc!{"a": 1}).await, [1, 2])`.

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;

/// Inserts `docs` (one `insert_many`), panicking on any error.
pub async fn seed(coll: &Collection<Document>, docs: impl IntoIterator<Item = Document>) {
    let docs: Vec<Document> = docs.into_iter().collect();
    let n = docs.len();
    let result = coll.insert_many(docs).await.unwrap_or_else(|e| panic!("seeding {}: {e:?}", coll.name()));
    assert_eq!(result.inserted_ids.len(), n, "seeding {}", coll.name());
}

/// All documents matching `filter`, sorted by `_id`.
pub async fn find_sorted(coll: &Collection<Document>, filter: Document) -> Vec<Document> {
    coll.find(filter.clone())
        .sort(doc! {"_id": 1})
        .await
        .unwrap_or_else(|e| panic!("find {filter} on {}: {e:?}", coll.name()))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("iterating find {filter} on {}: {e:?}", coll.name()))
}

/// The integer `_id`s of the documents matching `filter`, ascending.
pub async fn ids(coll: &Collection<Document>, filter: Document) -> Vec<i64> {
    find_sorted(coll, filter).await.iter().map(int_id).collect()
}

/// `_id` of a document whose `_id` is an int32 or int64.
#[track_caller]
pub fn int_id(d: &Document) -> i64 {
    match d.get("_id") {
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        other => panic!("expected an integer _id, got {other:?} in {d}"),
    }
}

/// The document with `_id: id`, panicking if absent.
pub async fn get(coll: &Collection<Document>, id: impl Into<Bson>) -> Document {
    let id = id.into();
    coll.find_one(doc! {"_id": id.clone()})
        .await
        .unwrap_or_else(|e| panic!("find_one _id {id} in {}: {e:?}", coll.name()))
        .unwrap_or_else(|| panic!("no document with _id {id} in {}", coll.name()))
}

/// A numeric value as f64 (int32, int64, double), for results whose exact numeric type MongoDB
/// leaves to the implementation (aggregation accumulators).
#[track_caller]
pub fn num(value: Option<&Bson>) -> f64 {
    match value {
        Some(Bson::Int32(i)) => f64::from(*i),
        Some(Bson::Int64(i)) => *i as f64,
        Some(Bson::Double(f)) => *f,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// Field names of `d` in order (document equality in `bson` ignores order; MongoDB keeps it).
pub fn keys(d: &Document) -> Vec<&str> {
    d.keys().map(String::as_str).collect()
}
