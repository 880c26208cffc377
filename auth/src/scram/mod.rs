//! SCRAM (RFC 5802; SHA-256 per RFC 7677) as MongoDB speaks it: the credentials a server keeps
//! ([`derive`]) and the server's side of a conversation ([`server`]).
//!
//! ```text
//!  client                                   server (router)
//!  saslStart  n,,n=<user>,r=<cnonce>  ──────►  look up credential (or a mock: never say which part failed)
//!             ◄──────  r=<cnonce><snonce>,s=<salt>,i=<iterations>
//!  saslContinue c=biws,r=<nonce>,p=<proof> ──►  verify proof against StoredKey
//!             ◄──────  v=<server signature>            (or AuthenticationFailed)
//! ```
//!
//! MongoDB's two twists: SCRAM-SHA-1 hashes `hex(md5("<user>:mongo:<password>"))` instead of the
//! password, and SCRAM-SHA-256 SASLpreps the password (RFC 4013) while user names are used as sent.
//!
//! Must not: keep or log a password or a proof; compare secrets in variable time.

pub mod client;
pub mod message;
pub mod server;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{KeyInit, Mac};
use md5::Digest;
use shoal_proto::catalog::{SCRAM_SHA_1, SCRAM_SHA_256, ScramCredential};

/// MongoDB's defaults (`scramIterationCount`, `scramSHA256IterationCount`).
pub const SHA1_ITERATIONS_DEFAULT: u32 = 10_000;
pub const SHA256_ITERATIONS_DEFAULT: u32 = 15_000;
/// Drivers refuse fewer (MongoDB's minimum for both parameters).
pub const ITERATIONS_MIN: u32 = 5_000;

