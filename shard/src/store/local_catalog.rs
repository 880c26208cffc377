//! The shard's local catalog ([`LocalCatalog`]): which collections this member stores, their ids,
//! UUIDs, options and indexes. Named local to tell it from the cluster catalog the config
//! servers hold (which shard owns which chunks): this one knows nothing of placement.
//!
//! The durable copy lives in the Meta space; this in-memory map mirrors it and is only changed
//! by the single writer after the batch that changed the durable copy committed.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{Document, Uuid, doc};
use shoal_proto::Namespace;

use super::indexes::{self, IndexSpec};
use crate::storage::StorageError;

#[derive(Debug, Clone)]
pub struct CollectionInfo {
    pub id: u64,
    pub ns: Namespace,
    pub uuid: Uuid,
    pub options: Document,
    /// Secondary indexes (the `_id` index is implicit: documents are stored by `_id`).
    pub indexes: Vec<Arc<IndexSpec>>,
}

impl CollectionInfo {
    pub fn full_name(&self) -> String {
        self.ns.to_string()
    }

    pub fn to_record(&self) -> Document {
        doc! {
            "id": self.id as i64,
            "db": &self.ns.db,
            "coll": &self.ns.coll,
            "uuid": self.uuid,
            "options": self.options.clone(),
            "indexes": self.indexes.iter().map(|i| i.to_record()).collect::<Vec<_>>(),
        }
    }

    pub fn index(&self, name: &str) -> Option<&Arc<IndexSpec>> {
        self.indexes.iter().find(|i| i.name == name)
    }

    /// Indexes reads may use (built).
    pub fn ready_indexes(&self) -> impl Iterator<Item = &Arc<IndexSpec>> {
        self.indexes.iter().filter(|i| !i.building)
    }

    pub fn from_record(record: &Document) -> Result<Self, StorageError> {
        let corrupt =
            |detail: &str| StorageError::Corrupt { space: "meta", detail: format!("collection record: {detail}") };
        let id = record.get_i64("id").map_err(|_| corrupt("id"))? as u64;
        let db = record.get_str("db").map_err(|_| corrupt("db"))?;
        let coll = record.get_str("coll").map_err(|_| corrupt("coll"))?;
        let ns = Namespace::new(db, coll).map_err(|e| corrupt(&e.to_string()))?;
        let uuid = match record.get("uuid") {
            Some(bson::Bson::Binary(b)) => {
                Uuid::from_bytes(b.bytes.as_slice().try_into().map_err(|_| corrupt("uuid"))?)
            }
            _ => return Err(corrupt("uuid")),
        };
        let options = record.get_document("options").cloned().unwrap_or_default();
        let indexes = indexes::from_records(record.get("indexes"))?;
        Ok(Self { id, ns, uuid, options, indexes })
    }
}

/// This member's collections by full namespace (`db.coll`), ordered so listings come out sorted.
#[derive(Debug, Default)]
pub struct LocalCatalog {
    pub(crate) by_ns: BTreeMap<String, Arc<CollectionInfo>>,
    pub(crate) next_id: u64,
}

impl LocalCatalog {
    pub fn get(&self, ns: &str) -> Option<Arc<CollectionInfo>> {
        self.by_ns.get(ns).cloned()
    }

    pub fn by_uuid(&self, uuid: Uuid) -> Option<Arc<CollectionInfo>> {
        self.by_ns.values().find(|c| c.uuid == uuid).cloned()
    }

    pub fn in_db<'a>(&'a self, db: &'a str) -> impl Iterator<Item = &'a Arc<CollectionInfo>> + 'a {
        self.by_ns.values().filter(move |c| c.ns.db == db)
    }

    pub fn databases(&self) -> Vec<String> {
        let mut dbs: Vec<String> = self.by_ns.values().map(|c| c.ns.db.clone()).collect();
        dbs.dedup();
        dbs
    }
}
