//! Oplog entries in MongoDB's shape (`src/mongo/db/repl/oplog_entry.idl`), written in the same
//! storage batch as the change they describe.
//!
//! Updates are logged as full post-images (`op: "u"`, `o` = new document, `o2` = `{_id}`): applying
//! one is idempotent, which secondaries and migrations rely on. Every entry carries the
//! replica-group term its primary wrote it in (`t`); `(t, ts)` is its [`OpTime`].

use bson::{DateTime, RawDocument, RawDocumentBuf, Timestamp, Uuid, cstr};

use crate::storage::StorageError;

/// The term of a member outside any replica group (no config servers), and the first term the
/// config service hands out.
pub const INITIAL_TERM: i64 = 1;

/// A position in the oplog. Ordered by term first: a later primary's entries always sort after
/// an earlier one's, whatever the clocks said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OpTime {
    pub term: i64,
    pub ts: TsKey,
}

/// A timestamp ordered as MongoDB orders them (seconds, then increment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TsKey {
    pub time: u32,
    pub increment: u32,
}

impl From<Timestamp> for TsKey {
    fn from(ts: Timestamp) -> Self {
        Self { time: ts.time, increment: ts.increment }
    }
}

impl From<TsKey> for Timestamp {
    fn from(k: TsKey) -> Self {
        Timestamp { time: k.time, increment: k.increment }
    }
}

impl OpTime {
    pub const ZERO: OpTime = OpTime { term: 0, ts: TsKey { time: 0, increment: 0 } };

    pub fn new(term: i64, ts: Timestamp) -> Self {
        Self { term, ts: ts.into() }
    }

    pub fn timestamp(&self) -> Timestamp {
        self.ts.into()
    }

    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }
}

impl std::fmt::Display for OpTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {}|{})", self.term, self.ts.time, self.ts.increment)
    }
}

/// The fields of a stored entry that replication needs, borrowed from its bytes.
#[derive(Debug, Clone, Copy)]
pub struct EntryView<'a> {
    pub optime: OpTime,
    pub op: &'a str,
    pub ns: &'a str,
    pub uuid: Option<Uuid>,
    pub o: &'a RawDocument,
    pub o2: Option<&'a RawDocument>,
}

impl<'a> EntryView<'a> {
    pub fn parse(raw: &'a RawDocument) -> Result<Self, StorageError> {
        let corrupt = |what: &str| StorageError::Corrupt { space: "oplog", detail: format!("entry: {what}") };
        let ts = raw.get_timestamp("ts").map_err(|_| corrupt("ts"))?;
        let term = match raw.get("t") {
            Ok(Some(bson::RawBsonRef::Int64(t))) => t,
            Ok(Some(bson::RawBsonRef::Int32(t))) => i64::from(t),
            _ => return Err(corrupt("t")),
        };
        let op = raw.get_str("op").map_err(|_| corrupt("op"))?;
        let ns = raw.get_str("ns").map_err(|_| corrupt("ns"))?;
        let uuid = match raw.get_binary("ui") {
            Ok(b) => Some(Uuid::from_bytes(b.bytes.try_into().map_err(|_| corrupt("ui"))?)),
            Err(_) => None,
        };
        let o = raw.get_document("o").map_err(|_| corrupt("o"))?;
        let o2 = raw.get_document("o2").ok();
        Ok(Self { optime: OpTime::new(term, ts), op, ns, uuid, o, o2 })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Insert,
    Update,
    Delete,
    Command,
    /// A no-op (`"n"`): a new primary's first entry, which makes its term's commit point count.
    Noop,
}

impl OpKind {
    fn code(self) -> &'static str {
        match self {
            OpKind::Insert => "i",
            OpKind::Update => "u",
            OpKind::Delete => "d",
            OpKind::Command => "c",
            OpKind::Noop => "n",
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

    /// Never hands out `ts` or anything before it (an entry applied from the primary).
    pub fn observe(&mut self, ts: Timestamp) {
        if TsKey::from(ts) > TsKey::from(self.last) {
            self.last = ts;
        }
    }
}

pub struct Entry<'a> {
    pub ts: Timestamp,
    pub term: i64,
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
        out.append(cstr!("t"), self.term);
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

/// A bookkeeping record's key and new value (`None`: removed).
pub type MetaWrite = (Vec<u8>, Option<Vec<u8>>);

/// The `meta` field of an entry that also writes bookkeeping records: `[{k, v?}, …]` (`v` absent:
/// removed), applied in order after the entry's own effect.
pub fn meta_array(writes: &[MetaWrite]) -> bson::RawArrayBuf {
    let binary = |b: &[u8]| bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b.to_vec() };
    let mut list = bson::RawArrayBuf::new();
    for (key, value) in writes {
        let mut one = RawDocumentBuf::new();
        one.append(cstr!("k"), binary(key));
        if let Some(v) = value {
            one.append(cstr!("v"), binary(v));
        }
        list.push(one);
    }
    list
}

/// The bookkeeping writes an entry carries (usually none).
pub fn meta_writes(entry: &RawDocument) -> Result<Vec<MetaWrite>, StorageError> {
    let Ok(list) = entry.get_array("meta") else { return Ok(Vec::new()) };
    let corrupt = || StorageError::Corrupt { space: "oplog", detail: "meta write without a binary k".into() };
    let mut out = Vec::new();
    for item in list {
        let one = item.ok().and_then(|i| i.as_document()).ok_or_else(corrupt)?;
        let key = one.get_binary("k").map_err(|_| corrupt())?.bytes.to_vec();
        let value = one.get_binary("v").ok().map(|b| b.bytes.to_vec());
        out.push((key, value));
    }
    Ok(out)
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

    #[test]
    fn meta_entries_round_trip() {
        let writes = vec![(b"retry/x".to_vec(), Some(b"value".to_vec())), (b"retry/y".to_vec(), None)];
        let mut entry = bson::rawdoc! { "op": "i" };
        entry.append(cstr!("meta"), meta_array(&writes));
        assert_eq!(meta_writes(&entry).expect("ok"), writes);
        let plain = bson::rawdoc! { "msg": "new primary" };
        assert!(meta_writes(&plain).expect("ok").is_empty());
    }
}
