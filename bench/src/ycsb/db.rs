//! The systems a YCSB workload can run against, behind one small set of operations: a MongoDB
//! protocol endpoint ([`super::mongo`]) or PostgreSQL with JSONB rows ([`super::postgres`]).
//!
//! Must not: measure (the runner times each call) or hide an error.

use std::time::Duration;

use super::mongo::{MongoOptions, MongoTarget};
use super::postgres::{self, PostgresSession, PostgresTarget};

/// How long connecting to PostgreSQL may take before the target counts as unreachable.
const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{0}")]
    Config(String),
    #[error("target unreachable: {0}")]
    Unreachable(String),
    #[error("{0}")]
    Operation(String),
}

impl From<postgres::PgError> for DbError {
    fn from(e: postgres::PgError) -> Self {
        DbError::Operation(e.to_string())
    }
}

/// Whether the record an operation named existed (YCSB's `OK` vs `NOT_FOUND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Yes,
    No,
}

impl From<postgres::Found> for Found {
    fn from(f: postgres::Found) -> Self {
        match f {
            postgres::Found::Yes => Found::Yes,
            postgres::Found::No => Found::No,
        }
    }
}

/// A system under test, shared by all client threads of a phase.
#[allow(clippy::large_enum_variant)] // one per phase; boxing buys nothing
pub enum Target {
    Mongo(MongoTarget),
    Postgres(PostgresTarget),
}

/// One client thread's connection to the target.
#[allow(clippy::large_enum_variant)] // one per client thread, never moved in a hot loop
pub enum Session {
    Mongo(MongoTarget),
    Postgres(PostgresSession),
}

impl Target {
    /// `postgres://` and `postgresql://` URLs go to PostgreSQL, everything else to the driver.
    pub async fn connect(uri: &str, table: &str, threads: usize, mongo: &MongoOptions) -> Result<Self, DbError> {
        if uri.starts_with("postgres://") || uri.starts_with("postgresql://") {
            let target = PostgresTarget::connect(uri, table, PG_CONNECT_TIMEOUT).await.map_err(|e| match e {
                postgres::PgError::InvalidUrl(_) | postgres::PgError::InvalidTable(_) => DbError::Config(e.to_string()),
                _ => DbError::Unreachable(format!("{uri}: {e}")),
            })?;
            Ok(Target::Postgres(target))
        } else if uri.starts_with("mongodb://") || uri.starts_with("mongodb+srv://") {
            Ok(Target::Mongo(MongoTarget::connect(uri, table, threads, mongo).await?))
        } else {
            Err(DbError::Config(format!("{uri}: expected a mongodb:// or postgres:// URI")))
        }
    }

    /// `shoal` for a Shoal router, `mongodb` for another MongoDB endpoint, `postgres`.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Mongo(m) if m.is_shoal() => "shoal",
            Target::Mongo(_) => "mongodb",
            Target::Postgres(_) => "postgres",
        }
    }

    /// The durability settings the target runs with, in words, for the report.
    pub async fn describe(&self) -> Result<String, DbError> {
        match self {
            Target::Mongo(m) => Ok(m.describe().to_string()),
            Target::Postgres(p) => Ok(p.describe().await?),
        }
    }

    pub async fn prepare(&self, fresh: bool) -> Result<(), DbError> {
        match self {
            Target::Mongo(m) => m.prepare(fresh).await,
            Target::Postgres(p) => Ok(p.prepare(fresh).await?),
        }
    }

    pub async fn count(&self) -> Result<u64, DbError> {
        match self {
            Target::Mongo(m) => m.count().await,
            Target::Postgres(p) => Ok(p.count().await?),
        }
    }

    pub async fn session(&self) -> Result<Session, DbError> {
        match self {
            Target::Mongo(m) => Ok(Session::Mongo(m.session())),
            Target::Postgres(p) => Ok(Session::Postgres(p.session().await?)),
        }
    }

    pub async fn close(self) {
        if let Target::Mongo(m) = self {
            m.close().await;
        }
    }
}

impl Session {
    pub async fn read(&mut self, key: &str, fields: Option<&[String]>) -> Result<Found, DbError> {
        match self {
            Session::Mongo(m) => m.read(key, fields).await,
            Session::Postgres(p) => Ok(p.read(key, fields).await?.0.into()),
        }
    }

    pub async fn scan(&mut self, start: &str, count: usize, fields: Option<&[String]>) -> Result<usize, DbError> {
        match self {
            Session::Mongo(m) => m.scan(start, count, fields).await,
            Session::Postgres(p) => Ok(p.scan(start, count, fields).await?),
        }
    }

    pub async fn update(&mut self, key: &str, values: &[(String, String)]) -> Result<Found, DbError> {
        match self {
            Session::Mongo(m) => m.update(key, values).await,
            Session::Postgres(p) => Ok(p.update(key, values).await?.into()),
        }
    }

    pub async fn insert(&mut self, key: &str, values: &[(String, String)]) -> Result<(), DbError> {
        match self {
            Session::Mongo(m) => m.insert(key, values).await,
            Session::Postgres(p) => Ok(p.insert(key, values).await?),
        }
    }

    pub async fn delete(&mut self, key: &str) -> Result<Found, DbError> {
        match self {
            Session::Mongo(m) => m.delete(key).await,
            Session::Postgres(p) => Ok(p.delete(key).await?.into()),
        }
    }
}
