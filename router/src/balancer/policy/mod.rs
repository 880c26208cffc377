//! The balancer's decision core: catalog + statistics + memory in, a [`Plan`] out. Pure.
//!
//! Priorities (MongoDB's balancer order), highest first: splits that must happen before a move (zone
//! boundaries, chunks over the size limit, hot chunks with a load split key); moves off draining
//! shards; moves into zones; data-size imbalance; load imbalance; then merges of small cold
//! neighbours, throttled. At most one migration per shard (as donor or recipient) per plan.
//!
//! ```text
//!  catalog snapshot ─┐
//!  shard statistics ─┼─> splits ──> moves (draining > zones > data > load) ──> merges ──> Plan
//!  balancer memory  ─┘   (a chunk split or marked jumbo this round is neither moved nor merged)
//! ```
//!
//! Invariants of every plan (unit tests and a property test check them):
//! - a shard takes part in at most one `Move` (donor or recipient), and has no `Merge` if it does;
//! - a jumbo chunk is never split by size or load, nor moved; a chunk that failed to split
//!   `split_attempts_before_jumbo` times is marked jumbo instead of being split again;
//! - a chunk inside a zone range only ever moves to a non-draining shard of that zone, a chunk that
//!   straddles a range boundary is split at the boundary and not moved;
//! - statistics reported for another version of a chunk are ignored;
//! - the same inputs give the same plan: maps are iterated in key order, ties go to the lower
//!   shard id, and `now_ms` is the only clock.
//!
//! Data size per shard is the sum of its chunks' reported bytes; a chunk without current
//! statistics counts as half the maximum chunk size (the expected size of a chunk that grew to the
//! limit and was halved), so a freshly sharded collection is spread before any shard reports.
//! Must not: do I/O, read a clock, or check the balancer mode and window (the caller does).

mod merges;
mod moves;
mod splits;
mod view;
mod zones;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use shoal_proto::catalog::{ChunkBound, ChunkVersion, ClusterCatalogView, Epoch, ShardId};
use shoal_proto::config::CatalogPart;

use view::CollView;

/// What a shard reported for one chunk (`_shoalChunkStats`). Sizes are exact as of `at_ms`;
/// load is over the shard's sampling window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChunkStats {
    pub bytes: u64,
    pub docs: u64,
    /// Requests per second that touched the chunk, over the shard's load window.
    pub ops_per_sec: f64,
    /// The sampled key that best balances the chunk's load (encoded shard key, as split points are).
    pub load_split_key: Option<Vec<u8>>,
    /// Why no load split key was found (too few samples, imbalance, too many contained spans).
    pub no_load_split_reason: Option<String>,
    /// The shard had enough samples and no split would spread the load (one hot key, or requests
    /// crossing every candidate): a hot chunk like that counts as a failed split attempt.
    pub load_unsplittable: bool,
}

/// Statistics by namespace, then by chunk `min` (the chunk the shard was asked about, with the
/// version the router read; stale entries are ignored by the policy).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub chunks: BTreeMap<String, BTreeMap<ChunkBound, (ChunkVersion, ChunkStats)>>,
}

impl Stats {
    /// Client requests per second over every chunk the shards answered for.
    pub fn ops_per_sec(&self) -> f64 {
        self.chunks.values().flat_map(|c| c.values()).map(|(_, s)| s.ops_per_sec).sum()
    }
}

/// Tunables (router flags; defaults in [`Params::default`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// A chunk above this many ops/s is hot (CockroachDB's default is 2500 QPS).
    pub load_split_ops_per_sec: f64,
    /// How long a chunk must stay hot before it is split by load.
    pub load_split_after_ms: u64,
    /// A boundary made by a load split is not merged away for this long (hysteresis).
    pub merge_cooldown_ms: u64,
    /// Failed split attempts of one chunk before it is marked jumbo.
    pub split_attempts_before_jumbo: u32,
    /// Merges per round (throttle).
    pub merges_per_round: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            load_split_ops_per_sec: 2500.0,
            load_split_after_ms: 10_000,
            merge_cooldown_ms: 10 * 60 * 1000,
            split_attempts_before_jumbo: 3,
            merges_per_round: 1,
        }
    }
}

