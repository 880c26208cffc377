//! The shard's Prometheus metrics, one registry per process ([`ShardMetrics`], held by the
//! [`Node`] and served on `/metrics` by [`crate::run`] when `metrics_listen` is set).
//!
//! Owns: the handles counted where events happen, each resolved when the node opens — commands by
//! name as the gRPC service dispatches them with their failures by error code ([`CommandMetrics`]),
//! elections won and step-downs ([`ReplCounters`], held by [`crate::repl::Repl`]), migration ends,
//! bytes moved and critical sections ([`MigrationMetrics`]), finished range deletions
//! ([`RangeDeletionCounters`]) — and the gauges read when scraped from state the shard keeps
//! anyway ([`register_pulled`]): role, term, each member's lag, the oplog's size and window, disk
//! space, open cursors, pending range deletions. The journal-sync counter is the group-commit
//! syncer's own (`storage`), registered here.
//!
//! Must not: cost an event more than an atomic add or a histogram observation (nothing is
//! registered per request; a generic command finds its handles in a read-only map by its table
//! entry's name and a failure its code name's counter, as the router does), keep the node alive
//! (scrape-time gauges hold a weak reference), or take a lock a writer holds for long (the gauges
//! read atomics, watch channels and the short mutexes of the replication state, the cursor table
//! and the range-deletion queue; the oplog window reads the oplog's first key, a point read).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use shoal_telemetry::{Error, GaugeVec, Histogram, IntCounter, Metrics};

use crate::commands::{COMMANDS, Spec};
use crate::exec::Node;
use crate::migration::record::Side;
use crate::repl::MemberState;
use crate::store::oplog::OpTime;

/// Every handle the shard counts in, and the registry they are registered in.
pub struct ShardMetrics {
    registry: Metrics,
    started: Instant,
    pub commands: CommandMetrics,
    pub repl: ReplCounters,
    pub migrations: MigrationMetrics,
    pub range_deletions: RangeDeletionCounters,
}

impl std::fmt::Debug for ShardMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMetrics").finish_non_exhaustive()
    }
}

impl ShardMetrics {
    /// A fresh registry with every counter and histogram of the shard in it (the scrape-time
    /// gauges come once the node exists: [`register_pulled`]).
    pub fn new() -> Result<Self, Error> {
        let registry = Metrics::new()?;
        Ok(Self {
            commands: CommandMetrics::new(&registry)?,
            repl: ReplCounters::new(&registry)?,
            migrations: MigrationMetrics::new(&registry)?,
            range_deletions: RangeDeletionCounters::new(&registry)?,
            started: Instant::now(),
            registry,
        })
    }

    /// The registry (cloning shares it): what `/metrics` renders.
    pub fn registry(&self) -> &Metrics {
        &self.registry
    }
}

pub use shoal_telemetry::commands::{PerCommand, UNKNOWN_COMMAND};

/// The typed RPCs' names as the `command` label has them.
const TYPED: [&str; 7] = ["insert", "update", "delete", "find", "aggregate", "getMore", "killCursors"];

/// Commands by name: the typed RPCs' (resolved into fields) and the generic table's
/// ([`COMMANDS`]), over the shared counting of `shoal_telemetry::commands`.
pub struct CommandMetrics {
    pub insert: PerCommand,
    pub update: PerCommand,
    pub delete: PerCommand,
    pub find: PerCommand,
    pub aggregate: PerCommand,
    pub get_more: PerCommand,
    pub kill_cursors: PerCommand,
    all: shoal_telemetry::commands::CommandMetrics,
}

