//! Group commit: many writers that need durability share one journal sync.
//!
//! ```text
//!  writer A: commit (Buffer) -> seq 7 -> wait_durable(7) ----------------------+--> ack
//!  writer B: commit (Buffer) -> seq 8 -> wait_durable(8) ---------------------+|
//!  syncer thread:   wakes, target = last committed (8), engine.sync(), durable = 8
//! ```
//!
//! Sequence numbers are handed out by the single writer path ([`GroupCommit::committed`]) after
//! each commit; a sync started after seq N was committed covers N. The syncer is a dedicated OS
//! thread because a sync blocks for the length of an fdatasync, and the tokio runtime must not.
//! It counts the syncs it completes ([`GroupCommit::syncs`], `shoal_storage_journal_syncs_total`
//! once the shard's metrics register it): commits per sync is how much grouping saves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use shoal_telemetry::IntCounter;
use tokio::sync::watch;

use super::{Engine, StorageError};

pub struct GroupCommit {
    shared: Arc<Shared>,
    durable_rx: watch::Receiver<Result<u64, String>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    committed: AtomicU64,
    // std Mutex + Condvar: the syncer is an OS thread, never an async task.
    state: Mutex<SyncerState>,
    wake: Condvar,
    /// Journal syncs completed.
    syncs: IntCounter,
}

#[derive(Default)]
struct SyncerState {
    requested: u64,
    shutdown: bool,
}

impl GroupCommit {
    /// Fails only if the OS will not start the syncer thread.
    pub fn start<E: Engine + ?Sized>(engine: Arc<E>) -> std::io::Result<Self> {
        let syncs = IntCounter::new(
            format!("{}storage_journal_syncs_total", shoal_telemetry::PREFIX),
            "Journal syncs (fdatasync) the group-commit syncer completed; each covers every batch committed before it",
        )
        .map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            committed: AtomicU64::new(0),
            state: Mutex::new(SyncerState::default()),
            wake: Condvar::new(),
            syncs,
        });
        let (tx, durable_rx) = watch::channel(Ok(0));
        let thread_shared = Arc::clone(&shared);
        let thread =
            std::thread::Builder::new().name("shoal-syncer".into()).spawn(move || syncer(engine, thread_shared, tx))?;
        Ok(Self { shared, durable_rx, thread: Mutex::new(Some(thread)) })
    }

    /// Records that a batch was committed; returns its sequence number. Callers hold the single
    /// write lock, so numbers follow commit order.
    pub fn committed(&self) -> u64 {
        self.shared.committed.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The newest sequence number handed out.
    pub fn last_committed(&self) -> u64 {
        self.shared.committed.load(Ordering::SeqCst)
    }

    /// The count of completed journal syncs, not registered anywhere (a registry takes a clone).
    pub fn syncs(&self) -> &IntCounter {
        &self.shared.syncs
    }

    /// Waits until the batch numbered `seq` is on disk.
    pub async fn wait_durable(&self, seq: u64) -> Result<(), StorageError> {
        {
            let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.requested < seq {
                state.requested = seq;
                self.shared.wake.notify_one();
            }
        }
        let mut rx = self.durable_rx.clone();
        let result = rx.wait_for(|r| match r {
            Ok(durable) => *durable >= seq,
            Err(_) => true,
        });
        match result.await {
            Ok(r) => match &*r {
                Ok(_) => Ok(()),
                Err(e) => Err(StorageError::Engine(format!("journal sync failed: {e}"))),
            },
            Err(_) => Err(StorageError::Engine("journal syncer stopped".into())),
        }
    }

    /// Stops the syncer after a final sync.
    pub fn shutdown(&self) {
        {
            let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.shutdown = true;
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn syncer<E: Engine + ?Sized>(engine: Arc<E>, shared: Arc<Shared>, tx: watch::Sender<Result<u64, String>>) {
    let mut durable = 0u64;
    loop {
        let shutdown = {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            while state.requested <= durable && !state.shutdown {
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            state.shutdown
        };
        // Everything committed before the sync starts is covered by it.
        let target = shared.committed.load(Ordering::SeqCst);
        match engine.sync() {
            Ok(()) => {
                durable = target;
                shared.syncs.inc();
                let _ = tx.send(Ok(durable));
            }
            Err(e) => {
                // A failed fsync leaves the journal's state unknown (the PostgreSQL fsync lesson):
                // report it to every waiter rather than retrying and pretending.
                tracing::error!(error = %e, "journal sync failed");
                let _ = tx.send(Err(e.to_string()));
                return;
            }
        }
        if shutdown {
            return;
        }
    }
}
