//! Merges of small, cold neighbours (MongoDB's automerger), last and throttled: runs of adjacent
//! chunks on one shard whose combined size is at most a quarter of the chunk size and whose
//! combined load is under a quarter of the load-split threshold, so a merged chunk is neither
//! split again by size nor by load soon after.
//!
//! Invariants: nothing is merged until `merge_cooldown_ms` after the lease holder started (it does
//! not know which boundaries recent load splits made before it) nor across a boundary a load split
//! made less than `merge_cooldown_ms` ago, nor across a zone range bound; only chunks with current
//! statistics, not jumbo, not split this round, on shards with no move this round; at most
//! `merges_per_round` merges per plan; none in a collection with `enableAutoMerge: false`.

use std::collections::BTreeSet;

use shoal_proto::catalog::{Chunk, ChunkBound, ShardId};

use super::view::{bytes, ops};
use super::zones::{Placement, is_range_bound};
use super::{Action, CollRound, Decision, Memory, Params, Plan};

pub(super) fn plan_merges(
    rounds: &[CollRound<'_>],
    busy: &BTreeSet<ShardId>,
    memory: &Memory,
    params: &Params,
    now_ms: u64,
    plan: &mut Plan,
) {
    if memory.since_ms.saturating_add(params.merge_cooldown_ms) > now_ms {
        return;
    }
    let mut budget = params.merges_per_round;
    for r in rounds.iter().filter(|r| !r.view.coll.no_auto_merge) {
        if budget == 0 {
            return;
        }
        merge_runs(r, busy, memory, params, now_ms, &mut budget, plan);
    }
}

fn merge_runs(
    r: &CollRound<'_>,
    busy: &BTreeSet<ShardId>,
    memory: &Memory,
    params: &Params,
    now_ms: u64,
    budget: &mut usize,
    plan: &mut Plan,
) {
    let view = &r.view;
    let ns = view.ns;
    let bytes_max = view.max_chunk_bytes / 4;
    let ops_max = params.load_split_ops_per_sec / 4.0;
    // A chunk that may take part in a merge at all, with its size and load.
    let candidate = |c: &Chunk| -> Option<(u64, f64)> {
        let s = view.stats(c)?;
        let ok = !c.jumbo
            && !r.frozen.contains(&c.min)
            && !busy.contains(&c.shard)
            && view.placement(c) != Placement::Crossing;
        ok.then_some((s.bytes, s.ops_per_sec))
    };
    let recent_load_split = |b: &ChunkBound| match b {
        ChunkBound::Key(k) => memory
            .load_split_boundaries
            .get(&(ns.to_owned(), k.clone()))
            .is_some_and(|at| at.saturating_add(params.merge_cooldown_ms) > now_ms),
        _ => false,
    };
    let chunks: Vec<&Chunk> = view.chunks().collect();
    let mut i = 0;
    while i < chunks.len() && *budget > 0 {
        let Some((mut total_bytes, mut total_ops)) = candidate(chunks[i]) else {
            i += 1;
            continue;
        };
        let first = chunks[i];
        let mut j = i + 1;
        while let Some(next) = chunks.get(j) {
            let Some((b, o)) = candidate(next) else { break };
            let joinable = next.shard == first.shard
                && view.placement(next) == view.placement(first)
                && !is_range_bound(view.ranges, &next.min)
                && !recent_load_split(&next.min)
                && total_bytes + b <= bytes_max
                && total_ops + o < ops_max;
            if !joinable {
                break;
            }
            total_bytes += b;
            total_ops += o;
            j += 1;
        }
        if j - i >= 2 {
            let run = &chunks[i..j];
            let last = run[run.len() - 1];
            let why = format!(
                "{} adjacent chunks of {ns} on {} from {} to {} hold {} and serve {} together, within a quarter of \
                 the chunk size ({}) and under a quarter of the load threshold ({}); they are merged.",
                run.len(),
                first.shard,
                view.bound(&first.min),
                view.bound(&last.max),
                bytes(total_bytes),
                ops(total_ops),
                bytes(bytes_max),
                ops(ops_max)
            );
            let action = Action::Merge {
                ns: ns.to_owned(),
                epoch: view.coll.epoch,
                min: first.min.clone(),
                max: last.max.clone(),
                versions: run.iter().map(|c| c.version).collect(),
                shard: first.shard.clone(),
            };
            plan.decisions.push(Decision { action, why });
            *budget -= 1;
        }
        i = j;
    }
}
