//! `security.clusterAuthMode: keyFile`: every connection between the cluster's processes starts
//! with a mutual challenge on the shared key, before HTTP/2; a peer that cannot answer is
//! disconnected before it can send a single request.
//!
//! ```text
//!  client                                              server
//!    ── "SHOALKF1" ‖ Nc (32 random bytes) ──────────────►
//!    ◄─ Ns (32 random bytes) ‖ HMAC(K, "server" ‖ Nc ‖ Ns)   the server proves it holds K
//!    ── HMAC(K, "client" ‖ Nc ‖ Ns) ────────────────────►   the client proves it holds K
//!    ◄─ 0x01                                               then gRPC (HTTP/2) as usual
//! ```
//!
//! K is SHA-256 of the key file's text without whitespace (MongoDB's key file format: 6 to 1024
//! base64 characters). Fresh nonces on both sides make a recorded handshake useless to replay.
//! Like MongoDB's keyFile mode this authenticates, it does not encrypt: a network that must not
//! be read needs `clusterAuthMode: x509` (TLS).
//!
//! Must not: reveal anything about K (proofs are compared in constant time), or wait on a silent
//! peer longer than [`HANDSHAKE_TIMEOUT`].

use std::path::Path;
use std::time::Duration;

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long either side waits for the other's half of the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const MAGIC: &[u8; 8] = b"SHOALKF1";
const NONCE_BYTES: usize = 32;
const PROOF_BYTES: usize = 32;
const ACCEPTED: u8 = 1;
/// MongoDB's bounds on a key file's characters (whitespace excluded).
const KEY_CHARS_MIN: usize = 6;
const KEY_CHARS_MAX: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read key file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("permissions on {path} are too open (mode {mode:o}): a key file must not be readable by group or others")]
    TooOpen { path: String, mode: u32 },
    #[error("key file {path}: {reason}")]
    Invalid { path: String, reason: String },
}

/// The cluster's shared secret, derived from its key file.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// Reads and checks a key file as MongoDB does (content and permissions).
    pub fn load(path: &Path) -> Result<ClusterKey, KeyFileError> {
        let name = path.display().to_string();
        let read_err = |source| KeyFileError::Read { path: name.clone(), source };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path).map_err(read_err)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyFileError::TooOpen { path: name, mode });
            }
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Self::from_text(&text).map_err(|reason| KeyFileError::Invalid { path: name, reason })
    }

    /// The key of a key file's text.
    pub fn from_text(text: &str) -> Result<ClusterKey, String> {
        let key: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if !(KEY_CHARS_MIN..=KEY_CHARS_MAX).contains(&key.len()) {
            return Err(format!("must hold {KEY_CHARS_MIN} to {KEY_CHARS_MAX} characters, not {}", key.len()));
        }
        if let Some(bad) = key.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))) {
            return Err(format!("invalid character {bad:?}: only base64 characters are allowed"));
        }
        let mut hasher = Sha256::new();
        hasher.update(b"shoal cluster key\0");
        hasher.update(key.as_bytes());
        Ok(ClusterKey(hasher.finalize().into()))
    }

    fn proof(&self, role: &[u8], client_nonce: &[u8], server_nonce: &[u8]) -> [u8; PROOF_BYTES] {
        // HMAC accepts a key of any length.
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(role);
        mac.update(client_nonce);
        mac.update(server_nonce);
        mac.finalize().into_bytes().into()
    }

    fn verify(&self, role: &[u8], client_nonce: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
        let expected = self.proof(role, client_nonce, server_nonce);
        subtle::ConstantTimeEq::ct_eq(&expected[..], proof).into()
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("the peer did not complete the cluster key handshake in time")]
    Timeout,
    #[error("the peer does not hold the cluster key")]
    Refused,
    #[error("not a cluster key handshake")]
    Protocol,
    #[error("handshake I/O: {0}")]
    Io(#[from] std::io::Error),
}

fn nonce() -> [u8; NONCE_BYTES] {
    let mut n = [0u8; NONCE_BYTES];
    rand::Rng::fill(&mut rand::rng(), &mut n);
    n
}

