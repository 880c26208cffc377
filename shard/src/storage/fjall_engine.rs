//! [`Engine`] on fjall: one LSM keyspace per [`Space`], all sharing fjall's single journal, so a
//! cross-space batch is one atomic journal record.
//!
//! Batches are committed with `PersistMode::Buffer` (written to the OS, survives kill -9); durability
//! against power loss is [`Engine::sync`], which [`super::GroupCommit`] calls once per group.
//!
//! `documents` and `oplog` separate keys from large values ([`create_options`]): a value of at least
//! [`SEPARATION_THRESHOLD`] bytes is written once to a blob file and the LSM carries only a pointer
//! to it, so leveled compaction rewrites keys, not documents. The setting is stored with each
//! keyspace when it is created; a database created before it keeps its keyspaces as they were.
//!
//! The sync is an `fdatasync` of the active journal file through a descriptor of our own, not
//! fjall's `Database::persist`: that holds the journal's writer lock for the whole `fdatasync`, so
//! every commit — every writer of the shard — waited for each sync to end (a load's profile showed
//! writers parked on it). Correct because each commit has already written its bytes to the OS
//! (`Buffer`), fjall syncs a journal fully before it seals it and starts the next (`rotate`), and
//! the active journal is the highest-numbered `N.jnl` in the database folder: a sync that finds
//! journal N covers every batch committed before it started, in N or in the sealed ones before it.

use std::fs::File;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode};

use super::{Engine, KvIter, Space, StorageError, WriteBatch};

pub struct FjallEngine {
    db: Database,
    spaces: [Keyspace; 4],
    /// The database folder, where the journals are.
    path: PathBuf,
    /// The active journal's number and a descriptor of it, for [`Engine::sync`] (only the
    /// group-commit syncer calls it; the lock is never contended).
    journal: Mutex<Option<(u64, File)>>,
}

/// Values at least this long go to blob files in the spaces that separate them: a document of a
/// few hundred bytes stays inline (one read, no indirection), a YCSB record of 10 × 100 B and its
/// oplog entry (~1.2 KB each) do not.
const SEPARATION_THRESHOLD: u32 = 1024;

/// How a keyspace is created: documents and oplog entries with their large values in blob files
/// (both are written once and then read or deleted whole; the oplog is deleted in order, so its
/// blob files empty out and go without being rewritten), index entries and metadata inline.
fn create_options(space: Space) -> KeyspaceCreateOptions {
    match space {
        Space::Documents | Space::Oplog => KeyspaceCreateOptions::default()
            .with_kv_separation(Some(KvSeparationOptions::default().separation_threshold(SEPARATION_THRESHOLD))),
        Space::Indexes | Space::Meta => KeyspaceCreateOptions::default(),
    }
}

fn engine_err(e: fjall::Error) -> StorageError {
    StorageError::Engine(e.to_string())
}

impl FjallEngine {
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Self, StorageError> {
        std::fs::create_dir_all(path)?;
        let db = Database::builder(path).cache_size(cache_bytes).open().map_err(engine_err)?;
        let open = |s: Space| db.keyspace(s.name(), || create_options(s)).map_err(engine_err);
        let spaces = [open(Space::Documents)?, open(Space::Indexes)?, open(Space::Oplog)?, open(Space::Meta)?];
        Ok(Self { db, spaces, path: path.to_path_buf(), journal: Mutex::new(None) })
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
        let Some(n) = active_journal(&self.path)? else {
            // No journal file found where fjall keeps them: let fjall sync (holding its lock).
            return self.db.persist(PersistMode::SyncData).map_err(engine_err);
        };
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if journal.as_ref().is_none_or(|(open, _)| *open != n) {
            *journal = Some((n, File::open(self.path.join(format!("{n}.jnl")))?));
        }
        if let Some((_, file)) = journal.as_ref() {
            file.sync_data()?;
        }
        Ok(())
    }

    fn disk_space_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }
}

