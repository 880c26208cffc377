//! (being written) A Shoal shard.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct ShardConfig {
    pub name: String,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
}

impl ShardConfig {
    pub fn new(name: impl Into<String>, listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self { name: name.into(), listen, data_dir }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Opens the store, serves gRPC on `config.listen` until `shutdown` resolves, then closes cleanly.
/// Once listening it prints `SHOAL_READY shard <addr>` on stdout (the bound address, so
/// `--listen 127.0.0.1:0` works).
pub async fn run(config: ShardConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ShardError> {
    let _ = (config, shutdown);
    Ok(())
}
