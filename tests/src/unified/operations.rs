//! The operations the vendored files use, on collection and database entities, run through the
//! driver's typed API (options are the driver's own option structs, deserialized from the
//! operation's arguments) and turned into the result documents the format expects. `count` and
//! `modifyCollection`, which the Rust driver has no helper for, are sent as commands.
//! `Err(String)` is a runner problem (an unknown operation or argument), `Ok(Err(_))` the
//! operation's error.

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::options::{
    AggregateOptions, CountOptions, CreateCollectionOptions, DeleteOptions, DistinctOptions, DropCollectionOptions,
    EstimatedDocumentCountOptions, FindOneAndDeleteOptions, FindOneAndReplaceOptions, FindOneAndUpdateOptions,
    FindOneOptions, FindOptions, InsertManyOptions, InsertOneOptions, ListCollectionsOptions, ReplaceOptions,
    UpdateModifications, UpdateOptions,
};
use mongodb::results::UpdateResult;
use mongodb::{Collection, Database, IndexModel};

use crate::unified::errors::OpError;

pub type OpResult = Result<Result<Option<Bson>, OpError>, String>;

/// How an operation's result is matched: documents and scalars as root-level values, iterable
/// results element by element as root-level documents.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Value,
    Iterable,
}

pub fn shape(name: &str) -> Shape {
    match name {
        "find" | "aggregate" | "listIndexes" | "listCollections" => Shape::Iterable,
        _ => Shape::Value,
    }
}

/// Takes argument `key` out of `args`.
fn take(args: &mut Document, key: &str) -> Result<Bson, String> {
    args.remove(key).ok_or_else(|| format!("missing argument {key}"))
}

fn take_doc(args: &mut Document, key: &str) -> Result<Document, String> {
    match take(args, key)? {
        Bson::Document(d) => Ok(d),
        other => Err(format!("argument {key} is not a document: {other}")),
    }
}

fn take_docs(args: &mut Document, key: &str) -> Result<Vec<Document>, String> {
    match take(args, key)? {
        Bson::Array(a) => a.into_iter().map(|d| d.as_document().cloned().ok_or("not a document".to_string())).collect(),
        other => Err(format!("argument {key} is not an array: {other}")),
    }
}

fn modifications(v: Bson) -> Result<UpdateModifications, String> {
    match v {
        Bson::Document(d) => Ok(UpdateModifications::Document(d)),
        Bson::Array(a) => {
            Ok(UpdateModifications::Pipeline(a.into_iter().filter_map(|d| d.as_document().cloned()).collect()))
        }
        other => Err(format!("update is {other}")),
    }
}

/// The rest of the arguments as the driver's options `T`.
fn opts<T: serde::de::DeserializeOwned>(args: Document) -> Result<T, String> {
    if args.contains_key("session") {
        return Err("sessions not supported by the runner".into());
    }
    bson::deserialize_from_document(args.clone()).map_err(|e| format!("options {args}: {e}"))
}

fn long(n: u64) -> Bson {
    Bson::Int64(i64::try_from(n).unwrap_or(i64::MAX))
}

fn update_result(r: UpdateResult) -> Bson {
    let mut d = doc! {
        "matchedCount": long(r.matched_count),
        "modifiedCount": long(r.modified_count),
        "upsertedCount": i64::from(r.upserted_id.is_some()),
    };
    if let Some(id) = r.upserted_id {
        d.insert("upsertedId", id);
    }
    Bson::Document(d)
}

fn docs(v: Vec<Document>) -> Option<Bson> {
    Some(Bson::Array(v.into_iter().map(Bson::Document).collect()))
}

macro_rules! op {
    ($e:expr, $f:expr) => {
        match $e.await {
            Ok(v) => Ok(Ok($f(v))),
            Err(e) => Ok(Err(OpError::from(e))),
        }
    };
}

