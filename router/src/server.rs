//! (being written) The wire-protocol listener.

use std::future::Future;

/// Serves the wire protocol on `config.listen` until `shutdown` resolves. Once listening it prints
/// `SHOAL_READY router <addr>` on stdout (the bound address, so port 0 works).
pub async fn run(config: crate::RouterConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    let _ = (config, shutdown);
    Ok(())
}
