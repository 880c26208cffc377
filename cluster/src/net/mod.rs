//! Channels between the cluster's processes, opened and accepted one way by every process:
//! [`connect_lazy`] / [`channel`] on the calling side, [`incoming`] on the serving side, both
//! authenticated as the process's [`ClusterAuth`] says (`security.clusterAuthMode`).
//!
//! ```text
//!  caller: Endpoint ─ connector: TCP ─ keyFile handshake | TLS (client cert) ─► HTTP/2 (tonic)
//!  server: TcpListener ─ accept ─ keyFile handshake | TLS (client cert required) ─► tonic serve
//!          (each accepted connection authenticates in its own task, bounded by a timeout, so a
//!           silent or hostile peer never holds up the next one)
//! ```
//!
//! A process installs its cluster authentication once at start ([`install`]); every channel and
//! listener of the process then uses it. Without one (`None`), channels are plain TCP, as on a
//! loopback development cluster.
//!
//! Must not: hand tonic a connection that has not authenticated, or accept one whose peer failed.

pub mod keyfile;
pub mod tls;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::{Channel, Endpoint, Uri};

pub use keyfile::ClusterKey;
pub use tls::{ClientCertificates, TlsFiles};

/// How this process proves it belongs to the cluster and checks that its peers do.
#[derive(Clone, Default)]
pub enum ClusterAuth {
    /// Plain TCP: any process that reaches a port is trusted (loopback development clusters).
    #[default]
    None,
    /// `clusterAuthMode: keyFile`: a mutual challenge on the shared key per connection.
    KeyFile(ClusterKey),
    /// `clusterAuthMode: x509`: TLS both ways, each side presenting a certificate the cluster CA
    /// signed.
    X509 { server: Arc<rustls::ServerConfig>, client: Arc<rustls::ClientConfig> },
}

impl std::fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.mode())
    }
}

impl ClusterAuth {
    pub fn key_file(path: &std::path::Path) -> Result<ClusterAuth, keyfile::KeyFileError> {
        Ok(ClusterAuth::KeyFile(ClusterKey::load(path)?))
    }

    pub fn x509(files: &TlsFiles) -> Result<ClusterAuth, tls::TlsError> {
        Ok(ClusterAuth::X509 {
            server: tls::server_config(files, ClientCertificates::Required)?,
            client: tls::client_config(files)?,
        })
    }

    /// MongoDB's name of the mode (`clusterAuthMode`).
    pub fn mode(&self) -> &'static str {
        match self {
            ClusterAuth::None => "none",
            ClusterAuth::KeyFile(_) => "keyFile",
            ClusterAuth::X509 { .. } => "x509",
        }
    }
}

static CLUSTER_AUTH: OnceLock<ClusterAuth> = OnceLock::new();

/// Sets this process's cluster authentication; only the first call takes effect (a process has
/// one cluster identity). Answers whether this call set it.
pub fn install(auth: ClusterAuth) -> bool {
    CLUSTER_AUTH.set(auth).is_ok()
}

/// The process's cluster authentication (`None` until [`install`]).
pub fn cluster_auth() -> &'static ClusterAuth {
    static NONE: ClusterAuth = ClusterAuth::None;
    CLUSTER_AUTH.get().unwrap_or(&NONE)
}

/// How often a connection with calls in flight is pinged, and how long a ping may go unanswered
/// before the connection (and every call on it) fails: the data path's patient default.
pub const KEEPALIVE: Keepalive =
    Keepalive { interval: Duration::from_secs(10), timeout: Duration::from_secs(5), while_idle: false };
/// The same for the config service's clients: a paused or cut-off config server must cost a
/// call about two seconds, not the call's whole timeout, so the client moves on to another server
/// (the liveness of the whole cluster waits on these calls). Idle connections are pinged too, so
/// a config server paused between two calls is found out before the next one is sent to it.
pub const CONFIG_KEEPALIVE: Keepalive =
    Keepalive { interval: Duration::from_secs(1), timeout: Duration::from_secs(2), while_idle: true };

/// HTTP/2 keepalive of a channel.
#[derive(Debug, Clone, Copy)]
pub struct Keepalive {
    pub interval: Duration,
    pub timeout: Duration,
    /// Ping a connection with no call in flight too.
    pub while_idle: bool,
}

/// A lazily connecting channel to `addr` (`host:port`) with the cluster's usual settings.
pub fn connect_lazy(addr: &str, connect_timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    connect_lazy_with(addr, connect_timeout, KEEPALIVE)
}

/// [`connect_lazy`] with its own keepalive.
pub fn connect_lazy_with(
    addr: &str,
    connect_timeout: Duration,
    keepalive: Keepalive,
) -> Result<Channel, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(shoal_proto::endpoint::uri(addr))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(keepalive.interval)
        .keep_alive_timeout(keepalive.timeout)
        .keep_alive_while_idle(keepalive.while_idle);
    Ok(channel(&endpoint))
}

/// A lazily connecting channel on a caller-configured endpoint (timeouts, windows), whose
/// connections authenticate as the cluster requires.
pub fn channel(endpoint: &Endpoint) -> Channel {
    endpoint.connect_with_connector_lazy(tower::service_fn(|uri: Uri| connect(uri, cluster_auth().clone())))
}

