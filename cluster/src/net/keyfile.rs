//! `security.clusterAuthMode: keyFile`: every connection between the cluster's processes starts
//! with a mutual challenge on the shared key, before HTTP/2; a peer that cannot answer is
//! disconnected before it can send a single request.
//!
//! ```text
//!  client                                              server
//!    ── "SHOALKF1" ‖ Nc (32 random bytes) ──────────────►
//!    ◄─ Ns (32 random bytes) ‖ n ‖ HMAC(Ki, "server" ‖ Nc ‖ Ns) for each of its n keys
//!    ── HMAC(K, "client" ‖ Nc ‖ Ns) ────────────────────►   the client proves it holds K
//!    ◄─ 0x01                                               then gRPC (HTTP/2) as usual
//! ```
//!
//! K is SHA-256 of the key file's text without whitespace (MongoDB's key file format: 6 to 1024
//! base64 characters). A key file may hold several keys as a YAML list (`- key` lines, MongoDB's
//! format for rotating keys): a process proves itself with the first and accepts a peer proving
//! any (the server sends one proof per key; the client checks them against its own keys). Fresh
//! nonces on both sides make a recorded handshake useless to replay.
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
/// Keys one key file may hold (rotation needs two; a few more cost nothing).
pub const KEYS_MAX: usize = 8;
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

/// The cluster's shared secrets, derived from its key file: the first is this process's own, the
/// others are accepted from peers too (rotation).
#[derive(Clone)]
pub struct ClusterKey(Vec<[u8; 32]>);

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

    /// The keys of a key file's text: one key, or a YAML list of keys.
    pub fn from_text(text: &str) -> Result<ClusterKey, String> {
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if !lines.is_empty() && lines.iter().all(|l| l.starts_with("- ")) {
            if lines.len() > KEYS_MAX {
                return Err(format!("holds {} keys; at most {KEYS_MAX}", lines.len()));
            }
            let keys = lines.iter().map(|l| Self::one(&l[2..])).collect::<Result<Vec<_>, _>>()?;
            return Ok(ClusterKey(keys));
        }
        Ok(ClusterKey(vec![Self::one(text)?]))
    }

    fn one(text: &str) -> Result<[u8; 32], String> {
        let key: String = text.chars().filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'').collect();
        if !(KEY_CHARS_MIN..=KEY_CHARS_MAX).contains(&key.len()) {
            return Err(format!("must hold {KEY_CHARS_MIN} to {KEY_CHARS_MAX} characters, not {}", key.len()));
        }
        if let Some(bad) = key.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))) {
            return Err(format!("invalid character {bad:?}: only base64 characters are allowed"));
        }
        let mut hasher = Sha256::new();
        hasher.update(b"shoal cluster key\0");
        hasher.update(key.as_bytes());
        Ok(hasher.finalize().into())
    }

    fn proof(key: &[u8; 32], role: &[u8], client_nonce: &[u8], server_nonce: &[u8]) -> [u8; PROOF_BYTES] {
        // HMAC accepts a key of any length.
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        mac.update(role);
        mac.update(client_nonce);
        mac.update(server_nonce);
        mac.finalize().into_bytes().into()
    }

    /// This process's proof (with its own, first, key).
    fn own_proof(&self, role: &[u8], client_nonce: &[u8], server_nonce: &[u8]) -> [u8; PROOF_BYTES] {
        self.0.first().map_or([0; PROOF_BYTES], |k| Self::proof(k, role, client_nonce, server_nonce))
    }

    /// Whether `proof` was made with any of this process's keys (each compared in constant time).
    fn verify(&self, role: &[u8], client_nonce: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
        self.0.iter().fold(false, |ok, key| {
            let expected = Self::proof(key, role, client_nonce, server_nonce);
            ok | bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], proof))
        })
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
        let mut server_nonce = [0u8; NONCE_BYTES];
        stream.read_exact(&mut server_nonce).await?;
        let count = usize::from(stream.read_u8().await?);
        if count == 0 || count > KEYS_MAX {
            return Err(HandshakeError::Protocol);
        }
        let mut proven = false;
        for _ in 0..count {
            let mut server_proof = [0u8; PROOF_BYTES];
            stream.read_exact(&mut server_proof).await?;
            proven |= key.verify(b"server", &client_nonce, &server_nonce, &server_proof);
        }
        if !proven {
            return Err(HandshakeError::Refused);
        }
        stream.write_all(&key.own_proof(b"client", &client_nonce, &server_nonce)).await?;
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
        // One proof per key this process holds (at most KEYS_MAX, so the count fits a byte).
        answer.push(key.0.len() as u8);
        for k in &key.0 {
            answer.extend_from_slice(&ClusterKey::proof(k, b"server", client_nonce, &server_nonce));
        }
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
        let both = ClusterKey::from_text("- abcdef123\n- newkey456\n").unwrap();
        assert_eq!(both.0.len(), 2);
        assert_eq!(both.0[0], a.0[0]);
    }

    /// Rotation: a process with `[old, new]` talks to one with `[old]` and one with `[new, old]`;
    /// `[new]` and `[old]` alone do not talk.
    #[tokio::test]
    async fn rotation_keeps_old_and_new_talking() {
        let old = ClusterKey::from_text("oldkey111").unwrap();
        let both = ClusterKey::from_text("- oldkey111\n- newkey222\n").unwrap();
        let flipped = ClusterKey::from_text("- newkey222\n- oldkey111\n").unwrap();
        let new = ClusterKey::from_text("newkey222").unwrap();
        for (c, s, ok) in [
            (&old, &both, true),
            (&both, &old, true),
            (&flipped, &old, false),
            (&new, &both, true),
            (&new, &old, false),
        ] {
            let (cr, sr) = pair(c, s).await;
            assert_eq!(cr.is_ok() && sr.is_ok(), ok, "{cr:?} {sr:?}");
        }
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

    /// Runs both sides; each drops its end when it finishes, as a real process closes its socket.
    async fn pair(c: &ClusterKey, s: &ClusterKey) -> (Result<(), HandshakeError>, Result<(), HandshakeError>) {
        let (a, b) = tokio::io::duplex(1024);
        tokio::join!(
            async move {
                let mut a = a;
                client(&mut a, c).await
            },
            async move {
                let mut b = b;
                server(&mut b, s).await
            }
        )
    }

    #[tokio::test]
    async fn the_same_key_passes_and_another_is_refused_on_both_sides() {
        let key = ClusterKey::from_text("clusterkey1").unwrap();
        let (c, s) = pair(&key, &key).await;
        assert!(c.is_ok() && s.is_ok());

        let other = ClusterKey::from_text("somethingelse").unwrap();
        let (c, s) = pair(&other, &key).await;
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