impl CommandMetrics {
    fn new(metrics: &Metrics) -> Result<Self, Error> {
        let all = shoal_telemetry::commands::CommandMetrics::new(
            metrics,
            "Commands by name as the shard's gRPC service dispatches them: time from received to reply \
             built (admission, version checks and write-concern waits included)",
            TYPED.into_iter().chain(COMMANDS.iter().map(|s| s.name)),
        )?;
        let typed = |name: &str| all.of(Some(name)).clone();
        Ok(Self {
            insert: typed("insert"),
            update: typed("update"),
            delete: typed("delete"),
            find: typed("find"),
            aggregate: typed("aggregate"),
            get_more: typed("getMore"),
            kill_cursors: typed("killCursors"),
            all,
        })
    }

    /// The handles of a generic command (`None`: not in the table).
    pub fn of(&self, spec: Option<&Spec>) -> &PerCommand {
        self.all.of(spec.map(|s| s.name))
    }

    /// One command done after `elapsed`; `failed` is its error's code name.
    pub fn finished(&self, per: &PerCommand, elapsed: Duration, failed: Option<&str>) {
        self.all.finished(per, elapsed, failed);
    }
}

/// Role transitions, counted by the replication code that makes them.
#[derive(Clone)]
pub struct ReplCounters {
    /// This member became primary (the config service named it and it wrote the term's no-op).
    pub elections: IntCounter,
    /// This member stopped being primary (a newer term, a lapsed lease, no majority in reach).
    pub step_downs: IntCounter,
}

impl ReplCounters {
    fn new(metrics: &Metrics) -> Result<Self, Error> {
        Ok(Self {
            elections: metrics.counter(
                "repl_elections_total",
                "Times this member became primary (named by the config service, its term's no-op written)",
            )?,
            step_downs: metrics.counter(
                "repl_step_downs_total",
                "Times this member stopped being primary (a newer term, a lapsed lease, or no majority heard from)",
            )?,
        })
    }
}

/// How a migration ended on this shard, as `migrations_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationEnd {
    /// The range moved (donor: the catalog committed it; recipient: the range is ours).
    Committed,
    /// It stopped before the commit (donor) or the received range is to be deleted (recipient).
    Aborted,
    /// Refused before anything moved (checks, another migration running, a failed start).
    Refused,
    /// Recovery could not settle it (the catalog out of reach for every round): the next restart
    /// tries again. A donor run whose commit answer was lost is not counted itself; the recovery
    /// that settles it counts what it found.
    Unresolved,
}

impl MigrationEnd {
    const ALL: [MigrationEnd; 4] =
        [MigrationEnd::Committed, MigrationEnd::Aborted, MigrationEnd::Refused, MigrationEnd::Unresolved];

    fn label(self) -> &'static str {
        match self {
            MigrationEnd::Committed => "committed",
            MigrationEnd::Aborted => "aborted",
            MigrationEnd::Refused => "refused",
            MigrationEnd::Unresolved => "unresolved",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

fn role(side: Side) -> &'static str {
    match side {
        Side::Donor => "donor",
        Side::Recipient => "recipient",
    }
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Donor => 0,
        Side::Recipient => 1,
    }
}

/// Chunk migrations: how they ended, the bytes moved, how long writes waited.
pub struct MigrationMetrics {
    /// `[side][end]`.
    ends: [[IntCounter; 4]; 2],
    /// `[side]`: sent by a donor, received by a recipient.
    bytes: [IntCounter; 2],
    critical_section: Histogram,
}

impl MigrationMetrics {
    fn new(metrics: &Metrics) -> Result<Self, Error> {
        let ends = metrics.counter_vec(
            "migrations_total",
            "Chunk migrations that ended on this shard, by its role and how they ended \
             (committed, aborted, refused before anything moved, unresolved: left for the next restart)",
            &["role", "outcome"],
        )?;
        let bytes = metrics.counter_vec(
            "migration_bytes_total",
            "Bytes of documents a chunk migration moved: sent by this shard as donor (clone and catch-up), \
             received as recipient",
            &["role"],
        )?;
        let per_side = |side: Side| MigrationEnd::ALL.map(|end| ends.with_label_values(&[role(side), end.label()]));
        Ok(Self {
            ends: [per_side(Side::Donor), per_side(Side::Recipient)],
            bytes: [Side::Donor, Side::Recipient].map(|side| bytes.with_label_values(&[role(side)])),
            critical_section: metrics.latency(
                "migration_critical_section_seconds",
                "How long a donor held a chunk migration's critical section (writes to the collection waited)",
            )?,
        })
    }

