//! YCSB's database operations on any MongoDB-protocol endpoint (Shoal's router, or a real MongoDB)
//! through the official `mongodb` driver, as YCSB's MongoDB binding does them: one document per
//! record with the key as `_id` and one string field per YCSB field; a scan is a `find` on
//! `_id >= start` sorted by `_id` with a limit.
//!
//! Must not: retry, batch or otherwise help an operation along: each YCSB operation is exactly one
//! driver call, so what is measured is what a client sees.

use std::time::Duration;

use bson::raw::CStr;
use bson::{Bson, Document, RawDocumentBuf, doc, rawdoc};
use mongodb::options::{Acknowledgment, ClientOptions, ReadPreference, SelectionCriteria, WriteConcern};
use mongodb::{Client, Collection};

use super::db::{DbError, Found};

/// How long the driver looks for a server before an operation fails (an unreachable `--uri`).
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Write concern and read preference as the command line gives them.
#[derive(Debug, Clone, Default)]
pub struct MongoOptions {
    /// `1`, `2`, ..., or `majority`; unset keeps the URI's (or the server's default).
    pub write_concern: Option<String>,
    /// `j` of the write concern; unset keeps the URI's.
    pub journal: Option<bool>,
    /// `primary`, `primaryPreferred`, `secondary`, `secondaryPreferred`, `nearest`.
    pub read_preference: Option<String>,
}

#[derive(Clone)]
pub struct MongoTarget {
    collection: Collection<RawDocumentBuf>,
    client: Client,
    describe: String,
    is_shoal: bool,
}

fn config_error(message: impl Into<String>) -> DbError {
    DbError::Config(message.into())
}

fn op_error(e: mongodb::error::Error) -> DbError {
    DbError::Operation(e.to_string())
}

fn write_concern(w: &str, journal: Option<bool>) -> Result<WriteConcern, DbError> {
    let ack = match w {
        "majority" => Acknowledgment::Majority,
        n => Acknowledgment::Nodes(
            n.parse().map_err(|_| config_error(format!("--write-concern {n:?}: expected a number or majority")))?,
        ),
    };
    Ok(WriteConcern::builder().w(ack).journal(journal).build())
}

fn read_preference(name: &str) -> Result<ReadPreference, DbError> {
    Ok(match name {
        "primary" => ReadPreference::Primary,
        "primaryPreferred" => ReadPreference::PrimaryPreferred { options: None },
        "secondary" => ReadPreference::Secondary { options: None },
        "secondaryPreferred" => ReadPreference::SecondaryPreferred { options: None },
        "nearest" => ReadPreference::Nearest { options: None },
        other => {
            return Err(config_error(format!(
                "--read-preference {other:?}: expected primary, primaryPreferred, secondary, secondaryPreferred or nearest"
            )));
        }
    })
}

