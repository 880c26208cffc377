//! openraft's [`RaftStateMachine`]: the [`ClusterCatalog`] in memory, persisted as snapshots.
//!
//! The catalog is one value, so rewriting it on every apply would cost O(catalog) per command.
//! Instead the state machine is transient and the snapshot is persistent (openraft's documented
//! pattern): on restart openraft installs the stored snapshot and re-applies the log up to the
//! saved `committed` id. A snapshot is fsync'd before `build_snapshot` / `install_snapshot`
//! return, because openraft purges the log behind it.
//!
//! Readers (the client API) do not go through openraft: they share [`CatalogState`], read under a
//! short lock, and follow [`CatalogState::subscribe`], a watch of the catalog version that moves
//! after every applied entry.

use std::io;
use std::sync::{Arc, RwLock, RwLockReadGuard, TryLockError};

use bytes::Bytes;
use futures::TryStreamExt;
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use tokio::sync::watch;

use super::log_store::blocking;
use super::store::{RaftDb, SNAPSHOT_DATA, SNAPSHOT_META, fjall_err};
use super::types::{ClusterCatalog, LogId, RaftReply, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};
use crate::codec;

/// What the state machine holds: the catalog and the Raft position it reflects.
#[derive(Default)]
pub struct Applied {
    pub catalog: ClusterCatalog,
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
}

/// The catalog version and the log index it was reached at, as published to watchers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VersionMark {
    pub catalog_version: u64,
    pub applied_index: u64,
    /// Users' and roles' own version: routers reload them only when it moves.
    pub security_version: u64,
}

/// The applied catalog, shared between the state machine (writer) and the API (readers).
pub struct CatalogState {
    // std RwLock: held only for an apply or a clone, never across an await.
    applied: RwLock<Applied>,
    version_tx: watch::Sender<VersionMark>,
}

impl CatalogState {
    fn new() -> Arc<Self> {
        let (version_tx, _) = watch::channel(VersionMark::default());
        Arc::new(Self { applied: RwLock::new(Applied::default()), version_tx })
    }

    /// A read view; keep it short (an apply waits for it).
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A read view if no apply holds the catalog right now, for readers that must not wait (a
    /// metrics scrape).
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, Applied>> {
        match self.applied.try_read() {
            Ok(applied) => Some(applied),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    pub fn mark(&self) -> VersionMark {
        *self.version_tx.borrow()
    }

    /// Follows the catalog version; the receiver sees every change (possibly coalesced).
    pub fn subscribe(&self) -> watch::Receiver<VersionMark> {
        self.version_tx.subscribe()
    }

    fn publish(&self, mark: VersionMark) {
        self.version_tx.send_if_modified(|current| {
            if *current == mark {
                false
            } else {
                *current = mark;
                true
            }
        });
    }
}

fn mark_of(applied: &Applied) -> VersionMark {
    VersionMark {
        catalog_version: super::catalog_api::version(&applied.catalog),
        applied_index: applied.last_applied.as_ref().map_or(0, |id| id.index()),
        security_version: applied.catalog.security().version,
    }
}

#[derive(Clone)]
pub struct StateMachineStore {
    state: Arc<CatalogState>,
    db: Arc<RaftDb>,
}

impl StateMachineStore {
    pub fn new(db: Arc<RaftDb>) -> Self {
        Self { state: CatalogState::new(), db }
    }

    pub fn state(&self) -> Arc<CatalogState> {
        Arc::clone(&self.state)
    }
}

/// Writes meta + data in one batch and fsyncs. Blocking.
fn persist_snapshot(db: &RaftDb, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
    let meta_bytes = codec::encode(meta)?;
    let mut batch = db.batch();
    batch.insert(&db.snapshot, SNAPSHOT_META, meta_bytes);
    batch.insert(&db.snapshot, SNAPSHOT_DATA, data);
    batch.commit().map_err(fjall_err)?;
    db.sync_now()
}

fn load_snapshot(db: &RaftDb) -> io::Result<Option<Snapshot>> {
    let Some(meta) = db.snapshot.get(SNAPSHOT_META).map_err(fjall_err)? else {
        return Ok(None);
    };
    let meta: SnapshotMeta = codec::decode(&meta)?;
    let data = db
        .snapshot
        .get(SNAPSHOT_DATA)
        .map_err(fjall_err)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "snapshot meta without data"))?;
    // Copy out: a fjall slice keeps its whole block alive (fjall README, "Memory usage").
    Ok(Some(Snapshot { meta, snapshot: Bytes::copy_from_slice(&data) }))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = Bytes;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let (catalog, last_log_id, last_membership) = {
            let applied = self.state.read();
            (applied.catalog.clone(), applied.last_applied, applied.last_membership.clone())
        };
        let meta = SnapshotMeta { last_log_id, last_membership };
        let db = Arc::clone(&self.db);
        let snapshot = blocking(move || {
            let data = Bytes::from(codec::encode(&catalog)?);
            persist_snapshot(&db, &meta, &data)?;
            Ok(Snapshot { meta, snapshot: data })
        })
        .await?;
        tracing::info!(
            last_log = ?snapshot.meta.last_log_id.as_ref().map(|id| id.index()),
            bytes = snapshot.snapshot.len(),
            "built catalog snapshot"
        );
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = Bytes;
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.state.read();
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id();
            let (reply, mark) = {
                let mut applied = self.state.applied.write().unwrap_or_else(|p| p.into_inner());
                let outcome = match &entry.payload {
                    EntryPayload::Blank => None,
                    EntryPayload::Normal(req) => Some(applied.catalog.apply(&req.command, req.issued_at_ms)),
                    EntryPayload::Membership(m) => {
                        applied.last_membership = StoredMembership::new(Some(log_id), m.clone());
                        None
                    }
                };
                applied.last_applied = Some(log_id);
                let mark = mark_of(&applied);
                (RaftReply { catalog_version: mark.catalog_version, outcome }, mark)
            };
            // Publish before answering: once a write returns, a watcher already sees its version.
            self.state.publish(mark);
            if let Some(responder) = responder {
                responder.send(reply);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Bytes) -> Result<(), io::Error> {
        let catalog: ClusterCatalog = codec::decode(&snapshot)?;
        let db = Arc::clone(&self.db);
        let stored_meta = meta.clone();
        let data = snapshot.clone();
        blocking(move || {
            // On restart openraft re-installs the stored snapshot; skip rewriting identical bytes.
            if let Some(current) = load_snapshot(&db)?
                && current.meta == stored_meta
            {
                return Ok(());
            }
            persist_snapshot(&db, &stored_meta, &data)
        })
        .await?;
        let mark = {
            let mut applied = self.state.applied.write().unwrap_or_else(|p| p.into_inner());
            *applied =
                Applied { catalog, last_applied: meta.last_log_id, last_membership: meta.last_membership.clone() };
            mark_of(&applied)
        };
        self.state.publish(mark);
        tracing::info!(last_log = ?meta.last_log_id.as_ref().map(|id| id.index()), "installed catalog snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || load_snapshot(&db)).await
    }
}
