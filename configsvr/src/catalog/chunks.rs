//! Chunk commits: `SplitChunk`, `MergeChunks`, `CommitMigration`, `SetChunkJumbo`. Each is a
//! compare-and-set on the epoch and on the chunk versions the caller read: chunk versions are
//! unique within an epoch, so an unchanged version means an unchanged chunk, and of two commits
//! based on the same version only the first succeeds.
//!
//! Version bumps (MongoDB's, as docs/architecture.md "Config service" lists them), with `cv` the
//! collection version before the commit:
//! ```text
//!  split into n+1    (cv.major, cv.minor+1 ..= cv.minor+n+1), or if the owner's shard version
//!                    equals cv (SERVER-41480): (cv.major+1, 1 ..= n+1)
//!  merge             (cv.major+1, 0)
//!  migration         moved chunk (cv.major+1, 0); one chunk left on the donor, the one with the
//!                    lowest min ("control chunk"), (cv.major+1, 1)
//!  jumbo flag        (cv.major, cv.minor+1): ownership is unchanged, but the chunk must reach
//!                    routers' caches through incremental refresh like any other change
//! ```
//! Every version a commit assigns is above `cv`, hence above every version its range had before;
//! versions only grow and stay unique. Arithmetic is checked: overflow refuses the command.

use super::CatalogError;
use super::Reply;
use super::changelog::LogDraft;
use super::{CHUNK_HISTORY_ENTRIES_MAX, Chunk, ChunkBound, ChunkHistoryEntry, ChunkVersion, Collection, Epoch};
use super::{ClusterCatalog, Outcome};

/// Split points one `SplitChunk` may carry (MongoDB's `kMaxSplitPoints`).
pub const SPLIT_POINTS_MAX: usize = 8192;

impl ClusterCatalog {
    /// The sharded collection `ns` at `epoch`.
    pub(super) fn sharded(&self, ns: &str, epoch: Epoch) -> Result<&Collection, CatalogError> {
        match self.collections.get(ns) {
            None => Err(CatalogError::NotSharded { ns: ns.to_owned() }),
            Some(c) if c.epoch != epoch => {
                Err(CatalogError::StaleEpoch { ns: ns.to_owned(), expected: epoch, current: c.epoch })
            }
            Some(c) => Ok(c),
        }
    }

