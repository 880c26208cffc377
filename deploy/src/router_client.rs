//! The one way the `shoal` tools (status, restart, dump, restore) open a driver connection to a
//! router: bounded server selection, TLS options from the spec's secrets, and the operator's
//! login (`-u/-p/--authenticationDatabase`, as mongosh takes them).
//!
//! Must not: retry by itself or hide which router it talks to; callers bound each command.

use std::time::Duration;

use anyhow::Context;
use bson::Document;

/// Bounds one command to a router (replSetGetStatus waits up to 2 s per member itself).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
const SERVER_SELECTION_TIMEOUT_MS: u64 = 3_000;

/// The operator's credentials; no username means no authentication.
#[derive(Debug, Clone, Default)]
pub struct Login {
    pub username: Option<String>,
    pub password: Option<String>,
    pub authentication_database: String,
}

/// A client of the router at `addr` (`host:port`); `tls_options` (`&tls=true&...`) are appended
/// to its connection string; `app` names the tool in the router's logs.
pub async fn connect(addr: &str, tls_options: &str, login: &Login, app: &str) -> anyhow::Result<mongodb::Client> {
    let uri = format!(
        "mongodb://{addr}/?directConnection=true&appName={app}\
         &serverSelectionTimeoutMS={SERVER_SELECTION_TIMEOUT_MS}&connectTimeoutMS={SERVER_SELECTION_TIMEOUT_MS}{tls_options}"
    );
    let mut options =
        mongodb::options::ClientOptions::parse(&uri).await.with_context(|| format!("bad router address {addr}"))?;
    if let Some(user) = &login.username {
        options.credential = Some(
            mongodb::options::Credential::builder()
                .username(user.clone())
                .password(login.password.clone())
                .source(login.authentication_database.clone())
                .build(),
        );
    }
    mongodb::Client::with_options(options).with_context(|| format!("bad router address {addr}"))
}

/// Runs `body` on `db`, bounded by [`COMMAND_TIMEOUT`].
pub async fn command(db: &mongodb::Database, body: Document) -> anyhow::Result<Document> {
    match tokio::time::timeout(COMMAND_TIMEOUT, db.run_command(body)).await {
        Ok(reply) => Ok(reply?),
        Err(_) => anyhow::bail!("no answer within {} s", COMMAND_TIMEOUT.as_secs()),
    }
}
