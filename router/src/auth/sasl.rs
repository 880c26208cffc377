//! Authentication commands: `saslStart` / `saslContinue` (SCRAM-SHA-1 and SCRAM-SHA-256), the
//! same first step inside `hello` (`speculativeAuthenticate`), `saslSupportedMechs` in `hello`,
//! and `logout`.
//!
//! ```text
//!  saslStart {mechanism, payload: n,,n=alice,r=..}  ─► ClientFirst ─► credential of alice@<$db>
//!                                                      (or a mock one: the reply looks the same)
//!     ◄─ {conversationId, done: false, payload: r=..,s=..,i=..}
//!  saslContinue {conversationId, payload: c=..,r=..,p=..} ─► proof checked
//!     ◄─ {done: true, payload: v=..}   (skipEmptyExchange; else done: false, then one empty step)
//!     ◄─ or AuthenticationFailed (18) after the failure delay, whatever was wrong
//! ```
//!
//! Must not: hold the session lock across an await, or answer a failure sooner than the delay.

use base64::Engine;
use bson::raw::RawBsonRef;
use bson::spec::BinarySubtype;
use bson::{Binary, RawDocument, RawDocumentBuf, rawdoc};
use shoal_auth::scram::message::ClientFirst;
use shoal_auth::scram::server::{ScramError, ServerConversation};
use shoal_auth::scram::{Mechanism, mock_credential};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::UserName;

use crate::cmd::info::truthy;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// Server nonce bytes (base64-encoded into the conversation).
const SERVER_NONCE_BYTES: usize = 24;

pub async fn sasl_start(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    start(state, conn, &cmd.db, cmd.body.as_ref()).await
}

pub async fn sasl_continue(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = cmd.body.as_ref();
    let id = match body.get("conversationId")? {
        Some(RawBsonRef::Int32(n)) => i64::from(n),
        Some(RawBsonRef::Int64(n)) => n,
        Some(RawBsonRef::Double(f)) => f as i64,
        _ => return Err(CommandError::type_mismatch("saslContinue needs a numeric conversationId")),
    };
    let payload = payload(body)?;
    let outcome = {
        let mut session = conn.session();
        match session.conversation() {
            Some(c) if i64::from(c.id) == id => {}
            _ => {
                return Err(CommandError::new(
                    ErrorCode::ProtocolError,
                    "No SASL session state found for this conversationId",
                ));
            }
        }
        continue_conversation(&mut session, &payload)
    };
    let (user, mechanism) = (outcome.user, outcome.mechanism);
    match outcome.step {
        Step::Done { payload } => {
            // The user may have been dropped since the conversation began.
            let snapshot = state.security.get(&state.catalog).await?;
            if snapshot.user(&user).is_none() {
                return failed(state, conn, &user, mechanism).await;
            }
            tracing::info!(user = %user, "authenticated");
            record_authentication(state, conn, &user, mechanism, 0);
            conn.session().set_user(user);
            Ok(reply(id, true, &payload))
        }
        Step::More { payload } => Ok(reply(id, false, &payload)),
        Step::Failed(ScramError::Malformed(e)) => Err(CommandError::new(ErrorCode::ProtocolError, e.to_string())),
        Step::Failed(ScramError::AuthenticationFailed) => failed(state, conn, &user, mechanism).await,
    }
}

/// `logout`: the connection is no longer authenticated.
pub async fn logout(_state: &RouterState, conn: &ConnContext, _cmd: &Command) -> HandlerResult {
    conn.session().logout();
    Ok(RawDocumentBuf::new())
}

/// `hello`'s `speculativeAuthenticate`: the `saslStart` reply to embed, or `None` (the hello
/// still succeeds, and the driver then authenticates normally and sees the real error).
pub async fn speculative(state: &RouterState, conn: &ConnContext, spec: &RawDocument) -> Option<RawDocumentBuf> {
    let db = match spec.get("db") {
        Ok(Some(RawBsonRef::String(db))) => db,
        _ => "admin",
    };
    match spec.iter().next() {
        Some(Ok((name, _))) if name.as_str() == "saslStart" => start(state, conn, db, spec).await.ok(),
        Some(Ok((name, _))) if name.as_str() == "authenticate" => {
            crate::auth::x509::speculative(state, conn, spec).await
        }
        _ => None,
    }
}

/// `hello`'s `saslSupportedMechs: "<db>.<user>"`: the user's mechanisms, `None` if there is no
/// such user (MongoDB then leaves the field out).
pub async fn supported_mechanisms(state: &RouterState, qualified: &str) -> Option<Vec<&'static str>> {
    let (db, user) = qualified.split_once('.')?;
    let snapshot = state.security.get(&state.catalog).await.ok()?;
    Some(snapshot.user(&UserName::new(user, db))?.credentials.mechanisms())
}