pub async fn collection(coll: &Collection<Document>, name: &str, mut a: Document) -> OpResult {
    // Drivers send `rawData` only to 8.2+ servers; the tests that run here ask it be ignored.
    a.remove("rawData");
    match name {
        "insertOne" => {
            let d = take_doc(&mut a, "document")?;
            op!(
                coll.insert_one(d).with_options(opts::<InsertOneOptions>(a)?),
                |r: mongodb::results::InsertOneResult| { Some(Bson::Document(doc! { "insertedId": r.inserted_id })) }
            )
        }
        "insertMany" => {
            let d = take_docs(&mut a, "documents")?;
            let total = d.len();
            let o = opts::<InsertManyOptions>(a)?;
            let ordered = o.ordered.unwrap_or(true);
            match coll.insert_many(d).with_options(o).await {
                Ok(r) => Ok(Ok(Some(Bson::Document(doc! { "insertedIds": ids(r.inserted_ids) })))),
                Err(e) => {
                    // A BulkWriteException's partial result, as the CRUD spec defines insertMany's
                    // (the driver keeps its inserted ids private: counted from the write errors).
                    let inserted = match e.kind.as_ref() {
                        mongodb::error::ErrorKind::InsertMany(m) => {
                            let failed: Vec<usize> = m.write_errors.iter().flatten().map(|w| w.index).collect();
                            match (ordered, failed.first()) {
                                (true, Some(first)) => Some(*first),
                                _ => Some(total - failed.len()),
                            }
                        }
                        _ => None,
                    };
                    let mut err = OpError::from(e);
                    err.partial = inserted.map(|n| {
                        Bson::Document(doc! {
                            "insertedCount": i64::try_from(n).unwrap_or(0), "matchedCount": 0, "modifiedCount": 0,
                            "deletedCount": 0, "upsertedCount": 0, "upsertedIds": {},
                        })
                    });
                    Ok(Err(err))
                }
            }
        }
        "updateOne" | "updateMany" => {
            let f = take_doc(&mut a, "filter")?;
            let u = modifications(take(&mut a, "update")?)?;
            let o = opts::<UpdateOptions>(a)?;
            match name {
                "updateOne" => op!(coll.update_one(f, u).with_options(o), |r| Some(update_result(r))),
                _ => op!(coll.update_many(f, u).with_options(o), |r| Some(update_result(r))),
            }
        }
        "replaceOne" => {
            let f = take_doc(&mut a, "filter")?;
            let r = take_doc(&mut a, "replacement")?;
            op!(coll.replace_one(f, r).with_options(opts::<ReplaceOptions>(a)?), |r| Some(update_result(r)))
        }
        "deleteOne" | "deleteMany" => {
            let f = take_doc(&mut a, "filter")?;
            let o = opts::<DeleteOptions>(a)?;
            let res = |r: mongodb::results::DeleteResult| {
                Some(Bson::Document(doc! { "deletedCount": long(r.deleted_count) }))
            };
            match name {
                "deleteOne" => op!(coll.delete_one(f).with_options(o), res),
                _ => op!(coll.delete_many(f).with_options(o), res),
            }
        }
        "find" => {
            let f = a.remove("filter").and_then(|f| f.as_document().cloned()).unwrap_or_default();
            let o = opts::<FindOptions>(a)?;
            match coll.find(f).with_options(o).await {
                Ok(cursor) => op!(cursor.try_collect::<Vec<_>>(), docs),
                Err(e) => Ok(Err(e.into())),
            }
        }
        "findOne" => {
            let f = a.remove("filter").and_then(|f| f.as_document().cloned()).unwrap_or_default();
            op!(coll.find_one(f).with_options(opts::<FindOneOptions>(a)?), |r: Option<Document>| Some(
                r.map_or(Bson::Null, Bson::Document)
            ))
        }
        "aggregate" => {
            let p = take_docs(&mut a, "pipeline")?;
            match coll.aggregate(p).with_options(opts::<AggregateOptions>(a)?).await {
                Ok(cursor) => op!(cursor.try_collect::<Vec<_>>(), docs),
                Err(e) => Ok(Err(e.into())),
            }
        }
        "countDocuments" => {
            let f = take_doc(&mut a, "filter")?;
            op!(coll.count_documents(f).with_options(opts::<CountOptions>(a)?), |n| Some(long(n)))
        }
        "estimatedDocumentCount" => {
            let o = opts::<EstimatedDocumentCountOptions>(a)?;
            op!(coll.estimated_document_count().with_options(o), |n| Some(long(n)))
        }
        "distinct" => {
            let field = take(&mut a, "fieldName")?;
            let f = take_doc(&mut a, "filter")?;
            let o = opts::<DistinctOptions>(a)?;
            op!(coll.distinct(field.as_str().unwrap_or_default(), f).with_options(o), |v| Some(Bson::Array(v)))
        }
        "findOneAndUpdate" => {
            let f = take_doc(&mut a, "filter")?;
            let u = modifications(take(&mut a, "update")?)?;
            let o = opts::<FindOneAndUpdateOptions>(a)?;
            op!(coll.find_one_and_update(f, u).with_options(o), found)
        }
        "findOneAndReplace" => {
            let f = take_doc(&mut a, "filter")?;
            let r = take_doc(&mut a, "replacement")?;
            let o = opts::<FindOneAndReplaceOptions>(a)?;
            op!(coll.find_one_and_replace(f, r).with_options(o), found)
        }
        "findOneAndDelete" => {
            let f = take_doc(&mut a, "filter")?;
            op!(coll.find_one_and_delete(f).with_options(opts::<FindOneAndDeleteOptions>(a)?), found)
        }
        "bulkWrite" => crate::unified::bulk::run(coll, a).await,
        "createIndex" => {
            let keys = take(&mut a, "keys")?;
            let mut model = doc! { "key": keys };
            model.extend(a);
            let model: IndexModel = opts(model)?;
            op!(coll.create_index(model), |r: mongodb::results::CreateIndexResult| Some(Bson::String(r.index_name)))
        }
        "listIndexes" => match coll.list_indexes().await {
            Ok(cursor) => op!(cursor.try_collect::<Vec<IndexModel>>(), |v: Vec<IndexModel>| docs(
                v.iter().filter_map(|m| bson::serialize_to_document(m).ok()).collect()
            )),
            Err(e) => Ok(Err(e.into())),
        },
        "dropIndex" => {
            let n = take(&mut a, "name")?;
            op!(coll.drop_index(n.as_str().unwrap_or_default()), |()| None)
        }
        "dropIndexes" => op!(coll.drop_indexes(), |()| None),
        "count" => {
            let mut cmd = doc! { "count": coll.name(), "query": a.remove("filter").unwrap_or(Bson::Document(doc! {})) };
            cmd.extend(a);
            let db = coll.client().database(&coll.namespace().db);
            op!(db.run_command(cmd), |r: Document| r.get("n").cloned())
        }
        "createSearchIndex" => {
            let model: mongodb::SearchIndexModel = opts(take_doc(&mut a, "model")?)?;
            op!(coll.create_search_index(model), |n| Some(Bson::String(n)))
        }
        "createSearchIndexes" => {
            let models = take_docs(&mut a, "models")?;
            let models: Vec<mongodb::SearchIndexModel> = models.into_iter().map(opts).collect::<Result<_, _>>()?;
            op!(coll.create_search_indexes(models), |v: Vec<String>| Some(Bson::Array(
                v.into_iter().map(Bson::String).collect()
            )))
        }
        "updateSearchIndex" => {
            let n = take(&mut a, "name")?;
            let d = take_doc(&mut a, "definition")?;
            op!(coll.update_search_index(n.as_str().unwrap_or_default(), d), |()| None)
        }
        "dropSearchIndex" => {
            let n = take(&mut a, "name")?;
            op!(coll.drop_search_index(n.as_str().unwrap_or_default()), |()| None)
        }
        "listSearchIndexes" => {
            let mut action = coll.list_search_indexes();
            if let Some(Bson::String(n)) = a.remove("name") {
                action = action.name(n);
            }
            if let Ok(o) = a.get_document("aggregationOptions") {
                action = action.aggregate_options(opts::<AggregateOptions>(o.clone())?);
            }
            match action.await {
                Ok(cursor) => op!(cursor.try_collect::<Vec<_>>(), docs),
                Err(e) => Ok(Err(e.into())),
            }
        }
        other => Err(format!("collection operation {other} not supported by the runner")),
    }
}

