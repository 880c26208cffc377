//! What the balancer tells an operator about its work: its Prometheus series (rounds, splits,
//! moves by outcome with their durations, jumbo chunks, data bytes per collection per shard) and,
//! for the status page, the last [`RECENT_MOVES_MAX`] moves with the policy's reason for each.
//!
//! Every handle is resolved when the router starts; an event costs an atomic add, a histogram
//! observation or (moves and rounds, a few a second at most) one short `std::sync::Mutex` hold —
//! never held across an await. Only the router holding the balancer lease runs rounds, so only
//! its series move and only its page lists moves.
//!
//! Must not: decide anything (the policy does) or do I/O; the runtime calls in with what it saw.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use shoal_proto::catalog::{ClusterCatalogView, ShardId};
use shoal_telemetry::{Error, Histogram, IntCounter, IntGauge, Metrics};

use super::policy::{Action, Decision, Stats};
use crate::cmd::config_db::docs::bound_document;
use crate::routing::cache::CachedCollection;
use crate::state::RouterState;

/// Moves the status page lists (the newest first); older ones are forgotten.
pub const RECENT_MOVES_MAX: usize = 20;

/// How a move ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
}

impl Outcome {
    /// The `outcome` label and the page's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
        }
    }
}

/// One chunk move the balancer made, as the status page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct MoveRecord {
    /// Wall-clock milliseconds since the Unix epoch when it ended.
    pub at_ms: u64,
    pub ns: String,
    /// The chunk's bounds as shard-key documents (`{ k: 5 }`, `{ k: MinKey }`).
    pub min: String,
    pub max: String,
    pub from: ShardId,
    pub to: ShardId,
    /// The policy's reason (`DataImbalance`, `Draining`, ...) and its sentence.
    pub reason: String,
    pub why: String,
    pub outcome: Outcome,
    pub millis: u64,
    pub error: Option<String>,
}

/// What the last round saw that the page and the pulled gauges read.
#[derive(Default)]
struct Observed {
    /// Newest first, at most [`RECENT_MOVES_MAX`].
    moves: VecDeque<MoveRecord>,
    /// Bytes per (collection, shard) from the last round's chunk statistics.
    data_bytes: BTreeMap<(String, ShardId), u64>,
}

/// `balancer_rounds_total`, `balancer_splits_total`, `balancer_moves_total{outcome}`,
/// `balancer_move_duration_seconds`, `balancer_jumbo_chunks` and the recent moves.
pub struct BalancerMetrics {
    rounds: IntCounter,
    splits: IntCounter,
    moves_ok: IntCounter,
    moves_failed: IntCounter,
    move_seconds: Histogram,
    jumbo_chunks: IntGauge,
    observed: Mutex<Observed>,
}

impl BalancerMetrics {
    pub fn new(metrics: &Metrics) -> Result<Self, Error> {
        let moves = metrics.counter_vec(
            "balancer_moves_total",
            "Chunk moves the balancer ran on this router, by outcome (ok, failed)",
            &["outcome"],
        )?;
        Ok(Self {
            rounds: metrics.counter("balancer_rounds_total", "Balancer rounds run while this router held the lease")?,
            splits: metrics.counter("balancer_splits_total", "Chunk splits the balancer made (zone, size or load)")?,
            moves_ok: moves.with_label_values(&[Outcome::Ok.as_str()]),
            moves_failed: moves.with_label_values(&[Outcome::Failed.as_str()]),
            move_seconds: metrics
                .latency("balancer_move_duration_seconds", "How long each balancer chunk move took, either outcome")?,
            jumbo_chunks: metrics
                .gauge("balancer_jumbo_chunks", "Chunks marked jumbo, as the last balancer round read the catalog")?,
            observed: Mutex::default(),
        })
    }

    fn observed(&self) -> MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A round began on the lease holder (idle or not).
    pub fn round(&self) {
        self.rounds.inc();
    }

    /// The round's catalog snapshot: the jumbo chunks in it.
    pub fn saw_catalog(&self, catalog: &ClusterCatalogView) {
        let jumbo = catalog.collections().values().flat_map(|c| c.chunks.values()).filter(|c| c.jumbo).count();
        self.jumbo_chunks.set(i64::try_from(jumbo).unwrap_or(i64::MAX));
    }

    /// The round's chunk statistics, added up per collection and owning shard (statistics of
    /// another chunk version than the catalog's are left out, as the policy leaves them out).
    pub fn saw_stats(&self, catalog: &ClusterCatalogView, stats: &Stats) {
        self.observed().data_bytes = data_bytes(catalog, stats);
    }

