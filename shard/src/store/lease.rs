//! Who may take client writes, and in which term: the store's [`Lease`], kept apart from the
//! writer lock. A write holds the writer lock for a whole command (a range deletion or a clone
//! batch can take a second); the heartbeat that renews the primary's lease, adopts a newer term or
//! steps down must never wait behind it (liveness traffic does not starve behind bulk work), so
//! it touches only this lock, which is held for a few instructions and never across storage work.
//!
//! Writers check the lease when a write starts, and each staged batch commits inside
//! [`Lease::commit_in`], under this lock: a heartbeat waits for one batch's commit at most, never a
//! whole command, and once [`Lease::set_not_writable`] or [`Lease::follow`] returns no write of
//! the old lease commits any more (a step-down reads its final position after it).

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::storage::StorageError;

/// Whether client writes are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writability {
    /// A member outside any replica group.
    Always,
    /// The primary of a term, until its lease lapses.
    Until(Instant),
    /// A secondary, or a primary that stepped down.
    Never,
}

impl Writability {
    pub fn allows(self) -> bool {
        match self {
            Writability::Always => true,
            Writability::Until(t) => Instant::now() < t,
            Writability::Never => false,
        }
    }
}

/// The term new entries are written in and whether client writes are accepted in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseState {
    pub term: i64,
    pub writable: Writability,
}

impl LeaseState {
    /// Whether a write begun in `term` may commit now.
    pub fn check(&self, term: i64) -> Result<(), StorageError> {
        if self.term != term && self.writable != Writability::Always {
            return Err(StorageError::NotWritable {
                reason: format!("term {term} ended: this member follows term {}", self.term),
            });
        }
        if self.writable.allows() {
            return Ok(());
        }
        Err(StorageError::NotWritable {
            reason: match self.writable {
                Writability::Until(_) => format!("the primary's lease for term {} lapsed", self.term),
                _ => "this member is not the primary".into(),
            },
        })
    }
}

pub struct Lease(Mutex<LeaseState>);

impl Lease {
    pub fn new(term: i64) -> Self {
        Lease(Mutex::new(LeaseState { term, writable: Writability::Always }))
    }

    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self) -> LeaseState {
        *self.lock()
    }

    /// Runs `commit` (one staged batch's storage commit) if a write begun in `term` may commit now,
    /// holding the lease so it cannot end halfway.
    pub fn commit_in<T>(&self, term: i64, commit: impl FnOnce() -> Result<T, StorageError>) -> Result<T, StorageError> {
        let l = self.lock();
        l.check(term)?;
        let out = commit();
        drop(l);
        out
    }

    /// Stops client writes (a secondary, or a primary stepping down).
    pub fn set_not_writable(&self) {
        self.lock().writable = Writability::Never;
    }

    /// Enters `term` to write its first entry (the new primary's no-op): client writes stay off
    /// until [`Lease::grant`]. Refused if a newer term was adopted meanwhile.
    pub fn enter(&self, term: i64) -> Result<(), StorageError> {
        let mut l = self.lock();
        if l.term > term {
            return Err(StorageError::NotWritable {
                reason: format!("this member already follows term {}, newer than term {term}", l.term),
            });
        }
        l.term = term;
        if l.writable != Writability::Always {
            l.writable = Writability::Never;
        }
        Ok(())
    }

    /// Takes client writes until `until` if still in `term`.
    pub fn grant(&self, term: i64, until: Instant) {
        let mut l = self.lock();
        if l.term == term {
            l.writable = Writability::Until(until);
        }
    }

    /// Extends the primary's lease; ignored unless it is still primary of `term`.
    pub fn extend(&self, term: i64, until: Instant) {
        let mut l = self.lock();
        if l.term == term && matches!(l.writable, Writability::Until(t) if t < until) {
            l.writable = Writability::Until(until);
        }
    }

    /// Takes writes again until `until` if still in `term` and stopped (a step-down that found no
    /// successor).
    pub fn resume(&self, term: i64, until: Instant) {
        let mut l = self.lock();
        if l.term == term && l.writable == Writability::Never {
            l.writable = Writability::Until(until);
        }
    }

    /// Follows `term` without writing in it (a secondary learning a new term).
    pub fn follow(&self, term: i64) {
        let mut l = self.lock();
        if term > l.term {
            l.term = term;
            if l.writable != Writability::Always {
                l.writable = Writability::Never;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Lease, Writability};

    #[test]
    fn a_newer_term_stops_writes_begun_in_the_old_one() {
        let lease = Lease::new(1);
        lease.set_not_writable();
        lease.enter(2).unwrap();
        lease.grant(2, Instant::now() + Duration::from_secs(60));
        assert!(lease.get().check(2).is_ok());
        lease.follow(3);
        assert!(lease.get().check(2).is_err());
        assert!(lease.get().check(3).is_err(), "following a term is not writing in it");
    }

    #[test]
    fn a_lease_of_an_older_term_is_neither_granted_nor_extended() {
        let lease = Lease::new(1);
        lease.set_not_writable();
        lease.follow(5);
        assert!(lease.enter(4).is_err());
        lease.grant(4, Instant::now() + Duration::from_secs(60));
        lease.extend(4, Instant::now() + Duration::from_secs(60));
        lease.resume(4, Instant::now() + Duration::from_secs(60));
        assert_eq!(lease.get().writable, Writability::Never);
    }

    #[test]
    fn extending_never_shortens_and_never_revives_a_stepped_down_primary() {
        let lease = Lease::new(1);
        let far = Instant::now() + Duration::from_secs(60);
        lease.enter(2).unwrap();
        lease.set_not_writable();
        lease.grant(2, far);
        lease.extend(2, far - Duration::from_secs(30));
        assert_eq!(lease.get().writable, Writability::Until(far));
        lease.set_not_writable();
        lease.extend(2, far + Duration::from_secs(1));
        assert_eq!(lease.get().writable, Writability::Never);
    }

    #[test]
    fn a_commit_runs_only_inside_its_lease() {
        let lease = Lease::new(1);
        lease.enter(2).unwrap();
        lease.grant(2, Instant::now() + Duration::from_secs(60));
        let ran = std::cell::Cell::new(0);
        let commit = || {
            ran.set(ran.get() + 1);
            Ok(())
        };
        assert!(lease.commit_in(2, commit).is_ok());
        lease.set_not_writable();
        assert!(lease.commit_in(2, commit).is_err());
        assert_eq!(ran.get(), 1, "no commit after the lease ended");
    }

    #[test]
    fn a_member_outside_any_group_always_writes() {
        let lease = Lease::new(1);
        lease.follow(7);
        assert!(lease.get().check(1).is_ok());
    }
}
