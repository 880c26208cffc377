//! `top`: time and count of the operations on each collection since this member started, in
//! MongoDB's categories (`total`, `readLock` for reads and `writeLock` for writes, then
//! `queries`, `getmore`, `insert`, `update`, `remove`, `commands` by the op's type). Counted when
//! an operation ends ([`super::Running`]), in microseconds.
//!
//! Bounded: a dropped collection's entry goes with it ([`Top::forget`], [`Top::forget_database`]),
//! and past [`ENTRIES_MAX`] namespaces (operations on collections that never existed) new ones
//! are not counted.
//!
//! Must not: cost an operation more than one short mutex and a hash lookup.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use bson::{Document, doc};

use super::{Op, OpKind};

/// Namespaces counted at most.
pub const ENTRIES_MAX: usize = 10_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub time_micros: u64,
    pub count: u64,
}

impl Usage {
    fn add(&mut self, micros: u64) {
        self.time_micros += micros;
        self.count += 1;
    }

    fn to_doc(self) -> Document {
        doc! { "time": self.time_micros as i64, "count": self.count as i64 }
    }
}

/// One collection's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    pub total: Usage,
    pub read_lock: Usage,
    pub write_lock: Usage,
    pub queries: Usage,
    pub getmore: Usage,
    pub insert: Usage,
    pub update: Usage,
    pub remove: Usage,
    pub commands: Usage,
}

#[derive(Debug, Default)]
pub struct Top {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Top {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one finished operation (commands naming no collection are not counted).
    pub fn record(&self, op: &Op, elapsed: Duration) {
        if op.ns.is_empty() || op.ns.ends_with(".$cmd") {
            return;
        }
        let micros = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        let mut entries = self.entries();
        if !entries.contains_key(&op.ns) {
            if entries.len() >= ENTRIES_MAX {
                return;
            }
            entries.insert(op.ns.clone(), Entry::default());
        }
        let Some(entry) = entries.get_mut(&op.ns) else { return };
        entry.total.add(micros);
        if op.writes {
            entry.write_lock.add(micros)
        } else {
            entry.read_lock.add(micros)
        }
        match op.kind {
            OpKind::Query => entry.queries.add(micros),
            OpKind::GetMore => entry.getmore.add(micros),
            OpKind::Insert => entry.insert.add(micros),
            OpKind::Update => entry.update.add(micros),
            OpKind::Remove => entry.remove.add(micros),
            OpKind::Command => entry.commands.add(micros),
        }
    }

    /// The totals of `ns`, if counted.
    pub fn get(&self, ns: &str) -> Option<Entry> {
        self.entries().get(ns).copied()
    }

    /// Drops a dropped collection's totals.
    pub fn forget(&self, ns: &str) {
        self.entries().remove(ns);
    }

    /// Drops the totals of every collection of a dropped database.
    pub fn forget_database(&self, db: &str) {
        self.entries().retain(|ns, _| !ns.strip_prefix(db).is_some_and(|rest| rest.starts_with('.')));
    }

    /// `top`'s reply: `{totals: {note, "<db.coll>": {total, readLock, ...}}}`, by namespace.
    pub fn report(&self) -> Document {
        let entries: BTreeMap<String, Entry> = self.entries().iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut totals = doc! { "note": "all times in microseconds" };
        for (ns, e) in entries {
            totals.insert(
                ns,
                doc! {
                    "total": e.total.to_doc(),
                    "readLock": e.read_lock.to_doc(),
                    "writeLock": e.write_lock.to_doc(),
                    "queries": e.queries.to_doc(),
                    "getmore": e.getmore.to_doc(),
                    "insert": e.insert.to_doc(),
                    "update": e.update.to_doc(),
                    "remove": e.remove.to_doc(),
                    "commands": e.commands.to_doc(),
                },
            );
        }
        doc! { "totals": totals }
    }
}
