//! gRPC clients of a shard for tests that ask it directly (its own view of state, orphans, a
//! migration started by hand), opened through `shoal_cluster::net` like every process's channels,
//! so they authenticate when the suite runs secured (`crate::security`).

use std::fmt::Display;
use std::time::Duration;

use shoal_proto::shard::migration_client::MigrationClient;
use shoal_proto::shard::shard_client::ShardClient;
use tonic::transport::{Channel, Endpoint};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

async fn channel(addr: impl Display) -> anyhow::Result<Channel> {
    // The harness's security (if any) is installed for this process before the first channel.
    let _ = crate::security::enabled();
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?.connect_timeout(CONNECT_TIMEOUT);
    Ok(shoal_cluster::net::channel_now(&endpoint).await?)
}

/// A client of the shard (member) at `addr` (`host:port`).
pub async fn shard(addr: impl Display) -> anyhow::Result<ShardClient<Channel>> {
    Ok(ShardClient::new(channel(addr).await?).max_decoding_message_size(usize::MAX))
}

/// A client of the migration service of the shard at `addr`.
pub async fn migration(addr: impl Display) -> anyhow::Result<MigrationClient<Channel>> {
    Ok(MigrationClient::new(channel(addr).await?).max_decoding_message_size(usize::MAX))
}