    /// A migration this shard took part in as `side` ended.
    pub fn ended(&self, side: Side, end: MigrationEnd) {
        self.ends[side_index(side)][end.index()].inc();
    }

    /// `bytes` of documents sent (donor) or received (recipient).
    pub fn moved(&self, side: Side, bytes: u64) {
        self.bytes[side_index(side)].inc_by(bytes);
    }

    /// The donor left a critical section it held for `held`.
    pub fn critical_section(&self, held: Duration) {
        self.critical_section.observe(held.as_secs_f64());
    }
}

/// Range deletions this member ran to the end.
pub struct RangeDeletionCounters {
    tasks: IntCounter,
    documents: IntCounter,
}

impl RangeDeletionCounters {
    fn new(metrics: &Metrics) -> Result<Self, Error> {
        Ok(Self {
            tasks: metrics.counter(
                "range_deletions_total",
                "Range deletions (ranges this shard no longer owns) run to the end by this member",
            )?,
            documents: metrics.counter(
                "range_deletion_documents_total",
                "Documents the range deleter deleted (orphans of ranges migrated away or aborted)",
            )?,
        })
    }

    /// One task finished after deleting `documents`.
    pub fn finished(&self, documents: u64) {
        self.tasks.inc();
        self.documents.inc_by(documents);
    }
}

/// How far `applied` is behind `newest`, in seconds: optimes carry the primary's wall-clock
/// seconds, so this is MongoDB's replication lag (whole seconds; never negative).
pub fn lag_seconds(newest: OpTime, applied: OpTime) -> f64 {
    f64::from(newest.ts.time.saturating_sub(applied.ts.time))
}

/// The oplog's extent in seconds: its newest entry's time minus its oldest's (0 if it is empty).
fn oplog_window_seconds(node: &Node) -> f64 {
    match node.store.oplog_first() {
        Ok(Some(first)) => f64::from(node.store.position().optime.ts.time.saturating_sub(first.time)),
        Ok(None) => 0.0,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the oplog's first entry for the metrics");
            0.0
        }
    }
}

