//! Applying entries another member wrote ([`Store::apply`](super::Store::apply)): each entry is
//! stored verbatim and its effect written idempotently — documents by `_id`, collection creates
//! and drops, index builds and drops, and the bookkeeping records riding on the entry.

use std::sync::Arc;

use bson::{Bson, Document, RawDocument, Uuid};
use bytes::Bytes;
use shoal_proto::Namespace;

use super::local_catalog::CollectionInfo;
use super::oplog::{self, EntryView, OpKind};
use super::{WriteTxn, indexes, keys, oplog_size};
use crate::storage::{Space, StorageError};

impl WriteTxn<'_> {
    /// Stores one entry another member wrote and applies its effect (see [`Store::apply`]).
    pub(super) fn apply_entry(&mut self, raw: &Bytes) -> Result<(), StorageError> {
        let doc = RawDocument::from_bytes(raw)
            .map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
        let entry = EntryView::parse(doc)?;
        let corrupt =
            |what: &str| StorageError::Corrupt { space: "oplog", detail: format!("{} entry: {what}", entry.op) };
        let ts = entry.optime.timestamp();
        let key = keys::oplog_key(ts);
        self.staged_oplog_bytes += oplog_size::entry_bytes(&key, raw);
        self.batch.put(Space::Oplog, key.to_vec(), raw.clone());
        self.staged_tail.push((ts, raw.clone()));
        self.writer.clock.observe(ts);
        self.writer.last = self.writer.last.max(entry.optime);
        let coll = entry.uuid.and_then(|u| self.collection_by_uuid(u));
        match (entry.op, coll) {
            ("i" | "u", Some(coll)) => {
                let id_source = if entry.op == "u" { entry.o2.unwrap_or(entry.o) } else { entry.o };
                let id = id_source.get("_id").ok().flatten().ok_or_else(|| corrupt("no _id"))?;
                let id = Bson::try_from(id).map_err(|e| corrupt(&e.to_string()))?;
                self.put_document(&coll, &id, entry.o, OpKind::Update)?;
            }
            ("d", Some(coll)) => {
                let id = entry.o.get("_id").ok().flatten().ok_or_else(|| corrupt("no _id"))?;
                let id = Bson::try_from(id).map_err(|e| corrupt(&e.to_string()))?;
                self.delete(&coll, &id)?;
            }
            ("c", coll) => self.apply_command(&entry, coll)?,
            ("i" | "u" | "d", None) => {
                tracing::debug!(ns = entry.ns, optime = %entry.optime, "entry of an unknown collection skipped");
            }
            _ => {}
        }
        for (key, value) in oplog::meta_writes(doc)? {
            match value {
                Some(v) => self.batch.put(Space::Meta, key, v),
                None => self.batch.delete(Space::Meta, key),
            }
        }
        self.flush_if_large()
    }

    fn apply_command(&mut self, entry: &EntryView<'_>, coll: Option<Arc<CollectionInfo>>) -> Result<(), StorageError> {
        let db = entry.ns.strip_suffix(".$cmd").unwrap_or(entry.ns);
        let corrupt = |what: &str| StorageError::Corrupt { space: "oplog", detail: format!("command entry: {what}") };
        if let Ok(name) = entry.o.get_str("create") {
            let ns = Namespace::new(db, name).map_err(|e| corrupt(&e.to_string()))?;
            let uuid = entry.uuid.ok_or_else(|| corrupt("create without ui"))?;
            match self.collection(&ns.to_string()) {
                Some(existing) if existing.uuid == uuid => {}
                Some(existing) => {
                    // A collection of the same name from before: it was dropped on the primary.
                    self.drop_collection(&existing)?;
                    self.create_recorded(&ns, uuid, entry.o)?;
                }
                None => self.create_recorded(&ns, uuid, entry.o)?,
            }
        } else if entry.o.get_str("drop").is_ok()
            && let Some(coll) = coll
        {
            self.drop_collection(&coll)?;
        } else if entry.o.get_str("createIndexes").is_ok()
            && let Some(coll) = coll
        {
            let mut spec = Document::try_from(entry.o).map_err(|e| corrupt(&e.to_string()))?;
            spec.remove("createIndexes");
            let spec = indexes::IndexSpec::from_user(&spec).map_err(|e| corrupt(&e.message))?;
            self.create_index_now(&coll, spec)?;
        } else if entry.o.get_str("collMod").is_ok()
            && let Some(coll) = coll
        {
            let index = entry.o.get_document("index").map_err(|e| corrupt(&e.to_string()))?;
            let name = index.get_str("name").map_err(|e| corrupt(&e.to_string()))?;
            let hidden = index.get_bool("hidden").ok();
            let expire = index.get_i64("expireAfterSeconds").ok();
            self.modify_index(&coll, name, hidden, expire)?;
        } else if entry.o.get_str("dropIndexes").is_ok()
            && let Some(coll) = coll
        {
            let name = entry.o.get_str("index").map_err(|e| corrupt(&e.to_string()))?;
            self.drop_index(&coll, name, false)?;
        }
        Ok(())
    }

    fn create_recorded(&mut self, ns: &Namespace, uuid: Uuid, o: &RawDocument) -> Result<(), StorageError> {
        let mut options =
            Document::try_from(o).map_err(|e| StorageError::Corrupt { space: "oplog", detail: e.to_string() })?;
        options.remove("create");
        self.create_collection(ns, uuid, options).map(|_| ())
    }
}
