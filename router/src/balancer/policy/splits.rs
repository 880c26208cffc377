//! Splits, decided before any move: a chunk straddling a zone range boundary is cut there, a
//! chunk over the size limit is cut into chunk-sized pieces, a chunk hot for `load_split_after_ms` is cut at its load
//! split key. Priority in that order, at most one split per chunk per round.
//!
//! Invariants: a jumbo chunk is never split by size or load; a chunk that has failed to split
//! `split_attempts_before_jumbo` times at its current version is marked jumbo (size, load) or
//! left alone with a note (zone boundary) instead of being tried again. A hot chunk whose shard
//! reports the load unsplittable (on one key) is a failed attempt each round it stays so
//! ([`Plan::unsplittable`]).

use shoal_proto::catalog::{Chunk, ChunkBound};

use super::view::{CollView, bytes, ops};
use super::zones::interior_boundaries;
use super::{Action, CollRound, Decision, Memory, Params, Plan, SplitAt, SplitReason};

pub(super) fn plan_splits(r: &mut CollRound<'_>, memory: &Memory, params: &Params, now_ms: u64, plan: &mut Plan) {
    for chunk in r.view.chunks() {
        if let Some(d) = decide(&r.view, chunk, memory, params, now_ms, plan) {
            r.frozen.insert(chunk.min.clone());
            r.needs_work = true;
            plan.decisions.push(d);
        }
    }
}

fn decide(
    view: &CollView<'_>,
    chunk: &Chunk,
    memory: &Memory,
    params: &Params,
    now_ms: u64,
    plan: &mut Plan,
) -> Option<Decision> {
    let ns = view.ns;
    let failed = memory.failed_splits.get(&(ns.to_owned(), chunk.min.clone(), chunk.version)).copied().unwrap_or(0);
    let gave_up = failed >= params.split_attempts_before_jumbo;

    let boundaries = interior_boundaries(view.ranges, &chunk.min, &chunk.max);
    if !boundaries.is_empty() {
        let shown = boundaries.iter().map(|b| view.key(b)).collect::<Vec<_>>().join(", ");
        if gave_up {
            plan.notes.push(format!(
                "chunk {} of {ns} crosses zone range boundaries {shown} but failed to split there {failed} times; \
                 it is left in place until an operator splits it.",
                view.range(chunk)
            ));
            return None;
        }
        let why = format!(
            "chunk {} of {ns} on {} crosses zone range boundaries {shown}; it is split there so that each part \
             lies in one zone.",
            view.range(chunk),
            chunk.shard
        );
        return Some(split(view, chunk, SplitAt::Points(boundaries), SplitReason::ZoneBoundary, why));
    }

    let stats = view.stats(chunk)?;
    let over = stats.bytes > view.max_chunk_bytes;
    let hot_for_ms = (stats.ops_per_sec >= params.load_split_ops_per_sec)
        .then(|| memory.hot_since_ms.get(&(ns.to_owned(), chunk.min.clone())))
        .flatten()
        .map(|since| now_ms.saturating_sub(*since))
        .filter(|t| *t >= params.load_split_after_ms);

    if chunk.jumbo {
        if over || hot_for_ms.is_some() {
            plan.notes.push(format!(
                "chunk {} of {ns} on {} is jumbo ({}, {}): the balancer neither splits nor moves it until its \
                 jumbo flag is cleared.",
                view.range(chunk),
                chunk.shard,
                bytes(stats.bytes),
                ops(stats.ops_per_sec)
            ));
        }
        return None;
    }

    let (at, reason, why) = if over {
        let why = format!(
            "chunk {} of {ns} on {} holds {}, more than the {} chunk size; it is split every half chunk size of data.",
            view.range(chunk),
            chunk.shard,
            bytes(stats.bytes),
            bytes(view.max_chunk_bytes)
        );
        (SplitAt::BySize, SplitReason::Size, why)
    } else if let Some(hot_ms) = hot_for_ms {
        let key = stats.load_split_key.as_ref().filter(|k| {
            let b = ChunkBound::Key((*k).clone());
            chunk.min < b && b < chunk.max
        });
        let hot = format!(
            "chunk {} of {ns} on {} has served {} (threshold {}) for {:.1} s",
            view.range(chunk),
            chunk.shard,
            ops(stats.ops_per_sec),
            ops(params.load_split_ops_per_sec),
            hot_ms as f64 / 1000.0
        );
        let Some(key) = key else {
            let reason = match (&stats.load_split_key, &stats.no_load_split_reason) {
                (Some(k), _) => format!("its load split key {} is not inside the chunk", view.key(k)),
                (None, Some(reason)) => format!("the shard found no load split key: {reason}"),
                (None, None) => "the shard found no load split key".to_owned(),
            };
            if stats.load_split_key.is_some() || !stats.load_unsplittable {
                plan.notes.push(format!("{hot} but cannot be split by load: {reason}."));
                return None;
            }
            // The samples show no split would spread the load: a failed attempt, as a refused split is.
            if gave_up {
                return Some(mark_jumbo(view, chunk, failed, params, &format!("{hot}, {reason}")));
            }
            plan.notes.push(format!(
                "{hot} but cannot be split by load: {reason} (attempt {} of {}).",
                failed + 1,
                params.split_attempts_before_jumbo
            ));
            plan.unsplittable.push((ns.to_owned(), chunk.min.clone(), chunk.version));
            return None;
        };
        let why = format!("{hot}; it is split at its load split key {}.", view.key(key));
        (SplitAt::Points(vec![key.clone()]), SplitReason::Load, why)
    } else {
        return None;
    };

    if gave_up {
        let needs = format!(
            "chunk {} of {ns} on {} needs a {} split",
            view.range(chunk),
            chunk.shard,
            if reason == SplitReason::Size { "size" } else { "load" }
        );
        return Some(mark_jumbo(view, chunk, failed, params, &needs));
    }
    Some(split(view, chunk, at, reason, why))
}

/// Marks a chunk jumbo after `failed` failed split attempts; `needs` says why it needed a split.
fn mark_jumbo(view: &CollView<'_>, chunk: &Chunk, failed: u32, params: &Params, needs: &str) -> Decision {
    let why = format!(
        "{needs}, but failed to split {failed} times (limit {}); it is marked jumbo, so the balancer stops \
         splitting and moving it.",
        params.split_attempts_before_jumbo
    );
    let action = Action::MarkJumbo {
        ns: view.ns.to_owned(),
        epoch: view.coll.epoch,
        min: chunk.min.clone(),
        max: chunk.max.clone(),
        version: chunk.version,
    };
    Decision { action, why }
}

fn split(view: &CollView<'_>, chunk: &Chunk, at: SplitAt, reason: SplitReason, why: String) -> Decision {
    let action = Action::Split {
        ns: view.ns.to_owned(),
        epoch: view.coll.epoch,
        min: chunk.min.clone(),
        max: chunk.max.clone(),
        version: chunk.version,
        at,
        reason,
    };
    Decision { action, why }
}
