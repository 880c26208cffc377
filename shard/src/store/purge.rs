//! Background deletion of what drops left behind: documents of dropped collections and entries
//! of dropped indexes, found through their markers in Meta, in bounded batches.

use std::ops::Bound;

use super::{DROP_DELETE_BATCH_KEYS, Store, keys};
use crate::storage::{Space, StorageError, WriteBatch, prefix_upper_bound};

impl Store {
    /// Deletes the documents of collections and the entries of indexes dropped earlier, in
    /// bounded batches. Returns how many keys it deleted; run it until it returns 0.
    pub fn purge_dropped(&self) -> Result<usize, StorageError> {
        let documents = self.purge_marked(keys::DROPPED_PREFIX, Space::Documents)?;
        if documents > 0 {
            return Ok(documents);
        }
        self.purge_marked(keys::DROPPED_INDEX_PREFIX, Space::Indexes)
    }

    /// One batch of deletions for the first marker under `marker_prefix` (its 8-byte suffix is
    /// the key prefix of what to delete in `space`); the marker goes with the last batch.
    fn purge_marked(&self, marker_prefix: &[u8], space: Space) -> Result<usize, StorageError> {
        let upper = prefix_upper_bound(marker_prefix);
        let first = self
            .engine
            .scan(
                Space::Meta,
                Bound::Included(marker_prefix),
                upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                false,
            )
            .next();
        let Some(kv) = first else { return Ok(0) };
        let (marker, _) = kv?;
        let Ok(prefix) = <[u8; 8]>::try_from(&marker[marker_prefix.len()..]) else {
            return Err(StorageError::Corrupt { space: "meta", detail: "dropped-collection marker".into() });
        };
        let upper = prefix_upper_bound(&prefix);
        let mut batch = WriteBatch::new();
        for kv in self
            .engine
            .scan(
                space,
                Bound::Included(&prefix[..]),
                upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                false,
            )
            .take(DROP_DELETE_BATCH_KEYS)
        {
            batch.delete(space, kv?.0);
        }
        let deleted = batch.len();
        if deleted < DROP_DELETE_BATCH_KEYS {
            batch.delete(Space::Meta, marker);
        }
        self.engine.commit(batch)?;
        Ok(deleted.max(1))
    }
}
