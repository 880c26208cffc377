//! The calling side of `Exchange`: many calls to one shard member on one long-lived gRPC stream.
//!
//! A unary call costs a new HTTP/2 stream, headers both ways and a status per request, and a
//! pass through tonic's channel buffer; profiles put the router's h2 client at a fifth of its
//! CPU. Here each call is an id and a [`Call`] sent on the stream; one task reads the replies and
//! wakes each call's waiter by id. Calls queued at one moment leave in one frame.
//!
//! ```text
//!  call ─ pending[id] = waiter ─ send Call{id} ─► (request stream) ─► shard, one task per call
//!  call ◄─ waiter ◄─ reader task: pending.remove(id) ◄─ (response stream) ◄─ CallReply{id}
//! ```
//!
//! Failures keep the unary meanings (mapped by the caller): a stream that cannot be opened did
//! not carry the call ([`ExchangeError::NotSent`] when the connection was never made); a stream
//! that breaks fails every call waiting on it as possibly run ([`ExchangeError::Broken`]), and
//! the next call opens a new one. Each call has the pool's RPC timeout. A call abandoned by its
//! caller keeps running on the shard (as a unary call whose storage work began does); its reply
//! is dropped.
//!
//! Must not: carry a call whose request or reply may be large (one stream delivers in order, so
//! a large message would hold back every small one behind it; see `channels::ShardPool`), or
//! retry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_proto::shard::{Call, CallReply, call, call_reply};
use tokio::sync::{mpsc, oneshot};
use tonic::Streaming;
use tonic::transport::Channel;

/// Why a call on the stream has no reply.
#[derive(Debug)]
pub enum ExchangeError {
    /// Opening the stream failed (`Unimplemented`: the member predates `Exchange`); the call was
    /// not sent on it and comes back. Whether anything reached the member is what the status
    /// says (a connection never made: not sent).
    Open(tonic::Status, Box<call::Op>),
    /// The call never entered a stream: another member may run it.
    NotSent(String),
    /// The stream broke while the call was on it: it may have run.
    Broken(String),
    /// No reply within the RPC timeout.
    Timeout(Duration),
    /// The shard failed the call as a unary call fails with this status.
    Failed(tonic::Status),
}

type Waiter = oneshot::Sender<Result<call_reply::Reply, ExchangeError>>;

/// Calls sent on one stream and not yet answered.
#[derive(Default)]
struct Pending {
    waiting: Mutex<HashMap<u64, Waiter>>,
    /// Set (under `waiting`'s lock) once the stream broke: no call may wait on it any more.
    broken: AtomicBool,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        // A panic while holding it leaves only a map of waiters: still usable.
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fails every waiting call; later calls see `broken`.
    fn break_all(&self, why: &str) {
        let waiters: Vec<Waiter> = {
            let mut waiting = self.lock();
            self.broken.store(true, Ordering::Release);
            waiting.drain().map(|(_, w)| w).collect()
        };
        for w in waiters {
            let _ = w.send(Err(ExchangeError::Broken(why.to_owned())));
        }
    }
}

/// One open stream: its sending half and its calls in flight. Dropping the last sender ends the
/// request stream, which closes the exchange once the shard has answered what it received.
#[derive(Clone)]
struct Live {
    calls: mpsc::UnboundedSender<Call>,
    pending: Arc<Pending>,
}

/// Removes a call's waiter when its caller stops waiting (a timeout, a dropped future).
struct Registered<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.id);
    }
}

pub struct Exchange {
    channel: Channel,
    rpc_timeout: Duration,
    live: Mutex<Option<Live>>,
    /// Held while a stream is being opened, so concurrent first calls open one.
    opening: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

impl Exchange {
    /// Calls over `channel` (connecting lazily; no per-call timeout of its own: the stream
    /// lives across calls), each bounded by `rpc_timeout`.
    pub fn new(channel: Channel, rpc_timeout: Duration) -> Self {
        Self {
            channel,
            rpc_timeout,
            live: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
        }
    }

    /// Runs `op` on the member and returns its reply, within the RPC timeout. A call still
    /// waiting for its stream to open when the time is up was not sent ([`ExchangeError::NotSent`]);
    /// one sent and not answered may have run ([`ExchangeError::Timeout`]).
    pub async fn call(&self, op: call::Op) -> Result<call_reply::Reply, ExchangeError> {
        let deadline = tokio::time::Instant::now() + self.rpc_timeout;
        let live = match tokio::time::timeout_at(deadline, self.live()).await {
            Ok(Ok(live)) => live,
            Ok(Err(status)) => return Err(ExchangeError::Open(status, Box::new(op))),
            Err(_) => {
                return Err(ExchangeError::NotSent(format!(
                    "no stream to the shard opened within {:?}",
                    self.rpc_timeout
                )));
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = live.pending.lock();
            if live.pending.broken.load(Ordering::Acquire) {
                return Err(ExchangeError::NotSent("the stream to the shard had just broken".into()));
            }
            waiting.insert(id, tx);
        }
        let _registered = Registered { pending: &live.pending, id };
        if live.calls.send(Call { id, op: Some(op) }).is_err() {
            self.forget(&live);
            return Err(ExchangeError::NotSent("the stream to the shard had closed".into()));
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => reply,
            // The reader dropped every waiter without answering: the stream went away.
            Ok(Err(_)) => Err(ExchangeError::Broken("the stream to the shard closed".into())),
            Err(_) => Err(ExchangeError::Timeout(self.rpc_timeout)),
        }
    }

    /// The open stream, opening one if there is none (or it broke).
    async fn live(&self) -> Result<Live, tonic::Status> {
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let _opening = self.opening.lock().await;
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let (calls, requests) = mpsc::unbounded_channel();
        let mut client = ShardClient::new(self.channel.clone())
            .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
            .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES);
        let replies =
            client.exchange(tokio_stream::wrappers::UnboundedReceiverStream::new(requests)).await?.into_inner();
        let pending = Arc::new(Pending::default());
        tokio::spawn(read_replies(Arc::clone(&pending), replies));
        let live = Live { calls, pending };
        *self.slot() = Some(live.clone());
        Ok(live)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Live>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn current(&self) -> Option<Live> {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|l| l.pending.broken.load(Ordering::Acquire) || l.calls.is_closed()) {
            *slot = None;
        }
        slot.clone()
    }

    /// Drops `live` from the slot if it is still the current stream.
    fn forget(&self, live: &Live) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(&l.pending, &live.pending)) {
            *slot = None;
        }
    }
}

/// Hands each reply to its call's waiter until the stream ends, then fails the calls left.
async fn read_replies(pending: Arc<Pending>, mut replies: Streaming<CallReply>) {
    let why = loop {
        match replies.message().await {
            Ok(Some(CallReply { id, reply })) => {
                let Some(waiter) = pending.lock().remove(&id) else { continue };
                let reply = match reply {
                    Some(call_reply::Reply::Failed(f)) => {
                        Err(ExchangeError::Failed(tonic::Status::new(tonic::Code::from(f.code), f.message)))
                    }
                    Some(reply) => Ok(reply),
                    None => Err(ExchangeError::Failed(tonic::Status::internal("a reply without a result"))),
                };
                let _ = waiter.send(reply);
            }
            Ok(None) => break "the shard closed the stream".to_owned(),
            Err(status) => break format!("the stream to the shard broke: {status}"),
        }
    };
    tracing::debug!(reason = %why, "exchange stream ended");
    pending.break_all(&why);
}