    /// A decision was carried out (`result`: did it succeed, else its error) after `elapsed`.
    pub fn done(&self, catalog: &ClusterCatalogView, d: &Decision, elapsed: Duration, error: Option<&str>) {
        match &d.action {
            Action::Split { .. } if error.is_none() => self.splits.inc(),
            Action::Move { .. } => {
                let outcome = if error.is_none() { Outcome::Ok } else { Outcome::Failed };
                match outcome {
                    Outcome::Ok => self.moves_ok.inc(),
                    Outcome::Failed => self.moves_failed.inc(),
                }
                self.move_seconds.observe(elapsed.as_secs_f64());
                if let Some(record) = move_record(catalog, d, outcome, elapsed, error, super::runtime::now_ms()) {
                    self.remember(record);
                }
            }
            _ => {}
        }
    }

    fn remember(&self, record: MoveRecord) {
        let mut observed = self.observed();
        observed.moves.push_front(record);
        observed.moves.truncate(RECENT_MOVES_MAX);
    }

    /// The recent moves, newest first.
    pub fn recent_moves(&self) -> Vec<MoveRecord> {
        self.observed().moves.iter().cloned().collect()
    }

    /// Bytes per (collection, shard) the last round's statistics reported (empty on a router
    /// that does not hold the lease).
    pub fn data_bytes(&self) -> BTreeMap<(String, ShardId), u64> {
        self.observed().data_bytes.clone()
    }
}

/// The page's record of a move decision; `None` for any other action.
fn move_record(
    catalog: &ClusterCatalogView,
    d: &Decision,
    outcome: Outcome,
    elapsed: Duration,
    error: Option<&str>,
    at_ms: u64,
) -> Option<MoveRecord> {
    let Action::Move { ns, min, max, from, to, reason, .. } = &d.action else { return None };
    let key = catalog.collection(ns).map(|c| &c.key);
    Some(MoveRecord {
        at_ms,
        ns: ns.clone(),
        min: bound_document(key, min).to_string(),
        max: bound_document(key, max).to_string(),
        from: from.clone(),
        to: to.clone(),
        reason: format!("{reason:?}"),
        why: d.why.clone(),
        outcome,
        millis: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        error: error.map(str::to_owned),
    })
}

fn data_bytes(catalog: &ClusterCatalogView, stats: &Stats) -> BTreeMap<(String, ShardId), u64> {
    let mut out = BTreeMap::new();
    for (ns, chunks) in &stats.chunks {
        let Some(coll) = catalog.collection(ns) else { continue };
        for (min, (version, s)) in chunks {
            if let Some(chunk) = coll.chunks.get(min).filter(|c| c.version == *version) {
                *out.entry((ns.clone(), chunk.shard.clone())).or_insert(0) += s.bytes;
            }
        }
    }
    out
}

/// Chunks per (collection, shard) of the routing tables this router has cached (collections it
/// routed a request for since they were last refreshed).
pub fn cached_chunks(state: &RouterState) -> BTreeMap<(String, ShardId), u64> {
    let mut out = BTreeMap::new();
    for (ns, cached) in state.routing.loaded() {
        if let CachedCollection::Sharded(table) = cached {
            for chunk in &table.chunks {
                *out.entry((ns.clone(), chunk.shard.clone())).or_insert(0) += 1;
            }
        }
    }
    out
}

