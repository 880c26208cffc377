//! (being written) The wire-protocol listener.
pub async fn run(_config: crate::RouterConfig) {}
