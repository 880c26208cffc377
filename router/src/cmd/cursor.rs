//! (being written by the router's CRUD owner)

use crate::command::Command; use crate::dispatch::HandlerResult; use crate::error::CommandError; use crate::state::{ConnContext, RouterState};
pub async fn get_more(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn kill_cursors(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
