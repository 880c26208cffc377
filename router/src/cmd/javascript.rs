//! Commands that run server-side JavaScript (`mapReduce`): refused with NotImplemented (238)
//! until the sandboxed engine docs/query-language.md ("JavaScript") decides on exists, so a
//! driver gets a clear reason instead of CommandNotFound.
//!
//! Must not: run any of it.

use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

pub async fn map_reduce(_state: &RouterState, _conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    Err(CommandError::new(
        ErrorCode::NotImplemented,
        "mapReduce (server-side JavaScript) is not supported yet; an aggregation pipeline does the same",
    ))
}
