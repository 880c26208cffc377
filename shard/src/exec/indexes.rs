//! `createIndexes`, `dropIndexes` and `listIndexes` on one shard.
//!
//! `createIndexes` answers as MongoDB does: a spec equal to an existing index is a no-op ("all
//! indexes already exist"); the same name with another key is IndexKeySpecsConflict (86); the
//! same key under another name or with other options is IndexOptionsConflict (85). New indexes
//! are built one after another ([`index_build`]) and the reply comes when all are ready.
//!
//! Must not: decide cluster-wide rules (unique indexes prefixed by the shard key): the router
//! checks those, it knows the shard key.

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::exec::{Node, Request, args, deadline, index_build};
use crate::store::indexes::IndexSpec;
use crate::store::local_catalog::CollectionInfo;

/// How long `createIndexes` waits for a concurrent build of the same index to finish.
const CONCURRENT_BUILD_WAIT: Duration = Duration::from_secs(600);
const CONCURRENT_BUILD_POLL: Duration = Duration::from_millis(50);

pub fn list_indexes(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let name = args::collection_name(&req.body, "listIndexes")?;
    let ns = args::namespace(req.db, &name)?;
    let Some(coll) = node.store.collection(&ns.to_string()) else {
        return Err(ExecError::new(ErrorCode::NamespaceNotFound, format!("ns does not exist: {ns}")));
    };
    let mut batch = vec![Bson::Document(doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_" })];
    batch.extend(coll.ready_indexes().map(|s| Bson::Document(s.listing())));
    Ok(doc! { "cursor": { "id": 0_i64, "ns": ns.to_string(), "firstBatch": batch } })
}

fn parse_specs(body: &Document) -> ExecResult<Vec<IndexSpec>> {
    let specs = match body.get("indexes") {
        Some(Bson::Array(a)) if !a.is_empty() => a,
        Some(Bson::Array(_)) => return Err(ExecError::bad_value("Must specify at least one index to create")),
        Some(other) => return Err(args::wrong_type("createIndexes", "indexes", other, "array")),
        None => {
            return Err(ExecError::new(
                ErrorCode::Location40414,
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ));
        }
    };
    let mut out: Vec<IndexSpec> = Vec::with_capacity(specs.len());
    for spec in specs {
        let Bson::Document(d) = spec else {
            return Err(args::wrong_type("createIndexes", "indexes", spec, "object"));
        };
        if is_id_spec(d) {
            continue;
        }
        let parsed = IndexSpec::from_user(d)?;
        if out.iter().any(|o| o.name == parsed.name || o.key == parsed.key) {
            return Err(ExecError::new(
                ErrorCode::IndexKeySpecsConflict,
                format!("the request names index '{}' (or its key) twice", parsed.name),
            ));
        }
        out.push(parsed);
    }
    Ok(out)
}

/// `{key: {_id: 1}}` (optionally named `_id_`): the index every collection has.
fn is_id_spec(d: &Document) -> bool {
    let key_is_id =
        d.get_document("key").is_ok_and(|k| k.len() == 1 && k.get("_id").and_then(args::as_f64) == Some(1.0));
    key_is_id && d.get_str("name").map_or(true, |n| n == "_id_") && !d.contains_key("unique")
}

/// What to do with a requested spec given the collection's indexes.
enum Disposition {
    Exists,
    Build,
    /// The same index is being built by another command.
    Wait,
}

fn disposition(coll: &CollectionInfo, spec: &IndexSpec) -> ExecResult<Disposition> {
    for existing in &coll.indexes {
        if existing.name == spec.name {
            if existing.key != spec.key {
                return Err(ExecError::new(
                    ErrorCode::IndexKeySpecsConflict,
                    format!(
                        "An existing index has the same name as the requested index. When index names are not \
                         specified, they are auto generated and can cause conflicts. Please refer to our \
                         documentation. Requested index: {}, existing index: {}",
                        spec.listing(),
                        existing.listing()
                    ),
                ));
            }
            if !existing.same_definition(spec) {
                return Err(ExecError::new(
                    ErrorCode::IndexOptionsConflict,
                    format!(
                        "An equivalent index already exists with the same name but different options. Requested \
                         index: {}, existing index: {}",
                        spec.listing(),
                        existing.listing()
                    ),
                ));
            }
            return Ok(if existing.building { Disposition::Wait } else { Disposition::Exists });
        }
        if existing.key == spec.key && existing.partial.is_none() && spec.partial.is_none() {
            return Err(ExecError::new(
                ErrorCode::IndexOptionsConflict,
                format!("Index already exists with a different name: {}", existing.name),
            ));
        }
    }
    Ok(Disposition::Build)
}

pub fn create_indexes(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let name = args::collection_name(&req.body, "createIndexes")?;
    let ns = args::namespace(req.db, &name)?;
    let specs = parse_specs(&req.body)?;
    let ((coll, created), mut seq) = node.store.write(|txn| txn.ensure_collection(&ns, Document::new()))?;
    let before = 1 + coll.indexes.iter().filter(|s| !s.building).count();
    let mut built = 0usize;
    for spec in specs {
        let started = Instant::now();
        loop {
            let current = node.store.collection(&ns.to_string()).ok_or_else(|| {
                ExecError::new(
                    ErrorCode::NamespaceNotFound,
                    format!("collection {ns} was dropped during the index build"),
                )
            })?;
            match disposition(&current, &spec)? {
                Disposition::Exists => break,
                Disposition::Build => {
                    seq = index_build::build(&node.store, &current, spec)?;
                    built += 1;
                    break;
                }
                Disposition::Wait if started.elapsed() < CONCURRENT_BUILD_WAIT => {
                    deadline::check()?;
                    std::thread::sleep(CONCURRENT_BUILD_POLL);
                }
                Disposition::Wait => {
                    return Err(ExecError::new(
                        ErrorCode::ExceededTimeLimit,
                        format!("index '{}' is still being built by another command", spec.name),
                    ));
                }
            }
        }
    }
    let after = node.store.collection(&ns.to_string()).map_or(before, |c| 1 + c.ready_indexes().count());
    let mut reply = doc! {
        "numIndexesBefore": before as i32,
        "numIndexesAfter": after as i32,
        "createdCollectionAutomatically": created,
    };
    if built == 0 {
        reply.insert("note", "all indexes already exist");
    }
    Ok((reply, seq))
}

/// `dropIndexes`: `index` is a name, a key pattern, `"*"` (every index but `_id`) or an array
/// of names.
pub fn drop_indexes(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let cmd = req.name().to_owned();
    let name = args::collection_name(&req.body, &cmd)?;
    let ns = args::namespace(req.db, &name)?;
    let Some(coll) = node.store.collection(&ns.to_string()) else {
        return Err(ExecError::new(ErrorCode::NamespaceNotFound, format!("ns not found {ns}")));
    };
    let was = 1 + coll.ready_indexes().count();
    let targets: Vec<String> = match req.body.get("index") {
        Some(Bson::String(s)) if s == "*" => coll.indexes.iter().map(|s| s.name.clone()).collect(),
        Some(Bson::String(s)) => vec![s.clone()],
        Some(Bson::Document(key)) => {
            if key.len() == 1 && key.get("_id").and_then(args::as_f64) == Some(1.0) {
                return Err(cannot_drop_id());
            }
            match coll.indexes.iter().find(|s| &s.key == key) {
                Some(s) => vec![s.name.clone()],
                None => {
                    return Err(ExecError::new(ErrorCode::IndexNotFound, format!("can't find index with key: {key}")));
                }
            }
        }
        Some(Bson::Array(names)) => names
            .iter()
            .map(|n| match n {
                Bson::String(s) => Ok(s.clone()),
                other => Err(args::wrong_type(&cmd, "index", other, "string")),
            })
            .collect::<ExecResult<_>>()?,
        Some(other) => return Err(args::wrong_type(&cmd, "index", other, "string or object")),
        None => {
            return Err(ExecError::new(
                ErrorCode::Location40414,
                format!("BSON field '{cmd}.index' is missing but a required field"),
            ));
        }
    };
    for t in &targets {
        if t == "_id_" {
            return Err(cannot_drop_id());
        }
        if coll.index(t).is_none() {
            return Err(ExecError::new(ErrorCode::IndexNotFound, format!("index not found with name [{t}]")));
        }
    }
    let ((), seq) = node.store.write(|txn| {
        for t in &targets {
            txn.drop_index(&coll, t, true)?;
        }
        Ok(())
    })?;
    Ok((doc! { "nIndexesWas": was as i32 }, seq))
}

fn cannot_drop_id() -> ExecError {
    ExecError::new(ErrorCode::InvalidOptions, "cannot drop _id index")
}
