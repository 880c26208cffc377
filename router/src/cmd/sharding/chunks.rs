//! Chunk commands: `split`, `mergeChunks`, `moveChunk` / `moveRange`, `clearJumboFlag`. Each reads the collection
//! from the catalog, names the chunk(s) it changes with the versions it read, and lets the
//! catalog's compare-and-set refuse it if they changed meanwhile.
//!
//! `split` with `find` (the chunk holding that document) or `bounds` (exactly that chunk) splits
//! at the chunk's median, which the owning shard computes (`median.rs`); `middle` splits at the
//! given key. `moveChunk`/`moveRange` to another shard
//! call the donor's `MoveRange` (shard `migration` module) and wait for it; to the current shard
//! they succeed without doing anything, as MongoDB does.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Chunk, ChunkBound, Collection, Command};
use shoal_proto::shard::{KeyBound, MoveRangeRequest};

use super::key::{bound_of_key, key_of_document};
use super::{body_of, raw};
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

fn namespace(body: &Document, name: &str) -> Result<String, CommandError> {
    match body.get(name) {
        Some(Bson::String(s)) if s.contains('.') => Ok(s.clone()),
        Some(Bson::String(s)) => {
            Err(CommandError::new(ErrorCode::InvalidNamespace, format!("Invalid namespace specified '{s}'")))
        }
        _ => Err(CommandError::type_mismatch(format!("BSON field '{name}' is the wrong type, expected type 'string'"))),
    }
}

/// The sharded collection `ns` with its chunks, confirmed current with a quorum.
async fn sharded(state: &RouterState, ns: &str) -> Result<Collection, CommandError> {
    state
        .catalog
        .collection(ns)
        .await?
        .ok_or_else(|| CommandError::new(ErrorCode::NamespaceNotSharded, format!("Collection {ns} is not sharded.")))
}

fn document<'a>(body: &'a Document, cmd: &str, field: &str) -> Result<Option<&'a Document>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(_) => Err(CommandError::type_mismatch(format!(
            "BSON field '{cmd}.{field}' is the wrong type, expected type 'object'"
        ))),
    }
}

/// `bounds: [min, max]` → the two chunk bounds.
fn bounds(coll: &Collection, body: &Document, cmd: &str) -> Result<Option<(ChunkBound, ChunkBound)>, CommandError> {
    match body.get("bounds") {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Array(a)) => match a.as_slice() {
            [Bson::Document(min), Bson::Document(max)] => {
                let min = bound_of_key(&coll.key, min, "bounds")?;
                let max = bound_of_key(&coll.key, max, "bounds")?;
                if min >= max {
                    return Err(CommandError::bad_value("bounds: the lower bound must be less than the upper"));
                }
                Ok(Some((min, max)))
            }
            _ => Err(CommandError::bad_value(format!("{cmd}: bounds must be an array of two shard-key documents"))),
        },
        Some(_) => Err(CommandError::type_mismatch(format!(
            "BSON field '{cmd}.bounds' is the wrong type, expected type 'array'"
        ))),
    }
}

/// The chunk exactly `[min, max)`.
fn exact_chunk<'a>(coll: &'a Collection, min: &ChunkBound, max: &ChunkBound) -> Result<&'a Chunk, CommandError> {
    coll.chunks.get(min).filter(|c| &c.max == max).ok_or_else(|| {
        CommandError::new(ErrorCode::InvalidOptions, format!("no chunk of {} has the bounds [{min}, {max})", coll.ns))
    })
}

fn owning_chunk<'a>(coll: &'a Collection, key: &ChunkBound) -> Result<&'a Chunk, CommandError> {
    coll.chunk_containing(key)
        .ok_or_else(|| CommandError::new(ErrorCode::InternalError, format!("no chunk of {} contains {key}", coll.ns)))
}