/// What the balancer remembers between rounds (in the router holding the lease; a new holder
/// starts empty and so waits `merge_cooldown_ms` before merging anything).
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// When the runtime started holding the lease.
    pub since_ms: u64,
    /// Since when each chunk (ns, min) has been continuously hot.
    pub hot_since_ms: BTreeMap<(String, ChunkBound), u64>,
    /// Failed split attempts by chunk (ns, min, version).
    pub failed_splits: BTreeMap<(String, ChunkBound, ChunkVersion), u32>,
    /// Boundaries made by load splits, with when (ns, boundary) → ms.
    pub load_split_boundaries: BTreeMap<(String, Vec<u8>), u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SplitAt {
    /// At these interior keys (zone boundaries, the load split key).
    Points(Vec<Vec<u8>>),
    /// At every half chunk size of data (one point for a chunk just over the size, many for a
    /// chunk far over it), which the owning shard computes.
    BySize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitReason {
    ZoneBoundary,
    Size,
    Load,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveReason {
    Draining,
    ZoneViolation,
    DataImbalance,
    LoadImbalance,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Split {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        max: ChunkBound,
        version: ChunkVersion,
        at: SplitAt,
        reason: SplitReason,
    },
    Move {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        max: ChunkBound,
        version: ChunkVersion,
        from: ShardId,
        to: ShardId,
        reason: MoveReason,
    },
    /// Merge the chunks exactly covering `[min, max)` (all on `shard`), listed by version in key
    /// order.
    Merge {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        max: ChunkBound,
        versions: Vec<ChunkVersion>,
        shard: ShardId,
    },
    MarkJumbo {
        ns: String,
        epoch: Epoch,
        min: ChunkBound,
        max: ChunkBound,
        version: ChunkVersion,
    },
}

/// One action and the sentence that explains it (logged and written to `config.actionlog`).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub why: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    /// Why something that looked needed was not done (no split key, jumbo, noBalance, window...).
    pub notes: Vec<String>,
    /// Collections found balanced this round (for `balancerCollectionStatus`).
    pub balanced: BTreeSet<String>,
    /// Chunks (ns, min, version) that needed a split this round and cannot have one (hot, with the
    /// load on one key): the runtime counts each as a failed split attempt, as it does a split the
    /// shard refused, so the chunk is marked jumbo after `split_attempts_before_jumbo` rounds.
    pub unsplittable: Vec<(String, ChunkBound, ChunkVersion)>,
}

/// The parts of the catalog [`plan`] reads (and the runtime that carries its plan out).
pub const INPUT: &[CatalogPart] =
    &[CatalogPart::Shards, CatalogPart::Collections, CatalogPart::Zones, CatalogPart::Settings];

/// The actions for this round. The caller has already checked the balancer mode and window; a
/// collection with `noBalance` gets no action and a note.
pub fn plan(catalog: &ClusterCatalogView, stats: &Stats, memory: &Memory, params: &Params, now_ms: u64) -> Plan {
    let mut plan = Plan::default();
    let mut rounds = Vec::new();
    for coll in catalog.collections().values() {
        if coll.no_balance {
            plan.notes.push(format!("{} is skipped: balancing is disabled for it (noBalance).", coll.ns));
            continue;
        }
        let mut round =
            CollRound { view: CollView::new(catalog, coll, stats), frozen: BTreeSet::new(), needs_work: false };
        splits::plan_splits(&mut round, memory, params, now_ms, &mut plan);
        rounds.push(round);
    }
    let mut busy = BTreeSet::new();
    moves::plan_moves(catalog, &mut rounds, params, &mut busy, &mut plan);
    if catalog.settings().automerge {
        merges::plan_merges(&rounds, &busy, memory, params, now_ms, &mut plan);
    }
    plan.balanced.extend(rounds.iter().filter(|r| !r.needs_work).map(|r| r.view.ns.to_owned()));
    plan
}

/// Records which chunks are hot now: a chunk reported at or above the load threshold keeps (or
/// starts) its `hot_since_ms`; every other entry is dropped, since nothing says it is still hot
/// (a cold report, a chunk that no longer exists, or a collection that was not reported).
pub fn observe_hot(memory: &mut Memory, stats: &Stats, params: &Params, now_ms: u64) {
    let mut hot = BTreeMap::new();
    for (ns, chunks) in &stats.chunks {
        for (min, (_, s)) in chunks {
            if s.ops_per_sec >= params.load_split_ops_per_sec {
                let key = (ns.clone(), min.clone());
                let since = memory.hot_since_ms.get(&key).copied().unwrap_or(now_ms);
                hot.insert(key, since);
            }
        }
    }
    memory.hot_since_ms = hot;
}

/// One collection's state during a round.
struct CollRound<'a> {
    view: CollView<'a>,
    /// Chunks (by `min`) split or marked jumbo this round: they are neither moved nor merged.
    frozen: BTreeSet<ChunkBound>,
    /// A split, jumbo mark or move was planned, or a needed move could not be (busy shards, jumbo
    /// chunks on a draining shard): the collection is not balanced.
    needs_work: bool,
}
