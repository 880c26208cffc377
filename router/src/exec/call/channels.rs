//! gRPC channels to the shard, and the mapping of transport failures to MongoDB errors.
//!
//! Channels connect lazily (a router starts before its shard is reachable) and reconnect by
//! themselves; each call carries a timeout. Several channels are used round-robin because one
//! HTTP/2 connection serialises its frames, and a busy router has thousands of client
//! connections multiplexed onto them.
//!
//! Must not: choose shards or members, or retry (the callers in `exec::call` do).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shoal_proto::ErrorCode;
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use shoal_proto::shard::shard_client::ShardClient;
use tonic::transport::{Channel, Endpoint};

use crate::error::CommandError;

/// Channels per shard.
pub const CHANNELS_PER_SHARD: usize = 4;
/// Time to establish a TCP+HTTP/2 connection to a shard.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a failed call never reached the shard (connecting failed), so running it elsewhere
/// cannot run it twice.
pub fn not_sent(status: &tonic::Status) -> bool {
    let mut text = status.message().to_ascii_lowercase();
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        text.push_str(&s.to_string().to_ascii_lowercase());
        source = s.source();
    }
    text.contains("tcp connect error") || text.contains("connection refused")
}

pub struct ShardPool {
    endpoint: String,
    /// Validated once; the base of [`ShardPool::dedicated_channel`].
    ep: Endpoint,
    channels: Vec<Channel>,
    next: AtomicUsize,
}

impl ShardPool {
    pub fn new(endpoint: &str, rpc_timeout: Duration) -> Result<Self, CommandError> {
        let ep = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| CommandError::new(ErrorCode::BadValue, format!("invalid shard endpoint '{endpoint}': {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(rpc_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20));
        let channels = (0..CHANNELS_PER_SHARD).map(|_| shoal_cluster::net::channel(&ep)).collect();
        Ok(Self { endpoint: endpoint.to_owned(), ep, channels, next: AtomicUsize::new(0) })
    }

    /// A channel of its own to the same member, with another per-call limit (a migration's).
    pub fn dedicated_channel(&self, timeout: Duration) -> Channel {
        shoal_cluster::net::channel(&self.ep.clone().timeout(timeout))
    }

    /// A client on the next channel.
    pub fn client(&self) -> ShardClient<Channel> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.channels.len();
        ShardClient::new(self.channels[i].clone())
            .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
            .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
    }

    /// A transport failure as the client sees it.
    pub fn status_error(&self, status: &tonic::Status) -> CommandError {
        let code = match status.code() {
            tonic::Code::DeadlineExceeded => ErrorCode::NetworkTimeout,
            // The connection was never made: the request was not sent.
            _ if not_sent(status) => ErrorCode::HostUnreachable,
            // Reset or closed mid-call (Unavailable, or Unknown "transport error"): the request
            // may have run.
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => ErrorCode::SocketException,
            _ => ErrorCode::InternalError,
        };
        tracing::warn!(shard = %self.endpoint, status = %status, "shard call failed");
        CommandError::new(code, format!("error from shard {}: {}", self.endpoint, status.message()))
    }
}
