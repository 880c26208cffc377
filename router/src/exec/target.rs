//! Target, the second step: which shards a command goes to, from the collection's routing table
//! (its [`Placement`]) and the command's filter ([`read`], [`write`], [`primary`]); below them
//! the pure chunk targeting they rest on: which chunks (and so which shards) a filter or a
//! document can touch.
//!
//! Rules (conservative: a target set always contains every shard holding a matching document):
//! - equality (`v`, `$eq`, `$in` of plain values) on every shard-key field → those keys' chunks
//!   (hashed fields hashed);
//! - a range (`$gt`/`$gte`/`$lt`/`$lte`/equality) on the first field of a range key → the chunks
//!   the interval overlaps (a compound key's other fields are free, so the interval covers every
//!   key beginning with a value in range);
//! - anything else → every shard owning a chunk.
//!
//! Must not: evaluate filters against documents, read the catalog or contact shards (the
//! placement is looked up by the caller, see `call::with_placement`).
use std::collections::BTreeSet;
use std::ops::Bound;

use bson::{Bson, Document};
use shoal_proto::catalog::{Chunk, ChunkBound, KeyFieldKind, KeyPattern, RoutingTable, ShardId};
use shoal_query::filter::{field_equalities, field_range};
use shoal_query::shard_key;
use shoal_query::{hash, keystring};

use crate::error::CommandError;
use crate::exec::parse::{Read, ReadKind};
use crate::routing::Placement;

/// Above this many key combinations an equality target is treated as a scatter.
pub const POINTS_MAX: usize = 1024;

/// The shard-key space a filter confines matches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySpace {
    /// Exact keys.
    Points(Vec<Vec<u8>>),
    /// Every key in `[lower, upper]` (by bound kinds).
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// No confinement.
    All,
}

/// What part of the key space `filter` can match.
pub fn key_space(pattern: &KeyPattern, filter: &Document) -> KeySpace {
    if let Some(points) = points(pattern, filter) {
        return KeySpace::Points(points);
    }
    let Some(first) = pattern.fields.first() else {
        return KeySpace::All;
    };
    if first.kind == KeyFieldKind::Hashed {
        return KeySpace::All;
    }
    match field_range(filter, &first.name) {
        // A key is the concatenation of self-delimiting field encodings, so every key whose first
        // field lies in the range lies between the range's low end and the successor of its high end.
        Some(r) => {
            let lower = match r.lower {
                Bound::Included(k) | Bound::Excluded(k) => Bound::Included(k),
                Bound::Unbounded => Bound::Unbounded,
            };
            let upper = match r.upper {
                Bound::Included(k) => prefix_successor(k).map_or(Bound::Unbounded, Bound::Excluded),
                Bound::Excluded(k) if pattern.fields.len() == 1 => Bound::Excluded(k),
                Bound::Excluded(k) => prefix_successor(k).map_or(Bound::Unbounded, Bound::Excluded),
                Bound::Unbounded => Bound::Unbounded,
            };
            KeySpace::Range(lower, upper)
        }
        None => KeySpace::All,
    }
}

/// The smallest byte string above every string starting with `k` (`None`: no such string).
fn prefix_successor(mut k: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(last) = k.pop() {
        if last < u8::MAX {
            k.push(last + 1);
            return Some(k);
        }
    }
    None
}

fn points(pattern: &KeyPattern, filter: &Document) -> Option<Vec<Vec<u8>>> {
    let mut combos: Vec<Vec<Bson>> = vec![Vec::new()];
    for f in &pattern.fields {
        let values = field_equalities(filter, &f.name)?;
        if values.is_empty() || combos.len() * values.len() > POINTS_MAX {
            return None;
        }
        let mut next = Vec::with_capacity(combos.len() * values.len());
        for c in &combos {
            for v in &values {
                let v = match f.kind {
                    KeyFieldKind::Hashed => Bson::Int64(hash::hash64(v)),
                    KeyFieldKind::Range => (*v).clone(),
                };
                let mut c = c.clone();
                c.push(v);
                next.push(c);
            }
        }
        combos = next;
    }
    let mut keys: Vec<Vec<u8>> = combos.iter().map(|c| shard_key::of_values(&c.iter().collect::<Vec<_>>())).collect();
    keys.sort();
    keys.dedup();
    Some(keys)
}

/// The chunk holding `key` (a document's shard key).
pub fn chunk_of<'t>(chunks: &'t [Chunk], key: &[u8]) -> Option<&'t Chunk> {
    let bound = ChunkBound::Key(key.to_vec());
    let i = chunks.partition_point(|c| c.min <= bound);
    i.checked_sub(1).and_then(|i| chunks.get(i)).filter(|c| bound < c.max)
}