/// A channel on a caller-configured endpoint, connected now (the first connection's failure is
/// the caller's error).
pub async fn channel_now(endpoint: &Endpoint) -> Result<Channel, tonic::transport::Error> {
    endpoint.connect_with_connector(tower::service_fn(|uri: Uri| connect(uri, cluster_auth().clone()))).await
}

/// Opens one authenticated connection to `uri`'s host and port.
async fn connect(uri: Uri, auth: ClusterAuth) -> io::Result<TokioIo<ClusterStream>> {
    let host = uri.host().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no host in {uri}")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    let stream = match auth {
        ClusterAuth::None => ClusterStream::Plain(tcp),
        ClusterAuth::KeyFile(key) => {
            let mut tcp = tcp;
            keyfile::client(&mut tcp, &key).await.map_err(refused)?;
            ClusterStream::Plain(tcp)
        }
        ClusterAuth::X509 { client, .. } => {
            let name = ServerName::try_from(host).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tls = tokio::time::timeout(keyfile::HANDSHAKE_TIMEOUT, TlsConnector::from(client).connect(name, tcp))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
            ClusterStream::ClientTls(Box::new(tls))
        }
    };
    Ok(TokioIo::new(stream))
}

fn refused(e: keyfile::HandshakeError) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, e)
}

/// Connections accepted at once but still authenticating; more wait in the listen backlog.
const AUTHENTICATING_MAX: usize = 256;

/// Pause after an accept error that is not the peer's own doing (EMFILE and the like): retrying
/// at once would spin while it lasts.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Logs an accept error and, unless the peer caused it, pauses before the next accept (every
/// listener of the cluster's processes, the router's client port included).
pub async fn accept_failed(e: io::Error) {
    match e.kind() {
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted => {
            tracing::debug!(error = %e, "accept failed");
        }
        _ => {
            tracing::warn!(error = %e, "accept failed; pausing");
            tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
        }
    }
}

/// The connections `listener` accepts, each authenticated as the cluster requires before it is
/// yielded (for tonic's `serve_with_incoming`). Peers that fail are logged and dropped; accept
/// errors are logged and retried after a pause, never yielded.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = io::Result<ClusterStream>> + Send + 'static {
    let auth = cluster_auth().clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<ClusterStream>>(AUTHENTICATING_MAX);
    let slots = Arc::new(tokio::sync::Semaphore::new(AUTHENTICATING_MAX));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // tonic only traces an accept error and asks again; a lasting one (EMFILE)
                    // would spin, so back off here.
                    accept_failed(e).await;
                    continue;
                }
            };
            let (tx, auth) = (tx.clone(), auth.clone());
            tokio::spawn(async move {
                let _slot = slot;
                match authenticate(tcp, &auth).await {
                    Ok(stream) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Err(e) => {
                        tracing::warn!(%peer, mode = auth.mode(), error = %e, "refused a connection that did not authenticate as a cluster member")
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

async fn authenticate(tcp: TcpStream, auth: &ClusterAuth) -> io::Result<ClusterStream> {
    tcp.set_nodelay(true)?;
    match auth {
        ClusterAuth::None => Ok(ClusterStream::Plain(tcp)),
        ClusterAuth::KeyFile(key) => {
            let mut tcp = tcp;
            keyfile::server(&mut tcp, key).await.map_err(refused)?;
            Ok(ClusterStream::Plain(tcp))
        }
        ClusterAuth::X509 { server, .. } => {
            let tls =
                tokio::time::timeout(keyfile::HANDSHAKE_TIMEOUT, TlsAcceptor::from(Arc::clone(server)).accept(tcp))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
            Ok(ClusterStream::ServerTls(Box::new(tls)))
        }
    }
}

/// A TLS server handshake on an accepted connection (the router's client port), bounded by
/// `timeout`: the stream and the verified subject of the client's certificate, if it sent one.
pub async fn accept_tls(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    timeout: Duration,
) -> io::Result<(ClusterStream, Option<String>)> {
    let stream = tokio::time::timeout(timeout, TlsAcceptor::from(config).accept(tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let subject = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()).and_then(tls::subject_name);
    Ok((ClusterStream::ServerTls(Box::new(stream)), subject))
}

/// A connection between two of the cluster's processes (or a client's, on the router's port),
/// after any handshake it needed.
pub enum ClusterStream {
    Plain(TcpStream),
    ClientTls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    ServerTls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl ClusterStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            ClusterStream::Plain(s) => s,
            ClusterStream::ClientTls(s) => s.get_ref().0,
            ClusterStream::ServerTls(s) => s.get_ref().0,
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }
}

impl Connected for ClusterStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo { local_addr: self.tcp().local_addr().ok(), remote_addr: self.tcp().peer_addr().ok() }
    }
}

impl AsyncRead for ClusterStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClusterStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClusterStream::ClientTls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            ClusterStream::ServerTls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClusterStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClusterStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClusterStream::ClientTls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            ClusterStream::ServerTls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClusterStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClusterStream::ClientTls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            ClusterStream::ServerTls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClusterStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClusterStream::ClientTls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            ClusterStream::ServerTls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClusterStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClusterStream::ClientTls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            ClusterStream::ServerTls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClusterStream::Plain(s) => s.is_write_vectored(),
            ClusterStream::ClientTls(s) => s.is_write_vectored(),
            ClusterStream::ServerTls(s) => s.is_write_vectored(),
        }
    }
}
