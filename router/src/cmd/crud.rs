//! CRUD commands: `insert`, `update`, `delete`, `find`, `aggregate`, `count`, `distinct`,
//! `findAndModify`, and commands one shard answers for a database ([`single_reply`]). Each runs
//! the router's path to shards (`exec`) as a straight line:
//!
//! ```text
//!   parse -> [ placement -> target -> call -> merge ] -> reply      (reads)
//!            [ placement -> target -> call ]          -> reply      (writes)
//! ```
//!
//! the bracketed part again with a refreshed placement after a shard answered StaleConfig
//! (`call::with_placement`). A read or write one shard serves passes the client's bytes through
//! without decoding them. The `config` database is answered from the cluster catalog instead
//! (`cmd::config_db`).
//!
//! Must not: call shards or combine their answers itself (the `exec` steps do).

use bson::Document;

use crate::cmd::config_db;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::exec::call::{self, WriteKind};
use crate::exec::parse::{self, ReadKind};
use crate::exec::{merge, reply, target, write};
use crate::state::{ConnContext, RouterState};

/// A read routed by its filter: parse, then target, call and merge under the current
/// placement, then the reply.
async fn read(state: &RouterState, cmd: &Command, coll: &str, kind: ReadKind) -> HandlerResult {
    let read = &parse::read(cmd, coll, kind)?;
    call::with_placement(state, &cmd.db, coll, read.creates(), |placement| async move {
        let route = match target::read(read, &placement)? {
            // A database that does not exist answers empty, but only after a shard has checked
            // the command as it checks every other read (one parser per command, on the shard).
            target::Route::Nowhere if matches!(placement, crate::routing::Placement::NoDatabase) => {
                match crate::routing::every_shard(state).await?.into_iter().next() {
                    // Stages only the router runs ($lookup) stay here, as on an existing database.
                    Some(shard) if kind == ReadKind::Aggregate && read.has_router_stage() => {
                        target::Route::Many([shard].into())
                    }
                    Some(shard) => target::Route::One(shard),
                    None => target::Route::Nowhere,
                }
            }
            route => route,
        };
        let answers = call::read(state, read, &placement, route).await?;
        let merged = merge::read(state, read, answers).await?;
        reply::read(state, read, merged)
    })
    .await
}

/// A write: the client's bytes to the one shard of an unsharded namespace, or split by shard
/// key; a missing database is created.
pub(crate) async fn routed_write(state: &RouterState, cmd: &Command, coll: &str, kind: WriteKind) -> HandlerResult {
    let answer = call::with_placement(state, &cmd.db, coll, true, |placement| async move {
        let route = target::write(&placement)?;
        write::call(state, cmd, coll, kind, placement, route).await
    })
    .await?;
    reply::write_reply(answer, matches!(kind, WriteKind::Update))
}

pub async fn insert(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if config_db::serves(&cmd.db, coll) {
        return Err(config_db::write::refused(&cmd.name, coll));
    }
    routed_write(state, cmd, coll, WriteKind::Insert).await
}

pub async fn update(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == config_db::NAME {
        return config_db::write::update(state, cmd, coll).await;
    }
    if config_db::serves(&cmd.db, coll) {
        return Err(config_db::write::refused(&cmd.name, coll));
    }
    routed_write(state, cmd, coll, WriteKind::Update).await
}

pub async fn delete(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if config_db::serves(&cmd.db, coll) {
        return Err(config_db::write::refused(&cmd.name, coll));
    }
    routed_write(state, cmd, coll, WriteKind::Delete).await
}

pub async fn find(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if config_db::serves(&cmd.db, coll) {
        return config_db::find(state, conn, cmd, coll).await;
    }
    read(state, cmd, coll, ReadKind::Find).await
}

