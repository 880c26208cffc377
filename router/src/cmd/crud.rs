//! CRUD commands: forwarded to the shard over gRPC, replies shaped as MongoDB's. The `config`
//! database is answered from the catalog instead (`config_db.rs`, `config_write.rs`).

use bson::RawDocumentBuf;

use crate::cmd::forward::{self, BatchField};
use crate::cmd::{config_db, config_write};
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// The database the router answers from the catalog.
const CONFIG_DB: &str = "config";

pub async fn insert(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return Err(config_write::refused(&cmd.name, coll));
    }
    let reply =
        state.shards.client().insert(forward::request(cmd)?).await.map_err(|s| state.shards.status_error(&s))?;
    forward::write_reply(reply.into_inner(), false)
}

pub async fn update(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_write::update(state, cmd, coll).await;
    }
    let reply =
        state.shards.client().update(forward::request(cmd)?).await.map_err(|s| state.shards.status_error(&s))?;
    forward::write_reply(reply.into_inner(), true)
}

pub async fn delete(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return Err(config_write::refused(&cmd.name, coll));
    }
    let reply =
        state.shards.client().delete(forward::request(cmd)?).await.map_err(|s| state.shards.status_error(&s))?;
    forward::write_reply(reply.into_inner(), false)
}

pub async fn find(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_db::find(state, conn, cmd, coll).await;
    }
    let reply = state
        .shards
        .client()
        .find(forward::request(cmd)?)
        .await
        .map_err(|s| state.shards.status_error(&s))?
        .into_inner();
    first_batch(state, reply)
}

pub async fn aggregate(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    if cmd.db == CONFIG_DB
        && let Ok(coll) = cmd.collection()
    {
        return config_db::aggregate(state, conn, cmd, coll).await;
    }
    let reply = state
        .shards
        .client()
        .aggregate(forward::request(cmd)?)
        .await
        .map_err(|s| state.shards.status_error(&s))?
        .into_inner();
    first_batch(state, reply)
}

/// A shard's first batch as the client's: a router cursor stands in for the shard's.
fn first_batch(state: &RouterState, reply: shoal_proto::shard::CursorReply) -> HandlerResult {
    if let Some(e) = reply.error {
        return Err(e.into());
    }
    let id = if reply.cursor_id == 0 { 0 } else { state.cursors.register(reply.ns.clone(), reply.cursor_id) };
    forward::cursor_reply(BatchField::First, &reply.documents, id, &reply.ns)
}

/// Commands whose reply is one document computed by the shard.
pub async fn single_reply(state: &RouterState, cmd: &Command) -> HandlerResult {
    let reply = state
        .shards
        .client()
        .command(forward::request(cmd)?)
        .await
        .map_err(|s| state.shards.status_error(&s))?
        .into_inner();
    if let Some(e) = reply.error {
        return Err(e.into());
    }
    RawDocumentBuf::from_bytes(reply.body.to_vec()).map_err(CommandError::from)
}

pub async fn find_and_modify(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return Err(config_write::refused(&cmd.name, coll));
    }
    single_reply(state, cmd).await
}

pub async fn count(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_db::count(state, conn, cmd, coll).await;
    }
    single_reply(state, cmd).await
}

pub async fn distinct(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_db::distinct(state, conn, cmd, coll).await;
    }
    single_reply(state, cmd).await
}
