//! The catalog's invariants as executable checks. `apply` runs them after every change in debug
//! builds (a violation there is a bug and panics); the unit and property tests call them directly.
//!
//! - Coverage: each sharded collection's chunks are keyed by their `min`, non-empty, contiguous,
//!   and span exactly `Min..Max`.
//! - Versions: unique within the collection, major >= 1, the collection version is the highest;
//!   across a change (same epoch) no range's version falls below what it was.
//! - References: chunks, database primaries and zone ranges name things that exist; a replica
//!   group's primary is one of its members.
//! - Zone ranges: sorted, non-empty, non-overlapping.
//! - Fencing: the token counter never goes back, and a lease's token only changes upwards.

use std::collections::BTreeSet;

use super::ClusterCatalog;
use super::leases::Leases;
use super::{CHUNK_HISTORY_ENTRIES_MAX, ChunkBound, Collection};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvariantViolation {
    #[error("chunks of '{ns}' do not cover the key space: {detail}")]
    Coverage { ns: String, detail: String },
    #[error("chunk versions of '{ns}': {detail}")]
    Versions { ns: String, detail: String },
    #[error("dangling reference: {detail}")]
    Reference { detail: String },
    #[error("zone ranges of '{ns}': {detail}")]
    ZoneRanges { ns: String, detail: String },
    #[error("fencing: {detail}")]
    Fencing { detail: String },
}

/// Coverage and version consistency of one collection.
pub fn check_collection(coll: &Collection) -> Result<(), InvariantViolation> {
    let ns = &coll.ns;
    let coverage = |detail: String| InvariantViolation::Coverage { ns: ns.clone(), detail };
    let mut expected_min = &ChunkBound::Min;
    for (key, chunk) in &coll.chunks {
        if key != &chunk.min {
            return Err(coverage(format!("chunk [{}, {}) is filed under {key}", chunk.min, chunk.max)));
        }
        if &chunk.min != expected_min {
            return Err(coverage(format!(
                "chunk [{}, {}) follows a chunk ending at {expected_min}",
                chunk.min, chunk.max
            )));
        }
        if chunk.min >= chunk.max {
            return Err(coverage(format!("empty chunk [{}, {})", chunk.min, chunk.max)));
        }
        expected_min = &chunk.max;
    }
    if expected_min != &ChunkBound::Max {
        return Err(coverage(format!("the last chunk ends at {expected_min}")));
    }

    let versions_err = |detail: String| InvariantViolation::Versions { ns: ns.clone(), detail };
    let mut seen = BTreeSet::new();
    for chunk in coll.chunks.values() {
        if chunk.version.major == 0 {
            return Err(versions_err(format!("chunk at {} has major version 0", chunk.min)));
        }
        if !seen.insert(chunk.version) {
            return Err(versions_err(format!("version {} is used twice", chunk.version)));
        }
        if chunk.history.len() > CHUNK_HISTORY_ENTRIES_MAX {
            return Err(versions_err(format!("chunk at {} keeps {} history entries", chunk.min, chunk.history.len())));
        }
    }
    match seen.last() {
        Some(max) if *max == coll.version => Ok(()),
        max => Err(versions_err(format!("collection version {} but highest chunk version {max:?}", coll.version))),
    }
}

/// No range of `after` has a lower version than the chunks covering it in `before` had.
/// Collections of different epochs are unrelated and pass.
pub fn check_versions_grew(before: &Collection, after: &Collection) -> Result<(), InvariantViolation> {
    if before.epoch != after.epoch {
        return Ok(());
    }
    let err = |detail: String| InvariantViolation::Versions { ns: after.ns.clone(), detail };
    if after.version < before.version {
        return Err(err(format!("collection version went from {} to {}", before.version, after.version)));
    }
    for chunk in after.chunks.values() {
        let containing_min = before.chunks.range(..=chunk.min.clone()).next_back().map(|(_, c)| c);
        let inner = before.chunks.range(chunk.min.clone()..).map(|(_, c)| c).take_while(|c| c.min < chunk.max);
        for old in containing_min.into_iter().chain(inner).filter(|c| c.min < chunk.max && chunk.min < c.max) {
            if chunk.version < old.version {
                return Err(err(format!(
                    "[{}, {}) has version {} but [{}, {}) had {}",
                    chunk.min, chunk.max, chunk.version, old.min, old.max, old.version
                )));
            }
        }
    }
    Ok(())
}

