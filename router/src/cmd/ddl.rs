//! Collection and database commands, answered by the shard.

use crate::cmd::crud::single_reply;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::state::{ConnContext, RouterState};

pub async fn create(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    cmd.collection()?;
    single_reply(state, cmd).await
}

pub async fn drop(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    cmd.collection()?;
    single_reply(state, cmd).await
}

pub async fn drop_database(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    single_reply(state, cmd).await
}

pub async fn list_databases(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    single_reply(state, cmd).await
}

pub async fn list_collections(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    single_reply(state, cmd).await
}

pub async fn list_indexes(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    cmd.collection()?;
    single_reply(state, cmd).await
}

pub async fn create_indexes(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    cmd.collection()?;
    single_reply(state, cmd).await
}
