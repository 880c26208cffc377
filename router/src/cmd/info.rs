//! (being written)
use crate::command::Command; use crate::dispatch::HandlerResult; use crate::error::CommandError; use crate::state::{ConnContext, RouterState};
pub async fn ping(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn build_info(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn server_status(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn get_parameter(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn get_log(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn whats_my_uri(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn connection_status(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn end_sessions(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn get_last_error(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn host_info(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn get_cmd_line_opts(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
pub async fn list_commands(_state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult { Err(CommandError::new(shoal_proto::ErrorCode::NotImplemented, format!("{} is not implemented yet", cmd.name))) }
