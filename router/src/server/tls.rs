//! TLS on the client port (`net.tls.mode`): `disabled`, `allowTLS` and `preferTLS` (both
//! protocols on one port: a connection whose first bytes are a TLS handshake record gets TLS), and
//! `requireTLS` (a plaintext client is disconnected). With a `CAFile`, a client's certificate is
//! verified, and its subject is what MONGODB-X509 authenticates.
//!
//! ```text
//!  accept ─► requireTLS: TLS handshake ─────────────────────────────► request loop
//!         ─► allow/preferTLS: peek 3 bytes ─ 16 03 0x? ─► TLS handshake ─►
//!                                          └ anything else ──────────────►  (plaintext)
//! ```
//!
//! Must not: wait on a client that never finishes the handshake longer than
//! [`HANDSHAKE_TIMEOUT`], or accept a certificate that did not verify.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use shoal_cluster::net::ClusterStream;
use shoal_cluster::net::tls::ServerConfig;
use tokio::net::TcpStream;

/// How long a client has to complete its TLS handshake (and, in allow/prefer mode, to send its
/// first bytes).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `net.tls.mode`, in MongoDB's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    #[default]
    Disabled,
    AllowTls,
    PreferTls,
    RequireTls,
}

impl TlsMode {
    pub fn parse(name: &str) -> Option<TlsMode> {
        Some(match name {
            "disabled" => TlsMode::Disabled,
            "allowTLS" => TlsMode::AllowTls,
            "preferTLS" => TlsMode::PreferTls,
            "requireTLS" => TlsMode::RequireTls,
            _ => return None,
        })
    }
}

/// The client port's TLS: its mode and the server configuration it uses.
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub mode: TlsMode,
    pub config: Arc<ServerConfig>,
}

/// An accepted connection, after TLS if it uses it: the stream and the verified subject of the
/// client's certificate, if it presented one.
pub async fn accept(tcp: TcpStream, tls: Option<&ClientTls>) -> io::Result<(ClusterStream, Option<String>)> {
    let Some(tls) = tls.filter(|t| t.mode != TlsMode::Disabled) else {
        return Ok((ClusterStream::Plain(tcp), None));
    };
    if tls.mode != TlsMode::RequireTls && !starts_with_tls(&tcp).await? {
        return Ok((ClusterStream::Plain(tcp), None));
    }
    shoal_cluster::net::accept_tls(tcp, Arc::clone(&tls.config), HANDSHAKE_TIMEOUT).await
}

/// Whether the client's first bytes are a TLS handshake record (`16 03 0x`). A MongoDB message
/// starts with its little-endian length, which would have to be about 200 KB of one exact value
/// to look the same; MongoDB tells them apart the same way.
async fn starts_with_tls(tcp: &TcpStream) -> io::Result<bool> {
    let mut head = [0u8; 3];
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        let n = tokio::time::timeout_at(deadline, tcp.peek(&mut head))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no request within the handshake timeout"))??;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if n >= head.len() || head[0] != 0x16 {
            return Ok(head[0] == 0x16 && head[1] == 0x03 && head[2] <= 0x04);
        }
        // A partial record header: wait for the rest rather than spin.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_have_mongodb_names() {
        assert_eq!(TlsMode::parse("requireTLS"), Some(TlsMode::RequireTls));
        assert_eq!(TlsMode::parse("allowTLS"), Some(TlsMode::AllowTls));
        assert_eq!(TlsMode::parse("preferTLS"), Some(TlsMode::PreferTls));
        assert_eq!(TlsMode::parse("disabled"), Some(TlsMode::Disabled));
        assert_eq!(TlsMode::parse("requireSSL"), None);
    }

    #[tokio::test]
    async fn plaintext_is_told_apart_from_a_tls_client_hello() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for (bytes, tls) in [(&[0x16u8, 0x03, 0x01, 0x02][..], true), (&[0x3a, 0x00, 0x00, 0x00][..], false)] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut client, bytes).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            assert_eq!(starts_with_tls(&server).await.unwrap(), tls);
        }
    }
}
