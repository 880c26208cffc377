//! Keeping secondary indexes in step with documents inside a [`WriteTxn`], and the catalog
//! changes of index builds and drops.
//!
//! Every document write first computes the entries its old and new versions have in each index
//! of the collection (as the catalog has it *now*, not as the caller's possibly older
//! `CollectionInfo` had it: an index created between a command's lookup and its write is still
//! maintained) and checks unique indexes *before* staging anything, so a refused write leaves no
//! trace. Writes replicated from the primary skip the checks (the primary made them).
//!
//! Builds ([`crate::exec::index_build`] drives them): a spec is added `building` (local, not
//! logged), existing documents are indexed in bounded batches while writes continue (each write
//! maintains building indexes too), and the commit logs one `createIndexes` command entry;
//! members apply it by building the index on their data in one pass. Drops log `dropIndexes`.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document, RawDocument, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;

use super::indexes::{Entry, IndexSpec};
use super::local_catalog::CollectionInfo;
use super::{CatalogChange, WriteTxn, bson_bytes, keys};

/// An index's specification before and after a change.
pub type IndexChange = (Arc<IndexSpec>, Arc<IndexSpec>);
use crate::storage::{Space, StorageError, prefix_upper_bound};

fn decode(raw: &[u8]) -> Result<Document, StorageError> {
    Document::from_reader(&mut &raw[..])
        .map_err(|e| StorageError::Corrupt { space: "documents", detail: e.to_string() })
}

