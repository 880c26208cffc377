//! `$shardedDataDistribution` (`db.adminCommand({aggregate: 1, pipeline: [{$shardedDataDistribution:
//! {}}]})`): per sharded collection, per shard, the documents the shard owns and the orphans it
//! still holds (documents outside its chunks, e.g. left by a migration's donor), as MongoDB
//! reports them. The stages after it run on the router.
//!
//! ```text
//!   router --collStats (unversioned: every document)--> each shard     => total count, size
//!   router --count (versioned: owned documents only)--> owning shards  => numOwnedDocuments
//!   numOrphanedDocs = total - owned;  sizes = count * the shard's average document size
//! ```
//!
//! The sizes are estimates from the average document size, as MongoDB's are. The two reads are
//! not one snapshot: a write between them can make a count off by the documents it touched (the
//! orphan count is clamped at 0).
//!
//! Must not: count anything itself — every number comes from a shard.

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;
use shoal_proto::config::CatalogPart;
use shoal_query::aggregate::Pipeline;

use crate::cmd::ddl::num;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::exec::reply;
use crate::routing::every_shard;
use crate::routing::{self, Placement, STALE_ATTEMPTS_MAX};
use crate::state::RouterState;

/// The stage's name, as the first stage of an `aggregate: 1` on `admin`.
pub const STAGE: &str = "$shardedDataDistribution";

fn command(cmd: &Command, db: &str, body: Document) -> Result<Command, CommandError> {
    Ok(Command::internal(RawDocumentBuf::try_from(&body)?, db, cmd.request_id))
}

/// Runs the stage, then `rest` over its output.
pub async fn run(state: &RouterState, cmd: &Command, spec: &Bson, rest: &[Bson]) -> HandlerResult {
    if !matches!(spec, Bson::Document(d) if d.is_empty()) {
        return Err(CommandError::new(ErrorCode::FailedToParse, format!("{STAGE} takes no arguments: {STAGE}: {{}}")));
    }
    if cmd.db != "admin" || cmd.collection().is_ok() {
        return Err(CommandError::new(
            ErrorCode::InvalidNamespace,
            format!("{STAGE} must be run against the 'admin' database with {{aggregate: 1}}"),
        ));
    }
    let rest = Pipeline::parse(rest)?;
    let catalog = routing::read_view(state, &[CatalogPart::Collections]).await?;
    let shards = every_shard(state).await?;
    let mut docs = Vec::new();
    for ns in catalog.collections().keys() {
        let Some((db, coll)) = ns.split_once('.') else { continue };
        if let Some(d) = collection(state, cmd, db, coll, &shards).await? {
            docs.push(d);
        }
    }
    let docs = rest.run(docs.into_iter())?;
    reply::buffered(state, "admin.$cmd.aggregate", docs, usize::MAX)
}

/// One collection's document; `None` if it is no longer sharded.
async fn collection(
    state: &RouterState,
    cmd: &Command,
    db: &str,
    coll: &str,
    shards: &[String],
) -> Result<Option<Document>, CommandError> {
    let stats_cmd = command(cmd, db, doc! { "collStats": coll, "$db": db })?;
    let count_cmd = command(cmd, db, doc! { "count": coll, "query": {}, "$db": db })?;
    let mut attempt = 0;
    loop {
        let placement = routing::placement(state, db, coll, false).await?;
        let Placement::Sharded(_) = placement else { return Ok(None) };
        let owners: Vec<String> = placement.all_shards().into_iter().collect();
        let totals = broadcast(state, &stats_cmd, &Placement::NoDatabase, shards).await;
        let owned = broadcast(state, &count_cmd, &placement, &owners).await;
        if let Some(e) = owned.iter().find_map(|r| r.as_ref().err())
            && routing::is_stale(e)
            && attempt + 1 < STALE_ATTEMPTS_MAX
        {
            routing::on_stale(state, db, coll, &placement, e, attempt).await;
            attempt += 1;
            continue;
        }
        let mut per_shard = Vec::new();
        for (shard, stats) in shards.iter().zip(totals) {
            let stats = stats?;
            let (total, bytes) = (num(stats.get("count")), num(stats.get("size")));
            let owned_n = match owners.iter().position(|o| o == shard) {
                Some(i) => num(owned[i].as_ref().map_err(Clone::clone)?.get("n")),
                None => 0,
            };
            if owned_n == 0 && total == 0 && !owners.contains(shard) {
                continue;
            }
            let orphans = (total - owned_n).max(0);
            let avg = if total == 0 { 0 } else { bytes / total };
            per_shard.push(Bson::Document(doc! {
                "shardName": shard,
                "numOrphanedDocs": orphans,
                "numOwnedDocuments": owned_n,
                "ownedSizeBytes": owned_n * avg,
                "orphanedSizeBytes": orphans * avg,
            }));
        }
        return Ok(Some(doc! { "ns": format!("{db}.{coll}"), "shards": per_shard }));
    }
}