impl MongoTarget {
    /// Connects and pings, so an unreachable or wrong endpoint fails here, once, clearly.
    /// The pool holds `threads` connections unless the URI sets `maxPoolSize`, as YCSB's binding
    /// shares one client among its threads. The database is the URI's, else `ycsb`.
    pub async fn connect(uri: &str, table: &str, threads: usize, opts: &MongoOptions) -> Result<Self, DbError> {
        let mut options = ClientOptions::parse(uri).await.map_err(|e| config_error(format!("--uri {uri}: {e}")))?;
        if options.max_pool_size.is_none() {
            options.max_pool_size = Some(threads.max(1) as u32);
        }
        options.server_selection_timeout.get_or_insert(SERVER_SELECTION_TIMEOUT);
        if let Some(w) = &opts.write_concern {
            options.write_concern = Some(write_concern(w, opts.journal)?);
        } else if let Some(j) = opts.journal {
            options.write_concern.get_or_insert_with(WriteConcern::default).journal = Some(j);
        }
        if let Some(rp) = &opts.read_preference {
            options.selection_criteria = Some(SelectionCriteria::ReadPreference(read_preference(rp)?));
        }
        let wc = options.write_concern.clone();
        let rp = options.selection_criteria.clone();
        let db_name = options.default_database.clone().unwrap_or_else(|| "ycsb".to_string());
        let client = Client::with_options(options).map_err(|e| config_error(e.to_string()))?;
        let db = client.database(&db_name);
        let build =
            db.run_command(doc! { "buildInfo": 1 }).await.map_err(|e| DbError::Unreachable(format!("{uri}: {e}")))?;
        let version = build.get_str("version").unwrap_or("?").to_string();
        let is_shoal = build.get_str("gitVersion").is_ok_and(|g| g.starts_with("shoal-"));
        let server =
            if is_shoal { format!("Shoal router (MongoDB {version} protocol)") } else { format!("MongoDB {version}") };
        let default_wc = if is_shoal {
            "server default: {w: majority}, which Shoal acknowledges after the journal fsync".to_string()
        } else {
            "server default".to_string()
        };
        let describe = format!(
            "{server} at {uri}, db {db_name}: write concern {}, read preference {}",
            wc.map_or(default_wc, |w| describe_wc(&w)),
            rp.map_or_else(|| "primary".to_string(), |r| format!("{r:?}")),
        );
        Ok(Self { collection: db.collection(table), client, describe, is_shoal })
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Whether the endpoint is a Shoal router (its buildInfo's gitVersion says so).
    pub fn is_shoal(&self) -> bool {
        self.is_shoal
    }

    /// Load phase: drop the collection first when `fresh`.
    pub async fn prepare(&self, fresh: bool) -> Result<(), DbError> {
        if fresh {
            self.collection.drop().await.map_err(op_error)?;
        }
        Ok(())
    }

    pub async fn count(&self) -> Result<u64, DbError> {
        self.collection.count_documents(doc! {}).await.map_err(op_error)
    }

    /// A handle for one client thread (the driver's pool is shared).
    pub fn session(&self) -> MongoTarget {
        self.clone()
    }

    pub async fn close(self) {
        self.client.shutdown().await;
    }

    pub async fn read(&self, key: &str, fields: Option<&[String]>) -> Result<Found, DbError> {
        let mut find = self.collection.find_one(doc! { "_id": key });
        if let Some(fields) = fields {
            find = find.projection(projection(fields));
        }
        Ok(if find.await.map_err(op_error)?.is_some() { Found::Yes } else { Found::No })
    }

    pub async fn scan(&self, start: &str, count: usize, fields: Option<&[String]>) -> Result<usize, DbError> {
        let mut find =
            self.collection.find(doc! { "_id": { "$gte": start } }).sort(doc! { "_id": 1 }).limit(count as i64);
        if let Some(fields) = fields {
            find = find.projection(projection(fields));
        }
        let mut cursor = find.await.map_err(op_error)?;
        let mut n = 0;
        while cursor.advance().await.map_err(op_error)? {
            n += 1;
        }
        Ok(n)
    }

    pub async fn update(&self, key: &str, values: &[(String, String)]) -> Result<Found, DbError> {
        let mut set = Document::new();
        for (k, v) in values {
            set.insert(k.as_str(), v.as_str());
        }
        let result = self.collection.update_one(doc! { "_id": key }, doc! { "$set": set }).await.map_err(op_error)?;
        Ok(if result.matched_count > 0 { Found::Yes } else { Found::No })
    }

    pub async fn insert(&self, key: &str, values: &[(String, String)]) -> Result<(), DbError> {
        // Built as raw BSON directly: the driver sends these bytes as they are.
        let mut record = rawdoc! { "_id": key };
        for (k, v) in values {
            let name = <&CStr>::try_from(k.as_str()).map_err(|e| DbError::Operation(e.to_string()))?;
            record.append(name, v.as_str());
        }
        self.collection.insert_one(record).await.map_err(op_error)?;
        Ok(())
    }

    pub async fn delete(&self, key: &str) -> Result<Found, DbError> {
        let result = self.collection.delete_one(doc! { "_id": key }).await.map_err(op_error)?;
        Ok(if result.deleted_count > 0 { Found::Yes } else { Found::No })
    }
}

fn projection(fields: &[String]) -> Document {
    fields.iter().map(|f| (f.clone(), Bson::Int32(1))).collect()
}

fn describe_wc(wc: &WriteConcern) -> String {
    let w = match &wc.w {
        None => "default".to_string(),
        Some(Acknowledgment::Majority) => "majority".to_string(),
        Some(Acknowledgment::Nodes(n)) => n.to_string(),
        Some(other) => format!("{other:?}"),
    };
    match wc.journal {
        None => format!("{{w: {w}}}"),
        Some(j) => format!("{{w: {w}, j: {j}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_or_say_what_is_wrong() {
        assert!(write_concern("majority", Some(true)).is_ok());
        assert!(write_concern("2", None).is_ok());
        assert!(write_concern("most", None).is_err());
        assert!(read_preference("secondaryPreferred").is_ok());
        assert!(read_preference("tertiary").is_err());
        assert_eq!(describe_wc(&write_concern("majority", Some(true)).unwrap_or_default()), "{w: majority, j: true}");
    }
}
