//! [`Engine`] on fjall: one LSM keyspace per [`Space`], all sharing fjall's single journal, so a
//! cross-space batch is one atomic journal record.
//!
//! Batches are committed with `PersistMode::Buffer` (written to the OS, survives kill -9); durability
//! against power loss is [`Engine::sync`], which [`super::GroupCommit`] calls once per group.

use std::ops::Bound;
use std::path::Path;

use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{Engine, KvIter, Space, StorageError, WriteBatch};

pub struct FjallEngine {
    db: Database,
    spaces: [Keyspace; 4],
}

fn engine_err(e: fjall::Error) -> StorageError {
    StorageError::Engine(e.to_string())
}

impl FjallEngine {
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Self, StorageError> {
        std::fs::create_dir_all(path)?;
        let db = Database::builder(path).cache_size(cache_bytes).open().map_err(engine_err)?;
        let open = |s: Space| db.keyspace(s.name(), KeyspaceCreateOptions::default).map_err(engine_err);
        let spaces = [open(Space::Documents)?, open(Space::Indexes)?, open(Space::Oplog)?, open(Space::Meta)?];
        Ok(Self { db, spaces })
    }

    fn ks(&self, space: Space) -> &Keyspace {
        match space {
            Space::Documents => &self.spaces[0],
            Space::Indexes => &self.spaces[1],
            Space::Oplog => &self.spaces[2],
            Space::Meta => &self.spaces[3],
        }
    }
}

fn owned(bound: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(b) => Bound::Included(b.to_vec()),
        Bound::Excluded(b) => Bound::Excluded(b.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Engine for FjallEngine {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>, StorageError> {
        Ok(self.ks(space).get(key).map_err(engine_err)?.map(Bytes::from))
    }

    fn scan(&self, space: Space, lower: Bound<&[u8]>, upper: Bound<&[u8]>, reverse: bool) -> KvIter<'static> {
        let iter = self.ks(space).range::<Vec<u8>, _>((owned(lower), owned(upper)));
        let map = |g: fjall::Guard| g.into_inner().map(|(k, v)| (Bytes::from(k), Bytes::from(v))).map_err(engine_err);
        if reverse { Box::new(iter.rev().map(map)) } else { Box::new(iter.map(map)) }
    }

    fn commit(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let mut b = self.db.batch().durability(Some(PersistMode::Buffer));
        for (space, key, value) in batch.ops {
            match value {
                Some(v) => b.insert(self.ks(space), key, v),
                None => b.remove(self.ks(space), key),
            }
        }
        b.commit().map_err(engine_err)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.db.persist(PersistMode::SyncData).map_err(engine_err)
    }

    fn disk_space_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_atomic_across_spaces_and_scans_in_order() -> Result<(), StorageError> {
        let dir = tempfile::tempdir()?;
        let engine = FjallEngine::open(dir.path(), 8 << 20)?;
        let mut batch = WriteBatch::new();
        for k in [3u8, 1, 2] {
            batch.put(Space::Documents, vec![k], vec![k * 10]);
        }
        batch.put(Space::Oplog, vec![9], vec![1]);
        engine.commit(batch)?;
        engine.sync()?;
        let keys: Vec<_> = engine
            .scan(Space::Documents, Bound::Included(&[1u8][..]), Bound::Unbounded, false)
            .map(|kv| kv.map(|(k, _)| k[0]))
            .collect::<Result<_, _>>()?;
        assert_eq!(keys, vec![1, 2, 3]);
        let rev: Vec<_> = engine
            .scan(Space::Documents, Bound::Unbounded, Bound::Excluded(&[3u8][..]), true)
            .map(|kv| kv.map(|(k, _)| k[0]))
            .collect::<Result<_, _>>()?;
        assert_eq!(rev, vec![2, 1]);
        assert_eq!(engine.get(Space::Oplog, &[9])?.as_deref(), Some(&[1u8][..]));
        Ok(())
    }
}
