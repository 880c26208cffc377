//! The fjall log store and catalog state machine against openraft's own storage test suite, plus
//! what the suite does not cover: surviving a reopen of the store.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::sync::Arc;

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::{StorageError, Vote};
use shoal_configsvr::raft::log_store::LogStore;
use shoal_configsvr::raft::state_machine::StateMachineStore;
use shoal_configsvr::raft::store::RaftDb;
use shoal_configsvr::raft::types::{Entry, TypeConfig};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let db = RaftDb::open(dir.path()).map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((dir, LogStore::new(Arc::clone(&db)), StateMachineStore::new(db)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() {
    Suite::test_all(Builder).await.expect("openraft storage suite");
}

fn log_id(term: u64, index: u64) -> shoal_configsvr::raft::types::LogId {
    openraft::testing::log_id::<TypeConfig>(term, 1, index)
}

async fn append(store: &mut LogStore, entries: Vec<Entry>) {
    let (tx, rx) = TypeConfig::oneshot();
    store.append(entries, IOFlushed::signal(tx)).await.expect("append");
    rx.await.expect("flush callback").expect("flushed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_vote_and_purge_survive_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let db = RaftDb::open(dir.path()).expect("open");
        let mut store = LogStore::new(Arc::clone(&db));
        append(&mut store, (1..=20).map(|i| Entry::new_blank(log_id(1, i))).collect()).await;
        store.save_vote(&Vote::new(2, 3)).await.expect("save vote");
        store.truncate_after(Some(log_id(1, 15))).await.expect("truncate");
        store.purge(log_id(1, 4)).await.expect("purge");
        store.save_committed(Some(log_id(1, 12))).await.expect("save committed");
        db.shutdown();
    }
    let db = RaftDb::open(dir.path()).expect("reopen");
    let mut store = LogStore::new(Arc::clone(&db));
    let state = store.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(1, 15)));
    assert_eq!(store.read_vote().await.expect("vote"), Some(Vote::new(2, 3)));
    assert_eq!(store.read_committed().await.expect("committed"), Some(log_id(1, 12)));
    let entries = store.try_get_log_entries(0..100).await.expect("entries");
    let indexes: Vec<u64> = entries.iter().map(|e| e.index()).collect();
    assert_eq!(indexes, (5..=15).collect::<Vec<_>>());
    let limited = store.limited_get_log_entries(5, 16).await.expect("limited");
    assert!(!limited.is_empty() && limited[0].index() == 5);
    // The state machine starts empty: it is rebuilt from snapshot + log by openraft.
    let mut sm = StateMachineStore::new(db);
    assert_eq!(sm.applied_state().await.expect("applied").0, None);
    assert!(sm.get_current_snapshot().await.expect("snapshot").is_none());
}
