//! (being written by the router's CRUD owner)

use crate::command::Command; use crate::dispatch::HandlerResult; use crate::error::CommandError; use crate::state::{ConnContext, RouterState};
pub async fn insert(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn update(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn delete(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn find(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn find_and_modify(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn count(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn distinct(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn aggregate(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
