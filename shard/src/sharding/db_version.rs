//! Database versions: whether a request a router sent for an unsharded collection reached the
//! database's primary, the router's and this shard's view of the database compared (MongoDB's
//! `databaseVersion`, StaleDbVersion 249).
//!
//! The decision ([`decide`]) is pure; [`DatabaseCache`] keeps what the catalog said about each
//! database (single-flight refresh, like the collection metadata) and
//! [`super::ShardingState::check_database`] runs the decision, refreshing at most once.
//!
//! ```text
//!  received \ shard   unknown   absent    other incarnation          same incarnation
//!  db version         Refresh   Refresh   ts newer: Refresh          last_mod =: Accept if primary here, else Stale
//!                                          else: Stale               last_mod >: Refresh
//!                                                                    last_mod <: Stale
//! ```
//! "Refresh" becomes "Stale" when the entry was just refreshed. A router that gets StaleDbVersion
//! drops its cached database and retries on the primary it reads again.
//!
//! Must not: route requests or touch storage.

use shoal_cluster::config_client::ConfigClient;
use shoal_cluster::single_flight::SingleFlight;
use shoal_proto::catalog::{DatabaseVersion, Timestamp};
use uuid::Uuid;

use super::error::ShardingError;
use super::version::Decision;

/// What this shard's cache says about a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownDb {
    /// Never loaded (or forgotten).
    Unknown,
    /// The catalog has no such database.
    Absent,
    Present {
        version: DatabaseVersion,
        primary_here: bool,
    },
}

/// Parses the wire form (the uuid must be 16 bytes).
pub fn received(v: &shoal_proto::shard::DatabaseVersion) -> Result<DatabaseVersion, ShardingError> {
    let uuid = Uuid::from_slice(&v.uuid)
        .map_err(|_| ShardingError::BadShardVersion(format!("database uuid of {} bytes, expected 16", v.uuid.len())))?;
    Ok(DatabaseVersion {
        uuid,
        timestamp: Timestamp { secs: v.timestamp_secs, inc: v.timestamp_inc },
        last_mod: v.last_mod,
    })
}

/// The wire form of a database version (what routers send).
pub fn to_wire(v: &DatabaseVersion) -> shoal_proto::shard::DatabaseVersion {
    shoal_proto::shard::DatabaseVersion {
        uuid: v.uuid.as_bytes().to_vec().into(),
        timestamp_secs: v.timestamp.secs,
        timestamp_inc: v.timestamp.inc,
        last_mod: v.last_mod,
    }
}

/// The decision. `just_refreshed`: the entry was loaded for this very request, so a disagreement
/// that would ask for a refresh is final.
pub fn decide(received: &DatabaseVersion, known: &KnownDb, just_refreshed: bool) -> Decision {
    let d = match known {
        // Absent: the router may have created it after this shard last looked.
        KnownDb::Unknown | KnownDb::Absent => Decision::Refresh,
        KnownDb::Present { version, primary_here } => {
            if version.uuid != received.uuid {
                // Dropped and created again: the newer incarnation has the later timestamp.
                if received.timestamp > version.timestamp { Decision::Refresh } else { Decision::Stale }
            } else {
                match received.last_mod.cmp(&version.last_mod) {
                    std::cmp::Ordering::Equal if *primary_here => Decision::Accept,
                    std::cmp::Ordering::Equal | std::cmp::Ordering::Less => Decision::Stale,
                    std::cmp::Ordering::Greater => Decision::Refresh,
                }
            }
        }
    };
    if d == Decision::Refresh && just_refreshed { Decision::Stale } else { d }
}

/// A version for messages, as MongoDB prints a DBVersion.
pub fn shown(v: Option<&DatabaseVersion>) -> String {
    match v {
        None => "none".into(),
        Some(v) => format!("{{ uuid: {}, timestamp: {}, lastMod: {} }}", v.uuid, v.timestamp, v.last_mod),
    }
}

/// Per database, what the catalog said the last time this shard asked.
#[derive(Default)]
pub struct DatabaseCache {
    by_db: SingleFlight<KnownDb>,
}