/// The scrape-time gauges `chunks{collection,shard}` (this router's cached routing tables) and
/// `data_bytes{collection,shard}` (the last balancer round's statistics).
pub fn register_pulled(metrics: &Metrics, state: Weak<RouterState>) -> Result<(), Error> {
    let labels = &["collection", "shard"];
    let weak = state.clone();
    metrics.pulled_vec(
        "chunks",
        "Chunks per collection and shard, in the routing tables this router has cached",
        labels,
        move |g| {
            if let Some(s) = weak.upgrade() {
                for ((ns, shard), n) in cached_chunks(&s) {
                    g.with_label_values(&[&ns, &shard]).set(n as f64);
                }
            }
        },
    )?;
    metrics.pulled_vec(
        "data_bytes",
        "Bytes per collection and shard, from the chunk statistics of the last balancer round on this router",
        labels,
        move |g| {
            if let Some(s) = state.upgrade() {
                for ((ns, shard), n) in s.balancer_metrics.data_bytes() {
                    g.with_label_values(&[&ns, &shard]).set(n as f64);
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::{Chunk, ChunkBound, ChunkVersion, Collection, Epoch, KeyPattern, Timestamp};

    use super::super::policy::{ChunkStats, MoveReason};
    use super::*;

    fn key(n: i32) -> ChunkBound {
        ChunkBound::Key(shoal_query::keystring::encode(&bson::Bson::Int32(n)))
    }

    fn catalog() -> ClusterCatalogView {
        let v = |minor| ChunkVersion::new(1, minor);
        let mut chunks = BTreeMap::new();
        for (min, max, shard, minor, jumbo) in [
            (ChunkBound::Min, key(0), "s0", 0, false),
            (key(0), key(10), "s0", 1, true),
            (key(10), ChunkBound::Max, "s1", 2, false),
        ] {
            let mut c = Chunk::new(min.clone(), max, shard, v(minor));
            c.jumbo = jumbo;
            chunks.insert(min, c);
        }
        let coll = Collection {
            ns: "db.c".into(),
            uuid: uuid::Uuid::nil(),
            epoch: Epoch([1; 12]),
            timestamp: Timestamp::default(),
            key: KeyPattern::range(&["k"]),
            unique: false,
            no_balance: false,
            no_auto_merge: false,
            max_chunk_size_bytes: None,
            version: v(2),
            chunks,
        };
        ClusterCatalogView::default().with_collections(BTreeMap::from([("db.c".to_owned(), coll)]))
    }

    fn move_of(min: ChunkBound, max: ChunkBound) -> Decision {
        Decision {
            action: Action::Move {
                ns: "db.c".into(),
                epoch: Epoch([1; 12]),
                min,
                max,
                version: ChunkVersion::new(1, 0),
                from: "s0".into(),
                to: "s1".into(),
                reason: MoveReason::DataImbalance,
            },
            why: "s0 holds 3 MiB more".into(),
        }
    }

    #[test]
    fn moves_are_counted_by_outcome_and_the_newest_are_remembered() {
        let metrics = Metrics::new().unwrap();
        let b = BalancerMetrics::new(&metrics).unwrap();
        let catalog = catalog();
        b.done(&catalog, &move_of(ChunkBound::Min, key(0)), Duration::from_millis(30), None);
        b.done(&catalog, &move_of(key(0), key(10)), Duration::from_millis(5), Some("jumbo"));
        // One more than the kept moves: the first is forgotten, the failed one is the oldest kept.
        for _ in 0..RECENT_MOVES_MAX - 1 {
            b.done(&catalog, &move_of(key(10), ChunkBound::Max), Duration::ZERO, None);
        }
        let text = metrics.render();
        assert!(text.contains(&format!(r#"shoal_balancer_moves_total{{outcome="ok"}} {RECENT_MOVES_MAX}"#)), "{text}");
        assert!(text.contains(r#"shoal_balancer_moves_total{outcome="failed"} 1"#), "{text}");
        assert!(
            text.contains(&format!("shoal_balancer_move_duration_seconds_count {}", RECENT_MOVES_MAX + 1)),
            "{text}"
        );
        let recent = b.recent_moves();
        assert_eq!(recent.len(), RECENT_MOVES_MAX);
        assert_eq!(recent[0].min, r#"{ "k": 10 }"#);
        assert_eq!(recent[0].max, r#"{ "k": MaxKey }"#);
        let failed = &recent[RECENT_MOVES_MAX - 1];
        assert_eq!((failed.outcome, failed.error.as_deref()), (Outcome::Failed, Some("jumbo")));
        assert_eq!((failed.reason.as_str(), failed.why.as_str()), ("DataImbalance", "s0 holds 3 MiB more"));
        assert_eq!((failed.from.as_str(), failed.to.as_str(), failed.millis), ("s0", "s1", 5));
    }

    #[test]
    fn rounds_see_jumbo_chunks_and_data_bytes_of_current_chunk_versions() {
        let metrics = Metrics::new().unwrap();
        let b = BalancerMetrics::new(&metrics).unwrap();
        let catalog = catalog();
        b.round();
        b.saw_catalog(&catalog);
        let mut stats = Stats::default();
        let bytes = |n| ChunkStats { bytes: n, ..ChunkStats::default() };
        let chunks = stats.chunks.entry("db.c".into()).or_default();
        chunks.insert(ChunkBound::Min, (ChunkVersion::new(1, 0), bytes(100)));
        chunks.insert(key(0), (ChunkVersion::new(1, 1), bytes(20)));
        chunks.insert(key(10), (ChunkVersion::new(9, 9), bytes(7)));
        stats.chunks.entry("db.gone".into()).or_default().insert(ChunkBound::Min, (ChunkVersion::ZERO, bytes(1)));
        b.saw_stats(&catalog, &stats);
        assert_eq!(b.data_bytes(), BTreeMap::from([(("db.c".to_owned(), "s0".to_owned()), 120)]));
        let text = metrics.render();
        assert!(text.contains("shoal_balancer_rounds_total 1"), "{text}");
        assert!(text.contains("shoal_balancer_jumbo_chunks 1"), "{text}");
    }
}
