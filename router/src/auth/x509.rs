//! MONGODB-X509: a client authenticates as the subject of the certificate it presented in the TLS
//! handshake (verified against `--tlsCAFile`), which must be a user of the `$external` database
//! (`db.getSiblingDB("$external").createUser({user: "CN=alice,O=Example", roles: [...]})`).
//!
//! Must not: take a subject from anywhere but the verified certificate (the `user` argument may
//! only repeat it).

use bson::raw::RawBsonRef;
use bson::{RawDocument, RawDocumentBuf, rawdoc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::UserName;

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

pub const MECHANISM: &str = "MONGODB-X509";
pub const EXTERNAL_DB: &str = "$external";

/// `authenticate` (the command MONGODB-X509 uses; MONGODB-CR is long gone from MongoDB too).
pub async fn authenticate(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    run(state, conn, &cmd.db, cmd.body.as_ref()).await
}

/// `hello`'s `speculativeAuthenticate` with `mechanism: "MONGODB-X509"`: the reply to embed, or
/// `None` (the driver then authenticates normally and sees the real error).
pub async fn speculative(state: &RouterState, conn: &ConnContext, spec: &RawDocument) -> Option<RawDocumentBuf> {
    let db = match spec.get("db") {
        Ok(Some(RawBsonRef::String(db))) => db,
        _ => EXTERNAL_DB,
    };
    run(state, conn, db, spec).await.ok()
}

async fn run(state: &RouterState, conn: &ConnContext, db: &str, body: &RawDocument) -> HandlerResult {
    match body.get("mechanism")? {
        Some(RawBsonRef::String(MECHANISM)) => {}
        Some(RawBsonRef::String(other)) => {
            return Err(CommandError::new(
                ErrorCode::MechanismUnavailable,
                format!("Received authentication for mechanism {other} which is not enabled"),
            ));
        }
        _ => return Err(CommandError::bad_value("authenticate needs a mechanism")),
    }
    if db != EXTERNAL_DB {
        return Err(CommandError::bad_value("X.509 authentication must always use the $external database."));
    }
    let Some(subject) = conn.certificate_subject.clone() else {
        return Err(CommandError::new(
            ErrorCode::AuthenticationFailed,
            "No verified subject name available from client",
        ));
    };
    if let Some(RawBsonRef::String(user)) = body.get("user")?
        && user != subject
    {
        return Err(CommandError::new(
            ErrorCode::AuthenticationFailed,
            "There is no x.509 client certificate matching the user.",
        ));
    }
    let name = UserName::new(subject.clone(), EXTERNAL_DB);
    let snapshot = state.security.get(&state.catalog).await?;
    if snapshot.user(&name).is_none() {
        tracing::info!(peer = %conn.peer, "X.509 authentication failed: no such user");
        crate::auth::sasl::record_authentication(state, conn, &name, MECHANISM, ErrorCode::AuthenticationFailed.code());
        tokio::time::sleep(state.settings.auth_failed_delay).await;
        return Err(CommandError::new(ErrorCode::AuthenticationFailed, "Authentication failed."));
    }
    tracing::info!(user = %name, "authenticated with X.509");
    crate::auth::sasl::record_authentication(state, conn, &name, MECHANISM, 0);
    conn.session().set_user(name);
    Ok(rawdoc! { "dbname": EXTERNAL_DB, "user": subject })
}
