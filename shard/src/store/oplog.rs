//! Oplog entries in MongoDB's shape (`src/mongo/db/repl/oplog_entry.idl`), written in the same
//! storage batch as the change they describe.
//!
//! Updates are logged as full post-images (`op: "u"`, `o` = new document, `o2` = `{_id}`): applying
//! one is idempotent, which secondaries (issue 7) and migrations (issue 5) rely on.

use bson::{DateTime, RawDocument, RawDocumentBuf, Timestamp, Uuid, cstr};

/// The term until replica groups (issue 7) exist.
pub const INITIAL_TERM: i64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Insert,
    Update,
    Delete,
    Command,
}

impl OpKind {
    fn code(self) -> &'static str {
        match self {
            OpKind::Insert => "i",
            OpKind::Update => "u",
            OpKind::Delete => "d",
            OpKind::Command => "c",
        }
    }
}

/// Allocates strictly increasing oplog timestamps: seconds since the epoch and a counter within
/// the second, never going backwards even if the wall clock does.
#[derive(Debug, Clone, Copy)]
pub struct TimestampClock {
    last: Timestamp,
}

impl TimestampClock {
    pub fn new(last: Timestamp) -> Self {
        Self { last }
    }

    pub fn next(&mut self, now: DateTime) -> Timestamp {
        let secs = (now.timestamp_millis() / 1000).clamp(0, u32::MAX as i64) as u32;
        self.last = if secs > self.last.time {
            Timestamp { time: secs, increment: 1 }
        } else if self.last.increment == u32::MAX {
            Timestamp { time: self.last.time + 1, increment: 1 }
        } else {
            Timestamp { time: self.last.time, increment: self.last.increment + 1 }
        };
        self.last
    }

    pub fn last(&self) -> Timestamp {
        self.last
    }
}

pub struct Entry<'a> {
    pub ts: Timestamp,
    pub wall: DateTime,
    pub kind: OpKind,
    pub ns: &'a str,
    pub uuid: Option<Uuid>,
    pub o: &'a RawDocument,
    pub o2: Option<&'a RawDocument>,
    /// Written by a migration or the range deleter, not a client: replication applies it, but a
    /// migration's catch-up skips it (MongoDB's `fromMigrate`).
    pub from_migrate: bool,
}

impl Entry<'_> {
    pub fn encode(&self) -> RawDocumentBuf {
        let mut out = RawDocumentBuf::new();
        out.append(cstr!("ts"), self.ts);
        out.append(cstr!("t"), INITIAL_TERM);
        out.append(cstr!("v"), 2i32);
        out.append(cstr!("op"), self.kind.code());
        out.append(cstr!("ns"), self.ns);
        if let Some(uuid) = self.uuid {
            out.append(cstr!("ui"), bson::Binary::from_uuid(uuid));
        }
        out.append(cstr!("o"), self.o);
        if let Some(o2) = self.o2 {
            out.append(cstr!("o2"), o2);
        }
        if self.from_migrate {
            out.append(cstr!("fromMigrate"), true);
        }
        out.append(cstr!("wall"), self.wall);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_even_if_time_goes_back() {
        let mut clock = TimestampClock::new(Timestamp { time: 100, increment: 5 });
        let a = clock.next(DateTime::from_millis(50_000));
        assert_eq!(a, Timestamp { time: 100, increment: 6 });
        let b = clock.next(DateTime::from_millis(200_000));
        assert_eq!(b, Timestamp { time: 200, increment: 1 });
    }
}
