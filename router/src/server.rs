//! The wire-protocol listener: accepts client connections and runs each one's request loop.
//!
//! ```text
//!  run ─► RouterState::new ─► bind ─► "SHOAL_READY router <addr>" ─► accept loop
//!                                                                    │ one task per connection
//!                                                                    ▼ (bounded by max_connections)
//!  socket ─► FramedRead<MessageCodec> ─► parse_request ─► into_command ─► dispatch ─┐
//!     ▲                                                                             │
//!     └──────────── write_all(reply) unless moreToCome ◄── ReplyKind::encode ◄──────┘
//! ```
//!
//! Owns: the listening socket, the per-connection task and its counters, the connection limit,
//! and graceful shutdown.
//!
//! Invariants:
//! - A connection handles one request at a time, in arrival order: the next frame is not read
//!   before the previous reply is written (drivers rely on replies in order; MongoDB does the same).
//! - A fault in one connection (garbage, truncation, a panic in a handler) ends that connection
//!   only: errors are values, panics stay inside the connection's task, and all connection state
//!   lives in that task.
//! - Idle connections are never timed out: drivers keep pools of them open for hours.
//! - At shutdown: stop accepting, close idle connections, let in-flight commands finish for at
//!   most [`SHUTDOWN_GRACE`], then drop whatever is left.

use std::future::Future;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use shoal_cluster::net::ClusterStream;
use shoal_proto::limits::MAX_MESSAGE_SIZE_BYTES;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::codec::FramedRead;
use tracing::Instrument;

use crate::dispatch::{dispatch, error_reply};
use crate::error::CommandError;
use crate::settings::RouterSettings;
use crate::state::{ConnContext, RouterState};
use crate::wire::op_msg::{self, flags};
use crate::wire::{Frame, MessageCodec, ReplyKind, WireError, parse_request};

/// How long in-flight commands may run after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Read-buffer capacity an idle connection may keep between requests.
const IDLE_READ_BUFFER_MAX_BYTES: usize = 64 * 1024;
/// Largest reply we send: a bigger one would be refused by the driver (`maxMessageSizeBytes`), so
/// it is replaced by an error the client can read.
const REPLY_SIZE_MAX_BYTES: usize = MAX_MESSAGE_SIZE_BYTES;

/// Serves the wire protocol on `settings.listen` until `shutdown` resolves. Once listening it prints
/// `SHOAL_READY router <addr>` on stdout (the bound address, so port 0 works).
pub async fn run(settings: RouterSettings, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<()> {
    let (listener, metrics, state) = start(settings).await?;
    announce_ready(listener.local_addr()?);
    serve(listener, metrics, state, shutdown).await
}

/// Raises the open-file limit, builds the shared state and binds the listeners.
async fn start(settings: RouterSettings) -> io::Result<(TcpListener, Option<TcpListener>, Arc<RouterState>)> {
    raise_open_files_limit(settings.max_connections);
    let state = Arc::new(RouterState::new(settings.clone()).await.map_err(io::Error::other)?);
    crate::http::register_pulled(&state).map_err(io::Error::other)?;
    let listener = listen(settings.listen, settings.listen_backlog)?;
    let metrics = match settings.metrics_listen {
        Some(addr) => Some(shoal_telemetry::http::bind(addr).await?),
        None => None,
    };
    Ok((listener, metrics, state))
}

fn announce_ready(addr: SocketAddr) {
    tracing::info!(%addr, "router listening");
    let mut out = io::stdout().lock();
    // The launcher waits for this line; if it closed our stdout it no longer cares, so a failed
    // write is logged rather than fatal.
    if let Err(e) = writeln!(out, "{}", shoal_proto::ready::line("router", addr)).and_then(|()| out.flush()) {
        tracing::warn!(error = %e, "could not print the ready line");
    }
    shoal_telemetry::log::startup_done();
}

/// The accept loop; returns after `shutdown` resolved and connections drained.
async fn serve(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    state: Arc<RouterState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max_connections = state.settings.max_connections.min(Semaphore::MAX_PERMITS).min(connection_capacity());
    let slots = Arc::new(Semaphore::new(max_connections));
    let (stop_tx, stop_rx) = watch::channel(());
    let mut connections = JoinSet::new();
    let reaper = tokio::spawn(crate::cursors::reap_idle_forever(Arc::clone(&state)));
    let follower = tokio::spawn(crate::routing::follow::follow_primaries(Arc::clone(&state)));
    let security = tokio::spawn(crate::auth::cache::follow(Arc::clone(&state)));
    let balancer = crate::balancer::runtime::start(&state, balancer_holder(&listener));
    let metrics = metrics.map(|l| crate::http::spawn(l, &state, stop_rx.clone()));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(done) = connections.join_next(), if !connections.is_empty() => log_task_end(done),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => {
                        connections.spawn(connection(Arc::clone(&state), stream, peer, slot, stop_rx.clone()));
                    }
                    Err(_) => {
                        // MongoDB does the same above maxIncomingConnections: close at once, so the
                        // client sees a failed connect instead of a hang.
                        tracing::warn!(%peer, max_connections, "refusing connection: too many open connections");
                        drop(stream);
                    }
                },
                Err(e) => shoal_cluster::net::accept_failed(e).await,
            },
        }
    }

    drop(listener);
    reaper.abort();
    follower.abort();
    security.abort();
    if let Some(balancer) = balancer {
        balancer.stop().await;
    }
    tracing::info!(open = connections.len(), "router shutting down");
    stop_tx.send_replace(());
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while let Some(done) = connections.join_next().await {
            log_task_end(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(open = connections.len(), "closing connections still busy after the shutdown grace period");
        connections.shutdown().await;
    }
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    Ok(())
}

