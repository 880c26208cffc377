//! YCSB's DB operations on PostgreSQL, so `shoal bench` can run the same workload against Shoal and
//! against PostgreSQL storing documents as JSONB rows.
//!
//! What it owns:
//! - The table layout: one row per record, `ycsb_key VARCHAR(255) COLLATE "C" PRIMARY KEY` (the C
//!   collation compares bytes, so the key order, and hence what a scan returns, matches BSON's
//!   string order in Shoal/MongoDB) and the record's fields as one JSONB object in `doc NOT NULL`.
//! - The five operations (read, scan, update, insert, delete) with YCSB's semantics: a missing key
//!   is [`Found::No`], not an error; an insert of an existing key is an error; update merges the
//!   given fields into the record (`doc || new`).
//! - Connections: one dedicated connection per client thread ([`PostgresSession`]), like YCSB's
//!   JDBC binding, with its statements prepared once and reused. Every statement runs in
//!   autocommit (its own transaction, committed before the call returns) and is bounded by
//!   [`STATEMENT_TIMEOUT`].
//!
//! What it must not do: change server settings (durability is whatever the server runs with;
//! [`PostgresTarget::describe`] reports it), batch or pipeline operations of one client thread,
//! retry, or keep state between operations beyond prepared statements. It knows nothing of
//! workloads, key choice or measurement. Only std, tokio, tokio-postgres, serde_json and thiserror.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

/// Upper bound on any one statement (including its round trip); past it the call fails with
/// [`PgError::Timeout`]. The server is not told: it may still finish the statement.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// PostgreSQL truncates identifiers longer than this (NAMEDATALEN - 1) silently; we refuse them.
const MAX_TABLE_NAME_LEN: usize = 63;

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("invalid PostgreSQL URL: {0}")]
    InvalidUrl(String),
    #[error("cannot connect to PostgreSQL at {target}: {message}")]
    Connect { target: String, message: String },
    #[error("PostgreSQL {op} failed: {message}{}", sqlstate_note(.sqlstate.as_deref()))]
    Query {
        op: &'static str,
        /// The server's SQLSTATE (e.g. "23505" for a duplicate key); None when the error did not
        /// come from the server (connection closed, a result that does not decode).
        sqlstate: Option<String>,
        message: String,
    },
    #[error("invalid table name {0:?}: use 1 to {MAX_TABLE_NAME_LEN} ASCII letters, digits and underscores")]
    InvalidTable(String),
    #[error("PostgreSQL {op} timed out after {after:?}")]
    Timeout { op: &'static str, after: Duration },
}

fn sqlstate_note(sqlstate: Option<&str>) -> String {
    sqlstate.map(|code| format!(" (SQLSTATE {code})")).unwrap_or_default()
}

impl PgError {
    /// The server's SQLSTATE, for errors the server reported.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            PgError::Query { sqlstate, .. } => sqlstate.as_deref(),
            _ => None,
        }
    }

    /// True when an insert failed because the key already exists.
    pub fn is_duplicate_key(&self) -> bool {
        self.sqlstate() == Some(SqlState::UNIQUE_VIOLATION.code())
    }

    fn query(op: &'static str, error: tokio_postgres::Error) -> Self {
        let sqlstate = error.code().map(|code| code.code().to_owned());
        PgError::Query { op, sqlstate, message: error_message(&error) }
    }
}

/// tokio-postgres' Display says only the kind ("db error"); the server's message (and detail) or
/// the underlying cause is in the source.
fn error_message(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return match db.detail() {
            Some(detail) => format!("{}: {} ({detail})", db.severity(), db.message()),
            None => format!("{}: {}", db.severity(), db.message()),
        };
    }
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// YCSB's per-operation status besides errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Yes,
    No,
}