/// The number of the active journal: the highest `N` of the `N.jnl` files in `dir`.
fn active_journal(dir: &Path) -> Result<Option<u64>, StorageError> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(n) = name.to_str().and_then(|n| n.strip_suffix(".jnl")).and_then(|n| n.parse::<u64>().ok()) {
            newest = newest.max(Some(n));
        }
    }
    Ok(newest)
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

    /// Commits `(space, key, value)` puts in one batch.
    fn commit_puts(
        engine: &FjallEngine,
        puts: impl IntoIterator<Item = (Space, u32, Vec<u8>)>,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::new();
        for (space, key, value) in puts {
            batch.put(space, key.to_be_bytes().to_vec(), value);
        }
        engine.commit(batch)
    }

    /// Commits deletes of `keys` in `space` in one batch.
    fn commit_deletes(
        engine: &FjallEngine,
        space: Space,
        keys: impl IntoIterator<Item = u32>,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::new();
        for key in keys {
            batch.delete(space, key.to_be_bytes().to_vec());
        }
        engine.commit(batch)
    }

    #[test]
    fn separated_values_survive_flush_and_reopen() -> Result<(), StorageError> {
        let dir = tempfile::tempdir()?;
        let value = |k: u32| -> Vec<u8> {
            let len = if k.is_multiple_of(2) { SEPARATION_THRESHOLD as usize * 2 } else { 100 };
            (0..len).map(|i| (k as usize + i) as u8).collect()
        };
        {
            let engine = FjallEngine::open(dir.path(), 8 << 20)?;
            commit_puts(&engine, (0..500u32).flat_map(|k| [Space::Documents, Space::Oplog].map(|s| (s, k, value(k)))))?;
            for space in [Space::Documents, Space::Oplog] {
                engine.ks(space).rotate_memtable_and_wait().map_err(engine_err)?;
            }
            commit_deletes(&engine, Space::Oplog, (0..500u32).step_by(5))?;
            engine.sync()?;
        }
        let engine = FjallEngine::open(dir.path(), 8 << 20)?;
        for space in [Space::Documents, Space::Oplog] {
            assert!(engine.ks(space).blob_file_count() > 0, "{} wrote no blob file", space.name());
        }
        for k in 0..500u32 {
            assert_eq!(engine.get(Space::Documents, &k.to_be_bytes())?.as_deref(), Some(&value(k)[..]));
            let oplog = engine.get(Space::Oplog, &k.to_be_bytes())?;
            assert_eq!(oplog.as_deref(), (!k.is_multiple_of(5)).then(|| value(k)).as_deref());
        }
        let scanned = engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, false).count();
        assert_eq!(scanned, 400);
        Ok(())
    }

    /// The oplog is deleted from its old end: once compaction has seen the deletes, the blob
    /// files that held the deleted entries go (no rewrite, no space kept for dead values).
    #[test]
    fn deleted_separated_values_give_their_blob_files_back() -> Result<(), StorageError> {
        let dir = tempfile::tempdir()?;
        let engine = FjallEngine::open(dir.path(), 8 << 20)?;
        let oplog = engine.ks(Space::Oplog);
        let value = vec![7u8; SEPARATION_THRESHOLD as usize * 4];
        for round in 0..4u32 {
            commit_puts(&engine, (0..256u32).map(|k| (Space::Oplog, round * 256 + k, value.clone())))?;
            oplog.rotate_memtable_and_wait().map_err(engine_err)?;
        }
        let full = oplog.blob_file_count();
        assert!(full >= 4, "one blob file per flush at least, found {full}");
        commit_deletes(&engine, Space::Oplog, 0..3 * 256u32)?;
        oplog.rotate_memtable_and_wait().map_err(engine_err)?;
        // The first compaction finds the values dead; lsm-tree drops a blob file whose values all
        // are at its next compaction (a running shard compacts continually).
        oplog.major_compact().map_err(engine_err)?;
        oplog.major_compact().map_err(engine_err)?;
        let left = oplog.blob_file_count();
        assert!(left < full, "no blob file dropped after deleting three quarters: {left} of {full}");
        let remaining = engine.scan(Space::Oplog, Bound::Unbounded, Bound::Unbounded, false).count();
        assert_eq!(remaining, 256);
        Ok(())
    }

    #[test]
    fn the_active_journal_is_the_highest_numbered() -> Result<(), StorageError> {
        let dir = tempfile::tempdir()?;
        assert_eq!(active_journal(dir.path())?, None);
        for name in ["0.jnl", "12.jnl", "3.jnl", "x.jnl", "40.jnl.tmp", "99"] {
            std::fs::write(dir.path().join(name), b"")?;
        }
        assert_eq!(active_journal(dir.path())?, Some(12));
        Ok(())
    }

    #[test]
    fn sync_follows_fjall_to_its_next_journal() -> Result<(), StorageError> {
        let dir = tempfile::tempdir()?;
        let engine = FjallEngine::open(dir.path(), 8 << 20)?;
        let first = active_journal(dir.path())?.expect("fjall keeps its journals in the database folder");
        let mut batch = WriteBatch::new();
        batch.put(Space::Documents, vec![1], vec![1]);
        engine.commit(batch)?;
        engine.sync()?;
        assert_eq!(engine.journal.lock().expect("lock").as_ref().map(|(n, _)| *n), Some(first));
        // fjall seals a journal past 64 MB at its next memtable flush (syncing it) and opens the
        // next one; the sync must follow.
        // Incompressible values (the journal compresses large ones).
        for k in 0..66u32 {
            let mut value = vec![0u8; 1 << 20];
            rand::Rng::fill(&mut rand::rng(), &mut value[..]);
            let mut batch = WriteBatch::new();
            batch.put(Space::Documents, k.to_be_bytes().to_vec(), value);
            engine.commit(batch)?;
        }
        engine.ks(Space::Documents).rotate_memtable_and_wait().map_err(engine_err)?;
        let mut batch = WriteBatch::new();
        batch.put(Space::Documents, vec![2], vec![2]);
        engine.commit(batch)?;
        engine.sync()?;
        let now = active_journal(dir.path())?;
        assert!(now > Some(first), "no new journal after a rotation: {now:?}");
        assert_eq!(engine.journal.lock().expect("lock").as_ref().map(|(n, _)| *n), now);
        Ok(())
    }
}
