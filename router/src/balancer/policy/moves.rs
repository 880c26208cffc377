//! Moves, in priority order across all collections: chunks off draining shards, chunks into their
//! zones, then per zone (and the no-zone remainder) data-size imbalance (MongoDB 7: the gap between
//! the fullest and emptiest eligible shard above 3 × the chunk size), then load imbalance.
//!
//! Invariants: each shard is in `busy` once it is the donor or recipient of a move, and a busy
//! shard takes part in no other move; a jumbo chunk, a chunk split this round, or a chunk that
//! straddles a zone boundary is never moved; the recipient is non-draining and, for a chunk inside
//! a zone range, in that zone. Candidates are compared by (amount, shard id) so ties are stable.

use std::collections::{BTreeMap, BTreeSet};

use shoal_proto::catalog::{Chunk, ClusterCatalogView, ShardId};

use super::view::{CollView, bytes, ops};
use super::zones::{Placement, eligible_shards, zones_in};
use super::{Action, CollRound, Decision, MoveReason, Params, Plan};

pub(super) fn plan_moves(
    catalog: &ClusterCatalogView,
    rounds: &mut [CollRound<'_>],
    params: &Params,
    busy: &mut BTreeSet<ShardId>,
    plan: &mut Plan,
) {
    for r in rounds.iter_mut() {
        draining(catalog, r, busy, plan);
    }
    for r in rounds.iter_mut() {
        zone_violations(catalog, r, busy, plan);
    }
    for r in rounds.iter_mut() {
        for group in groups(&r.view) {
            data_imbalance(catalog, r, group, busy, plan);
        }
    }
    for r in rounds.iter_mut() {
        for group in groups(&r.view) {
            load_imbalance(catalog, r, group, params, busy, plan);
        }
    }
}

/// The balancing groups of a collection: the no-zone remainder, then each zone with ranges.
fn groups<'a>(view: &CollView<'a>) -> Vec<Option<&'a str>> {
    std::iter::once(None).chain(zones_in(view.ranges).into_iter().map(Some)).collect()
}

fn in_group(p: Placement<'_>, group: Option<&str>) -> bool {
    match (p, group) {
        (Placement::Free, None) => true,
        (Placement::Zone(z), Some(g)) => z == g,
        _ => false,
    }
}

fn movable(r: &CollRound<'_>, chunk: &Chunk) -> bool {
    !chunk.jumbo && !r.frozen.contains(&chunk.min) && r.view.placement(chunk) != Placement::Crossing
}

/// Bytes of the collection on every shard of the cluster (zero for a shard without chunks).
fn totals(catalog: &ClusterCatalogView, view: &CollView<'_>) -> BTreeMap<ShardId, u64> {
    let mut totals: BTreeMap<ShardId, u64> = catalog.shards().keys().map(|s| (s.clone(), 0)).collect();
    for chunk in view.chunks() {
        *totals.entry(chunk.shard.clone()).or_default() += view.bytes(chunk).0;
    }
    totals
}

/// The non-busy candidate holding the least, ties to the lower id.
fn least_loaded(candidates: &[ShardId], busy: &BTreeSet<ShardId>, totals: &BTreeMap<ShardId, u64>) -> Option<ShardId> {
    candidates
        .iter()
        .filter(|s| !busy.contains(*s))
        .min_by_key(|s| (totals.get(*s).copied().unwrap_or(0), (*s).clone()))
        .cloned()
}

/// The move of `chunk` to `to`; both shards become busy.
fn emit(
    view: &CollView<'_>,
    chunk: &Chunk,
    to: &ShardId,
    reason: MoveReason,
    why: String,
    busy: &mut BTreeSet<ShardId>,
) -> Decision {
    let action = Action::Move {
        ns: view.ns.to_owned(),
        epoch: view.coll.epoch,
        min: chunk.min.clone(),
        max: chunk.max.clone(),
        version: chunk.version,
        from: chunk.shard.clone(),
        to: to.clone(),
        reason,
    };
    busy.insert(chunk.shard.clone());
    busy.insert(to.clone());
    Decision { action, why }
}