/// Runs one statement's future within `after`.
async fn bounded<T>(
    op: &'static str,
    after: Duration,
    future: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PgError> {
    match tokio::time::timeout(after, future).await {
        Ok(result) => result.map_err(|e| PgError::query(op, e)),
        Err(_) => Err(PgError::Timeout { op, after }),
    }
}

/// Table names are spliced into SQL (quoted), so only plain identifiers are allowed.
fn validate_table(table: &str) -> Result<(), PgError> {
    let valid = !table.is_empty()
        && table.len() <= MAX_TABLE_NAME_LEN
        && table.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid { Ok(()) } else { Err(PgError::InvalidTable(table.to_owned())) }
}

/// Where the URL points, for messages (never the password).
fn describe_target(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let host = match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let user = config.get_user().unwrap_or("");
    let dbname = config.get_dbname().unwrap_or(user);
    format!("{user}@{}/{dbname}", hosts.join(","))
}

/// Opens one connection and spawns its I/O task. If the connection fails later, its task ends and
/// the client's calls fail with "connection closed".
async fn open(config: &Config, target: &str, timeout: Duration) -> Result<Client, PgError> {
    let (client, connection) = match tokio::time::timeout(timeout, config.connect(NoTls)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(PgError::Connect { target: target.to_owned(), message: error_message(&e) }),
        Err(_) => return Err(PgError::Timeout { op: "connect", after: timeout }),
    };
    tokio::spawn(async move {
        // Its error (if any) is reported to the client's pending and later calls.
        let _ = connection.await;
    });
    Ok(client)
}

/// One PostgreSQL database and table as a YCSB target; shared by all client threads.
pub struct PostgresTarget {
    config: Config,
    target: String,
    /// The table name, double-quoted for splicing into SQL.
    table: String,
    connect_timeout: Duration,
    /// For prepare, describe and count; client threads use their own sessions.
    admin: Client,
}

impl PostgresTarget {
    /// Parses the URL (postgres://user@host:port/db), checks the server answers within `timeout`,
    /// and validates `table` (ASCII letters, digits, underscore; else PgError::InvalidTable).
    pub async fn connect(url: &str, table: &str, timeout: std::time::Duration) -> Result<Self, PgError> {
        validate_table(table)?;
        let mut config: Config = url.parse().map_err(|e| PgError::InvalidUrl(error_message(&e)))?;
        config.connect_timeout(timeout);
        if config.get_application_name().is_none() {
            config.application_name("shoal-bench");
        }
        let target = describe_target(&config);
        let admin = open(&config, &target, timeout).await?;
        bounded("ping", timeout, admin.simple_query("SELECT 1")).await?;
        Ok(PostgresTarget { config, target, table: format!("\"{table}\""), connect_timeout: timeout, admin })
    }

    /// Load phase: DROP TABLE IF EXISTS + CREATE TABLE (ycsb_key VARCHAR(255) COLLATE "C" PRIMARY KEY,
    /// doc JSONB NOT NULL) when `fresh`, else CREATE TABLE IF NOT EXISTS.
    pub async fn prepare(&self, fresh: bool) -> Result<(), PgError> {
        let table = &self.table;
        let columns = r#"(ycsb_key VARCHAR(255) COLLATE "C" PRIMARY KEY, doc JSONB NOT NULL)"#;
        // Several statements in one simple query run as one transaction.
        let sql = if fresh {
            format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} {columns}")
        } else {
            format!("CREATE TABLE IF NOT EXISTS {table} {columns}")
        };
        bounded("create table", STATEMENT_TIMEOUT, self.admin.batch_execute(&sql)).await
    }

    /// One dedicated connection for one client thread, with its statements prepared.
    pub async fn session(&self) -> Result<PostgresSession, PgError> {
        let client = open(&self.config, &self.target, self.connect_timeout).await?;
        let t = &self.table;
        let read_all = format!("SELECT doc FROM {t} WHERE ycsb_key = $1");
        let scan_all = format!("SELECT doc FROM {t} WHERE ycsb_key >= $1 ORDER BY ycsb_key LIMIT $2");
        let update = format!("UPDATE {t} SET doc = doc || $2 WHERE ycsb_key = $1");
        let insert = format!("INSERT INTO {t} (ycsb_key, doc) VALUES ($1, $2)");
        let delete = format!("DELETE FROM {t} WHERE ycsb_key = $1");
        // Prepared concurrently: tokio-postgres pipelines them on the connection.
        let (read_all, scan_all, update, insert, delete) = bounded("prepare", STATEMENT_TIMEOUT, async {
            tokio::try_join!(
                client.prepare(&read_all),
                client.prepare(&scan_all),
                client.prepare(&update),
                client.prepare(&insert),
                client.prepare(&delete),
            )
        })
        .await?;
        Ok(PostgresSession {
            client,
            table: self.table.clone(),
            read_all,
            scan_all,
            update,
            insert,
            delete,
            read_some: HashMap::new(),
            scan_some: HashMap::new(),
        })
    }

    /// The durability settings read from the server, in words, e.g. "PostgreSQL 15.18: fsync=on,
    /// synchronous_commit=on, wal_sync_method=fdatasync, full_page_writes=on, commit per statement
    /// (autocommit)".
    pub async fn describe(&self) -> Result<String, PgError> {
        let sql = "SELECT current_setting('server_version'), current_setting('fsync'), \
                   current_setting('synchronous_commit'), current_setting('wal_sync_method'), \
                   current_setting('full_page_writes')";
        let row = bounded("describe", STATEMENT_TIMEOUT, self.admin.query_one(sql, &[])).await?;
        let get = |i: usize| row.try_get::<_, String>(i).map_err(|e| PgError::query("describe", e));
        // server_version may carry a distributor's suffix: "15.18 (Debian 15.18-0+deb12u1)".
        let version = get(0)?;
        let version = version.split_whitespace().next().unwrap_or("?");
        Ok(format!(
            "PostgreSQL {version}: fsync={}, synchronous_commit={}, wal_sync_method={}, full_page_writes={}, \
             commit per statement (autocommit)",
            get(1)?,
            get(2)?,
            get(3)?,
            get(4)?
        ))
    }

    /// Number of rows in the table (for verification after a load).
    pub async fn count(&self) -> Result<u64, PgError> {
        let sql = format!("SELECT count(*) FROM {}", self.table);
        let row = bounded("count", STATEMENT_TIMEOUT, self.admin.query_one(&sql, &[])).await?;
        let n: i64 = row.try_get(0).map_err(|e| PgError::query("count", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// One client thread's connection and prepared statements.
pub struct PostgresSession {
    client: Client,
    table: String,
    read_all: Statement,
    scan_all: Statement,
    update: Statement,
    insert: Statement,
    delete: Statement,
    /// `SELECT doc->$2::text, doc->$3::text, ...` by number of fields: the field names are
    /// parameters, so one statement per field count serves every field list of that length
    /// (YCSB asks for one field when readallfields=false). The server does a plain index lookup
    /// and projection, with no per-row aggregation as a text[]-parameter + jsonb_object_agg
    /// statement would need, and no field name is ever spliced into SQL.
    read_some: HashMap<usize, Statement>,
    scan_some: HashMap<usize, Statement>,
}

#[derive(Clone, Copy)]
enum Subset {
    Read,
    Scan,
}

impl PostgresSession {
    /// fields None = all fields (SELECT doc); Some(names) = only those keys. Returns Found::No when
    /// the key does not exist, and the number of fields read (requested fields the record lacks
    /// are not counted).
    pub async fn read(&mut self, key: &str, fields: Option<&[String]>) -> Result<(Found, usize), PgError> {
        let row = match fields {
            None => bounded("read", STATEMENT_TIMEOUT, self.client.query_opt(&self.read_all, &[&key])).await?,
            Some(fields) => {
                let statement = self.subset_statement(Subset::Read, fields.len()).await?;
                let params = subset_params(&[&key], fields);
                bounded("read", STATEMENT_TIMEOUT, self.client.query_opt(&statement, &params)).await?
            }
        };
        match row {
            None => Ok((Found::No, 0)),
            Some(row) => Ok((Found::Yes, decode_fields(&row, fields.is_none(), "read")?)),
        }
    }

    /// Records with ycsb_key >= start ORDER BY ycsb_key LIMIT count; returns how many rows came
    /// back. The rows are decoded (as YCSB materializes them), then dropped.
    pub async fn scan(&mut self, start: &str, count: usize, fields: Option<&[String]>) -> Result<usize, PgError> {
        let limit = i64::try_from(count).unwrap_or(i64::MAX);
        let rows = match fields {
            None => bounded("scan", STATEMENT_TIMEOUT, self.client.query(&self.scan_all, &[&start, &limit])).await?,
            Some(fields) => {
                let statement = self.subset_statement(Subset::Scan, fields.len()).await?;
                let params = subset_params(&[&start, &limit], fields);
                bounded("scan", STATEMENT_TIMEOUT, self.client.query(&statement, &params)).await?
            }
        };
        for row in &rows {
            decode_fields(row, fields.is_none(), "scan")?;
        }
        Ok(rows.len())
    }

    /// Sets the given fields (doc = doc || new fields); Found::No if no row matched.
    pub async fn update(&mut self, key: &str, values: &[(String, String)]) -> Result<Found, PgError> {
        let doc = Json(to_object(values));
        let n = bounded("update", STATEMENT_TIMEOUT, self.client.execute(&self.update, &[&key, &doc])).await?;
        Ok(if n == 0 { Found::No } else { Found::Yes })
    }

    /// Inserts a new record; a duplicate key is an error ([`PgError::is_duplicate_key`]).
    pub async fn insert(&mut self, key: &str, values: &[(String, String)]) -> Result<(), PgError> {
        let doc = Json(to_object(values));
        bounded("insert", STATEMENT_TIMEOUT, self.client.execute(&self.insert, &[&key, &doc])).await?;
        Ok(())
    }

    pub async fn delete(&mut self, key: &str) -> Result<Found, PgError> {
        let n = bounded("delete", STATEMENT_TIMEOUT, self.client.execute(&self.delete, &[&key])).await?;
        Ok(if n == 0 { Found::No } else { Found::Yes })
    }

    /// The statement reading `n` named fields, prepared on first use.
    async fn subset_statement(&mut self, kind: Subset, n: usize) -> Result<Statement, PgError> {
        let cache = match kind {
            Subset::Read => &mut self.read_some,
            Subset::Scan => &mut self.scan_some,
        };
        if let Some(statement) = cache.get(&n) {
            return Ok(statement.clone());
        }
        let (first_param, tail) = match kind {
            Subset::Read => (2, "WHERE ycsb_key = $1"),
            Subset::Scan => (3, "WHERE ycsb_key >= $1 ORDER BY ycsb_key LIMIT $2"),
        };
        let columns: Vec<String> = (first_param..first_param + n).map(|i| format!("doc->${i}::text")).collect();
        // With no fields this is `SELECT FROM ...`, which PostgreSQL accepts (zero columns).
        let sql = format!("SELECT {} FROM {} {tail}", columns.join(", "), self.table);
        let statement = bounded("prepare", STATEMENT_TIMEOUT, self.client.prepare(&sql)).await?;
        cache.insert(n, statement.clone());
        Ok(statement)
    }
}

fn subset_params<'a>(leading: &[&'a (dyn ToSql + Sync)], fields: &'a [String]) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut params = Vec::with_capacity(leading.len() + fields.len());
    params.extend_from_slice(leading);
    params.extend(fields.iter().map(|f| f as &(dyn ToSql + Sync)));
    params
}

/// Decodes a row as YCSB would materialize it; returns the number of fields present.
fn decode_fields(row: &Row, whole_doc: bool, op: &'static str) -> Result<usize, PgError> {
    if whole_doc {
        let doc: Json<Map<String, Value>> = row.try_get(0).map_err(|e| PgError::query(op, e))?;
        return Ok(doc.0.len());
    }
    let mut present = 0;
    for i in 0..row.len() {
        let value: Option<Json<Value>> = row.try_get(i).map_err(|e| PgError::query(op, e))?;
        present += usize::from(value.is_some());
    }
    Ok(present)
}

/// The fields as a JSON object: one copy of each name and value (the Map owns its strings; the
/// driver then serializes it straight into the outgoing message).
fn to_object(values: &[(String, String)]) -> Map<String, Value> {
    values.iter().map(|(name, value)| (name.clone(), Value::String(value.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        for ok in ["usertable", "UserTable", "t", "_x", "t_1", "1t", &"a".repeat(63)] {
            assert!(validate_table(ok).is_ok(), "{ok:?} should be valid");
        }
        for bad in ["", "user table", "t;drop", "t\"x", "t-1", "tä", "schema.t", &"a".repeat(64)] {
            match validate_table(bad) {
                Err(PgError::InvalidTable(name)) => assert_eq!(name, bad),
                other => panic!("{bad:?} should be invalid, got {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn invalid_table_checked_before_connecting() {
        // No server on port 1: the table name is rejected first.
        let result =
            PostgresTarget::connect("postgres://postgres@127.0.0.1:1/ycsb", "a b", Duration::from_secs(5)).await;
        assert!(matches!(result, Err(PgError::InvalidTable(_))));
    }

    #[tokio::test]
    async fn invalid_url_and_refused_connection() {
        let result = PostgresTarget::connect("postgres://u@h:notaport/db", "t", Duration::from_secs(5)).await;
        assert!(matches!(result, Err(PgError::InvalidUrl(_))), "{:?}", result.err());
        let result = PostgresTarget::connect("postgres://postgres@127.0.0.1:1/ycsb", "t", Duration::from_secs(5)).await;
        match result {
            Err(e @ PgError::Connect { .. }) => {
                let text = e.to_string();
                assert!(text.contains("127.0.0.1:1") && text.contains("refused"), "{text}");
            }
            other => panic!("expected a connect error, got {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn bounded_times_out() {
        let pending = std::future::pending::<Result<(), tokio_postgres::Error>>();
        let result = bounded("read", Duration::from_millis(20), pending).await;
        assert!(matches!(result, Err(PgError::Timeout { op: "read", .. })));
    }

    fn record(tag: &str) -> Vec<(String, String)> {
        (0..10).map(|i| (format!("field{i}"), format!("{tag}-{i}-{}", "x".repeat(90)))).collect()
    }

    /// Runs against the server in SHOAL_PG_URL (e.g. from bench/postgres.sh start); skipped when
    /// it is unset.
    #[tokio::test]
    async fn operations_against_server() -> Result<(), PgError> {
        let Ok(url) = std::env::var("SHOAL_PG_URL") else {
            eprintln!("skipped: set SHOAL_PG_URL (e.g. postgres://postgres@127.0.0.1:55432/ycsb) to run");
            return Ok(());
        };
        let table = format!("ycsbpg_test_{}", std::process::id());
        let target = PostgresTarget::connect(&url, &table, Duration::from_secs(10)).await?;
        let described = target.describe().await?;
        assert!(described.starts_with("PostgreSQL ") && described.contains("fsync="), "{described}");
        eprintln!("{described}");

        target.prepare(true).await?;
        let mut s = target.session().await?;
        // C collation: "User0" < "user1" < "user10" < "user2" (byte order, as in BSON).
        for key in ["user2", "user10", "User0", "user1"] {
            s.insert(key, &record(key)).await?;
        }
        let duplicate = s.insert("user1", &record("again")).await;
        match duplicate {
            Err(e) => {
                eprintln!("duplicate insert: {e}");
                assert!(e.is_duplicate_key() && e.to_string().contains("23505"), "{e}");
            }
            Ok(()) => panic!("duplicate insert succeeded"),
        }
        assert_eq!(target.count().await?, 4);

        assert_eq!(s.read("user1", None).await?, (Found::Yes, 10));
        assert_eq!(s.read("nope", None).await?, (Found::No, 0));
        let some = vec!["field3".to_owned(), "field7".to_owned()];
        assert_eq!(s.read("user1", Some(&some)).await?, (Found::Yes, 2));
        let odd = vec!["field0".to_owned(), "it's \"odd\"".to_owned()];
        assert_eq!(s.read("user1", Some(&odd)).await?, (Found::Yes, 1));
        assert_eq!(s.read("nope", Some(&some)).await?, (Found::No, 0));
        assert_eq!(s.read("user1", Some(&[])).await?, (Found::Yes, 0));

        let changes = vec![("field3".to_owned(), "changed".to_owned()), ("it's \"odd\"".to_owned(), "new".to_owned())];
        assert_eq!(s.update("user1", &changes).await?, Found::Yes);
        assert_eq!(s.update("nope", &changes).await?, Found::No);
        assert_eq!(s.read("user1", None).await?, (Found::Yes, 11));
        assert_eq!(s.read("user1", Some(&odd)).await?, (Found::Yes, 2));
        let row = target
            .admin
            .query_one(&format!("SELECT doc->>'field3', doc->>'field4' FROM \"{table}\" WHERE ycsb_key = 'user1'"), &[])
            .await
            .map_err(|e| PgError::query("check", e))?;
        assert_eq!(row.get::<_, String>(0), "changed");
        assert!(row.get::<_, String>(1).starts_with("user1-4-"));

        assert_eq!(s.scan("user1", 2, None).await?, 2); // user1, user10
        assert_eq!(s.scan("user10", 10, None).await?, 2); // user10, user2
        assert_eq!(s.scan("", 100, None).await?, 4);
        // Byte order puts "User0" before "user" (a linguistic collation would not).
        assert_eq!(s.scan("user", 100, None).await?, 3);
        assert_eq!(s.scan("User", 100, Some(&some)).await?, 4);
        assert_eq!(s.scan("user3", 10, None).await?, 0);
        assert_eq!(s.scan("", 0, None).await?, 0);

        assert_eq!(s.delete("user10").await?, Found::Yes);
        assert_eq!(s.delete("user10").await?, Found::No);
        assert_eq!(s.read("user10", None).await?, (Found::No, 0));
        assert_eq!(target.count().await?, 3);

        // Another session sees the committed data.
        let mut other = target.session().await?;
        assert_eq!(other.read("user2", None).await?, (Found::Yes, 10));

        target.prepare(false).await?;
        assert_eq!(target.count().await?, 3);
        target.prepare(true).await?;
        assert_eq!(target.count().await?, 0);

        drop((s, other));
        bounded("cleanup", STATEMENT_TIMEOUT, target.admin.batch_execute(&format!("DROP TABLE \"{table}\""))).await
    }
}
