//! (being written by the router's CRUD owner)

use crate::command::Command; use crate::dispatch::HandlerResult; use crate::error::CommandError; use crate::state::{ConnContext, RouterState};
pub async fn create(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn drop(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn drop_database(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn list_databases(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn list_collections(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