/// This router process's name as a lease holder: unique while it lives (host, port, pid).
fn balancer_holder(listener: &TcpListener) -> String {
    let port = listener.local_addr().map_or(0, |a| a.port());
    format!("{}:{port}:{}", crate::cmd::info::hostname(), std::process::id())
}

fn log_task_end(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "connection task panicked; only that connection was closed");
    }
}

/// One client connection, from accept to close.
async fn connection(
    state: Arc<RouterState>,
    stream: TcpStream,
    peer: SocketAddr,
    _slot: OwnedSemaphorePermit,
    stop: watch::Receiver<()>,
) {
    // MongoDB numbers connections from 1.
    let id = state.counters.next_connection_id.fetch_add(1, Ordering::Relaxed) + 1;
    state.counters.connections_total.inc();
    // Counted open for as long as the connection lives, including if its task panics.
    let _open = shoal_telemetry::commands::Open::new(&state.counters.connections_current);
    let local = stream.local_addr().unwrap_or(state.settings.listen);
    // Small request/reply messages: Nagle would add up to 40 ms per round trip.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "set_nodelay failed");
    }
    let span = tracing::info_span!("conn", conn = id, %peer);
    async {
        tracing::debug!("connection accepted");
        let (stream, subject) = match tls::accept(stream, state.settings.tls.as_ref()).await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::info!(error = %e, "TLS handshake failed; closing the connection");
                return;
            }
        };
        let conn = ConnContext::new(id, peer, local).with_certificate_subject(subject);
        match request_loop(&state, &conn, stream, stop).await {
            Ok(()) => tracing::debug!("connection closed"),
            Err(e) if e.is_fatal() && !matches!(e, WireError::Io(_)) => {
                tracing::warn!(error = %e, "protocol error; closing the connection");
            }
            Err(e) => tracing::debug!(error = %e, "connection ended"),
        }
    }
    .instrument(span)
    .await
}

/// Reads, dispatches and answers requests in order until the client leaves, a fatal protocol
/// error occurs, or shutdown is signalled while the connection is idle.
async fn request_loop(
    state: &RouterState,
    conn: &ConnContext,
    stream: ClusterStream,
    mut stop: watch::Receiver<()>,
) -> Result<(), WireError> {
    let (reader, mut writer) = tokio::io::split(stream);
    let reader = stall::StallGuard::new(reader, state.settings.message_stall_timeout);
    let mut frames = FramedRead::new(reader, MessageCodec::default());
    let mut reply_ids = ReplyIds::default();
    loop {
        let next = tokio::select! {
            biased;
            // Also fires if the sender is gone; either way the server is stopping.
            _ = stop.changed() => return Ok(()),
            next = frames.next() => next,
        };
        let Some(frame) = next else { return Ok(()) };
        let frame = frame?;
        let request_id = frame.header.request_id;
        state.counters.network.received(frame.header.message_length);
        let reply = handle(state, conn, frame, reply_ids.next())
            .instrument(tracing::debug_span!("request", request_id))
            .await?;
        if let Some(bytes) = reply {
            state.counters.network.sent(bytes.len());
            writer.write_all(&bytes).await?;
        }
        // After a large message the read buffer keeps its capacity; an idle pooled connection
        // would hold up to 48 MB for hours. Give it back once nothing is buffered.
        let buffer = frames.read_buffer_mut();
        if buffer.is_empty() && buffer.capacity() > IDLE_READ_BUFFER_MAX_BYTES {
            *buffer = bytes::BytesMut::new();
        }
    }
}

