//! The serving side of `Exchange`: many calls on one long-lived stream from a router.
//!
//! Each [`Call`] read off the stream runs in a task of its own through the same
//! [`ShardService`] method a unary call of that kind runs (admission, version checks, where it
//! runs, write concern: all unchanged), and its reply is queued for the response stream with the
//! call's id, in completion order. tonic encodes every reply queued at one moment into one frame,
//! so a busy stream answers many calls per write to the socket.
//!
//! A call keeps running when the router goes away mid-call, as a unary call's storage work does
//! once it started; its reply is dropped.
//!
//! Must not: run a call differently from its unary method, or wait for one call before reading
//! the next.

use std::pin::Pin;

use futures::Stream;
use shoal_proto::shard::shard_server::Shard;
use shoal_proto::shard::{Call, CallFailed, CallReply, call, call_reply};
use tokio::sync::mpsc;
use tonic::{Request, Status, Streaming};

use crate::service::ShardService;

/// Replies waiting for the response stream; a router that stops reading holds the calls'
/// tasks back at this many.
const REPLIES_QUEUED_MAX: usize = 1024;

/// The response stream of one `Exchange`.
pub type Replies = Pin<Box<dyn Stream<Item = Result<CallReply, Status>> + Send + 'static>>;

/// Serves the calls `inbound` brings until the router closes it or it breaks.
pub fn serve(service: ShardService, mut inbound: Streaming<Call>) -> Replies {
    let (tx, rx) = mpsc::channel(REPLIES_QUEUED_MAX);
    tokio::spawn(async move {
        loop {
            let call = match inbound.message().await {
                Ok(Some(call)) => call,
                Ok(None) => break,
                Err(status) => {
                    tracing::debug!(%status, "exchange stream from a router ended");
                    break;
                }
            };
            let (service, tx) = (service.clone(), tx.clone());
            tokio::spawn(async move {
                let reply = run(&service, call).await;
                // The router may have gone; its replies go with it.
                let _ = tx.send(Ok(reply)).await;
            });
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// One call through the unary method of its kind.
async fn run(service: &ShardService, call: Call) -> CallReply {
    use call_reply::Reply;
    let reply = match call.op {
        Some(call::Op::Insert(req)) => service.insert(Request::new(req)).await.map(|r| Reply::Write(r.into_inner())),
        Some(call::Op::Update(req)) => service.update(Request::new(req)).await.map(|r| Reply::Write(r.into_inner())),
        Some(call::Op::Delete(req)) => service.delete(Request::new(req)).await.map(|r| Reply::Write(r.into_inner())),
        Some(call::Op::Find(req)) => service.find(Request::new(req)).await.map(|r| Reply::Cursor(r.into_inner())),
        Some(call::Op::Aggregate(req)) => {
            service.aggregate(Request::new(req)).await.map(|r| Reply::Cursor(r.into_inner()))
        }
        Some(call::Op::Command(req)) => {
            service.command(Request::new(req)).await.map(|r| Reply::Command(r.into_inner()))
        }
        None => Err(Status::invalid_argument("a call without an operation")),
    };
    let reply = reply.unwrap_or_else(|status| {
        Reply::Failed(CallFailed { code: status.code() as i32, message: status.message().to_owned() })
    });
    CallReply { id: call.id, reply: Some(reply) }
}
