//! The server's side of one SCRAM conversation: [`ServerConversation::start`] answers the
//! client-first message, [`ServerConversation::finish`] checks the proof and answers the server
//! signature. Pure: the caller supplies the credential (a mock one for unknown users) and the
//! server nonce.
//!
//! Must not: tell a client which part was wrong: a bad proof, a wrong nonce and an unknown user
//! are the same [`ScramError::AuthenticationFailed`].

use shoal_proto::catalog::ScramCredential;
use subtle::ConstantTimeEq;

use super::message::{ClientFinal, ClientFirst, Malformed};
use super::{Mechanism, b64};

/// Why a conversation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// The message could not be read (MongoDB's ProtocolError); says nothing about credentials.
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// Wrong password, unknown user, or a message that does not continue this conversation.
    #[error("Authentication failed.")]
    AuthenticationFailed,
}

/// A conversation waiting for the client's final message.
#[derive(Debug, Clone)]
pub struct ServerConversation {
    mechanism: Mechanism,
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ServerConversation {
    /// Answers `first` with `server-first-message`. `server_nonce` must be fresh and random
    /// (printable, no `,`); `credential` is the user's, or [`super::mock_credential`].
    pub fn start(
        mechanism: Mechanism,
        first: ClientFirst,
        credential: ScramCredential,
        server_nonce: &str,
    ) -> (ServerConversation, Vec<u8>) {
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!("r={nonce},s={},i={}", b64(&credential.salt), credential.iteration_count);
        let reply = server_first.clone().into_bytes();
        let conversation = ServerConversation {
            mechanism,
            user: first.user,
            credential,
            gs2_header: first.gs2_header,
            client_first_bare: first.bare,
            server_first,
            nonce,
        };
        (conversation, reply)
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The user name the client sent.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Verifies the client's proof; on success answers `server-final-message` (`v=...`).
    pub fn finish(&self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        let last = ClientFinal::parse(client_final)?;
        if last.channel_binding != self.gs2_header.as_bytes() || last.nonce != self.nonce {
            return Err(ScramError::AuthenticationFailed);
        }
        let auth_message = format!("{},{},{}", self.client_first_bare, self.server_first, last.without_proof);
        let m = self.mechanism;
        let client_signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if last.proof.len() != client_signature.len() {
            return Err(ScramError::AuthenticationFailed);
        }
        let client_key: Vec<u8> = last.proof.iter().zip(&client_signature).map(|(p, s)| p ^ s).collect();
        let stored_key = m.hash(&client_key);
        if !bool::from(stored_key.as_slice().ct_eq(self.credential.stored_key.as_slice())) {
            return Err(ScramError::AuthenticationFailed);
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", b64(&server_signature)).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{derive_with_salt, mock_credential, unb64};
    use super::*;

    /// RFC 5802 §5: user "user", password "pencil" (no MongoDB digest in the RFC's example).
    #[test]
    fn rfc5802_sha1_vector() {
        let credential = derive_with_salt(Mechanism::ScramSha1, b"pencil", unb64("QSXCR+Q6sek8bf92").unwrap(), 4096);
        let first = ClientFirst::parse(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL").unwrap();
        let (conv, server_first) =
            ServerConversation::start(Mechanism::ScramSha1, first, credential, "3rfcNHYJY1ZVvWVs7j");
        assert_eq!(server_first, b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096");
        let server_final =
            conv.finish(b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=").unwrap();
        assert_eq!(server_final, b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
    }

    /// RFC 7677 §3.
    #[test]
    fn rfc7677_sha256_vector() {
        let credential =
            derive_with_salt(Mechanism::ScramSha256, b"pencil", unb64("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(), 4096);
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let (conv, server_first) =
            ServerConversation::start(Mechanism::ScramSha256, first, credential, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let server_final = conv
            .finish(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            )
            .unwrap();
        assert_eq!(server_final, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    fn rfc7677_conversation(credential: ScramCredential) -> ServerConversation {
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        ServerConversation::start(Mechanism::ScramSha256, first, credential, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0").0
    }

    #[test]
    fn wrong_password_wrong_nonce_and_unknown_user_fail_alike() {
        let right =
            derive_with_salt(Mechanism::ScramSha256, b"pencil", unb64("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(), 4096);
        let wrong = derive_with_salt(Mechanism::ScramSha256, b"pen", right.salt.clone(), 4096);
        let good_final: &[u8] =
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(rfc7677_conversation(wrong).finish(good_final), Err(ScramError::AuthenticationFailed));
        let mock = mock_credential(Mechanism::ScramSha256, b"k", "user");
        assert_eq!(rfc7677_conversation(mock).finish(good_final), Err(ScramError::AuthenticationFailed));
        let other_nonce: &[u8] = b"c=biws,r=rOprNGfwEbeRWgbNEkqOxxx,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(rfc7677_conversation(right.clone()).finish(other_nonce), Err(ScramError::AuthenticationFailed));
        let short_proof: &[u8] = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA";
        assert_eq!(rfc7677_conversation(right.clone()).finish(short_proof), Err(ScramError::AuthenticationFailed));
        let other_binding: &[u8] =
            b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(rfc7677_conversation(right).finish(other_binding), Err(ScramError::AuthenticationFailed));
    }
}
