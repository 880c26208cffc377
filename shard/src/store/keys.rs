//! Key layout of the shard's spaces.
//!
//! ```text
//! Documents: collection id (u64 BE) ‖ keystring(_id)      -> BSON document
//! Indexes:   index ident (u64 BE) ‖ key ‖ keystring(_id)  -> BSON {i: _id, k: [values]} (`indexes`)
//! Oplog:     ts.time (u32 BE) ‖ ts.increment (u32 BE)     -> BSON oplog entry
//! Meta:      "coll/" ‖ namespace                           -> BSON collection record
//!            "dropped/" ‖ collection id (u64 BE)           -> "" (documents still to delete)
//!            "droppedidx/" ‖ index ident (u64 BE)          -> "" (index entries still to delete)
//!            "rangedel/" ‖ task id (u64 BE)                -> BSON range-deletion task
//!            "migdonor/" ‖ migration id                   -> JSON donor migration record
//!            "migrecv/" ‖ migration id                    -> JSON recipient migration record
//!            "initsync"                                   -> optime (BSON) an initial sync must reach
//!            "retryhead/" ‖ lsid (16)                      -> BSON {txnNumber, lastUse}
//!            "retry/" ‖ lsid (16) ‖ stmtId (u32 BE)        -> BSON {txnNumber, ns, r}
//! ```
//! `rangedel/`, `migdonor/`, `migrecv/`, `retryhead/` and `retry/` are replicated
//! ([`REPLICATED_META_PREFIXES`]).
//! Collection ids are never reused, so documents of a dropped collection are unreachable from the
//! moment its catalog record is gone; the range deleter removes them afterwards.

use bson::{Bson, Timestamp};

pub const COLLECTION_PREFIX: &[u8] = b"coll/";
pub const DROPPED_PREFIX: &[u8] = b"dropped/";
/// Indexes dropped (or abandoned while building) whose entries are still to delete.
pub const DROPPED_INDEX_PREFIX: &[u8] = b"droppedidx/";
pub const RANGE_DELETION_PREFIX: &[u8] = b"rangedel/";
pub const MIGRATION_DONOR_PREFIX: &[u8] = b"migdonor/";
pub const MIGRATION_RECIPIENT_PREFIX: &[u8] = b"migrecv/";
/// Bookkeeping records that belong to the replica group, not to one member: written through a
/// write transaction (logged, so secondaries apply them and rollback removes them) and copied by
/// initial sync. Everything else in Meta is local (the catalog is rebuilt from the oplog's
/// commands; `initsync` describes this member's own copy).
/// Retryable-write session heads and statement records (`exec::retry`).
pub const RETRY_HEAD_PREFIX: &[u8] = b"retryhead/";
pub const RETRY_RECORD_PREFIX: &[u8] = b"retry/";
pub const REPLICATED_META_PREFIXES: &[&[u8]] = &[
    RANGE_DELETION_PREFIX,
    MIGRATION_DONOR_PREFIX,
    MIGRATION_RECIPIENT_PREFIX,
    RETRY_HEAD_PREFIX,
    RETRY_RECORD_PREFIX,
];
/// Present while an initial sync is unfinished: the data is not a consistent copy.
pub const INITIAL_SYNC_KEY: &[u8] = b"initsync";

pub fn collection_prefix(coll_id: u64) -> [u8; 8] {
    coll_id.to_be_bytes()
}

pub fn document_key(coll_id: u64, id: &Bson) -> Vec<u8> {
    let mut key = Vec::with_capacity(24);
    key.extend_from_slice(&coll_id.to_be_bytes());
    shoal_query::keystring::encode_into(id, &mut key);
    key
}

pub fn oplog_key(ts: Timestamp) -> [u8; 8] {
    (((ts.time as u64) << 32) | ts.increment as u64).to_be_bytes()
}

pub fn oplog_ts(key: &[u8]) -> Option<Timestamp> {
    let raw = u64::from_be_bytes(key.try_into().ok()?);
    Some(Timestamp { time: (raw >> 32) as u32, increment: raw as u32 })
}

pub fn collection_record_key(ns: &str) -> Vec<u8> {
    [COLLECTION_PREFIX, ns.as_bytes()].concat()
}

pub fn dropped_key(coll_id: u64) -> Vec<u8> {
    [DROPPED_PREFIX, &coll_id.to_be_bytes()[..]].concat()
}

pub fn dropped_index_key(ident: u64) -> Vec<u8> {
    [DROPPED_INDEX_PREFIX, &ident.to_be_bytes()[..]].concat()
}

pub fn range_deletion_key(task_id: u64) -> Vec<u8> {
    [RANGE_DELETION_PREFIX, &task_id.to_be_bytes()[..]].concat()
}