/// A SCRAM mechanism MongoDB offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    ScramSha1,
    ScramSha256,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha1, Mechanism::ScramSha256];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha1 => SCRAM_SHA_1,
            Mechanism::ScramSha256 => SCRAM_SHA_256,
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Salt bytes a new credential gets (MongoDB: the digest size less 4).
    fn salt_len(self) -> usize {
        match self {
            Mechanism::ScramSha1 => 16,
            Mechanism::ScramSha256 => 28,
        }
    }

    pub fn default_iterations(self) -> u32 {
        match self {
            Mechanism::ScramSha1 => SHA1_ITERATIONS_DEFAULT,
            Mechanism::ScramSha256 => SHA256_ITERATIONS_DEFAULT,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha1 => sha1::Sha1::digest(data).to_vec(),
            Mechanism::ScramSha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so `new_from_slice` cannot fail here.
        match self {
            Mechanism::ScramSha1 => hmac::Hmac::<sha1::Sha1>::new_from_slice(key)
                .map(|m| m.chain_update(data).finalize().into_bytes().to_vec())
                .unwrap_or_default(),
            Mechanism::ScramSha256 => hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
                .map(|m| m.chain_update(data).finalize().into_bytes().to_vec())
                .unwrap_or_default(),
        }
    }

    fn salted_password(self, prepared: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::ScramSha1 => {
                let mut out = [0u8; 20];
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(prepared, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::ScramSha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(prepared, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a password cannot become a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("Password must not be empty")]
    Empty,
    #[error("Unable to saslPrep password: {0}")]
    SaslPrep(String),
    #[error("iteration count {0} is below the minimum of {ITERATIONS_MIN}")]
    Iterations(u32),
}

/// The text PBKDF2 hashes for `mechanism`: MongoDB's digest for SHA-1, the SASLprepped
/// password for SHA-256.
pub fn prepare_password(mechanism: Mechanism, user: &str, password: &str) -> Result<String, PasswordError> {
    if password.is_empty() {
        return Err(PasswordError::Empty);
    }
    match mechanism {
        Mechanism::ScramSha1 => {
            let digest = md5::Md5::digest(format!("{user}:mongo:{password}").as_bytes());
            Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
        }
        Mechanism::ScramSha256 => {
            stringprep::saslprep(password).map(|p| p.into_owned()).map_err(|e| PasswordError::SaslPrep(e.to_string()))
        }
    }
}

/// The credential a server keeps for `password`, with a fresh random salt.
pub fn derive(
    mechanism: Mechanism,
    user: &str,
    password: &str,
    iterations: u32,
) -> Result<ScramCredential, PasswordError> {
    if iterations < ITERATIONS_MIN {
        return Err(PasswordError::Iterations(iterations));
    }
    let prepared = prepare_password(mechanism, user, password)?;
    let mut salt = vec![0u8; mechanism.salt_len()];
    rand::Rng::fill(&mut rand::rng(), salt.as_mut_slice());
    Ok(derive_with_salt(mechanism, prepared.as_bytes(), salt, iterations))
}

/// RFC 5802's key derivation from an already prepared password.
pub fn derive_with_salt(mechanism: Mechanism, prepared: &[u8], salt: Vec<u8>, iterations: u32) -> ScramCredential {
    let salted = mechanism.salted_password(prepared, &salt, iterations);
    let client_key = mechanism.hmac(&salted, b"Client Key");
    ScramCredential {
        iteration_count: iterations,
        stored_key: mechanism.hash(&client_key),
        server_key: mechanism.hmac(&salted, b"Server Key"),
        salt,
    }
}

/// A credential for a user that does not exist, so the conversation goes on and fails at the
/// proof exactly as a wrong password does. Stable per (secret, user), so asking twice shows the
/// same salt; its keys match no password.
pub fn mock_credential(mechanism: Mechanism, secret: &[u8], user: &str) -> ScramCredential {
    let seed = mechanism.hmac(secret, user.as_bytes());
    let mut salt = seed.clone();
    salt.resize(mechanism.salt_len(), 0);
    ScramCredential {
        iteration_count: mechanism.default_iterations(),
        salt,
        stored_key: mechanism.hmac(&seed, b"stored"),
        server_key: mechanism.hmac(&seed, b"server"),
    }
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

pub(crate) fn unb64(text: &str) -> Option<Vec<u8>> {
    B64.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mongodb_sha1_password_digest() {
        // hex(md5("user:mongo:pencil")), as the drivers compute it.
        let digest = prepare_password(Mechanism::ScramSha1, "user", "pencil").unwrap();
        assert_eq!(digest, "1c33006ec1ffd90f9cadcbcc0e118200");
    }

    #[test]
    fn sha256_passwords_are_saslprepped() {
        // RFC 4013: non-ASCII space maps to space, soft hyphen maps to nothing.
        assert_eq!(prepare_password(Mechanism::ScramSha256, "u", "I\u{00AD}X").unwrap(), "IX");
        assert_eq!(prepare_password(Mechanism::ScramSha256, "u", "a\u{2000}b").unwrap(), "a b");
        assert!(matches!(prepare_password(Mechanism::ScramSha256, "u", "\u{0007}"), Err(PasswordError::SaslPrep(_))));
        assert_eq!(prepare_password(Mechanism::ScramSha256, "u", ""), Err(PasswordError::Empty));
    }

    #[test]
    fn derive_refuses_few_iterations_and_salts_freshly() {
        assert_eq!(derive(Mechanism::ScramSha256, "u", "p", 100), Err(PasswordError::Iterations(100)));
        let a = derive(Mechanism::ScramSha256, "u", "p", ITERATIONS_MIN).unwrap();
        let b = derive(Mechanism::ScramSha256, "u", "p", ITERATIONS_MIN).unwrap();
        assert_ne!(a.salt, b.salt);
        assert_eq!((a.salt.len(), a.stored_key.len(), a.server_key.len()), (28, 32, 32));
    }

    #[test]
    fn mock_credentials_are_stable_per_user() {
        let a = mock_credential(Mechanism::ScramSha1, b"secret", "ghost");
        assert_eq!(a, mock_credential(Mechanism::ScramSha1, b"secret", "ghost"));
        assert_ne!(a.salt, mock_credential(Mechanism::ScramSha1, b"secret", "other").salt);
        assert_eq!(a.salt.len(), 16);
    }
}