/// Request ids of our replies: any value works for drivers, a per-connection sequence is easy
/// to follow in a packet capture.
#[derive(Default)]
struct ReplyIds(i32);

impl ReplyIds {
    fn next(&mut self) -> i32 {
        self.0 = self.0.wrapping_add(1);
        self.0
    }
}

/// Turns one frame into the bytes to send back, `None` for moreToCome requests, or a fatal error.
async fn handle(
    state: &RouterState,
    conn: &ConnContext,
    frame: Frame,
    reply_id: i32,
) -> Result<Option<bytes::Bytes>, WireError> {
    let header = frame.header;
    let Some(kind) = ReplyKind::for_op_code(header.op_code) else {
        return Err(WireError::UnsupportedOpCode(header.op_code));
    };
    let (body, no_reply) = match parse_request(&frame) {
        Ok(request) => {
            let no_reply = request.more_to_come();
            match request.into_command(header.request_id) {
                Ok(mut cmd) => {
                    cmd.client = Some(conn.client_info(&cmd.body));
                    (dispatch(state, conn, &cmd).await, no_reply)
                }
                Err(e) => (rejected(e)?, no_reply),
            }
        }
        Err(e) => {
            // Honour moreToCome even for a request we could not parse: the client reads no reply.
            let no_reply = op_msg::peek_flags(&frame).is_some_and(|f| f & flags::MORE_TO_COME != 0);
            (rejected(e)?, no_reply)
        }
    };
    if no_reply {
        return Ok(None);
    }
    let body = if body.as_bytes().len() > REPLY_SIZE_MAX_BYTES {
        tracing::warn!(bytes = body.as_bytes().len(), "reply too large; sending an error instead");
        error_reply(&CommandError::new(
            shoal_proto::ErrorCode::BSONObjectTooLarge,
            format!("reply of {} bytes exceeds maxMessageSizeBytes", body.as_bytes().len()),
        ))
    } else {
        body
    };
    Ok(Some(kind.encode(reply_id, header.request_id, &body)))
}

/// The error reply for a request refused before dispatch, or the error itself if it must close
/// the connection.
fn rejected(e: WireError) -> Result<bson::RawDocumentBuf, WireError> {
    if e.is_fatal() {
        return Err(e);
    }
    tracing::debug!(error = %e, "request refused");
    Ok(error_reply(&e.to_command_error()))
}

/// Binds `addr` with a listen backlog of `backlog` (MongoDB's `net.listenBacklog`; the kernel
/// caps it at `net.core.somaxconn`): a burst of clients connecting at once waits in it instead of
/// being refused.
fn listen(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// The system's largest listen backlog (`/proc/sys/net/core/somaxconn`), MongoDB's default for
/// `net.listenBacklog`; 4096 (Linux's default since 5.4) where it cannot be read.
pub fn system_listen_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(4096)
}

/// Descriptors kept for everything but client connections (channels to shards and config servers,
/// data files of nothing: the router has none, logs).
const RESERVED_DESCRIPTORS: u64 = 512;

/// How many client connections the open-file limit leaves room for: above it, connections are
/// closed at accept rather than failing with EMFILE.
fn connection_capacity() -> usize {
    use nix::sys::resource::{Resource, getrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => usize::try_from(soft.saturating_sub(RESERVED_DESCRIPTORS).max(1)).unwrap_or(usize::MAX),
        Err(_) => usize::MAX,
    }
}

/// Lifts the soft RLIMIT_NOFILE to the hard limit: each connection is a descriptor, and the
/// common soft default of 1024 would cap us near a thousand clients. Failure only costs capacity.
fn raise_open_files_limit(max_connections: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::debug!(error = %e, "getrlimit(RLIMIT_NOFILE) failed");
            return;
        }
    };
    let mut effective = soft;
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => effective = hard,
            Err(e) => tracing::debug!(error = %e, soft, hard, "could not raise RLIMIT_NOFILE"),
        }
    }
    if effective < max_connections as u64 {
        tracing::info!(
            open_files_limit = effective,
            max_connections,
            "the open-file limit caps client connections below maxIncomingConnections"
        );
    }
}

pub mod stall;
pub mod tls;

#[cfg(test)]
mod tests;
