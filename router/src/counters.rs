//! The numbers `serverStatus` reports from the router's own traffic: connections, commands,
//! `opcounters` (which entry a command counts in is the command table's [`OpCounter`]) and
//! `network`. Atomics only, one increment per event on the request path; must not shape replies
//! (`cmd/info.rs` does).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::command::Command;
use crate::commands::OpCounter;
use crate::exec::call::WriteKind;

/// Numbers `serverStatus` reports.
#[derive(Default)]
pub struct Counters {
    pub connections_current: AtomicI64,
    pub connections_total: AtomicU64,
    pub next_connection_id: AtomicI64,
    pub commands_total: AtomicU64,
    pub commands_failed: AtomicU64,
    pub ops: OpCounters,
    pub network: NetworkCounters,
}

/// `serverStatus.opcounters`, counted as a mongos counts what it receives (the command table says
/// which entry: [`OpCounter`]), whether or not the command succeeds.
#[derive(Default)]
pub struct OpCounters {
    insert: AtomicU64,
    query: AtomicU64,
    update: AtomicU64,
    delete: AtomicU64,
    getmore: AtomicU64,
    command: AtomicU64,
}

/// The counts of [`OpCounters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub insert: u64,
    pub query: u64,
    pub update: u64,
    pub delete: u64,
    pub getmore: u64,
    pub command: u64,
}

impl OpCounters {
    /// Counts one received command: a write once per statement, anything else once.
    pub fn count(&self, cmd: &Command) {
        let kind = cmd.spec.map_or(OpCounter::Command, |s| s.counted_as);
        let (counter, n) = match kind {
            OpCounter::Insert => (&self.insert, statement_count(cmd, WriteKind::Insert)),
            OpCounter::Update => (&self.update, statement_count(cmd, WriteKind::Update)),
            OpCounter::Delete => (&self.delete, statement_count(cmd, WriteKind::Delete)),
            OpCounter::Query => (&self.query, 1),
            OpCounter::GetMore => (&self.getmore, 1),
            OpCounter::Command => (&self.command, 1),
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> OpCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        OpCounts {
            insert: get(&self.insert),
            query: get(&self.query),
            update: get(&self.update),
            delete: get(&self.delete),
            getmore: get(&self.getmore),
            command: get(&self.command),
        }
    }
}

/// How many statements a write carries: its kind-1 sequences and its body's array.
fn statement_count(cmd: &Command, kind: WriteKind) -> u64 {
    let field = kind.items_field();
    let in_sequences: usize = cmd.sequences.iter().filter(|s| s.identifier == field).map(|s| s.documents.len()).sum();
    let in_body = match cmd.body.get(field) {
        Ok(Some(bson::RawBsonRef::Array(a))) => a.into_iter().count(),
        _ => 0,
    };
    (in_sequences + in_body) as u64
}

/// `serverStatus.network`: client messages received and their bytes, reply bytes sent.
#[derive(Default)]
pub struct NetworkCounters {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    requests: AtomicU64,
}

/// The counts of [`NetworkCounters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkCounts {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub requests: u64,
}

impl NetworkCounters {
    /// One client message of `bytes` (its header's length) received.
    pub fn received(&self, bytes: i32) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(u64::try_from(bytes).unwrap_or(0), Ordering::Relaxed);
    }

    /// A reply of `bytes` sent.
    pub fn sent(&self, bytes: usize) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> NetworkCounts {
        NetworkCounts {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::rawdoc;
    use bytes::Bytes;

    use super::*;
    use crate::command::DocSequence;

    fn command(body: bson::RawDocumentBuf, sequence: Option<(&str, usize)>) -> Command {
        let sent = body.iter().next().and_then(Result::ok).map(|(k, _)| k.as_str().to_owned()).unwrap_or_default();
        let sequences = sequence
            .map(|(identifier, n)| DocSequence {
                identifier: identifier.to_owned(),
                documents: (0..n).map(|_| Bytes::from(rawdoc! {}.into_bytes())).collect(),
            })
            .into_iter()
            .collect();
        Command::new(&sent, "db".into(), body, sequences, 1)
    }

    #[test]
    fn each_command_counts_in_its_entry_and_writes_per_statement() {
        let ops = OpCounters::default();
        ops.count(&command(rawdoc! { "insert": "c" }, Some(("documents", 3))));
        ops.count(&command(rawdoc! { "insert": "c", "documents": [{}, {}] }, None));
        ops.count(&command(rawdoc! { "update": "c", "updates": [{}] }, Some(("updates", 2))));
        ops.count(&command(rawdoc! { "delete": "c", "deletes": 1 }, None));
        ops.count(&command(rawdoc! { "find": "c" }, None));
        ops.count(&command(rawdoc! { "getMore": 1i64 }, None));
        ops.count(&command(rawdoc! { "findandmodify": "c" }, None));
        ops.count(&command(rawdoc! { "noSuchCommand": 1 }, None));
        let want = OpCounts { insert: 5, query: 1, update: 3, delete: 0, getmore: 1, command: 2 };
        assert_eq!(ops.snapshot(), want);
    }
}