fn below_upper(min: &ChunkBound, upper: &Bound<Vec<u8>>) -> bool {
    match (min, upper) {
        (ChunkBound::Min, _) | (_, Bound::Unbounded) => true,
        (ChunkBound::Max, _) => false,
        (ChunkBound::Key(m), Bound::Included(u)) => m <= u,
        (ChunkBound::Key(m), Bound::Excluded(u)) => m < u,
    }
}

fn above_lower(max: &ChunkBound, lower: &Bound<Vec<u8>>) -> bool {
    match (max, lower) {
        (ChunkBound::Max, _) | (_, Bound::Unbounded) => true,
        (ChunkBound::Min, _) => false,
        // A chunk's max is exclusive.
        (ChunkBound::Key(m), Bound::Included(l) | Bound::Excluded(l)) => m > l,
    }
}

/// The shards owning a chunk the key space touches, sorted.
pub fn shards_for(chunks: &[Chunk], space: &KeySpace) -> BTreeSet<ShardId> {
    match space {
        KeySpace::Points(keys) => keys.iter().filter_map(|k| chunk_of(chunks, k)).map(|c| c.shard.clone()).collect(),
        KeySpace::Range(lower, upper) => chunks
            .iter()
            .filter(|c| below_upper(&c.min, upper) && above_lower(&c.max, lower))
            .map(|c| c.shard.clone())
            .collect(),
        KeySpace::All => chunks.iter().map(|c| c.shard.clone()).collect(),
    }
}

/// Where a read goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// No shard: the database does not exist, or no chunk can match. The answer is empty.
    Nowhere,
    /// One shard, sent the client's bytes as they are.
    One(ShardId),
    /// Several shards whose answers the router combines (or one, for a pipeline with a stage only
    /// the router runs).
    Many(BTreeSet<ShardId>),
}

/// Where `read` goes under `placement`.
pub fn read(read: &Read<'_>, placement: &Placement) -> Result<Route, CommandError> {
    let mut targets = match placement {
        Placement::NoDatabase => return Ok(Route::Nowhere),
        // Decoded only for sharded collections: elsewhere the bytes are forwarded untouched.
        Placement::Sharded(_) => shards(placement, &read.filter()?),
        unsharded => unsharded.all_shards(),
    };
    // `$lookup`, `$out` and `$merge` touch other collections: the router runs them, even over
    // one shard.
    if targets.len() == 1
        && !(read.kind == ReadKind::Aggregate && read.has_router_stage())
        && let Some(one) = targets.pop_first()
    {
        return Ok(Route::One(one));
    }
    Ok(if targets.is_empty() { Route::Nowhere } else { Route::Many(targets) })
}

/// Where a write goes.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteRoute {
    /// The one shard of an unsharded namespace, sent the client's bytes as they are.
    One(ShardId),
    /// A sharded collection: each document or statement is targeted by its shard key.
    ByShardKey,
}

/// Where a write goes under `placement` (a write's placement creates its database).
pub fn write(placement: &Placement) -> Result<WriteRoute, CommandError> {
    match placement {
        Placement::Unsharded { shard, .. } => Ok(WriteRoute::One(shard.clone())),
        Placement::Sharded(_) => Ok(WriteRoute::ByShardKey),
        Placement::NoDatabase => {
            Err(CommandError::new(shoal_proto::ErrorCode::NamespaceNotFound, "database not found"))
        }
    }
}

/// The database's primary shard, for commands one shard answers for the whole database.
pub fn primary(placement: &Placement) -> Result<ShardId, CommandError> {
    match placement {
        Placement::Unsharded { shard, .. } => Ok(shard.clone()),
        _ => Err(CommandError::new(shoal_proto::ErrorCode::NamespaceNotFound, "database not found")),
    }
}

/// The shards a query with `filter` must visit under `placement`.
pub fn shards(placement: &Placement, filter: &Document) -> BTreeSet<ShardId> {
    match placement {
        Placement::Sharded(t) => target(t, filter),
        other => other.all_shards(),
    }
}

/// The shards a query with `filter` must visit.
pub fn target(table: &RoutingTable, filter: &Document) -> BTreeSet<ShardId> {
    shards_for(&table.chunks, &key_space(&table.key, filter))
}

/// Whether `filter` pins the whole shard key to exactly one value (single-document writes).
pub fn is_exact_key(table: &RoutingTable, filter: &Document) -> bool {
    matches!(key_space(&table.key, filter), KeySpace::Points(p) if p.len() == 1)
}

/// Encoded single value, for tests and bounds.
pub fn encode_value(v: &Bson) -> Vec<u8> {
    keystring::encode(v)
}

#[cfg(test)]
mod tests;
