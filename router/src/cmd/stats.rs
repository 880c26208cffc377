//! `dbStats` and `collStats` across shards, and the `$collStats` aggregation stage: each shard
//! answers for its own documents (orphans included, as MongoDB's storage statistics do), the
//! router adds the counts and sizes up and keeps each shard's answer (`raw` / `shards`), as
//! mongos does. `$collStats` must be the first stage; the stages after it run on the router.
//!
//! Must not: estimate anything itself — every number comes from a shard.

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;

use crate::cmd::ddl::num;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::routing::every_shard;
use crate::routing::{self, Placement};
use crate::state::{ConnContext, RouterState};

const DB_SUMS: &[&str] =
    &["collections", "views", "objects", "dataSize", "storageSize", "indexes", "indexSize", "totalSize"];
const COLL_SUMS: &[&str] = &["count", "size", "storageSize", "totalIndexSize", "totalSize"];

/// Every shard's answer to `cmd`, by shard id.
async fn per_shard(state: &RouterState, cmd: &Command) -> Result<Vec<(String, Document)>, CommandError> {
    let shards = every_shard(state).await?;
    let replies = broadcast(state, cmd, &Placement::NoDatabase, &shards).await;
    shards.into_iter().zip(replies).map(|(s, r)| r.map(|d| (s, d))).collect()
}

fn sums(replies: &[(String, Document)], fields: &[&str]) -> Document {
    let mut out = Document::new();
    for f in fields {
        out.insert(*f, replies.iter().map(|(_, r)| num(r.get(*f))).sum::<i64>());
    }
    out
}

fn avg(bytes: i64, count: i64) -> f64 {
    if count == 0 { 0.0 } else { bytes as f64 / count as f64 }
}

pub async fn db_stats(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let replies = per_shard(state, cmd).await?;
    let mut out =
        doc! { "raw": replies.iter().map(|(s, r)| (s.clone(), Bson::Document(r.clone()))).collect::<Document>() };
    let totals = sums(&replies, DB_SUMS);
    // Collections counted once per shard that has them: the most any shard has is the nearest.
    let collections = replies.iter().map(|(_, r)| num(r.get("collections"))).max().unwrap_or(0);
    out.insert("db", cmd.db.as_str());
    out.extend(totals.clone());
    out.insert("collections", collections);
    out.insert("indexes", collections);
    out.insert("avgObjSize", avg(num(totals.get("dataSize")), num(totals.get("objects"))));
    out.insert("scaleFactor", replies.first().map_or(1, |(_, r)| num(r.get("scaleFactor")).max(1)));
    Ok(RawDocumentBuf::try_from(&out)?)
}

pub async fn coll_stats(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    let placement = routing::placement(state, &cmd.db, coll, false).await?;
    let (sharded, nchunks) = match &placement {
        Placement::Sharded(t) => (true, t.chunks.len() as i64),
        _ => (false, 1),
    };
    // The shards that own chunks (a sharded collection) or the database's primary.
    let owners = placement.all_shards();
    let replies = per_shard(state, cmd).await?;
    let totals = sums(&replies, COLL_SUMS);
    let mut out = doc! { "sharded": sharded, "ns": format!("{}.{coll}", cmd.db) };
    out.extend(totals.clone());
    out.insert("avgObjSize", avg(num(totals.get("size")), num(totals.get("count"))));
    // Index sizes summed by name over the shards; the count is the largest any shard has.
    let mut index_sizes = doc! { "_id_": 0_i64 };
    let mut nindexes = 1i64;
    for (_, r) in &replies {
        nindexes = nindexes.max(num(r.get("nindexes")));
        for (name, size) in r.get_document("indexSizes").map(|d| d.iter().collect::<Vec<_>>()).unwrap_or_default() {
            let sum = num(index_sizes.get(name)) + num(Some(size));
            index_sizes.insert(name.clone(), sum);
        }
    }
    out.insert("nindexes", nindexes as i32);
    out.insert("indexSizes", index_sizes);
    out.insert("scaleFactor", replies.first().map_or(1, |(_, r)| num(r.get("scaleFactor")).max(1)));
    out.insert("nchunks", nchunks);
    // Every shard's documents are counted (orphans too); `shards` lists the owners, as mongos does.
    let per: Document = replies
        .iter()
        .filter(|(s, _)| owners.contains(s) || owners.is_empty())
        .map(|(s, r)| (s.clone(), Bson::Document(r.clone())))
        .collect();
    out.insert("shards", per);
    Ok(RawDocumentBuf::try_from(&out)?)
}

/// `aggregate` whose first stage is `$collStats`: one document per shard, then the rest of the
/// pipeline on the router.
pub async fn coll_stats_stage(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    spec: &Document,
    rest: &[Bson],
) -> HandlerResult {
    for k in spec.keys() {
        if !matches!(k.as_str(), "storageStats" | "count" | "latencyStats" | "queryExecStats") {
            return Err(CommandError::new(ErrorCode::FailedToParse, format!("unrecognized option to $collStats: {k}")));
        }
    }
    let mut stats_body = doc! { "collStats": coll, "$db": cmd.db.as_str() };
    if let Ok(s) = spec.get_document("storageStats")
        && let Some(scale) = s.get("scale")
    {
        stats_body.insert("scale", scale.clone());
    }
    let stats_cmd = Command::internal(RawDocumentBuf::try_from(&stats_body)?, &cmd.db, cmd.request_id);
    let ns = format!("{}.{coll}", cmd.db);
    let mut docs = Vec::new();
    for (shard, r) in per_shard(state, &stats_cmd).await? {
        let mut d = doc! { "ns": &ns, "shard": &shard, "host": state.shards.primary(&shard).unwrap_or_default(), "localTime": bson::DateTime::now() };
        if spec.contains_key("storageStats") {
            d.insert("storageStats", r.clone());
        }
        if spec.contains_key("count") {
            d.insert("count", doc! { "count": num(r.get("count")) });
        }
        if spec.contains_key("latencyStats") || spec.contains_key("queryExecStats") {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                "$collStats latencyStats and queryExecStats are not supported yet",
            ));
        }
        docs.push(d);
    }
    let pipeline = shoal_query::aggregate::Pipeline::parse(rest)?;
    let out = pipeline.run(docs.into_iter())?;
    let batch: Vec<bytes::Bytes> = out.iter().map(|d| d.to_vec().map(bytes::Bytes::from)).collect::<Result<_, _>>()?;
    crate::exec::reply::cursor_reply(crate::exec::reply::BatchField::First, &batch, 0, &ns)
}
