//! The config server's on-disk store: one fjall database in `<data-dir>/raft`, shared by the Raft
//! log store and the state machine's snapshot, and the journal syncer that makes appends durable.
//!
//! ```text
//!  keyspace  key                      value (JSON unless noted)
//!  log       log index, u64 BE        openraft Entry
//!  meta      "vote"                   Vote            written, then journal fsync'd before return
//!            "committed"              LogId           written lazily (openraft may lose it)
//!            "last_purged"            LogId           written in the same batch as the purge
//!  snapshot  "meta"                   SnapshotMeta    meta + data in one batch, fsync'd
//!            "data"                   catalog bytes
//! ```
//!
//! Every write goes to fjall's single journal with `PersistMode::Buffer` (in the OS page cache, so
//! it survives kill -9); durability against power loss comes from an fdatasync of that journal.
//! Because the journal is sequential, one sync covers every batch written before it started: the
//! [`Syncer`] thread takes all pending append callbacks, syncs once, and acks them all (group
//! commit). The thread is a plain OS thread because an fsync blocks.

use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use openraft::storage::IOFlushed;

use super::types::TypeConfig;

/// fjall's block cache for the config store; the catalog is small and mostly in memory anyway.
const CACHE_SIZE_BYTES: u64 = 32 << 20;

pub(crate) const META_VOTE: &[u8] = b"vote";
pub(crate) const META_COMMITTED: &[u8] = b"committed";
pub(crate) const META_LAST_PURGED: &[u8] = b"last_purged";
pub(crate) const SNAPSHOT_META: &[u8] = b"meta";
pub(crate) const SNAPSHOT_DATA: &[u8] = b"data";

pub struct RaftDb {
    pub(crate) db: Database,
    pub(crate) log: Keyspace,
    pub(crate) meta: Keyspace,
    pub(crate) snapshot: Keyspace,
    syncer: Syncer,
}

pub(crate) fn fjall_err(e: fjall::Error) -> io::Error {
    io::Error::other(format!("fjall: {e}"))
}

impl RaftDb {
    /// Opens (or creates) the store under `dir`. Blocking.
    pub fn open(dir: &Path) -> io::Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let db = Database::builder(dir).cache_size(CACHE_SIZE_BYTES).open().map_err(fjall_err)?;
        let open = |name: &str| db.keyspace(name, KeyspaceCreateOptions::default).map_err(fjall_err);
        let log = open("log")?;
        let meta = open("meta")?;
        let snapshot = open("snapshot")?;
        let syncer = Syncer::start(db.clone())?;
        Ok(Arc::new(Self { db, log, meta, snapshot, syncer }))
    }

    /// Starts a batch that reaches the OS on commit (not yet the disk).
    pub(crate) fn batch(&self) -> fjall::OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::Buffer))
    }

    /// fdatasyncs the journal now, on the calling (blocking) thread.
    pub(crate) fn sync_now(&self) -> io::Result<()> {
        self.db.persist(PersistMode::SyncData).map_err(fjall_err)
    }

    /// Calls `callback` once everything written so far is on disk.
    pub(crate) fn flush_later(&self, callback: IOFlushed<TypeConfig>) {
        self.syncer.enqueue(callback);
    }

    /// Stops the syncer after a final sync that acks every pending callback.
    pub fn shutdown(&self) {
        self.syncer.shutdown();
    }
}

impl Drop for RaftDb {
    fn drop(&mut self) {
        self.syncer.shutdown();
    }
}

struct Syncer {
    shared: Arc<SyncShared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct SyncShared {
    // std Mutex + Condvar: the waiter is an OS thread, never an async task.
    queue: Mutex<SyncQueue>,
    wake: Condvar,
}

#[derive(Default)]
struct SyncQueue {
    pending: Vec<IOFlushed<TypeConfig>>,
    shutdown: bool,
    /// Once a sync fails the journal's state is unknown (the PostgreSQL fsync lesson): every later
    /// callback gets the same error instead of a retried sync that might pretend success.
    failed: Option<String>,
}

impl Syncer {
    fn start(db: Database) -> io::Result<Self> {
        let shared = Arc::new(SyncShared { queue: Mutex::new(SyncQueue::default()), wake: Condvar::new() });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("configsvr-syncer".into())
            .spawn(move || sync_loop(&db, &thread_shared))?;
        Ok(Self { shared, thread: Mutex::new(Some(thread)) })
    }

    fn enqueue(&self, callback: IOFlushed<TypeConfig>) {
        let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(err) = &queue.failed {
            let err = io::Error::other(err.clone());
            drop(queue);
            callback.io_completed(Err(err));
            return;
        }
        queue.pending.push(callback);
        self.shared.wake.notify_one();
    }

    fn shutdown(&self) {
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.shutdown = true;
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

fn sync_loop(db: &Database, shared: &SyncShared) {
    loop {
        let (batch, shutdown) = {
            let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            while queue.pending.is_empty() && !queue.shutdown {
                queue = shared.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
            }
            (std::mem::take(&mut queue.pending), queue.shutdown)
        };
        // Every callback taken above was enqueued after its batch was written, so this sync
        // covers all of them.
        let result = db.persist(PersistMode::SyncData);
        match result {
            Ok(()) => {
                for callback in batch {
                    callback.io_completed(Ok(()));
                }
            }
            Err(e) => {
                let msg = format!("journal sync failed: {e}");
                tracing::error!(error = %msg, "config store journal sync failed; the store is unusable");
                let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
                queue.failed = Some(msg.clone());
                let later = std::mem::take(&mut queue.pending);
                drop(queue);
                for callback in batch.into_iter().chain(later) {
                    callback.io_completed(Err(io::Error::other(msg.clone())));
                }
            }
        }
        if shutdown {
            return;
        }
    }
}