async fn start(state: &RouterState, conn: &ConnContext, db: &str, body: &RawDocument) -> HandlerResult {
    let mechanism = match body.get("mechanism")? {
        Some(RawBsonRef::String(m)) => Mechanism::from_name(m).ok_or_else(|| {
            CommandError::new(
                ErrorCode::MechanismUnavailable,
                format!("Received authentication for mechanism {m} which is not enabled"),
            )
        })?,
        _ => return Err(CommandError::bad_value("saslStart needs a mechanism")),
    };
    let skip_empty_exchange = match body.get("options")? {
        Some(RawBsonRef::Document(o)) => o.get("skipEmptyExchange")?.is_some_and(truthy),
        _ => false,
    };
    let first =
        ClientFirst::parse(&payload(body)?).map_err(|e| CommandError::new(ErrorCode::ProtocolError, e.to_string()))?;
    let name = UserName::new(first.user.clone(), db);
    let snapshot = state.security.get(&state.catalog).await?;
    let credential = match snapshot.user(&name) {
        Some(user) => {
            let credential = match mechanism {
                Mechanism::ScramSha1 => user.credentials.scram_sha1.clone(),
                Mechanism::ScramSha256 => user.credentials.scram_sha256.clone(),
            };
            credential.ok_or_else(|| {
                CommandError::new(
                    ErrorCode::MechanismUnavailable,
                    format!("Unable to use {mechanism} based authentication for user without any {mechanism} credentials registered"),
                )
            })?
        }
        None => mock_credential(mechanism, state.security.mock_secret(), &name.to_string()),
    };
    let mut nonce = [0u8; SERVER_NONCE_BYTES];
    rand::Rng::fill(&mut rand::rng(), &mut nonce);
    let nonce = base64::engine::general_purpose::STANDARD.encode(nonce);
    let (scram, server_first) = ServerConversation::start(mechanism, first, credential, &nonce);
    let id = conn.session().begin(db.to_owned(), scram, skip_empty_exchange);
    Ok(reply(i64::from(id), false, &server_first))
}

enum Step {
    Done { payload: Vec<u8> },
    More { payload: Vec<u8> },
    Failed(ScramError),
}

/// A step of a conversation and whom it was about.
struct Outcome {
    user: UserName,
    mechanism: &'static str,
    step: Step,
}

fn continue_conversation(session: &mut crate::auth::session::Session, payload: &[u8]) -> Outcome {
    let Some(conversation) = session.conversation() else {
        let nobody = UserName::new("", "");
        return Outcome { user: nobody, mechanism: "", step: Step::Failed(ScramError::AuthenticationFailed) };
    };
    let user = UserName::new(conversation.scram.user(), conversation.db.clone());
    let mechanism = conversation.scram.mechanism().name();
    let step = if conversation.verified {
        // The empty last step of clients without skipEmptyExchange.
        session.end_conversation();
        Step::Done { payload: Vec::new() }
    } else {
        match conversation.scram.finish(payload) {
            Ok(server_final) if conversation.skip_empty_exchange => {
                session.end_conversation();
                Step::Done { payload: server_final }
            }
            Ok(server_final) => {
                conversation.verified = true;
                Step::More { payload: server_final }
            }
            Err(e) => {
                session.end_conversation();
                Step::Failed(e)
            }
        }
    };
    Outcome { user, mechanism, step }
}

/// Records an authentication attempt in the audit log (`authenticate`; result 0 or 18).
pub(crate) fn record_authentication(
    state: &RouterState,
    conn: &ConnContext,
    user: &UserName,
    mechanism: &str,
    result: i32,
) {
    if !state.audit.is_enabled() {
        return;
    }
    let client = crate::audit::Client { local: conn.local, remote: conn.peer, user: (result == 0).then_some(user) };
    let param = serde_json::json!({ "user": user.user, "db": user.db, "mechanism": mechanism });
    state.audit.record("authenticate", &client, param, result);
}

/// AuthenticationFailed, after the configured delay (it slows guessing and hides which check
/// failed).
async fn failed(state: &RouterState, conn: &ConnContext, user: &UserName, mechanism: &str) -> HandlerResult {
    tracing::info!(peer = %conn.peer, "authentication failed");
    record_authentication(state, conn, user, mechanism, ErrorCode::AuthenticationFailed.code());
    tokio::time::sleep(state.settings.auth_failed_delay).await;
    Err(CommandError::new(ErrorCode::AuthenticationFailed, "Authentication failed."))
}

fn payload(body: &RawDocument) -> Result<Vec<u8>, CommandError> {
    match body.get("payload")? {
        Some(RawBsonRef::Binary(b)) => Ok(b.bytes.to_vec()),
        // Old clients send the payload as a string.
        Some(RawBsonRef::String(s)) => Ok(s.as_bytes().to_vec()),
        _ => Err(CommandError::bad_value("SASL payload must be binary data")),
    }
}

fn reply(conversation_id: i64, done: bool, payload: &[u8]) -> RawDocumentBuf {
    let id = i32::try_from(conversation_id).unwrap_or(i32::MAX);
    rawdoc! {
        "conversationId": id,
        "done": done,
        "payload": Binary { subtype: BinarySubtype::Generic, bytes: payload.to_vec() },
    }
}