    /// The chunk starting at `min` with version `expected`.
    fn chunk_at<'c>(coll: &'c Collection, min: &ChunkBound, expected: ChunkVersion) -> Result<&'c Chunk, CatalogError> {
        let Some(chunk) = coll.chunks.get(min) else {
            // No chunk starts there (any more): report the one that contains `min`, if any.
            let max = coll.chunk_containing(min).map_or(ChunkBound::Max, |c| c.max.clone());
            return Err(CatalogError::ChunkNotFound { ns: coll.ns.clone(), min: min.clone(), max });
        };
        if chunk.version != expected {
            return Err(CatalogError::StaleChunkVersion {
                ns: coll.ns.clone(),
                min: min.clone(),
                expected,
                current: chunk.version,
            });
        }
        Ok(chunk)
    }

    pub(super) fn split_chunk(
        &mut self,
        ns: &str,
        epoch: Epoch,
        min: &ChunkBound,
        expected: ChunkVersion,
        points: &[Vec<u8>],
    ) -> Result<Outcome, CatalogError> {
        let coll = self.sharded(ns, epoch)?;
        let chunk = Self::chunk_at(coll, min, expected)?;
        let refuse = |reason: String| CatalogError::CannotSplit { ns: ns.to_owned(), reason };
        if points.is_empty() {
            return Err(refuse("no split points".into()));
        }
        if points.len() > SPLIT_POINTS_MAX {
            return Err(CatalogError::limit("split points", SPLIT_POINTS_MAX));
        }
        let mut prev = &chunk.min;
        let bounds: Vec<ChunkBound> = points.iter().map(|p| ChunkBound::Key(p.clone())).collect();
        for p in &bounds {
            if p == &chunk.min || p == &chunk.max {
                return Err(refuse(format!("split point {p} is a bound of chunk [{}, {})", chunk.min, chunk.max)));
            }
            if p < &chunk.min || p > &chunk.max {
                return Err(refuse(format!("split point {p} is outside chunk [{}, {})", chunk.min, chunk.max)));
            }
            if p <= prev {
                return Err(refuse(format!("split points are not sorted and distinct at {p}")));
            }
            prev = p;
        }
        let cv = coll.version;
        let base = if coll.shard_version(&chunk.shard) == cv {
            cv.major.checked_add(1).map(|major| ChunkVersion::new(major, 0))
        } else {
            Some(cv)
        };
        // The last new chunk gets base.minor + points.len() + 1; check that one, the rest fit.
        let overflow = || CatalogError::VersionOverflow { ns: ns.to_owned() };
        let base = base.ok_or_else(overflow)?;
        u32::try_from(points.len() + 1).ok().and_then(|n| base.minor.checked_add(n)).ok_or_else(overflow)?;

        // Validated; build the pieces and swap them in.
        let mut pieces = Vec::with_capacity(bounds.len() + 1);
        let mut lower = chunk.min.clone();
        for (i, upper) in bounds.into_iter().chain([chunk.max.clone()]).enumerate() {
            let minor = base.minor + 1 + i as u32;
            pieces.push(Chunk {
                min: lower,
                max: upper.clone(),
                version: ChunkVersion::new(base.major, minor),
                jumbo: false,
                ..chunk.clone()
            });
            lower = upper;
        }
        let what = if points.len() == 1 { "split" } else { "multi-split" };
        let log = LogDraft::new(what, ns)
            .with("min", chunk.min.clone())
            .with("max", chunk.max.clone())
            .with("shard", chunk.shard.clone())
            .with("before", chunk.version)
            .with("pieces", pieces.len() as u64);
        let coll = self.collection_mut(ns)?;
        for piece in &pieces {
            coll.chunks.insert(piece.min.clone(), piece.clone());
        }
        coll.version = pieces.last().map_or(cv, |p| p.version);
        let collection_version = coll.placement(coll.version);
        Ok(Outcome::logged(Reply::Chunks { collection_version, changed: pieces }, log))
    }

    pub(super) fn merge_chunks(
        &mut self,
        ns: &str,
        epoch: Epoch,
        min: &ChunkBound,
        max: &ChunkBound,
        expected: &[ChunkVersion],
        now: u64,
    ) -> Result<Outcome, CatalogError> {
        let coll = self.sharded(ns, epoch)?;
        let refuse = |reason: String| CatalogError::CannotMerge { ns: ns.to_owned(), reason };
        if min >= max {
            return Err(refuse(format!("empty range [{min}, {max})")));
        }
        if !coll.chunks.contains_key(min) {
            return Err(refuse(format!("{min} is not the min of a chunk")));
        }
        let parts: Vec<&Chunk> =
            coll.chunks.range(min.clone()..).map(|(_, c)| c).take_while(|c| c.min < *max).collect();
        if parts.last().is_none_or(|c| c.max != *max) {
            return Err(refuse(format!("{max} is not the max of a chunk")));
        }
        let current: Vec<ChunkVersion> = parts.iter().map(|c| c.version).collect();
        if current != expected {
            return Err(CatalogError::StaleMergeVersions { ns: ns.to_owned(), expected: expected.to_vec(), current });
        }
        if parts.len() < 2 {
            return Err(refuse("the range holds a single chunk".into()));
        }
        let shard = &parts[0].shard;
        if let Some(other) = parts.iter().find(|c| c.shard != *shard) {
            return Err(refuse(format!("chunks are on shards '{shard}' and '{}'", other.shard)));
        }
        let Some(major) = coll.version.major.checked_add(1) else {
            return Err(CatalogError::VersionOverflow { ns: ns.to_owned() });
        };

        // Validated; replace the parts with one chunk.
        let merged = Chunk {
            min: min.clone(),
            max: max.clone(),
            shard: shard.clone(),
            version: ChunkVersion::new(major, 0),
            history: Vec::new(),
            // Any part too big to move makes the whole too big.
            jumbo: parts.iter().any(|c| c.jumbo),
            on_current_shard_since: parts.iter().map(|c| c.on_current_shard_since).max().unwrap_or_default(),
        };
        let log = LogDraft::new("merge", ns)
            .with("min", min.clone())
            .with("max", max.clone())
            .with("shard", shard.clone())
            .with("merged", parts.len() as u64);
        let part_mins: Vec<ChunkBound> = parts.iter().map(|c| c.min.clone()).collect();
        let Self { collections, clock, .. } = self;
        let coll = collections.get_mut(ns).ok_or_else(|| CatalogError::NotSharded { ns: ns.to_owned() })?;
        let valid_after = clock.next_timestamp(now);
        for m in &part_mins {
            coll.chunks.remove(m);
        }
        let mut merged = merged;
        merged.history = vec![ChunkHistoryEntry { valid_after, shard: merged.shard.clone() }];
        coll.chunks.insert(min.clone(), merged.clone());
        coll.version = merged.version;
        let collection_version = coll.placement(coll.version);
        Ok(Outcome::logged(Reply::Chunks { collection_version, changed: vec![merged] }, log))
    }

    #[allow(clippy::too_many_arguments)] // one per field of the command
    pub(super) fn commit_migration(
        &mut self,
        ns: &str,
        epoch: Epoch,
        min: &ChunkBound,
        max: &ChunkBound,
        from: &str,
        to: &str,
        expected: ChunkVersion,
        now: u64,
    ) -> Result<Outcome, CatalogError> {
        let coll = self.sharded(ns, epoch)?;
        let chunk = Self::chunk_at(coll, min, expected)?;
        if chunk.max != *max {
            return Err(CatalogError::ChunkNotFound { ns: ns.to_owned(), min: min.clone(), max: max.clone() });
        }
        if chunk.shard != from {
            return Err(CatalogError::ChunkNotOnShard {
                ns: ns.to_owned(),
                min: min.clone(),
                expected: from.to_owned(),
                current: chunk.shard.clone(),
            });
        }
        if from == to {
            return Err(CatalogError::CannotMigrate { ns: ns.to_owned(), reason: format!("'{to}' already owns it") });
        }
        match self.shards.get(to) {
            None => return Err(CatalogError::ShardNotFound { shard: to.to_owned() }),
            Some(s) if s.is_draining() => return Err(CatalogError::ShardDraining { shard: to.to_owned() }),
            Some(_) => {}
        }
        let Some(major) = coll.version.major.checked_add(1) else {
            return Err(CatalogError::VersionOverflow { ns: ns.to_owned() });
        };
        let control_min = coll.chunks.values().find(|c| c.shard == from && c.min != chunk.min).map(|c| c.min.clone());

        // Validated; move the chunk and bump the control chunk.
        let log = LogDraft::new("moveChunk.commit", ns)
            .with("min", min.clone())
            .with("max", max.clone())
            .with("from", from)
            .with("to", to)
            .with("version", ChunkVersion::new(major, 0));
        let Self { collections, clock, .. } = self;
        let coll = collections.get_mut(ns).ok_or_else(|| CatalogError::NotSharded { ns: ns.to_owned() })?;
        let ts = clock.next_timestamp(now);
        let mut changed = Vec::with_capacity(2);
        if let Some(moved) = coll.chunks.get_mut(min) {
            moved.shard = to.to_owned();
            moved.version = ChunkVersion::new(major, 0);
            moved.jumbo = false;
            moved.on_current_shard_since = ts;
            moved.history.insert(0, ChunkHistoryEntry { valid_after: ts, shard: to.to_owned() });
            moved.history.truncate(CHUNK_HISTORY_ENTRIES_MAX);
            changed.push(moved.clone());
        }
        if let Some(control) = control_min.and_then(|m| coll.chunks.get_mut(&m)) {
            control.version = ChunkVersion::new(major, 1);
            changed.push(control.clone());
        }
        changed.sort_by(|a, b| a.min.cmp(&b.min));
        coll.version = changed.iter().map(|c| c.version).max().unwrap_or(coll.version);
        let collection_version = coll.placement(coll.version);
        Ok(Outcome::logged(Reply::Chunks { collection_version, changed }, log))
    }

    pub(super) fn set_chunk_jumbo(
        &mut self,
        ns: &str,
        epoch: Epoch,
        min: &ChunkBound,
        expected: ChunkVersion,
        jumbo: bool,
    ) -> Result<Outcome, CatalogError> {
        let coll = self.sharded(ns, epoch)?;
        let chunk = Self::chunk_at(coll, min, expected)?;
        let collection_version = coll.placement(coll.version);
        if chunk.jumbo == jumbo {
            return Ok(Outcome::unchanged(Reply::Chunks { collection_version, changed: vec![chunk.clone()] }));
        }
        let Some(minor) = coll.version.minor.checked_add(1) else {
            return Err(CatalogError::VersionOverflow { ns: ns.to_owned() });
        };
        let version = ChunkVersion::new(coll.version.major, minor);
        let what = if jumbo { "markJumbo" } else { "clearJumbo" };
        let log = LogDraft::new(what, ns).with("min", min.clone()).with("max", chunk.max.clone());
        let coll = self.collection_mut(ns)?;
        let mut changed = Vec::with_capacity(1);
        if let Some(c) = coll.chunks.get_mut(min) {
            c.jumbo = jumbo;
            c.version = version;
            changed.push(c.clone());
        }
        coll.version = version;
        let collection_version = coll.placement(version);
        Ok(Outcome::logged(Reply::Chunks { collection_version, changed }, log))
    }

    /// The collection a handler already validated, for its mutation phase.
    fn collection_mut(&mut self, ns: &str) -> Result<&mut Collection, CatalogError> {
        self.collections.get_mut(ns).ok_or_else(|| CatalogError::NotSharded { ns: ns.to_owned() })
    }
}