impl DatabaseCache {
    pub fn get(&self, db: &str) -> KnownDb {
        self.by_db.get(db).unwrap_or(KnownDb::Unknown)
    }

    pub fn install(&self, db: &str, known: KnownDb) {
        self.by_db.install(db, known);
    }

    pub fn forget(&self, db: &str) {
        self.by_db.forget(db);
    }

    /// Reloads `db` with a linearizable catalog read (a change committed before the call is
    /// seen). With `join`, a refresh that finished while this call waited counts as this one.
    pub async fn refresh(
        &self,
        catalog: &ConfigClient,
        shard_id: &str,
        db: &str,
        join: bool,
    ) -> Result<KnownDb, ShardingError> {
        self.by_db
            .refresh(db, join, |_| async move {
                let found = catalog.database(db, true).await.map_err(|e| ShardingError::Catalog {
                    ns: db.to_owned(),
                    code: e.code(),
                    detail: e.to_string(),
                })?;
                Ok(match found {
                    None => KnownDb::Absent,
                    Some(d) => KnownDb::Present { version: d.version, primary_here: d.primary == shard_id },
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(uuid: u8, ts: u32, last_mod: u32) -> DatabaseVersion {
        DatabaseVersion { uuid: Uuid::from_bytes([uuid; 16]), timestamp: Timestamp { secs: ts, inc: 0 }, last_mod }
    }

    fn here(version: DatabaseVersion) -> KnownDb {
        KnownDb::Present { version, primary_here: true }
    }

    #[test]
    fn unknown_or_absent_databases_are_loaded_first() {
        assert_eq!(decide(&v(1, 1, 1), &KnownDb::Unknown, false), Decision::Refresh);
        assert_eq!(decide(&v(1, 1, 1), &KnownDb::Absent, false), Decision::Refresh);
        assert_eq!(decide(&v(1, 1, 1), &KnownDb::Absent, true), Decision::Stale);
    }

    #[test]
    fn the_same_version_on_the_primary_is_accepted() {
        assert_eq!(decide(&v(1, 1, 3), &here(v(1, 1, 3)), false), Decision::Accept);
        assert_eq!(decide(&v(1, 1, 3), &here(v(1, 1, 3)), true), Decision::Accept);
    }

    #[test]
    fn a_shard_that_is_not_the_primary_refuses_even_the_same_version() {
        let elsewhere = KnownDb::Present { version: v(1, 1, 3), primary_here: false };
        assert_eq!(decide(&v(1, 1, 3), &elsewhere, false), Decision::Stale);
    }

    #[test]
    fn an_older_router_is_stale_and_a_newer_one_makes_the_shard_refresh() {
        // The primary moved away (last_mod 4): a router still at 3 is told at once.
        let moved = KnownDb::Present { version: v(1, 1, 4), primary_here: false };
        assert_eq!(decide(&v(1, 1, 3), &moved, false), Decision::Stale);
        // The primary moved here and this shard has not heard yet.
        assert_eq!(decide(&v(1, 1, 5), &here(v(1, 1, 4)), false), Decision::Refresh);
        assert_eq!(decide(&v(1, 1, 5), &here(v(1, 1, 4)), true), Decision::Stale);
    }

    #[test]
    fn other_incarnations_compare_creation_timestamps() {
        let known = here(v(1, 10, 1));
        assert_eq!(decide(&v(2, 11, 1), &known, false), Decision::Refresh);
        assert_eq!(decide(&v(2, 9, 1), &known, false), Decision::Stale);
        assert_eq!(decide(&v(2, 11, 1), &known, true), Decision::Stale);
    }

    #[test]
    fn wire_form_round_trips_and_rejects_bad_uuids() {
        let x = v(7, 3, 9);
        assert_eq!(received(&to_wire(&x)).unwrap(), x);
        let bad = shoal_proto::shard::DatabaseVersion { uuid: vec![1, 2].into(), ..Default::default() };
        assert!(received(&bad).is_err());
        assert!(shown(Some(&x)).contains("lastMod: 9"));
    }
}