/// The client's side: proves itself to the server and checks that the server holds the key too.
pub async fn client<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, key: &ClusterKey) -> Result<(), HandshakeError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let client_nonce = nonce();
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&client_nonce);
        stream.write_all(&hello).await?;
        let mut answer = [0u8; NONCE_BYTES + PROOF_BYTES];
        stream.read_exact(&mut answer).await?;
        let (server_nonce, server_proof) = answer.split_at(NONCE_BYTES);
        if !key.verify(b"server", &client_nonce, server_nonce, server_proof) {
            return Err(HandshakeError::Refused);
        }
        stream.write_all(&key.proof(b"client", &client_nonce, server_nonce)).await?;
        let mut verdict = [0u8; 1];
        stream.read_exact(&mut verdict).await.map_err(|_| HandshakeError::Refused)?;
        if verdict[0] != ACCEPTED {
            return Err(HandshakeError::Refused);
        }
        Ok(())
    })
    .await
    .map_err(|_| HandshakeError::Timeout)?
}

/// The server's side: answers the client's challenge and accepts it only with a valid proof.
pub async fn server<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, key: &ClusterKey) -> Result<(), HandshakeError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let mut hello = [0u8; 8 + NONCE_BYTES];
        stream.read_exact(&mut hello).await?;
        let (magic, client_nonce) = hello.split_at(8);
        if magic != MAGIC {
            return Err(HandshakeError::Protocol);
        }
        let server_nonce = nonce();
        let mut answer = server_nonce.to_vec();
        answer.extend_from_slice(&key.proof(b"server", client_nonce, &server_nonce));
        stream.write_all(&answer).await?;
        let mut proof = [0u8; PROOF_BYTES];
        stream.read_exact(&mut proof).await?;
        if !key.verify(b"client", client_nonce, &server_nonce, &proof) {
            return Err(HandshakeError::Refused);
        }
        stream.write_all(&[ACCEPTED]).await?;
        Ok(())
    })
    .await
    .map_err(|_| HandshakeError::Timeout)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_follow_mongodb_rules() {
        assert!(ClusterKey::from_text("abc").is_err());
        assert!(ClusterKey::from_text("abc def\n ghi\n").is_ok());
        assert!(ClusterKey::from_text("not*base64").is_err());
        assert!(ClusterKey::from_text(&"a".repeat(1025)).is_err());
        // Whitespace does not change the key.
        let a = ClusterKey::from_text("abcdef123").unwrap();
        let b = ClusterKey::from_text("abc def\n123\n").unwrap();
        assert_eq!(a.0, b.0);
    }

    #[cfg(unix)]
    #[test]
    fn open_permissions_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "abcdefgh").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(ClusterKey::load(&path), Err(KeyFileError::TooOpen { .. })));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(ClusterKey::load(&path).is_ok());
    }

    #[tokio::test]
    async fn the_same_key_passes_and_another_is_refused_on_both_sides() {
        let key = ClusterKey::from_text("clusterkey1").unwrap();
        let (mut a, mut b) = tokio::io::duplex(1024);
        let (c, s) = tokio::join!(client(&mut a, &key), server(&mut b, &key));
        assert!(c.is_ok() && s.is_ok());

        let other = ClusterKey::from_text("somethingelse").unwrap();
        let (mut a, mut b) = tokio::io::duplex(1024);
        let (c, s) = tokio::join!(client(&mut a, &other), server(&mut b, &key));
        assert!(matches!(c, Err(HandshakeError::Refused)), "{c:?}");
        // The server never sees a client proof: the client stopped at the server's.
        assert!(s.is_err());
    }

    #[tokio::test]
    async fn garbage_and_silence_are_refused() {
        let key = ClusterKey::from_text("clusterkey1").unwrap();
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(b"GET / HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n").await.unwrap();
        assert!(matches!(server(&mut b, &key).await, Err(HandshakeError::Protocol)));
        tokio::time::pause();
        let (_a, mut b) = tokio::io::duplex(1024);
        assert!(matches!(server(&mut b, &key).await, Err(HandshakeError::Timeout)));
    }
}
