//! Migration critical sections: while a donor commits a migration, writes to the collection wait.
//!
//! One fair (write-preferring) async lock per namespace. Every write to a collection holds a read
//! permit while it checks its shard version and applies; entering the critical section takes the
//! write side, so it first waits for in-flight writes to finish and then holds new ones back until
//! the [`CriticalSection`] is dropped. A write that waited re-checks its version afterwards (the
//! chunk may have moved) and typically answers StaleConfig, which the router retries elsewhere.
//!
//! ```text
//!  write:  permit(ns) ── check version ── apply ── drop permit
//!  donor:            enter(ns) ── final catch-up ── commit in catalog ── drop section
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_proto::ErrorCode;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::error::{ExecError, ExecResult};

/// How long a write waits for a critical section before giving up (MongoDB bounds it too).
pub const WRITE_WAIT_MAX: Duration = Duration::from_secs(30);

/// Held by a write for as long as it runs.
pub type WritePermit = OwnedRwLockReadGuard<()>;

/// Held by a donor while the critical section lasts; dropping it lets writes through.
pub struct CriticalSection {
    pub ns: String,
    _guard: OwnedRwLockWriteGuard<()>,
}

#[derive(Default)]
pub struct Gates {
    by_ns: Mutex<HashMap<String, Arc<RwLock<()>>>>,
}

impl Gates {
    fn gate(&self, ns: &str) -> Arc<RwLock<()>> {
        let mut map = self.by_ns.lock().unwrap_or_else(|p| p.into_inner());
        // Every write passes here: look up before allocating the key.
        if let Some(gate) = map.get(ns) {
            return Arc::clone(gate);
        }
        Arc::clone(map.entry(ns.to_owned()).or_default())
    }

    /// A write's permit on `ns`, waiting at most `wait` for a critical section to end.
    pub async fn write_permit(&self, ns: &str, wait: Duration) -> ExecResult<WritePermit> {
        let gate = self.gate(ns);
        tokio::time::timeout(wait, gate.read_owned()).await.map_err(|_| {
            ExecError::new(
                ErrorCode::ExceededTimeLimit,
                format!("write to {ns} waited {wait:?} for a migration's critical section to end"),
            )
        })
    }

    /// Waits for the writes in flight on `ns` and holds new ones back until the section drops.
    pub async fn enter(&self, ns: &str) -> CriticalSection {
        let guard = self.gate(ns).write_owned().await;
        CriticalSection { ns: ns.to_owned(), _guard: guard }
    }

    /// Whether a critical section on `ns` is held right now.
    pub fn in_critical_section(&self, ns: &str) -> bool {
        self.gate(ns).try_read().is_err()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_critical_section_waits_for_writes_and_holds_new_ones() {
        let gates = Arc::new(Gates::default());
        let permit = gates.write_permit("db.c", WRITE_WAIT_MAX).await.unwrap();
        let g = Arc::clone(&gates);
        let entering = tokio::spawn(async move { g.enter("db.c").await });
        tokio::task::yield_now().await;
        assert!(!entering.is_finished(), "entered while a write was in flight");
        drop(permit);
        let section = entering.await.unwrap();
        assert!(gates.in_critical_section("db.c"));
        let err = gates.write_permit("db.c", Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::ExceededTimeLimit);
        // Other collections are not held back.
        drop(gates.write_permit("db.other", Duration::from_millis(20)).await.unwrap());
        drop(section);
        drop(gates.write_permit("db.c", Duration::from_millis(20)).await.unwrap());
    }
}