/// Tokens never go back.
pub fn check_fencing_grew(before: &Leases, after: &Leases) -> Result<(), InvariantViolation> {
    if after.last_token() < before.last_token() {
        let detail = format!("token counter went from {} to {}", before.last_token(), after.last_token());
        return Err(InvariantViolation::Fencing { detail });
    }
    for (name, old) in before.iter() {
        if let Some(new) = after.get(name)
            && new.token < old.token
        {
            let detail = format!("lease '{name}' token went from {} to {}", old.token, new.token);
            return Err(InvariantViolation::Fencing { detail });
        }
    }
    Ok(())
}

impl ClusterCatalog {
    /// Every invariant of the whole catalog.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let dangling = |detail: String| InvariantViolation::Reference { detail };
        for coll in self.collections.values() {
            check_collection(coll)?;
            let db = coll.ns.split_once('.').map_or(coll.ns.as_str(), |(db, _)| db);
            if !self.databases.contains_key(db) {
                return Err(dangling(format!("collection '{}' has no database", coll.ns)));
            }
            if let Some(c) = coll.chunks.values().find(|c| !self.shards.contains_key(&c.shard)) {
                return Err(dangling(format!("chunk of '{}' at {} is on unknown shard '{}'", coll.ns, c.min, c.shard)));
            }
        }
        for db in self.databases.values() {
            if !self.shards.contains_key(&db.primary) {
                return Err(dangling(format!("database '{}' has unknown primary '{}'", db.name, db.primary)));
            }
        }
        for shard in self.shards.values() {
            if let Some(p) = &shard.group.primary
                && !shard.group.members.contains(p)
            {
                return Err(dangling(format!("shard '{}' has primary '{p}' outside its members", shard.id)));
            }
        }
        let zones = self.zones();
        for (ns, ranges) in &self.zone_ranges {
            let err = |detail: String| InvariantViolation::ZoneRanges { ns: ns.clone(), detail };
            if ranges.is_empty() {
                return Err(err("empty list kept".into()));
            }
            for r in ranges {
                if r.min >= r.max {
                    return Err(err(format!("empty range [{}, {})", r.min, r.max)));
                }
                if !zones.contains_key(&r.zone) {
                    return Err(err(format!("zone '{}' has no shard", r.zone)));
                }
            }
            if let Some(w) = ranges.windows(2).find(|w| w[1].min < w[0].max) {
                return Err(err(format!(
                    "[{}, {}) and [{}, {}) overlap or are unsorted",
                    w[0].min, w[0].max, w[1].min, w[1].max
                )));
            }
        }
        if let Some((name, l)) = self.leases.iter().find(|(_, l)| l.token > self.leases.last_token()) {
            let detail = format!("lease '{name}' has token {} above the counter {}", l.token, self.leases.last_token());
            return Err(InvariantViolation::Fencing { detail });
        }
        Ok(())
    }
}

/// What `apply` remembers before a command (debug builds), to check the change after it.
#[cfg(debug_assertions)]
pub(crate) struct Before {
    collection: Option<Collection>,
    leases: Leases,
    version: u64,
}

#[cfg(debug_assertions)]
impl Before {
    pub(crate) fn capture(catalog: &ClusterCatalog, cmd: &super::Command) -> Self {
        let collection = cmd.chunk_namespace().and_then(|ns| catalog.collection(ns)).cloned();
        Self { collection, leases: catalog.leases.clone(), version: catalog.version }
    }

    pub(crate) fn verify(&self, after: &ClusterCatalog) -> Result<(), InvariantViolation> {
        after.check_invariants()?;
        if let Some(before) = &self.collection
            && let Some(now) = after.collection(&before.ns)
        {
            check_versions_grew(before, now)?;
        }
        check_fencing_grew(&self.leases, &after.leases)?;
        if after.version < self.version {
            return Err(InvariantViolation::Fencing { detail: "catalog version went back".into() });
        }
        Ok(())
    }
}