/// `split: ns` with exactly one of `middle` (a shard key: split there), `find` (a document: split
/// its chunk at the chunk's median) or `bounds` (that chunk, at its median).
pub async fn split(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let ns = namespace(&body, "split")?;
    let middle = document(&body, "split", "middle")?;
    let find = document(&body, "split", "find")?;
    let has_bounds = !matches!(body.get("bounds"), None | Some(Bson::Null));
    if usize::from(middle.is_some()) + usize::from(find.is_some()) + usize::from(has_bounds) != 1 {
        return Err(CommandError::new(ErrorCode::InvalidOptions, "split needs exactly one of middle, find or bounds"));
    }
    let coll = &sharded(state, &ns).await?;
    let at = match (middle, find) {
        (Some(m), _) => bound_of_key(&coll.key, m, "middle")?,
        (_, Some(f)) => {
            let chunk = owning_chunk(coll, &key_of_document(&coll.key, f, "find")?)?;
            super::median::median(state, coll, chunk).await?
        }
        _ => {
            let (min, max) = bounds(coll, &body, "split")?
                .ok_or_else(|| CommandError::new(ErrorCode::InvalidOptions, "split needs bounds: [min, max]"))?;
            super::median::median(state, coll, exact_chunk(coll, &min, &max)?).await?
        }
    };
    let chunk = owning_chunk(coll, &at)?;
    if matches!(at, ChunkBound::Min | ChunkBound::Max) || chunk.min == at {
        return Err(CommandError::new(
            ErrorCode::CannotSplit,
            format!("cannot split {ns} at {at}: it is already a chunk boundary"),
        ));
    }
    let ChunkBound::Key(point) = at else {
        return Err(CommandError::new(ErrorCode::CannotSplit, "cannot split at MinKey or MaxKey"));
    };
    state
        .catalog
        .write(&Command::SplitChunk {
            ns,
            epoch: coll.epoch,
            min: chunk.min.clone(),
            expected_version: chunk.version,
            split_points: vec![point],
            fencing: None,
        })
        .await?;
    raw(&doc! {})
}

/// `mergeChunks: ns, bounds: [min, max]`: the chunks exactly covering the range become one.
pub async fn merge_chunks(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let ns = namespace(&body, "mergeChunks")?;
    let coll = &sharded(state, &ns).await?;
    let (min, max) = bounds(coll, &body, "mergeChunks")?
        .ok_or_else(|| CommandError::new(ErrorCode::InvalidOptions, "mergeChunks needs bounds: [min, max]"))?;
    let covered: Vec<&Chunk> = coll.chunks.range(min.clone()..max.clone()).map(|(_, c)| c).collect();
    let exact = covered.first().is_some_and(|c| c.min == min) && covered.last().is_some_and(|c| c.max == max);
    if !exact {
        return Err(CommandError::new(
            ErrorCode::IllegalOperation,
            format!("could not merge chunks of {ns}: [{min}, {max}) does not start and end at chunk boundaries"),
        ));
    }
    let expected_versions = covered.iter().map(|c| c.version).collect();
    state
        .catalog
        .write(&Command::MergeChunks { ns, epoch: coll.epoch, min, max, expected_versions, fencing: None })
        .await?;
    raw(&doc! {})
}

/// `clearJumboFlag: ns, find | bounds`: the chunk holding `find` (or exactly `bounds`) is no longer
/// jumbo, so the balancer may split and move it again. A chunk that is not jumbo is left as is.
pub async fn clear_jumbo_flag(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let ns = namespace(&body, "clearJumboFlag")?;
    let coll = &sharded(state, &ns).await?;
    let chunk = match (document(&body, "clearJumboFlag", "find")?, bounds(coll, &body, "clearJumboFlag")?) {
        (Some(find), None) => owning_chunk(coll, &key_of_document(&coll.key, find, "find")?)?,
        (None, Some((min, max))) => exact_chunk(coll, &min, &max)?,
        _ => {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                "clearJumboFlag needs exactly one of find or bounds",
            ));
        }
    };
    if chunk.jumbo {
        let command = Command::SetChunkJumbo {
            ns: ns.clone(),
            epoch: coll.epoch,
            min: chunk.min.clone(),
            expected_version: chunk.version,
            jumbo: false,
            fencing: None,
        };
        state.catalog.write(&command).await?;
    }
    raw(&doc! {})
}

