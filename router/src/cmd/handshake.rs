//! (being written)
use crate::command::Command; use crate::dispatch::HandlerResult; use crate::error::CommandError; use crate::state::{ConnContext, RouterState};
pub async fn hello(_state: &RouterState, _conn: &ConnContext, cmd: &Command, _legacy: bool) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
