//! gRPC channels to the shard, which path each call takes, and the mapping of transport
//! failures to MongoDB errors.
//!
//! Channels connect lazily (a router starts before its shard is reachable) and reconnect by
//! themselves; each call carries a timeout. Small calls whose reply is small — writes of up to
//! [`EXCHANGE_REQUEST_MAX`] bytes, finds of at most one document — go on the member's
//! `Exchange` stream ([`super::exchange`]); everything else is a unary call on one of several
//! channels used round-robin (one HTTP/2 connection serialises its frames, and a busy router has
//! thousands of client connections multiplexed onto them). A member that predates `Exchange`
//! gets every call unary.
//!
//! Must not: choose shards or members, or retry (the callers in `exec::call` do).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use shoal_proto::ErrorCode;
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_proto::shard::{CommandRequest, CursorReply, WriteReply, call, call_reply};
use tonic::transport::{Channel, Endpoint};

use super::WriteKind;
use super::exchange::{Exchange, ExchangeError};
use crate::error::CommandError;

/// The largest request (body and document sequence) sent on the `Exchange` stream; larger ones
/// are unary calls, so they never hold back the small calls behind them.
pub const EXCHANGE_REQUEST_MAX: usize = 256 << 10;

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
    exchange: Exchange,
    /// The member answered `Exchange` with Unimplemented: every call is unary.
    unary_only: AtomicBool,
}

