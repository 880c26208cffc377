//! The numbers the router reports about its own traffic, kept once and read by both `serverStatus`
//! (`cmd/info.rs` shapes it) and the Prometheus endpoint (the same handles, registered in the
//! process's [`Metrics`]): connections, commands with their latency and errors, `opcounters`
//! (which entry a command counts in is the command table's [`OpCounter`]) and `network`.
//!
//! Must not: cost a request more than a few atomic adds (every handle is resolved when the router
//! starts; commands by name are `shoal_telemetry::commands`'), or shape replies.

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use shoal_telemetry::{IntCounter, IntCounterVec, IntGauge, Metrics};

use crate::command::Command;
use crate::commands::{COMMANDS, OpCounter};
use crate::exec::call::WriteKind;

pub use shoal_telemetry::commands::{CommandCount, UNKNOWN_COMMAND};

/// Numbers `serverStatus` and `/metrics` report.
pub struct Counters {
    pub connections_current: IntGauge,
    pub connections_total: IntCounter,
    pub next_connection_id: AtomicI64,
    pub commands: CommandCounters,
    pub ops: OpCounters,
    pub network: NetworkCounters,
    pub routing: RoutingCounters,
}

impl Counters {
    pub fn new(metrics: &Metrics) -> Result<Self, shoal_telemetry::Error> {
        Ok(Self {
            connections_current: metrics.gauge("connections_current", "Client connections open now")?,
            connections_total: metrics.counter("connections_total", "Client connections accepted")?,
            next_connection_id: AtomicI64::new(0),
            commands: command_counters(metrics)?,
            ops: OpCounters::new(metrics)?,
            network: NetworkCounters::new(metrics)?,
            routing: RoutingCounters::new(metrics)?,
        })
    }
}

/// Commands by name over the router's table: latency, failures, errors by code name.
pub type CommandCounters = shoal_telemetry::commands::CommandMetrics;

fn command_counters(metrics: &Metrics) -> Result<CommandCounters, shoal_telemetry::Error> {
    CommandCounters::new(
        metrics,
        "Client commands by name: time from parsed to reply built",
        COMMANDS.iter().map(|s| s.name),
    )
}

/// `serverStatus.opcounters`, counted as a mongos counts what it receives (the command table says
/// which entry: [`OpCounter`]), whether or not the command succeeds.
pub struct OpCounters {
    insert: IntCounter,
    query: IntCounter,
    update: IntCounter,
    delete: IntCounter,
    getmore: IntCounter,
    command: IntCounter,
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
    fn new(metrics: &Metrics) -> Result<Self, shoal_telemetry::Error> {
        let ops = metrics.counter_vec(
            "opcounters_total",
            "Operations received, as serverStatus.opcounters counts them",
            &["type"],
        )?;
        let entry = |name: &str| ops.with_label_values(&[name]);
        Ok(Self {
            insert: entry("insert"),
            query: entry("query"),
            update: entry("update"),
            delete: entry("delete"),
            getmore: entry("getmore"),
            command: entry("command"),
        })
    }

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
        counter.inc_by(n);
    }

    pub fn snapshot(&self) -> OpCounts {
        OpCounts {
            insert: self.insert.get(),
            query: self.query.get(),
            update: self.update.get(),
            delete: self.delete.get(),
            getmore: self.getmore.get(),
            command: self.command.get(),
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
pub struct NetworkCounters {
    bytes_in: IntCounter,
    bytes_out: IntCounter,
    requests: IntCounter,
}

/// Calls to shards and what routing them cost: each call's latency per shard, the retries after a
/// stale placement, the waits for a new primary.
pub struct RoutingCounters {
    shard_calls: shoal_telemetry::HistogramVec,
    stale_retries: IntCounterVec,
    failover_waits: IntCounterVec,
}

impl RoutingCounters {
    fn new(metrics: &Metrics) -> Result<Self, shoal_telemetry::Error> {
        Ok(Self {
            shard_calls: metrics.latency_vec(
                "shard_call_duration_seconds",
                "Calls to a shard's primary, by shard (each attempt)",
                &["shard"],
            )?,
            stale_retries: metrics.counter_vec(
                "routing_stale_retries_total",
                "Requests sent again after a shard answered StaleConfig or StaleDbVersion (the routing was refreshed)",
                &["code_name"],
            )?,
            failover_waits: metrics.counter_vec(
                "shard_failover_waits_total",
                "Calls that waited for a shard's next primary",
                &["shard"],
            )?,
        })
    }

    /// One call to `shard` answered (or failed) after `elapsed`.
    pub fn shard_call(&self, shard: &str, elapsed: Duration) {
        self.shard_calls.with_label_values(&[shard]).observe(elapsed.as_secs_f64());
    }

    /// A request goes again after a stale answer (`code_name`: StaleConfig or StaleDbVersion).
    pub fn stale_retry(&self, code_name: &str) {
        self.stale_retries.with_label_values(&[code_name]).inc();
    }

    /// A call to `shard` waits for its next primary.
    pub fn failover_wait(&self, shard: &str) {
        self.failover_waits.with_label_values(&[shard]).inc();
    }
}

/// The counts of [`NetworkCounters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkCounts {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub requests: u64,
}

impl NetworkCounters {
    fn new(metrics: &Metrics) -> Result<Self, shoal_telemetry::Error> {
        Ok(Self {
            bytes_in: metrics.counter("network_bytes_in_total", "Bytes of client messages received")?,
            bytes_out: metrics.counter("network_bytes_out_total", "Bytes of replies sent to clients")?,
            requests: metrics.counter("network_requests_total", "Client messages received")?,
        })
    }

    /// One client message of `bytes` (its header's length) received.
    pub fn received(&self, bytes: i32) {
        self.requests.inc();
        self.bytes_in.inc_by(u64::try_from(bytes).unwrap_or(0));
    }

    /// A reply of `bytes` sent.
    pub fn sent(&self, bytes: usize) {
        self.bytes_out.inc_by(bytes as u64);
    }

    pub fn snapshot(&self) -> NetworkCounts {
        NetworkCounts { bytes_in: self.bytes_in.get(), bytes_out: self.bytes_out.get(), requests: self.requests.get() }
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
        let ops = OpCounters::new(&Metrics::new().unwrap()).unwrap();
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
