//! Writes waiting for `w: "majority"`, keyed by the optime each waits for, so a commit-point
//! advance wakes exactly the writes it covers.
//!
//! Waiting on the commit point's watch channel woke every waiting write at each advance (and each
//! secondary's progress report woke them again): with 64 clients that was 64 task wake-ups per
//! advance, most of them to go back to sleep. Here an advance takes the covered entries off an
//! ordered map and wakes only those.
//!
//! Must not: decide anything — the commit point is computed in [`super::progress`]; a woken
//! waiter re-checks it (and its role) before it answers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::store::oplog::OpTime;

type Key = (OpTime, u64);

#[derive(Default)]
pub struct MajorityWaiters {
    waiting: Mutex<BTreeMap<Key, oneshot::Sender<()>>>,
    next_id: AtomicU64,
}

/// One registered wait: its receiver fires once the commit point reaches its optime. Dropping
/// it (the write answered, timed out or its client went away) takes it off the map.
pub struct Registration {
    waiters: Arc<MajorityWaiters>,
    key: Key,
    pub woken: oneshot::Receiver<()>,
}

impl MajorityWaiters {
    /// Registers a wait for `optime`; check the commit point again after this (an advance just
    /// before the registration has already passed).
    pub fn register(self: &Arc<Self>, optime: OpTime) -> Registration {
        let (tx, woken) = oneshot::channel();
        // Ids stay below u64::MAX: `release_upto` splits the map just after (point, u64::MAX).
        let key = (optime, self.next_id.fetch_add(1, Ordering::Relaxed) % (u64::MAX - 1));
        self.lock().insert(key, tx);
        Registration { waiters: Arc::clone(self), key, woken }
    }

    /// The commit point reached `point`: wakes every wait for an optime at or before it.
    pub fn release_upto(&self, point: OpTime) {
        let covered = {
            let mut waiting = self.lock();
            let later = waiting.split_off(&(point, u64::MAX));
            std::mem::replace(&mut *waiting, later)
        };
        for (_, tx) in covered {
            let _ = tx.send(());
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, oneshot::Sender<()>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use bson::Timestamp;

    use super::*;

    fn at(t: u32) -> OpTime {
        OpTime::new(1, Timestamp { time: t, increment: 1 })
    }

    #[tokio::test]
    async fn an_advance_wakes_exactly_the_waits_it_covers() {
        let w = Arc::new(MajorityWaiters::default());
        let mut r1 = w.register(at(1));
        let mut r2 = w.register(at(2));
        let mut r2b = w.register(at(2));
        let mut r3 = w.register(at(3));
        w.release_upto(at(2));
        assert!(r1.woken.try_recv().is_ok());
        assert!(r2.woken.try_recv().is_ok());
        assert!(r2b.woken.try_recv().is_ok());
        assert!(r3.woken.try_recv().is_err(), "not covered yet");
        assert_eq!(w.len(), 1);
        w.release_upto(at(3));
        assert!((&mut r3.woken).await.is_ok());
    }

    #[test]
    fn a_dropped_wait_leaves_the_map() {
        let w = Arc::new(MajorityWaiters::default());
        let r = w.register(at(5));
        assert_eq!(w.len(), 1);
        drop(r);
        assert_eq!(w.len(), 0);
        w.release_upto(at(9));
    }
}
