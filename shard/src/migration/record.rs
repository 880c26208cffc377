//! The migration records a shard persists in its meta space, so a restart knows what it was
//! doing: the donor's (`migdonor/` ‖ id) and the recipient's (`migrecv/` ‖ id). Written durably
//! (`Store::put_meta_replicated` syncs) before the step they announce; removed when the migration
//! is settled. They are replicated through the oplog, so a member promoted after its primary died
//! finds them and settles the migration (`crate::primary_only`).
//!
//! Must not: decide anything (the donor, recipient and recovery do).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shoal_configsvr::catalog::{ChunkBound, ChunkVersion, Epoch};
use shoal_query::shard_key::KeyField;
use uuid::Uuid;

use crate::storage::StorageError;
use crate::store::{Store, keys};

/// How far a donor got; recovery reads it, but always asks the catalog who owns the range.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Started, cloning or catching up: nothing committed.
    Cloning,
    /// In the critical section, about to (or did) send the catalog commit: the outcome is the
    /// catalog's to tell.
    Committing,
    /// The catalog committed; the donor's range is to be deleted.
    Committed,
}

/// One side of a migration. `key` holds `(field, hashed)` pairs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    pub id: String,
    pub ns: String,
    /// The collection's uuid in the catalog.
    pub uuid: Uuid,
    pub key: Vec<(String, bool)>,
    pub min: ChunkBound,
    pub max: ChunkBound,
    pub from: String,
    pub to: String,
    pub epoch: Epoch,
    pub expected_version: ChunkVersion,
    /// Donor records only; a recipient's stays `Cloning`.
    pub phase: Phase,
}

/// Which side a record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Donor,
    Recipient,
}

impl Side {
    fn prefix(self) -> &'static [u8] {
        match self {
            Side::Donor => keys::MIGRATION_DONOR_PREFIX,
            Side::Recipient => keys::MIGRATION_RECIPIENT_PREFIX,
        }
    }
}

impl Record {
    pub fn key_fields(&self) -> Vec<KeyField> {
        self.key.iter().map(|(name, hashed)| KeyField { name: name.clone(), hashed: *hashed }).collect()
    }

    fn meta_key(side: Side, id: &str) -> Vec<u8> {
        [side.prefix(), id.as_bytes()].concat()
    }

    /// Persists (or overwrites) the record durably. Blocking: call on the blocking pool.
    pub fn save(&self, store: &Store, side: Side) -> Result<(), StorageError> {
        let value = shoal_configsvr::codec::encode(self)
            .map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })?;
        put_when_writable(store, Self::meta_key(side, &self.id), Some(value))
    }

    /// Removes the record durably. Blocking.
    pub fn remove(store: &Store, side: Side, id: &str) -> Result<(), StorageError> {
        put_when_writable(store, Self::meta_key(side, id), None)
    }

    /// Every record of `side`. Blocking.
    pub fn load_all(store: &Store, side: Side) -> Result<Vec<Record>, StorageError> {
        store
            .meta_records(side.prefix())?
            .into_iter()
            .map(|(_, v)| {
                shoal_configsvr::codec::decode(&v)
                    .map_err(|e| StorageError::Corrupt { space: "meta", detail: format!("migration record: {e}") })
            })
            .collect()
    }
}

/// How long a record write waits for the member to take writes: a primary just promoted
/// without a lease takes none until its next heartbeat grants one (a few hundred ms).
pub const RECORD_WRITABLE_WAIT: Duration = Duration::from_secs(2);
const RECORD_WRITABLE_POLL: Duration = Duration::from_millis(50);

/// A replicated record write, retried (bounded) while the member is not writable yet. Blocking.
fn put_when_writable(store: &Store, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), StorageError> {
    let deadline = Instant::now() + RECORD_WRITABLE_WAIT;
    loop {
        match store.put_meta_replicated(key.clone(), value.clone()) {
            Err(StorageError::NotWritable { .. }) if Instant::now() < deadline => {
                std::thread::sleep(RECORD_WRITABLE_POLL)
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FjallEngine;
    use std::sync::Arc;

    #[test]
    fn records_round_trip_per_side() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(Arc::new(FjallEngine::open(dir.path(), 8 << 20).unwrap())).unwrap();
        let rec = Record {
            id: "m1".into(),
            ns: "db.c".into(),
            uuid: Uuid::new_v4(),
            key: vec![("k".into(), false)],
            min: ChunkBound::Key(vec![1, 2]),
            max: ChunkBound::Max,
            from: "s0".into(),
            to: "s1".into(),
            epoch: Epoch([7; 12]),
            expected_version: ChunkVersion { major: 3, minor: 1 },
            phase: Phase::Cloning,
        };
        rec.save(&store, Side::Donor).unwrap();
        assert_eq!(Record::load_all(&store, Side::Donor).unwrap(), vec![rec.clone()]);
        assert!(Record::load_all(&store, Side::Recipient).unwrap().is_empty());
        let committing = Record { phase: Phase::Committing, ..rec.clone() };
        committing.save(&store, Side::Donor).unwrap();
        assert_eq!(Record::load_all(&store, Side::Donor).unwrap(), vec![committing]);
        Record::remove(&store, Side::Donor, "m1").unwrap();
        assert!(Record::load_all(&store, Side::Donor).unwrap().is_empty());
    }
}