fn ids(ids: std::collections::HashMap<usize, Bson>) -> Document {
    let mut ids: Vec<(usize, Bson)> = ids.into_iter().collect();
    ids.sort_by_key(|(i, _)| *i);
    ids.into_iter().map(|(i, id)| (i.to_string(), id)).collect()
}

fn found(r: Option<Document>) -> Option<Bson> {
    Some(r.map_or(Bson::Null, Bson::Document))
}

pub async fn database(db: &Database, name: &str, mut a: Document) -> OpResult {
    a.remove("rawData");
    match name {
        "runCommand" => {
            let cmd = take_doc(&mut a, "command")?;
            a.remove("commandName");
            if let Some(rp) = a.remove("readPreference") {
                let rp: mongodb::options::ReadPreference =
                    bson::deserialize_from_bson(rp).map_err(|e| format!("readPreference: {e}"))?;
                let sc = mongodb::options::SelectionCriteria::ReadPreference(rp);
                return op!(db.run_command(cmd).selection_criteria(sc), |r| Some(Bson::Document(r)));
            }
            if !a.is_empty() {
                return Err(format!("runCommand arguments {a} not supported by the runner"));
            }
            op!(db.run_command(cmd), |r| Some(Bson::Document(r)))
        }
        "aggregate" => {
            let p = take_docs(&mut a, "pipeline")?;
            match db.aggregate(p).with_options(opts::<AggregateOptions>(a)?).await {
                Ok(cursor) => op!(cursor.try_collect::<Vec<_>>(), docs),
                Err(e) => Ok(Err(e.into())),
            }
        }
        "createCollection" => {
            let n = take(&mut a, "collection")?;
            let o = opts::<CreateCollectionOptions>(a)?;
            op!(db.create_collection(n.as_str().unwrap_or_default()).with_options(o), |()| None)
        }
        "dropCollection" => {
            let n = take(&mut a, "collection")?;
            let o = opts::<DropCollectionOptions>(a)?;
            op!(db.collection::<Document>(n.as_str().unwrap_or_default()).drop().with_options(o), |()| None)
        }
        "listCollections" => {
            let f = a.remove("filter").and_then(|f| f.as_document().cloned()).unwrap_or_default();
            let o = opts::<ListCollectionsOptions>(a)?;
            match db.list_collections().filter(f).with_options(o).await {
                Ok(cursor) => {
                    op!(cursor.try_collect::<Vec<_>>(), |v: Vec<mongodb::results::CollectionSpecification>| {
                        docs(v.iter().filter_map(|s| bson::serialize_to_document(s).ok()).collect())
                    })
                }
                Err(e) => Ok(Err(e.into())),
            }
        }
        "modifyCollection" => {
            let n = take(&mut a, "collection")?;
            let mut cmd = doc! { "collMod": n };
            cmd.extend(a);
            op!(db.run_command(cmd), |_| None)
        }
        other => Err(format!("database operation {other} not supported by the runner")),
    }
}