fn draining(catalog: &ClusterCatalogView, r: &mut CollRound<'_>, busy: &mut BTreeSet<ShardId>, plan: &mut Plan) {
    let view = &r.view;
    let ns = view.ns;
    let totals = totals(catalog, view);
    for chunk in view.chunks() {
        if !catalog.shard(&chunk.shard).is_some_and(|s| s.is_draining()) {
            continue;
        }
        r.needs_work = true;
        if chunk.jumbo {
            plan.notes.push(format!(
                "chunk {} of {ns} on draining shard {} is jumbo and is not moved; the shard cannot be removed \
                 until its jumbo flag is cleared and it is split or moved by hand.",
                view.range(chunk),
                chunk.shard
            ));
            continue;
        }
        let Some(group) = view.placement(chunk).group() else { continue };
        if !movable(r, chunk) || busy.contains(&chunk.shard) {
            continue;
        }
        let eligible = eligible_shards(catalog, group.as_deref());
        let among = match &group {
            Some(z) => format!("the non-draining shards of zone {z}"),
            None => "the non-draining shards".to_owned(),
        };
        if eligible.is_empty() {
            plan.notes.push(format!(
                "chunk {} of {ns} on draining shard {} has nowhere to go: {among} are none.",
                view.range(chunk),
                chunk.shard
            ));
            continue;
        }
        let Some(to) = least_loaded(&eligible, busy, &totals) else { continue };
        let why = format!(
            "{} is draining; chunk {} of {ns} ({}) moves to {to}, which holds the least of {ns} ({}) among {among}.",
            chunk.shard,
            view.range(chunk),
            bytes(view.bytes(chunk).0),
            bytes(totals.get(&to).copied().unwrap_or(0)),
        );
        plan.decisions.push(emit(&r.view, chunk, &to, MoveReason::Draining, why, busy));
        r.needs_work = true;
    }
}

fn zone_violations(catalog: &ClusterCatalogView, r: &mut CollRound<'_>, busy: &mut BTreeSet<ShardId>, plan: &mut Plan) {
    let view = &r.view;
    let ns = view.ns;
    let totals = totals(catalog, view);
    for chunk in view.chunks() {
        let Placement::Zone(zone) = view.placement(chunk) else { continue };
        match catalog.shard(&chunk.shard) {
            Some(s) if s.is_draining() || s.zones.contains(zone) => continue,
            _ => {}
        }
        r.needs_work = true;
        if chunk.jumbo {
            plan.notes.push(format!(
                "chunk {} of {ns} belongs in zone {zone} but is jumbo and stays on {}.",
                view.range(chunk),
                chunk.shard
            ));
            continue;
        }
        if !movable(r, chunk) || busy.contains(&chunk.shard) {
            continue;
        }
        let eligible = eligible_shards(catalog, Some(zone));
        if eligible.is_empty() {
            plan.notes.push(format!(
                "chunk {} of {ns} belongs in zone {zone}, which has no non-draining shard; it stays on {}.",
                view.range(chunk),
                chunk.shard
            ));
            continue;
        }
        let Some(to) = least_loaded(&eligible, busy, &totals) else { continue };
        let why = format!(
            "chunk {} of {ns} lies in zone {zone} but sits on {}, which is not in {zone}; it moves to {to}, the \
             zone's least loaded shard ({} of {ns}).",
            view.range(chunk),
            chunk.shard,
            bytes(totals.get(&to).copied().unwrap_or(0)),
        );
        plan.decisions.push(emit(&r.view, chunk, &to, MoveReason::ZoneViolation, why, busy));
        r.needs_work = true;
    }
}

/// The fullest and the emptiest of the non-busy, non-skipped shards in `amounts`: the donor is
/// the largest (ties to the lower id), the recipient the smallest of the others (ties likewise).
fn pair<T: Copy + PartialOrd>(
    amounts: &BTreeMap<ShardId, T>,
    busy: &BTreeSet<ShardId>,
    skip: &BTreeSet<ShardId>,
) -> Option<(ShardId, T, ShardId, T)> {
    let avail: Vec<(&ShardId, T)> =
        amounts.iter().filter(|(s, _)| !busy.contains(*s) && !skip.contains(*s)).map(|(s, a)| (s, *a)).collect();
    let mut donor: Option<(&ShardId, T)> = None;
    for (s, a) in &avail {
        if donor.is_none_or(|(_, d)| *a > d) {
            donor = Some((s, *a));
        }
    }
    let (d, da) = donor?;
    let mut recipient: Option<(&ShardId, T)> = None;
    for (s, a) in avail.iter().filter(|(s, _)| *s != d) {
        if recipient.is_none_or(|(_, r)| *a < r) {
            recipient = Some((s, *a));
        }
    }
    let (r, ra) = recipient?;
    Some((d.clone(), da, r.clone(), ra))
}

fn group_label(ns: &str, group: Option<&str>) -> String {
    match group {
        Some(z) => format!("{ns} in zone {z}"),
        None => ns.to_owned(),
    }
}

