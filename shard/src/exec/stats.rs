//! `collStats` and `dbStats` on one shard: document counts and BSON sizes per collection, from a
//! scan of its documents (Shoal keeps no running counters yet, so these cost a pass over the data,
//! bounded by the operation's `maxTimeMS` like any scan). Orphans are counted, as MongoDB's
//! storage statistics count them; only the `_id` index exists, and its size is not tracked (0).
//!
//! Must not: change anything.

use std::ops::Bound;

use bson::{Document, doc};

use crate::error::{ExecError, ExecResult};
use crate::exec::{Node, Request, args, deadline};
use crate::store::local_catalog::CollectionInfo;

/// Count and bytes of one collection's documents.
fn tally(node: &Node, coll: &CollectionInfo) -> ExecResult<(i64, i64)> {
    let (mut count, mut bytes) = (0i64, 0i64);
    for (i, kv) in node.store.scan(coll, Bound::Unbounded, Bound::Unbounded, false).enumerate() {
        if (i as u64).is_multiple_of(deadline::CHECK_EVERY) {
            deadline::check()?;
        }
        let (_, raw) = kv?;
        count += 1;
        bytes += raw.len() as i64;
    }
    Ok((count, bytes))
}

/// `scale`: sizes are divided by it (MongoDB: a positive number, default 1).
fn scale(body: &Document, cmd: &str) -> ExecResult<i64> {
    match body.get("scale") {
        None => Ok(1),
        Some(v) => match args::as_f64(v) {
            Some(s) if s >= 1.0 => Ok(s as i64),
            _ => Err(ExecError::bad_value(format!("{cmd}: scale has to be >= 1"))),
        },
    }
}

fn avg(bytes: i64, count: i64) -> f64 {
    if count == 0 { 0.0 } else { bytes as f64 / count as f64 }
}

pub fn coll_stats(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let name = args::collection_name(&req.body, "collStats")?;
    let ns = args::namespace(req.db, &name)?;
    let scale = scale(&req.body, "collStats")?;
    let coll = node.store.collection(&ns.to_string());
    let (count, bytes) = match &coll {
        Some(coll) => tally(node, coll)?,
        None => (0, 0),
    };
    // The _id index is the documents' own order: it takes no space of its own.
    let mut index_sizes = doc! { "_id_": 0_i64 };
    let mut index_total = 0i64;
    for spec in coll.iter().flat_map(|c| c.ready_indexes()) {
        let (_, b) = node.store.index_size(spec.ident)?;
        index_sizes.insert(spec.name.clone(), b as i64 / scale);
        index_total += b as i64;
    }
    Ok(doc! {
        "ns": ns.to_string(),
        "count": count,
        "size": bytes / scale,
        "avgObjSize": avg(bytes, count),
        "storageSize": bytes / scale,
        "nindexes": index_sizes.len() as i32,
        "indexSizes": index_sizes,
        "totalIndexSize": index_total / scale,
        "totalSize": (bytes + index_total) / scale,
        "scaleFactor": scale,
    })
}

pub fn db_stats(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let scale = scale(&req.body, "dbStats")?;
    let colls = node.store.collections_in(req.db);
    let (mut objects, mut bytes, mut indexes, mut index_bytes) = (0i64, 0i64, 0i64, 0i64);
    for coll in &colls {
        let (c, b) = tally(node, coll)?;
        objects += c;
        bytes += b;
        indexes += 1;
        for spec in coll.ready_indexes() {
            indexes += 1;
            index_bytes += node.store.index_size(spec.ident)?.1 as i64;
        }
    }
    let n = colls.len() as i64;
    Ok(doc! {
        "db": req.db,
        "collections": n,
        "views": 0_i64,
        "objects": objects,
        "avgObjSize": avg(bytes, objects),
        "dataSize": bytes / scale,
        "storageSize": bytes / scale,
        "indexes": indexes,
        "indexSize": index_bytes / scale,
        "totalSize": (bytes + index_bytes) / scale,
        "scaleFactor": scale,
    })
}