impl ShardPool {
    pub fn new(endpoint: &str, rpc_timeout: Duration) -> Result<Self, CommandError> {
        let base = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| CommandError::new(ErrorCode::BadValue, format!("invalid shard endpoint '{endpoint}': {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20));
        // The stream outlives any one call: its channel has no per-call timeout (each call on
        // it has `rpc_timeout`).
        let exchange = Exchange::new(shoal_cluster::net::channel(&base), rpc_timeout);
        let ep = base.timeout(rpc_timeout);
        let channels = (0..CHANNELS_PER_SHARD).map(|_| shoal_cluster::net::channel(&ep)).collect();
        Ok(Self {
            endpoint: endpoint.to_owned(),
            ep,
            channels,
            next: AtomicUsize::new(0),
            exchange,
            unary_only: AtomicBool::new(false),
        })
    }

    /// An insert, update or delete on the member.
    pub async fn write(&self, kind: WriteKind, req: CommandRequest) -> Result<WriteReply, CommandError> {
        if self.streams(&req) {
            let op = match kind {
                WriteKind::Insert => call::Op::Insert(req),
                WriteKind::Update => call::Op::Update(req),
                WriteKind::Delete => call::Op::Delete(req),
            };
            match self.exchange(op).await? {
                Ok(call_reply::Reply::Write(reply)) => return Ok(reply),
                Ok(_) => return Err(self.mismatched()),
                Err(op) => {
                    let (call::Op::Insert(r) | call::Op::Update(r) | call::Op::Delete(r)) = op else {
                        return Err(self.mismatched());
                    };
                    return self.write_unary(kind, r).await;
                }
            }
        }
        self.write_unary(kind, req).await
    }

    async fn write_unary(&self, kind: WriteKind, req: CommandRequest) -> Result<WriteReply, CommandError> {
        let mut client = self.client();
        let reply = match kind {
            WriteKind::Insert => client.insert(req).await,
            WriteKind::Update => client.update(req).await,
            WriteKind::Delete => client.delete(req).await,
        };
        reply.map(tonic::Response::into_inner).map_err(|s| self.status_error(&s))
    }

    /// A `find` (`aggregate: false`) or `aggregate` on the member: its first batch.
    pub async fn open_cursor(&self, req: CommandRequest, aggregate: bool) -> Result<CursorReply, CommandError> {
        if !aggregate && self.streams(&req) && at_most_one_document(&req.body) {
            match self.exchange(call::Op::Find(req)).await? {
                Ok(call_reply::Reply::Cursor(reply)) => return Ok(reply),
                Ok(_) => return Err(self.mismatched()),
                Err(call::Op::Find(r)) => {
                    return Ok(self.client().find(r).await.map_err(|s| self.status_error(&s))?.into_inner());
                }
                Err(_) => return Err(self.mismatched()),
            }
        }
        let mut client = self.client();
        let reply = if aggregate { client.aggregate(req).await } else { client.find(req).await };
        reply.map(tonic::Response::into_inner).map_err(|s| self.status_error(&s))
    }

    /// Whether `req` may go on the stream.
    fn streams(&self, req: &CommandRequest) -> bool {
        let bytes = req.body.len() + req.sequence.iter().map(|d| d.len()).sum::<usize>();
        bytes <= EXCHANGE_REQUEST_MAX && !self.unary_only.load(Ordering::Relaxed)
    }

    /// `op` on the stream: its reply, or `op` back when the member does not serve `Exchange`.
    async fn exchange(&self, op: call::Op) -> Result<Result<call_reply::Reply, call::Op>, CommandError> {
        match self.exchange.call(op).await {
            Ok(reply) => Ok(Ok(reply)),
            Err(ExchangeError::Open(status, op)) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(shard = %self.endpoint, "member has no Exchange stream; calling it unary");
                self.unary_only.store(true, Ordering::Relaxed);
                Ok(Err(*op))
            }
            Err(ExchangeError::Open(status, _) | ExchangeError::Failed(status)) => Err(self.status_error(&status)),
            Err(ExchangeError::NotSent(why)) => Err(self.failed(ErrorCode::HostUnreachable, &why)),
            Err(ExchangeError::Broken(why)) => Err(self.failed(ErrorCode::SocketException, &why)),
            Err(ExchangeError::Timeout(after)) => {
                Err(self.failed(ErrorCode::NetworkTimeout, &format!("no reply within {after:?}")))
            }
        }
    }

    fn failed(&self, code: ErrorCode, why: &str) -> CommandError {
        tracing::warn!(shard = %self.endpoint, error = %why, "shard call failed");
        CommandError::new(code, format!("error from shard {}: {why}", self.endpoint))
    }

    fn mismatched(&self) -> CommandError {
        self.failed(ErrorCode::InternalError, "the reply on the stream is not of the call's kind")
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

/// Whether a `find` returns at most one document: `limit` of 1 (or -1), or a filter of `_id`
/// equality on a scalar (without a collation, which may turn equality into a range).
fn at_most_one_document(body: &[u8]) -> bool {
    let Ok(doc) = bson::RawDocument::from_bytes(body) else { return false };
    let mut by_id = false;
    for field in doc.iter() {
        let Ok((name, value)) = field else { return false };
        match name.as_str() {
            "limit" if value.as_i64().or(value.as_i32().map(i64::from)).or(value.as_f64().map(|f| f as i64)).is_some_and(|l| l.abs() == 1) => {
                return true;
            }
            "filter" => {
                by_id = value.as_document().is_some_and(|f| {
                    let mut fields = f.iter();
                    matches!(fields.next(), Some(Ok((k, v))) if k.as_str() == "_id" && !matches!(v, bson::RawBsonRef::Document(_) | bson::RawBsonRef::Array(_) | bson::RawBsonRef::RegularExpression(_)))
                        && fields.next().is_none()
                })
            }
            "collation" => return false,
            _ => {}
        }
    }
    by_id
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::at_most_one_document;

    #[test]
    fn finds_of_one_document_are_recognised() {
        let one = |d: bson::Document| at_most_one_document(&d.to_vec().expect("encode"));
        assert!(one(doc! {"find": "c", "filter": {"_id": "a"}}));
        assert!(one(doc! {"find": "c", "filter": {"x": 1}, "limit": 1_i64}));
        assert!(one(doc! {"find": "c", "filter": {"x": 1}, "limit": -1}));
        assert!(one(doc! {"find": "c", "limit": 1.0}));
        assert!(!one(doc! {"find": "c", "filter": {"x": 1}}));
        assert!(!one(doc! {"find": "c", "filter": {"_id": {"$gt": 1}}}));
        assert!(!one(doc! {"find": "c", "filter": {"_id": 1, "x": 2}}));
        assert!(!one(doc! {"find": "c", "filter": {"_id": "a"}, "collation": {"locale": "en", "strength": 1}}));
        assert!(!one(doc! {"find": "c", "limit": 2}));
        assert!(!one(doc! {"find": "c"}));
        assert!(!at_most_one_document(b"\x05\x00"));
    }
}