/// `moveChunk: ns, find | bounds, to` and `moveRange: ns, min?, max?, toShard`.
pub async fn move_chunk(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let range = cmd.name == "moveRange";
    let (name, to_field) = if range { ("moveRange", "toShard") } else { ("moveChunk", "to") };
    let ns = namespace(&body, name)?;
    let to = match body.get(to_field) {
        Some(Bson::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(CommandError::new(ErrorCode::InvalidOptions, format!("{name} needs {to_field}: <shard>"))),
    };
    let coll = &sharded(state, &ns).await?;
    let chunk = if range {
        match (document(&body, name, "min")?, document(&body, name, "max")?) {
            (Some(min), max) => {
                let min = bound_of_key(&coll.key, min, "min")?;
                let chunk = owning_chunk(coll, &min)?;
                if let Some(max) = max {
                    exact_chunk(coll, &chunk.min, &bound_of_key(&coll.key, max, "max")?)?;
                }
                chunk
            }
            (None, Some(max)) => {
                let max = bound_of_key(&coll.key, max, "max")?;
                coll.chunks.values().find(|c| c.max == max).ok_or_else(|| {
                    CommandError::new(ErrorCode::InvalidOptions, format!("no chunk of {ns} ends at {max}"))
                })?
            }
            (None, None) => return Err(CommandError::new(ErrorCode::InvalidOptions, "moveRange needs min or max")),
        }
    } else {
        match (document(&body, name, "find")?, bounds(coll, &body, name)?) {
            (Some(find), None) => owning_chunk(coll, &key_of_document(&coll.key, find, "find")?)?,
            (None, Some((min, max))) => exact_chunk(coll, &min, &max)?,
            _ => {
                return Err(CommandError::new(
                    ErrorCode::InvalidOptions,
                    "moveChunk needs exactly one of find or bounds",
                ));
            }
        }
    };
    let shards = state.catalog.shards().await?;
    let shard = |id: &str| shards.iter().find(|s| s.id == id);
    if shard(&to).is_none() {
        return Err(CommandError::new(ErrorCode::ShardNotFound, format!("Shard {to} not found")));
    }
    if chunk.shard != to {
        let donor = shard(&chunk.shard)
            .ok_or_else(|| CommandError::new(ErrorCode::ShardNotFound, format!("Shard {} not found", chunk.shard)))?;
        let wait_for_delete = matches!(body.get("_waitForDelete"), Some(Bson::Boolean(true)));
        let request = MoveRangeRequest {
            request_id: format!("{}-{}", cmd.name, cmd.request_id),
            ns: ns.clone(),
            min: Some(wire_bound(&chunk.min)),
            max: Some(wire_bound(&chunk.max)),
            to_shard: to.clone(),
            epoch: coll.epoch.0.to_vec().into(),
            major: chunk.version.major,
            minor: chunk.version.minor,
            wait_for_delete,
            ..Default::default()
        };
        let millis = crate::exec::call::donor::move_range(state, &donor.id, request).await?;
        // The router's cached routing for `ns` is refreshed by the versioning protocol (StaleConfig).
        return if range { raw(&doc! {}) } else { raw(&doc! { "millis": millis }) };
    }
    // The chunk already lives on the destination: nothing to move.
    if range { raw(&doc! {}) } else { raw(&doc! { "millis": 0 }) }
}

pub(crate) fn wire_bound(b: &ChunkBound) -> KeyBound {
    match b {
        ChunkBound::Min => KeyBound { kind: 0, key: Default::default() },
        ChunkBound::Key(k) => KeyBound { kind: 1, key: k.clone().into() },
        ChunkBound::Max => KeyBound { kind: 2, key: Default::default() },
    }
}
