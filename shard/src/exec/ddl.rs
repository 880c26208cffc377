//! Collection and database commands: `create`, `drop`, `dropDatabase`, `listCollections`,
//! `listDatabases`.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;

use crate::error::{ExecError, ExecResult};
use crate::exec::{Node, Request, args};

/// Options of `create` that Shoal accepts and records; others are refused rather than ignored.
const CREATE_OPTIONS_SUPPORTED: &[&str] =
    &["idIndex", "storageEngine", "validationLevel", "validationAction", "comment"];

pub fn create(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let name = args::collection_name(&req.body, "create")?;
    let ns = args::namespace(req.db, &name)?;
    let mut options = Document::new();
    for (k, v) in req.body.iter().skip(1) {
        if k.starts_with('$')
            || matches!(
                k.as_str(),
                "writeConcern"
                    | "lsid"
                    | "txnNumber"
                    | "apiVersion"
                    | "apiStrict"
                    | "apiDeprecationErrors"
                    | "maxTimeMS"
            )
        {
            continue;
        }
        if matches!(
            k.as_str(),
            "capped"
                | "timeseries"
                | "clusteredIndex"
                | "viewOn"
                | "pipeline"
                | "validator"
                | "collation"
                | "changeStreamPreAndPostImages"
                | "expireAfterSeconds"
        ) {
            let enabled = !matches!(v, Bson::Boolean(false) | Bson::Null);
            if enabled {
                return Err(ExecError::new(
                    ErrorCode::NotImplemented,
                    format!("create option '{k}' is not supported yet"),
                ));
            }
            continue;
        }
        if !CREATE_OPTIONS_SUPPORTED.contains(&k.as_str()) {
            return Err(ExecError::new(
                ErrorCode::Location40414,
                format!("BSON field 'create.{k}' is an unknown field."),
            ));
        }
        options.insert(k.clone(), v.clone());
    }
    let (result, seq) = node.store.write(|txn| {
        if txn.collection(&ns.to_string()).is_some() {
            return Ok(Err(ExecError::new(ErrorCode::NamespaceExists, format!("Collection {ns} already exists."))));
        }
        txn.ensure_collection(&ns, options)?;
        Ok(Ok(()))
    })?;
    result?;
    Ok((Document::new(), seq))
}

pub fn drop(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let name = args::collection_name(&req.body, "drop")?;
    let ns = args::namespace(req.db, &name)?;
    if crate::ops::system_profile::is_profile(&name) {
        let existed = node.ops.profiler.drop_ring(req.db)?;
        let reply = if existed {
            doc! { "nIndexesWas": 0, "ns": ns.to_string() }
        } else {
            Document::new()
        };
        return Ok((reply, 0));
    }
    let (existed, seq) = node.store.write(|txn| match txn.collection(&ns.to_string()) {
        Some(coll) => txn.drop_collection(&coll).map(|()| true),
        None => Ok(false),
    })?;
    // MongoDB 7.0 answers a drop of a missing collection with ok:1 and no `ns`.
    let reply = if existed {
        doc! { "nIndexesWas": 1, "ns": ns.to_string() }
    } else {
        Document::new()
    };
    Ok((reply, seq))
}

pub fn drop_database(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let db = req.db.to_owned();
    shoal_proto::namespace::validate_db(&db).map_err(|e| ExecError::new(ErrorCode::InvalidNamespace, e.to_string()))?;
    let colls = node.store.collections_in(&db);
    let ((), seq) = node.store.write(|txn| {
        for c in &colls {
            if let Some(current) = txn.collection(&c.full_name()) {
                txn.drop_collection(&current)?;
            }
        }
        Ok(())
    })?;
    node.ops.profiler.forget_database(&db);
    Ok((doc! { "dropped": db }, seq))
}

pub fn list_collections(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let filter_doc = args::opt_document(&req.body, "listCollections", "filter")?.cloned().unwrap_or_default();
    let name_only = args::opt_bool(&req.body, "listCollections", "nameOnly")?.unwrap_or(false);
    let filter = Filter::parse(&filter_doc)?;
    let mut batch = Vec::new();
    for c in node.store.collections_in(req.db) {
        let full = doc! {
            "name": &c.ns.coll,
            "type": "collection",
            "options": c.options.clone(),
            "info": { "readOnly": false, "uuid": c.uuid },
            "idIndex": { "v": 2, "key": { "_id": 1 }, "name": "_id_" },
        };
        if filter.matches(&full) {
            batch.push(if name_only {
                doc! { "name": &c.ns.coll, "type": "collection" }
            } else {
                full
            });
        }
    }
    Ok(doc! { "cursor": { "id": 0_i64, "ns": format!("{}.$cmd.listCollections", req.db), "firstBatch": batch } })
}

pub fn list_databases(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let filter_doc = args::opt_document(&req.body, "listDatabases", "filter")?.cloned().unwrap_or_default();
    let name_only = args::opt_bool(&req.body, "listDatabases", "nameOnly")?.unwrap_or(false);
    let filter = Filter::parse(&filter_doc)?;
    let dbs = node.store.databases();
    // Per-database sizes are not tracked yet: the store's size is split evenly so totals add up.
    let total = node.store.disk_space_bytes() as i64;
    let each = if dbs.is_empty() { 0 } else { total / dbs.len() as i64 };
    let mut out = Vec::new();
    for name in dbs {
        let entry = if name_only {
            doc! { "name": &name }
        } else {
            doc! { "name": &name, "sizeOnDisk": each, "empty": false }
        };
        if filter.matches(&entry) {
            out.push(entry);
        }
    }
    let mut reply = doc! { "databases": out };
    if !name_only {
        reply.insert("totalSize", total);
        reply.insert("totalSizeMb", total / (1024 * 1024));
    }
    Ok(reply)
}