impl WriteTxn<'_> {
    /// The collection as the catalog has it now (this transaction's own changes included).
    pub(super) fn current_collection(&mut self, coll: &CollectionInfo) -> Option<Arc<CollectionInfo>> {
        if let Some(c) = self.current.get(&coll.id) {
            return Some(Arc::clone(c));
        }
        let found = self.collection(&coll.full_name()).filter(|c| c.id == coll.id)?;
        self.current.insert(coll.id, Arc::clone(&found));
        Some(found)
    }

    /// Stages the index changes of `_id` `id` becoming `new` (`None`: deleted). Fails with
    /// [`StorageError::Rejected`] (nothing staged) when a unique index already holds a new key
    /// for another document, or the document cannot be indexed.
    pub(super) fn maintain_indexes(
        &mut self,
        coll: &CollectionInfo,
        id: &Bson,
        new: Option<&RawDocument>,
        old_absent: bool,
    ) -> Result<(), StorageError> {
        let Some(current) = self.current_collection(coll) else { return Ok(()) };
        if current.indexes.is_empty() {
            return Ok(());
        }
        let old = match if old_absent { None } else { self.get(coll, id)? } {
            Some(raw) => Some(decode(&raw)?),
            None => None,
        };
        let new = match new {
            Some(raw) => Some(decode(raw.as_bytes())?),
            None => None,
        };
        // (entry, whether its index is unique: only those are staged for later unique checks).
        let mut puts: Vec<(Entry, bool)> = Vec::new();
        let mut deletes: Vec<(Vec<u8>, bool)> = Vec::new();
        let mut now_multikey: Vec<String> = Vec::new();
        for spec in &current.indexes {
            // An old version that cannot be indexed (stored before the index existed) has no
            // entries in it.
            let old_entries = match &old {
                Some(d) => spec.entries(id, d).map(|(e, _)| e).unwrap_or_default(),
                None => Vec::new(),
            };
            let (new_entries, multikey) = match &new {
                Some(d) => match spec.entries(id, d) {
                    Ok(x) => x,
                    Err(_) if self.replicating => (Vec::new(), false),
                    Err(e) => return Err(StorageError::Rejected { code: e.code, message: e.message, info: None }),
                },
                None => (Vec::new(), false),
            };
            if !old_entries.is_empty() {
                let new_keys: HashSet<&[u8]> = new_entries.iter().map(|e| e.key.as_slice()).collect();
                for e in &old_entries {
                    if !new_keys.contains(e.key.as_slice()) {
                        deletes.push((e.key.clone(), spec.unique));
                    }
                }
            }
            let old_keys: HashSet<&[u8]> = old_entries.iter().map(|e| e.key.as_slice()).collect();
            for e in new_entries {
                if old_keys.contains(e.key.as_slice()) {
                    continue;
                }
                if spec.unique && !self.replicating && self.unique_conflict(e.prefix(), &e.key[e.key_len..])? {
                    return Err(duplicate_key(&current, spec, &e.values));
                }
                puts.push((e, spec.unique));
            }
            if multikey && !spec.multikey {
                now_multikey.push(spec.name.clone());
            }
        }
        for (key, unique) in deletes {
            if unique {
                self.staged_index.insert(key.clone(), None);
            }
            self.batch.delete(Space::Indexes, key);
        }
        for (e, unique) in puts {
            let value = Bytes::from(bson_bytes(&e.value)?);
            if unique {
                self.staged_index.insert(e.key.clone(), Some(value.clone()));
            }
            self.batch.put(Space::Indexes, e.key, value);
        }
        if !now_multikey.is_empty() {
            let mut info = (*current).clone();
            info.indexes = info
                .indexes
                .iter()
                .map(|s| {
                    if now_multikey.contains(&s.name) {
                        let mut s = (**s).clone();
                        s.multikey = true;
                        Arc::new(s)
                    } else {
                        Arc::clone(s)
                    }
                })
                .collect();
            self.replace_collection(info)?;
        }
        Ok(())
    }

    /// Whether an entry of another document lies under `prefix` (`ident ‖ key`), as this
    /// transaction sees the index (entries of unique indexes are staged for this).
    fn unique_conflict(&self, prefix: &[u8], own_id: &[u8]) -> Result<bool, StorageError> {
        let upper = prefix_upper_bound(prefix);
        let upper_bound = upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        for kv in self.store.engine.scan(Space::Indexes, Bound::Included(prefix), upper_bound, false) {
            let (key, _) = kv?;
            if key[prefix.len()..] == *own_id || matches!(self.staged_index.get(key.as_ref()), Some(None)) {
                continue;
            }
            return Ok(true);
        }
        let staged = self.staged_index.range::<[u8], _>((Bound::Included(prefix), upper_bound));
        Ok(staged.into_iter().any(|(k, v)| v.is_some() && k[prefix.len()..] != *own_id))
    }

    /// Writes a new version of a collection's catalog record (unlogged: callers log what
    /// members need) and makes it current for this transaction.
    pub(super) fn replace_collection(&mut self, info: CollectionInfo) -> Result<Arc<CollectionInfo>, StorageError> {
        let info = Arc::new(info);
        let record = bson_bytes(&info.to_record())?;
        self.batch.put(Space::Meta, keys::collection_record_key(&info.full_name()), record);
        self.catalog_changes.push(CatalogChange::Created(Arc::clone(&info)));
        self.current.insert(info.id, Arc::clone(&info));
        Ok(info)
    }

    fn next_ident(&mut self) -> u64 {
        let mut cat = self.store.catalog.write().unwrap_or_else(|p| p.into_inner());
        let id = cat.next_id;
        cat.next_id += 1;
        id
    }

    /// Adds `spec` to the collection as a building index (local: not logged). Returns it with
    /// its ident.
    pub fn begin_index_build(
        &mut self,
        coll: &CollectionInfo,
        mut spec: IndexSpec,
    ) -> Result<Arc<IndexSpec>, StorageError> {
        let Some(current) = self.current_collection(coll) else {
            return Err(StorageError::Rejected {
                code: ErrorCode::NamespaceNotFound,
                message: format!("collection {} was dropped while its index was being built", coll.full_name()),
                info: None,
            });
        };
        spec.ident = self.next_ident();
        spec.building = true;
        spec.multikey = false;
        let spec = Arc::new(spec);
        let mut info = (*current).clone();
        info.indexes.push(Arc::clone(&spec));
        self.replace_collection(info)?;
        Ok(spec)
    }

    /// Indexes the current versions of the documents with these `_id`s in the building index
    /// `ident` (documents deleted meanwhile are skipped; ones written meanwhile already are).
    pub fn index_existing(&mut self, coll: &CollectionInfo, ident: u64, ids: &[Bson]) -> Result<(), StorageError> {
        let Some(current) = self.current_collection(coll) else { return Ok(()) };
        let Some(spec) = current.indexes.iter().find(|s| s.ident == ident).cloned() else {
            return Ok(());
        };
        let mut multikey = false;
        for id in ids {
            let Some(raw) = self.get(coll, id)? else { continue };
            let doc = decode(&raw)?;
            let (entries, mk) = match spec.entries(id, &doc) {
                Ok(x) => x,
                Err(_) if self.replicating => continue,
                Err(e) => return Err(StorageError::Rejected { code: e.code, message: e.message, info: None }),
            };
            multikey |= mk;
            for e in entries {
                if spec.unique && !self.replicating && self.unique_conflict(e.prefix(), &e.key[e.key_len..])? {
                    return Err(duplicate_key(&current, &spec, &e.values));
                }
                let value = Bytes::from(bson_bytes(&e.value)?);
                if spec.unique {
                    self.staged_index.insert(e.key.clone(), Some(value.clone()));
                }
                self.batch.put(Space::Indexes, e.key, value);
            }
            self.flush_if_large()?;
        }
        if multikey && !spec.multikey {
            self.set_index_state(coll, &spec.name, |s| s.multikey = true)?;
        }
        Ok(())
    }

    /// Marks a built index ready and logs its `createIndexes` entry.
    /// Creates each of `specs` the collection lacks ([`WriteTxn::create_index_now`]).
    pub fn ensure_indexes(&mut self, coll: &CollectionInfo, specs: Vec<IndexSpec>) -> Result<(), StorageError> {
        for spec in specs {
            self.create_index_now(coll, spec)?;
        }
        Ok(())
    }

    pub fn commit_index_build(&mut self, coll: &CollectionInfo, name: &str) -> Result<(), StorageError> {
        let Some(spec) = self.set_index_state(coll, name, |s| s.building = false)? else { return Ok(()) };
        let mut o = doc! { "createIndexes": &coll.ns.coll };
        o.extend(spec.listing());
        self.log_command(&coll.ns.db, Some(coll.uuid), &o)
    }

    /// Removes an index (its entries are purged later): `log` a `dropIndexes` entry, or not (an
    /// aborted build nobody else knew of).
    pub fn drop_index(&mut self, coll: &CollectionInfo, name: &str, log: bool) -> Result<bool, StorageError> {
        let Some(current) = self.current_collection(coll) else { return Ok(false) };
        let Some(spec) = current.index(name).cloned() else { return Ok(false) };
        let mut info = (*current).clone();
        info.indexes.retain(|s| s.name != name);
        self.replace_collection(info)?;
        self.batch.put(Space::Meta, keys::dropped_index_key(spec.ident), Bytes::new());
        if log {
            self.log_command(&coll.ns.db, Some(coll.uuid), &doc! { "dropIndexes": &coll.ns.coll, "index": name })?;
        }
        Ok(true)
    }

    /// Creates a ready index and indexes every document now stored (members applying a
    /// `createIndexes` entry, initial sync, migration recipients): one pass under the writer.
    /// An index of that name and definition that exists already is kept; one of another
    /// definition is replaced.
    pub fn create_index_now(&mut self, coll: &CollectionInfo, spec: IndexSpec) -> Result<(), StorageError> {
        if let Some(current) = self.current_collection(coll)
            && let Some(existing) = current.index(&spec.name)
        {
            if existing.same_definition(&spec) && !existing.building {
                return Ok(());
            }
            let name = existing.name.clone();
            self.drop_index(coll, &name, false)?;
        }
        // Documents staged so far must be visible to the scan below.
        self.flush()?;
        let spec = self.begin_index_build(coll, spec)?;
        let mut ids = Vec::new();
        for kv in self.store.scan(coll, Bound::Unbounded, Bound::Unbounded, false) {
            let (_, raw) = kv?;
            let doc = decode(&raw)?;
            if let Some(id) = doc.get("_id") {
                ids.push(id.clone());
            }
            if ids.len() >= 1024 {
                self.index_existing(coll, spec.ident, &std::mem::take(&mut ids))?;
            }
        }
        self.index_existing(coll, spec.ident, &ids)?;
        let Some(spec) = self.set_index_state(coll, &spec.name, |s| s.building = false)? else { return Ok(()) };
        // Logged (a no-op when replicating) so a primary's members build it too.
        let mut o = doc! { "createIndexes": &coll.ns.coll };
        o.extend(spec.listing());
        self.log_command(&coll.ns.db, Some(coll.uuid), &o)
    }

    /// `collMod`'s index change: sets `hidden` and/or `expireAfterSeconds` of index `name` and logs
    /// it (a no-op when replicating, so members apply the same entry). Returns the spec before and
    /// after (`None` if the index is gone).
    pub fn modify_index(
        &mut self,
        coll: &CollectionInfo,
        name: &str,
        hidden: Option<bool>,
        expire_after_secs: Option<i64>,
    ) -> Result<Option<IndexChange>, StorageError> {
        let Some(before) = self.current_collection(coll).and_then(|c| c.index(name).cloned()) else { return Ok(None) };
        let Some(after) = self.set_index_state(coll, name, |s| {
            if let Some(h) = hidden {
                s.hidden = h;
            }
            if let Some(e) = expire_after_secs {
                s.expire_after_secs = Some(e);
            }
        })?
        else {
            return Ok(None);
        };
        let mut index = doc! { "name": name };
        if let Some(h) = hidden {
            index.insert("hidden", h);
        }
        if let Some(e) = expire_after_secs {
            index.insert("expireAfterSeconds", e);
        }
        self.log_command(&coll.ns.db, Some(coll.uuid), &doc! { "collMod": &coll.ns.coll, "index": index })?;
        Ok(Some((before, after)))
    }

    /// Changes one index's local state; returns the changed spec (`None` if it is gone).
    fn set_index_state(
        &mut self,
        coll: &CollectionInfo,
        name: &str,
        change: impl Fn(&mut IndexSpec),
    ) -> Result<Option<Arc<IndexSpec>>, StorageError> {
        let Some(current) = self.current_collection(coll) else { return Ok(None) };
        let mut changed = None;
        let mut info = (*current).clone();
        info.indexes = info
            .indexes
            .iter()
            .map(|s| {
                if s.name == name {
                    let mut s = (**s).clone();
                    change(&mut s);
                    let s = Arc::new(s);
                    changed = Some(Arc::clone(&s));
                    s
                } else {
                    Arc::clone(s)
                }
            })
            .collect();
        if changed.is_some() {
            self.replace_collection(info)?;
        }
        Ok(changed)
    }
}

/// MongoDB's E11000 for a secondary index.
fn duplicate_key(coll: &CollectionInfo, spec: &IndexSpec, key: &[Bson]) -> StorageError {
    let value = spec.key_value(key);
    let shown: Vec<String> = value.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    StorageError::Rejected {
        code: ErrorCode::DuplicateKey,
        message: format!(
            "E11000 duplicate key error collection: {} index: {} dup key: {{ {} }}",
            coll.full_name(),
            spec.name,
            shown.join(", ")
        ),
        info: Some(doc! { "keyPattern": spec.key.clone(), "keyValue": value }),
    }
}
