//! Channels to the cluster's gRPC servers, opened one way by every process.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// Creates a lazily connecting channel to `addr` (`host:port`).
pub fn connect_lazy(addr: &str, connect_timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(shoal_proto::endpoint::uri(addr))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5));
    Ok(endpoint.connect_lazy())
}
