//! The migration records a shard persists in its meta space, so a restart knows what it was
//! doing: the donor's (`migdonor/` ‖ id) and the recipient's (`migrecv/` ‖ id). Written durably
//! (`Store::put_meta_replicated` syncs) before the step they announce; removed when the migration
//! is settled. They are replicated through the oplog, so a member promoted after its primary died
//! finds them and settles the migration (`crate::primary_only`).
//!
//! On disk a record is BSON `{v: 1, record: {...}}` (this crate's own format, versioned so a
//! later change is a new `v`); records written by earlier versions were JSON and are still read.
//!
//! Must not: decide anything (the donor, recipient and recovery do).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shoal_proto::catalog::{ChunkBound, ChunkVersion, Epoch};
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
        let value = encode(self).map_err(|detail| StorageError::Corrupt { space: "meta", detail })?;
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
                decode(&v)
                    .map_err(|e| StorageError::Corrupt { space: "meta", detail: format!("migration record: {e}") })
            })
            .collect()
    }
}

/// The on-disk format's version.
const FORMAT_VERSION: i32 = 1;

#[derive(Serialize)]
struct Stored<'a> {
    v: i32,
    record: &'a Record,
}

fn encode(record: &Record) -> Result<Vec<u8>, String> {
    bson::serialize_to_vec(&Stored { v: FORMAT_VERSION, record }).map_err(|e| e.to_string())
}

fn decode(bytes: &[u8]) -> Result<Record, String> {
    let doc = match bson::RawDocument::from_bytes(bytes) {
        Ok(doc) => doc,
        // Written before the BSON format: JSON, which always starts with `{` (a BSON document's
        // first bytes are its length, which a JSON text's never match).
        Err(_) if bytes.first() == Some(&b'{') => {
            return serde_json::from_slice(bytes).map_err(|e| format!("legacy JSON: {e}"));
        }
        Err(e) => return Err(e.to_string()),
    };
    match doc.get_i32("v") {
        Ok(FORMAT_VERSION) => {}
        Ok(v) => return Err(format!("format {v} is not this binary's ({FORMAT_VERSION})")),
        Err(e) => return Err(format!("no format version: {e}")),
    }
    let record = doc.get_document("record").map_err(|e| e.to_string())?;
    bson::deserialize_from_slice(record.as_bytes()).map_err(|e| e.to_string())
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

    fn sample() -> Record {
        Record {
            id: "m1".into(),
            ns: "db.c".into(),
            uuid: Uuid::new_v4(),
            key: vec![("k".into(), false), ("h".into(), true)],
            min: ChunkBound::Key(vec![1, 2, 255]),
            max: ChunkBound::Max,
            from: "s0".into(),
            to: "s1".into(),
            epoch: Epoch([7; 12]),
            expected_version: ChunkVersion { major: u32::MAX, minor: 1 },
            phase: Phase::Committed,
        }
    }

    #[test]
    fn the_format_is_versioned_bson_and_earlier_json_records_still_load() {
        let rec = sample();
        let bytes = encode(&rec).expect("encode");
        let doc = bson::RawDocument::from_bytes(&bytes).expect("a BSON document");
        assert_eq!(doc.get_i32("v").expect("v"), 1);
        assert_eq!(decode(&bytes).expect("decode"), rec);
        let legacy = serde_json::to_vec(&rec).expect("json");
        assert_eq!(decode(&legacy).expect("legacy"), rec);
        let newer = bson::serialize_to_vec(&bson::doc! { "v": 2, "record": {} }).expect("encode");
        assert!(decode(&newer).expect_err("newer").contains("format 2"));
        assert!(decode(b"\x05\0\0\0").is_err(), "garbage is an error, not a panic");
    }

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
