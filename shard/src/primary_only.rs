//! Work only a primary does with the replicated bookkeeping records: settling interrupted
//! migrations ([`migration::recovery`]) and running range deletions ([`range_deleter::run`]).
//!
//! The records (`migdonor/`, `migrecv/`, `rangedel/`) arrive on every member through the oplog,
//! so whichever member the config service promotes finds its predecessor's unfinished work. This
//! task watches the member's role: each time it becomes primary of a new term (or runs outside any
//! group) it reloads the records and starts both; when it stops being primary it stops them
//! (their writes would be refused anyway, and a secondary must not act on what it holds).
//!
//! ```text
//!  Repl role watch --PRIMARY (term t)--> reload rangedel/ -> range_deleter::run
//!                                       load migdonor/ migrecv/ (refuse new migrations) -> recovery::recover
//!                  --anything else-----> abort both
//! ```
//!
//! Must not: decide who is primary, or settle a migration this process itself is running (a
//! member re-promoted while its own migration is still in memory leaves that one to itself).

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::exec::Node;
use crate::migration::{self, Migrations};
use crate::repl::MemberState;
use crate::sharding::range_deleter;

struct Running(Vec<JoinHandle<()>>);

impl Running {
    fn stop(&mut self) {
        for task in self.0.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs for the member's lifetime; abort it to stop (its children stop with it).
pub async fn run(node: Arc<Node>, migrations: Arc<Migrations>) {
    let mut roles = node.repl.subscribe_role();
    let mut running = Running(Vec::new());
    let mut serving_term = None;
    loop {
        let view = roles.borrow_and_update().clone();
        let primary = matches!(view.state, MemberState::Primary | MemberState::Standalone);
        match (primary, serving_term) {
            (true, Some(t)) if t == view.term => {}
            (true, _) => {
                running.stop();
                match start(&node, &migrations).await {
                    Ok(tasks) => {
                        tracing::info!(term = view.term, "primary: range deleter and migration recovery started");
                        running.0 = tasks;
                        serving_term = Some(view.term);
                    }
                    Err(e) => {
                        // Retried at the next role change; the records stay for a later primary.
                        tracing::error!(error = %e, "loading migration and range-deletion records failed");
                    }
                }
            }
            (false, Some(_)) => {
                running.stop();
                serving_term = None;
                tracing::info!(term = view.term, state = view.state.name(), "not primary: range deleter stopped");
            }
            (false, None) => {}
        }
        if roles.changed().await.is_err() {
            return;
        }
    }
}

async fn start(node: &Arc<Node>, migrations: &Arc<Migrations>) -> Result<Vec<JoinHandle<()>>, String> {
    let (e, m) = (Arc::clone(node), Arc::clone(migrations));
    let loaded = tokio::task::spawn_blocking(move || {
        let tasks = e.sharding.range_deleter.reload(&e.store, e.cursors.pin_seq())?;
        let (donors, recipients) = migration::recovery::load(&m)?;
        Ok::<_, crate::storage::StorageError>((tasks, donors, recipients))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    let (tasks, mut donors, mut recipients) = loaded;
    if let Some(active) = migrations.active() {
        donors.retain(|r| r.id != active.record.id);
        recipients.retain(|r| r.id != active.record.id);
    }
    if tasks > 0 {
        tracing::info!(tasks, "resuming range deletions");
    }
    Ok(vec![
        tokio::spawn(range_deleter::run(Arc::clone(node))),
        tokio::spawn(migration::recovery::recover(Arc::clone(migrations), donors, recipients)),
    ])
}
