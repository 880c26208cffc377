//! The storage interface the shard is written against, and its implementations.
//!
//! The trait says nothing about the engine behind it (tikv's `engine_traits` rule): a second
//! engine, or an in-memory one for simulation, must fit. What it promises:
//!
//! - four ordered key spaces ([`Space`]) sharing one journal;
//! - [`Engine::commit`] applies a [`WriteBatch`] atomically across spaces and makes it survive a
//!   crash of the process (not yet of the machine) before it returns;
//! - [`Engine::sync`] makes everything committed so far survive a machine crash; [`GroupCommit`]
//!   shares one `sync` among many waiting writers;
//! - scans return keys in byte order; keys of documents and index entries are order-preserving
//!   encodings (`shoal_query::keystring`), so byte order is BSON order.

mod fjall_engine;
mod group_commit;

use std::ops::Bound;

use bytes::Bytes;

pub use fjall_engine::FjallEngine;
pub use group_commit::GroupCommit;

/// The key spaces of a shard's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// `collection id ‖ keystring(_id)` → BSON document.
    Documents,
    /// Secondary index entries (issue 8).
    Indexes,
    /// `timestamp (u64 BE)` → BSON oplog entry.
    Oplog,
    /// Catalog and bookkeeping records.
    Meta,
}

impl Space {
    pub const ALL: [Space; 4] = [Space::Documents, Space::Indexes, Space::Oplog, Space::Meta];

    pub fn name(self) -> &'static str {
        match self {
            Space::Documents => "documents",
            Space::Indexes => "indexes",
            Space::Oplog => "oplog",
            Space::Meta => "meta",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("storage I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("corrupt record in {space}: {detail}")]
    Corrupt { space: &'static str, detail: String },
    /// Client writes are refused: this member is not the primary (or its lease lapsed).
    #[error("not writable: {reason}")]
    NotWritable { reason: String },
    /// A document write an index refuses (duplicate key, unindexable value); nothing of it was
    /// staged. `info` goes to the write error's `errInfo` (`keyPattern`, `keyValue`).
    #[error("{message}")]
    Rejected { code: shoal_proto::ErrorCode, message: String, info: Option<bson::Document> },
}

/// Writes applied together or not at all.
#[derive(Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<(Space, Bytes, Option<Bytes>)>,
    bytes: usize,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn put(&mut self, space: Space, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len();
        self.ops.push((space, key, Some(value)));
    }
    pub fn delete(&mut self, space: Space, key: impl Into<Bytes>) {
        let key = key.into();
        self.bytes += key.len();
        self.ops.push((space, key, None));
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Approximate payload size, for bounding batches.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }
}

pub type KvIter<'a> = Box<dyn Iterator<Item = Result<(Bytes, Bytes), StorageError>> + Send + 'a>;

pub trait Engine: Send + Sync + 'static {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>, StorageError>;
    /// Key-ordered scan of `[lower, upper]` bounds; `reverse` walks from the upper end.
    fn scan(&self, space: Space, lower: Bound<&[u8]>, upper: Bound<&[u8]>, reverse: bool) -> KvIter<'static>;
    /// Applies `batch` atomically; it survives a process crash once this returns.
    fn commit(&self, batch: WriteBatch) -> Result<(), StorageError>;
    /// Makes every committed batch survive a machine crash (fdatasync of the journal).
    fn sync(&self) -> Result<(), StorageError>;
    /// Bytes on disk, for `listDatabases`/`serverStatus`.
    fn disk_space_bytes(&self) -> u64;
}

/// All keys starting with `prefix`: the bounds of a prefix scan.
pub fn prefix_upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < u8::MAX {
            upper.push(last + 1);
            return Some(upper);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_upper_bound(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_upper_bound(&[1, 255]), Some(vec![2]));
        assert_eq!(prefix_upper_bound(&[255, 255]), None);
    }
}