pub async fn aggregate(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    if let Ok(coll) = cmd.collection()
        && config_db::serves(&cmd.db, coll)
    {
        return config_db::aggregate(state, conn, cmd, coll).await;
    }
    if let Ok(coll) = cmd.collection()
        && let Ok(Some(bson::RawBsonRef::Array(stages))) = cmd.body.get("pipeline")
        && let Some(Ok(bson::RawBsonRef::Document(first))) = stages.into_iter().next()
        && let Ok(Some(bson::RawBsonRef::Document(spec))) = first.get("$collStats")
    {
        let spec = Document::try_from(spec)?;
        let all: Vec<bson::Bson> =
            Document::try_from(cmd.body.as_ref())?.get_array("pipeline").cloned().unwrap_or_default();
        return crate::cmd::stats::coll_stats_stage(state, cmd, coll, &spec, &all[1..]).await;
    }
    if let Some((spec, rest)) = router_first_stage(cmd, crate::cmd::operations::STAGE)? {
        return crate::cmd::operations::current_op_stage(state, conn, cmd, &spec, &rest).await;
    }
    if let Some((spec, rest)) = router_first_stage(cmd, crate::cmd::documents::STAGE)? {
        let stages = std::iter::once(bson::Bson::Document(bson::doc! { crate::cmd::documents::STAGE: spec }));
        return crate::cmd::documents::run(state, cmd, stages.chain(rest).collect()).await;
    }
    if let Some((spec, rest)) = router_first_stage(cmd, crate::cmd::data_distribution::STAGE)? {
        return crate::cmd::data_distribution::run(state, cmd, &spec, &rest).await;
    }
    match cmd.collection() {
        Ok(coll) => read(state, cmd, coll, ReadKind::Aggregate).await,
        // `aggregate: 1` (database-level): the database's primary.
        Err(_) => single_reply(state, cmd).await,
    }
}

/// The argument of the pipeline's first stage when it is `stage` (a stage the router answers
/// itself), and the stages after it.
fn router_first_stage(
    cmd: &Command,
    stage: &str,
) -> Result<Option<(bson::Bson, Vec<bson::Bson>)>, crate::error::CommandError> {
    let Ok(Some(bson::RawBsonRef::Array(stages))) = cmd.body.get("pipeline") else { return Ok(None) };
    let Some(Ok(bson::RawBsonRef::Document(first))) = stages.into_iter().next() else { return Ok(None) };
    if !matches!(first.get(stage), Ok(Some(_))) {
        return Ok(None);
    }
    let mut all: Vec<bson::Bson> =
        Document::try_from(cmd.body.as_ref())?.get_array("pipeline").cloned().unwrap_or_default();
    let spec = match all.first() {
        Some(bson::Bson::Document(d)) => d.get(stage).cloned(),
        _ => None,
    };
    let rest = all.split_off(1.min(all.len()));
    Ok(Some((spec.unwrap_or(bson::Bson::Null), rest)))
}

/// Commands whose reply is one document computed by one shard: the database's primary
/// (NamespaceNotFound when the database does not exist) or, without config servers, the legacy
/// shard. The client's bytes are passed through.
pub async fn single_reply(state: &RouterState, cmd: &Command) -> HandlerResult {
    // The primary may move meanwhile (StaleDbVersion): then the new one is asked.
    call::with_placement(state, &cmd.db, "", false, |placement| async move {
        let shard = target::primary(&placement)?;
        let (doc, write_concern_error) = call::read::one_document(state, cmd, &placement, shard).await?;
        reply::document(&doc, write_concern_error)
    })
    .await
}

pub async fn find_and_modify(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if config_db::serves(&cmd.db, coll) {
        return Err(config_db::write::refused(&cmd.name, coll));
    }
    read(state, cmd, coll, ReadKind::FindAndModify).await
}

pub async fn count(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if config_db::serves(&cmd.db, coll) {
        return config_db::count(state, conn, cmd, coll).await;
    }
    read(state, cmd, coll, ReadKind::Count).await
}

pub async fn distinct(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if config_db::serves(&cmd.db, coll) {
        return config_db::distinct(state, conn, cmd, coll).await;
    }
    read(state, cmd, coll, ReadKind::Distinct).await
}