fn data_imbalance(
    catalog: &ClusterCatalogView,
    r: &mut CollRound<'_>,
    group: Option<&str>,
    busy: &mut BTreeSet<ShardId>,
    plan: &mut Plan,
) {
    let eligible = eligible_shards(catalog, group);
    if eligible.len() < 2 {
        return;
    }
    let view = &r.view;
    let label = group_label(view.ns, group);
    let threshold = view.max_chunk_bytes.saturating_mul(3);
    let mut sizes: BTreeMap<ShardId, u64> = eligible.iter().map(|s| (s.clone(), 0)).collect();
    let mut estimated = false;
    let members: Vec<&Chunk> = view.chunks().filter(|c| in_group(view.placement(c), group)).collect();
    for chunk in &members {
        if let Some(size) = sizes.get_mut(&chunk.shard) {
            let (b, e) = view.bytes(chunk);
            *size += b;
            estimated |= e;
        }
    }
    let (lo, hi) = (sizes.values().min().copied().unwrap_or(0), sizes.values().max().copied().unwrap_or(0));
    if hi - lo > threshold {
        // Not balanced, even if busy shards keep this round from doing anything about it.
        r.needs_work = true;
    }
    let mut skip = BTreeSet::new();
    while let Some((donor, d, to, t)) = pair(&sizes, busy, &skip) {
        let gap = d - t;
        if gap <= threshold {
            break;
        }
        let best = members
            .iter()
            .filter(|c| c.shard == donor && movable(r, c))
            .min_by_key(|c| (r.view.bytes(c).0.abs_diff(gap / 2), c.min.clone()));
        let Some(chunk) = best else {
            plan.notes.push(format!(
                "{donor} holds {} of {label} but none of its chunks there can move (jumbo or being split).",
                bytes(d)
            ));
            skip.insert(donor);
            continue;
        };
        let why = format!(
            "{donor} holds {} of {label} and {to} {}; the gap exceeds 3 × {}, so chunk {} ({}) moves from {donor} \
             to {to}{}.",
            bytes(d),
            bytes(t),
            bytes(r.view.max_chunk_bytes),
            r.view.range(chunk),
            bytes(r.view.bytes(chunk).0),
            if estimated { " (chunks without statistics counted at half the chunk size)" } else { "" }
        );
        plan.decisions.push(emit(&r.view, chunk, &to, MoveReason::DataImbalance, why, busy));
        r.needs_work = true;
    }
}

fn load_imbalance(
    catalog: &ClusterCatalogView,
    r: &mut CollRound<'_>,
    group: Option<&str>,
    params: &Params,
    busy: &mut BTreeSet<ShardId>,
    plan: &mut Plan,
) {
    let eligible = eligible_shards(catalog, group);
    if eligible.len() < 2 {
        return;
    }
    let view = &r.view;
    let label = group_label(view.ns, group);
    let mut loads: BTreeMap<ShardId, f64> = eligible.iter().map(|s| (s.clone(), 0.0)).collect();
    let members: Vec<&Chunk> = view.chunks().filter(|c| in_group(view.placement(c), group)).collect();
    for chunk in &members {
        if let Some(load) = loads.get_mut(&chunk.shard) {
            *load += view.ops(chunk);
        }
    }
    let mut skip = BTreeSet::new();
    while let Some((donor, d, to, t)) = pair(&loads, busy, &skip) {
        if d <= params.load_split_ops_per_sec || d <= 2.0 * t {
            break;
        }
        let gap = d - t;
        // Moving a chunk with `ops < gap` leaves the pair closer than before: no ping-pong.
        let hottest = members
            .iter()
            .filter(|c| c.shard == donor && movable(r, c))
            .map(|c| (*c, r.view.ops(c)))
            .filter(|(_, o)| *o > 0.0 && *o < gap)
            .fold(None::<(&Chunk, f64)>, |best, (c, o)| match best {
                Some((_, b)) if b >= o => best,
                _ => Some((c, o)),
            });
        let Some((chunk, o)) = hottest else {
            plan.notes.push(format!(
                "{donor} serves {} on {label}, more than twice {to}'s {}, but no movable chunk of it would even \
                 the load out (its hottest chunks need a load split first).",
                ops(d),
                ops(t)
            ));
            skip.insert(donor);
            continue;
        };
        let why = format!(
            "{donor} serves {} on {label}, over the {} threshold and more than twice {to}'s {}; its hottest chunk \
             that narrows the gap, {} at {}, moves from {donor} to {to}.",
            ops(d),
            ops(params.load_split_ops_per_sec),
            ops(t),
            r.view.range(chunk),
            ops(o)
        );
        plan.decisions.push(emit(&r.view, chunk, &to, MoveReason::LoadImbalance, why, busy));
        r.needs_work = true;
    }
}
