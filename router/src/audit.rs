//! The audit log (`auditLog.destination: file`, `--auditDestination file --auditPath PATH`): one
//! JSON document per line in MongoDB's audit message shape (`atype`, `ts`, `local`, `remote`,
//! `users`, `roles`, `param`, `result`) for authentication successes and failures, authorization
//! refusals, user and role changes, and shards added or removed. Off by default.
//!
//! ```text
//!  handlers ── Auditor::record(event) ──► bounded queue ──► writer task ──► file (append, flushed per batch)
//! ```
//!
//! Must not: block a command on the disk (the queue is bounded: when it is full an event is counted
//! as dropped and logged, never waited for), or record a password or a credential.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use shoal_proto::catalog::UserName;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Events waiting for the writer; beyond this an event is dropped (and counted).
const QUEUE_EVENTS_MAX: usize = 10_000;

/// Where the audit log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditDestination {
    /// JSON lines appended to this file.
    File(PathBuf),
}

/// The router's audit log; records nothing when no destination is configured.
#[derive(Default)]
pub struct Auditor {
    queue: Option<mpsc::Sender<String>>,
    dropped: AtomicU64,
}

/// Who and where an event concerns.
pub struct Client<'a> {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub user: Option<&'a UserName>,
}

impl Auditor {
    /// An auditor writing to `destination` (opened now, so a bad path fails the start).
    pub async fn start(destination: &AuditDestination) -> std::io::Result<Auditor> {
        let AuditDestination::File(path) = destination;
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await?;
        let (tx, mut rx) = mpsc::channel::<String>(QUEUE_EVENTS_MAX);
        let path = path.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = first;
                while let Ok(more) = rx.try_recv() {
                    batch.push_str(&more);
                }
                if let Err(e) = async {
                    file.write_all(batch.as_bytes()).await?;
                    file.flush().await
                }
                .await
                {
                    tracing::error!(path = %path.display(), error = %e, "cannot write the audit log");
                }
            }
        });
        Ok(Auditor { queue: Some(tx), dropped: AtomicU64::new(0) })
    }

    pub fn is_enabled(&self) -> bool {
        self.queue.is_some()
    }

    /// Events not written because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records one event: MongoDB's `atype`, the client, the event's parameters and its result
    /// code (0 for success).
    pub fn record(&self, atype: &str, client: &Client<'_>, param: Value, result: i32) {
        let Some(queue) = &self.queue else { return };
        let mut line = message(atype, client, param, result, chrono::Utc::now()).to_string();
        line.push('\n');
        if queue.try_send(line).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(atype, dropped, "audit queue full; an audit event was dropped");
        }
    }
}

/// The `param` of an audited command: its database, what its first field names, and the roles it
/// grants or revokes; never `pwd` or privileges' details beyond their resources.
pub fn command_param(db: &str, body: &bson::RawDocument) -> Value {
    let mut param = serde_json::Map::new();
    param.insert("db".into(), json!(db));
    if let Some(Ok((key, value))) = body.iter().next() {
        let arg = match value {
            bson::RawBsonRef::String(s) => json!(s),
            other => json!(format!("{other:?}")),
        };
        param.insert(key.as_str().to_owned(), arg);
    }
    if let Ok(Some(bson::RawBsonRef::Array(roles))) = body.get("roles") {
        let roles: Vec<Value> = roles
            .into_iter()
            .filter_map(Result::ok)
            .map(|r| match r {
                bson::RawBsonRef::String(role) => json!({ "role": role, "db": db }),
                bson::RawBsonRef::Document(d) => json!({
                    "role": d.get_str("role").unwrap_or_default(),
                    "db": d.get_str("db").unwrap_or_default(),
                }),
                _ => Value::Null,
            })
            .collect();
        param.insert("roles".into(), Value::Array(roles));
    }
    Value::Object(param)
}

/// One audit message in MongoDB's shape.
fn message(atype: &str, client: &Client<'_>, param: Value, result: i32, now: chrono::DateTime<chrono::Utc>) -> Value {
    let users: Vec<Value> = client.user.iter().map(|u| json!({ "user": u.user, "db": u.db })).collect();
    json!({
        "atype": atype,
        "ts": { "$date": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true) },
        "local": { "ip": client.local.ip().to_string(), "port": client.local.port() },
        "remote": { "ip": client.remote.ip().to_string(), "port": client.remote.port() },
        "users": users,
        "roles": [],
        "param": param,
        "result": result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_mongodb_fields() {
        let user = UserName::new("alice", "admin");
        let client = Client {
            local: "127.0.0.1:27017".parse().unwrap(),
            remote: "10.0.0.5:51000".parse().unwrap(),
            user: Some(&user),
        };
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let m = message(
            "authenticate",
            &client,
            json!({ "user": "alice", "db": "admin", "mechanism": "SCRAM-SHA-256" }),
            0,
            at,
        );
        assert_eq!(m["atype"], "authenticate");
        assert_eq!(m["ts"]["$date"], "2023-11-14T22:13:20.123Z");
        assert_eq!(m["remote"]["ip"], "10.0.0.5");
        assert_eq!(m["users"][0]["user"], "alice");
        assert_eq!(m["result"], 0);
    }

    #[tokio::test]
    async fn events_reach_the_file_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.json");
        let auditor = Auditor::start(&AuditDestination::File(path.clone())).await.unwrap();
        let client =
            Client { local: "127.0.0.1:1".parse().unwrap(), remote: "127.0.0.1:2".parse().unwrap(), user: None };
        auditor.record("authCheck", &client, json!({ "command": "find" }), 13);
        auditor.record("dropUser", &client, json!({ "user": "x", "db": "app" }), 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.lines().count() == 2 {
                let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
                assert_eq!(first["atype"], "authCheck");
                assert_eq!(first["result"], 13);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "audit events never reached the file");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
