//! openraft's [`RaftLogStorage`] on the fjall store ([`RaftDb`]): entries keyed by big-endian index
//! in keyspace `log`, vote / committed / last-purged in `meta`.
//!
//! Contract kept (openraft storage v2):
//! - `append` commits the batch before returning, so the entries are readable at once; the
//!   `IOFlushed` callback fires after the group fsync that covers them.
//! - `save_vote` returns only after the journal is fsync'd.
//! - No holes: truncation removes a suffix, purge a prefix (with `last_purged` in the same batch).
//! - All writes are serialized: openraft awaits each call, and each call awaits its write.
//!
//! Every fjall call runs on the blocking pool (`spawn_blocking`), never on an async worker.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::OptionalSend;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};

use super::store::{META_COMMITTED, META_LAST_PURGED, META_VOTE, RaftDb, fjall_err};
use super::types::{Entry, LogId, TypeConfig, Vote};
use crate::codec;

/// Most entries one `limited_get_log_entries` returns, to keep an AppendEntries message well
/// under the 64 MiB gRPC limit.
const READ_ENTRIES_MAX: usize = 2048;
/// Most bytes of encoded entries one `limited_get_log_entries` returns.
const READ_BYTES_MAX: usize = 16 << 20;

#[derive(Clone)]
pub struct LogStore {
    db: Arc<RaftDb>,
}

impl LogStore {
    pub fn new(db: Arc<RaftDb>) -> Self {
        Self { db }
    }
}

/// Runs blocking storage work off the async workers.
pub(crate) async fn blocking<T, F>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| io::Error::other(format!("storage task failed: {e}")))?
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> io::Result<u64> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("log key of {} bytes", key.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

fn get_meta<T: serde::de::DeserializeOwned>(db: &RaftDb, key: &[u8]) -> io::Result<Option<T>> {
    match db.meta.get(key).map_err(fjall_err)? {
        Some(v) => Ok(Some(codec::decode(&v)?)),
        None => Ok(None),
    }
}

/// Reads entries with index in `[start, end)` in order, stopping early at `max_entries` /
/// `max_bytes` (at least one entry is returned if any exists). Fails on a hole.
fn read_range(db: &RaftDb, start: u64, end: u64, max_entries: usize, max_bytes: usize) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    if start >= end {
        return Ok(out);
    }
    let mut bytes = 0usize;
    let mut expect = None::<u64>;
    for item in db.log.range(index_key(start)..index_key(end)) {
        let (key, value) = item.into_inner().map_err(fjall_err)?;
        let index = key_index(&key)?;
        if let Some(want) = expect
            && index != want
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("hole in the raft log: expected index {want}, found {index}"),
            ));
        }
        let entry: Entry = codec::decode(&value)?;
        if entry.index() != index {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("raft log entry under key {index} has index {}", entry.index()),
            ));
        }
        bytes += value.len();
        out.push(entry);
        expect = Some(index + 1);
        if out.len() >= max_entries || bytes >= max_bytes {
            break;
        }
    }
    Ok(out)
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (start, end) = bounds(&range);
        let db = Arc::clone(&self.db);
        blocking(move || read_range(&db, start, end, usize::MAX, usize::MAX)).await
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || read_range(&db, start, end, READ_ENTRIES_MAX, READ_BYTES_MAX)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || get_meta(&db, META_VOTE)).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || {
            let last_purged: Option<LogId> = get_meta(&db, META_LAST_PURGED)?;
            let last = match db.log.last_key_value() {
                Some(guard) => {
                    let (_, value) = guard.into_inner().map_err(fjall_err)?;
                    let entry: Entry = codec::decode(&value)?;
                    Some(entry.log_id())
                }
                None => None,
            };
            Ok(LogState { last_log_id: last.or(last_purged), last_purged_log_id: last_purged })
        })
        .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let value = codec::encode(vote)?;
        let db = Arc::clone(&self.db);
        blocking(move || {
            let mut batch = db.batch();
            batch.insert(&db.meta, META_VOTE, value);
            batch.commit().map_err(fjall_err)?;
            db.sync_now()
        })
        .await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let value = codec::encode(&committed)?;
        let db = Arc::clone(&self.db);
        // Not synced: a lost `committed` only means re-applying from the snapshot on restart.
        blocking(move || {
            let mut batch = db.batch();
            batch.insert(&db.meta, META_COMMITTED, value);
            batch.commit().map_err(fjall_err)
        })
        .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || Ok(get_meta::<Option<LogId>>(&db, META_COMMITTED)?.flatten())).await
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut encoded = Vec::new();
        for entry in entries {
            encoded.push((index_key(entry.index()), codec::encode(&entry)?));
        }
        let db = Arc::clone(&self.db);
        blocking(move || {
            let mut batch = db.batch();
            for (key, value) in encoded {
                batch.insert(&db.log, key, value);
            }
            batch.commit().map_err(fjall_err)?;
            // Readable now; durable once the syncer's next fsync completes.
            db.flush_later(callback);
            Ok(())
        })
        .await
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.as_ref().map_or(0, |id| id.index() + 1);
        tracing::debug!(from, "truncating raft log");
        let db = Arc::clone(&self.db);
        blocking(move || {
            let mut batch = db.batch();
            for item in db.log.range(index_key(from)..) {
                let key = item.key().map_err(fjall_err)?;
                batch.remove(&db.log, key);
            }
            batch.commit().map_err(fjall_err)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        tracing::debug!(upto = log_id.index(), "purging raft log");
        let value = codec::encode(&log_id)?;
        let db = Arc::clone(&self.db);
        blocking(move || {
            // `last_purged` and the removals in one batch: never a state where entries are gone
            // but the log state still claims them.
            let mut batch = db.batch();
            batch.insert(&db.meta, META_LAST_PURGED, value);
            for item in db.log.range(..=index_key(log_id.index())) {
                let key = item.key().map_err(fjall_err)?;
                batch.remove(&db.log, key);
            }
            batch.commit().map_err(fjall_err)
        })
        .await
    }
}