/// Registers what is read from `node` when the registry is scraped, and the journal-sync counter
/// of its store. Called once, by [`crate::open_node`].
pub fn register_pulled(node: &Arc<Node>) -> Result<(), Error> {
    let read = |f: fn(&Node) -> f64| {
        let weak: Weak<Node> = Arc::downgrade(node);
        move || weak.upgrade().map_or(0.0, |n| f(&n))
    };
    let m = node.metrics.registry();
    m.register(node.store.journal_syncs().clone())?;
    m.pulled(
        "uptime_seconds",
        "Seconds since the shard opened its store",
        read(|n| n.metrics.started.elapsed().as_secs_f64()),
    )?;
    m.pulled(
        "repl_primary",
        "1 if this member is its replica group's primary (or runs outside any group), else 0",
        read(|n| f64::from(u8::from(matches!(n.repl.role().state, MemberState::Primary | MemberState::Standalone)))),
    )?;
    m.pulled("repl_term", "The replica-group term this member is in", read(|n| n.repl.role().term as f64))?;
    m.pulled(
        "repl_state",
        "This member's state as MongoDB numbers it (1 primary, 2 secondary, 0 startup, 5 startup2, 9 rollback, ...)",
        read(|n| f64::from(n.repl.role().state.code())),
    )?;
    let weak = Arc::downgrade(node);
    m.pulled_vec(
        "repl_lag_seconds",
        "On a primary: how far each other member's last reported applied entry is behind the primary's newest, \
         in seconds of the entries' timestamps (members that have not reported are left out)",
        &["member"],
        move |gauges: &GaugeVec| {
            let Some(n) = weak.upgrade() else { return };
            let newest = n.store.position().optime;
            for (member, applied) in n.repl.members_applied() {
                gauges.with_label_values(&[member.as_str()]).set(lag_seconds(newest, applied));
            }
        },
    )?;
    m.pulled(
        "oplog_size_bytes",
        "The oplog's size (keys and values of its entries)",
        read(|n| n.store.oplog_size_bytes() as f64),
    )?;
    m.pulled(
        "oplog_size_max_bytes",
        "The oplog's size cap: past it the oldest entries are truncated",
        read(|n| n.repl.settings.oplog_size_max_bytes as f64),
    )?;
    m.pulled(
        "oplog_window_seconds",
        "Seconds between the oplog's oldest and newest entries: how long a member may be away and still catch up",
        read(oplog_window_seconds),
    )?;
    m.pulled(
        "storage_disk_bytes",
        "Bytes the storage engine holds on disk (tables and journals)",
        read(|n| n.store.disk_space_bytes() as f64),
    )?;
    m.pulled("cursors_open", "Cursors open on this member", read(|n| n.cursors.len() as f64))?;
    m.pulled(
        "range_deletions_pending",
        "Range deletions scheduled and not finished yet",
        read(|n| n.sharding.range_deletions_pending() as f64),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bson::doc;
    use shoal_proto::shard::CommandRequest;

    use super::*;
    use crate::store::oplog::TsKey;

    fn node(dir: &std::path::Path) -> Arc<Node> {
        let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
        crate::open_node(&config).expect("open")
    }

    fn render(node: &Node) -> String {
        node.metrics.registry().render()
    }

    fn has(text: &str, line: &str) {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
    }

    #[test]
    fn lag_counts_whole_seconds_and_never_goes_negative() {
        let at = |time| OpTime { term: 1, ts: TsKey { time, increment: 3 } };
        assert_eq!(lag_seconds(at(100), at(93)), 7.0);
        assert_eq!(lag_seconds(at(100), at(100)), 0.0);
        assert_eq!(lag_seconds(at(90), at(100)), 0.0);
    }

    #[test]
    fn a_fresh_standalone_node_renders_its_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = node(dir.path());
        let text = render(&node);
        has(&text, "shoal_repl_primary 1");
        has(&text, "shoal_repl_term 1");
        has(&text, "shoal_repl_state 1");
        has(&text, "shoal_cursors_open 0");
        has(&text, "shoal_range_deletions_pending 0");
        has(&text, "shoal_repl_elections_total 0");
        has(&text, "shoal_repl_step_downs_total 0");
        has(&text, "shoal_range_deletions_total 0");
        has(&text, &format!("shoal_oplog_size_max_bytes {}", node.repl.settings.oplog_size_max_bytes));
        assert!(text.contains("# TYPE shoal_storage_journal_syncs_total counter"), "{text}");
        assert!(text.contains("# HELP shoal_migration_critical_section_seconds "), "{text}");
        assert!(text.contains("shoal_storage_disk_bytes "), "{text}");
        assert!(text.contains("shoal_uptime_seconds "), "{text}");
        has(&text, r#"shoal_migrations_total{outcome="committed",role="donor"} 0"#);
        has(&text, r#"shoal_migration_bytes_total{role="recipient"} 0"#);
        has(&text, r#"shoal_command_duration_seconds_count{command="<UNKNOWN>"} 0"#);
        assert!(!text.contains("shoal_repl_lag_seconds{"), "a standalone member reports no lag: {text}");
    }

    #[tokio::test]
    async fn writes_show_in_the_oplog_and_journal_gauges() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = node(dir.path());
        let body = doc! {"insert": "c", "documents": [{"_id": 1, "x": "a"}, {"_id": 2}]};
        let raw = CommandRequest { db: "db".into(), body: body.to_vec().expect("encode").into(), ..Default::default() };
        let (_, seq) =
            crate::exec::insert::run(&node, &crate::exec::Request::parse(&raw).expect("parse")).expect("insert");
        node.store.wait_durable(seq).await.expect("durable");
        let text = render(&node);
        let value = |name: &str| -> f64 {
            let line =
                text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {text}"));
            line[name.len() + 1..].parse().expect("number")
        };
        assert!(value("shoal_storage_journal_syncs_total") >= 1.0, "{text}");
        assert_eq!(value("shoal_oplog_size_bytes"), node.store.oplog_size_bytes() as f64);
        assert!(value("shoal_oplog_size_bytes") > 0.0);
        assert!(value("shoal_oplog_window_seconds") >= 0.0);
    }

    #[test]
    fn a_primary_reports_each_members_lag_and_its_step_down() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = node(dir.path());
        let body = doc! {"insert": "c", "documents": [{"_id": 1}]};
        let raw = CommandRequest { db: "db".into(), body: body.to_vec().expect("encode").into(), ..Default::default() };
        crate::exec::insert::run(&node, &crate::exec::Request::parse(&raw).expect("parse")).expect("insert");
        let newest = node.store.position().optime;
        let me = node.repl.me.clone();
        {
            let mut inner = node.repl.lock();
            inner.state = MemberState::Primary;
            inner.members = vec![me, "m:2".into(), "m:3".into()];
            inner.lease_until = Instant::now().checked_sub(Duration::from_secs(5));
        }
        let behind = OpTime { term: newest.term, ts: TsKey { time: newest.ts.time - 5, increment: 0 } };
        node.repl.record_progress("m:2", behind, behind);
        let text = render(&node);
        has(&text, r#"shoal_repl_lag_seconds{member="m:2"} 5"#);
        assert!(!text.contains(r#"member="m:3""#), "m:3 has not reported: {text}");
        has(&text, "shoal_repl_primary 1");
        has(&text, "shoal_repl_state 1");

        // The lease lapsed past its grace: the member steps down, and says so.
        node.repl.step_down_if_lease_lapsed();
        let text = render(&node);
        has(&text, "shoal_repl_step_downs_total 1");
        has(&text, "shoal_repl_primary 0");
        has(&text, "shoal_repl_state 2");
        assert!(!text.contains("shoal_repl_lag_seconds{"), "only a primary reports lag: {text}");
    }

    #[test]
    fn migrations_and_range_deletions_count_by_role_and_outcome() {
        let metrics = ShardMetrics::new().expect("metrics");
        let m = &metrics.migrations;
        m.ended(Side::Donor, MigrationEnd::Committed);
        m.ended(Side::Donor, MigrationEnd::Committed);
        m.ended(Side::Recipient, MigrationEnd::Aborted);
        m.moved(Side::Donor, 1000);
        m.moved(Side::Recipient, 24);
        m.critical_section(Duration::from_millis(3));
        metrics.range_deletions.finished(7);
        let text = metrics.registry().render();
        has(&text, r#"shoal_migrations_total{outcome="committed",role="donor"} 2"#);
        has(&text, r#"shoal_migrations_total{outcome="aborted",role="recipient"} 1"#);
        has(&text, r#"shoal_migrations_total{outcome="refused",role="donor"} 0"#);
        has(&text, r#"shoal_migration_bytes_total{role="donor"} 1000"#);
        has(&text, r#"shoal_migration_bytes_total{role="recipient"} 24"#);
        has(&text, "shoal_migration_critical_section_seconds_count 1");
        has(&text, r#"shoal_migration_critical_section_seconds_bucket{le="0.0032"} 1"#);
        has(&text, "shoal_range_deletions_total 1");
        has(&text, "shoal_range_deletion_documents_total 7");
    }
}
