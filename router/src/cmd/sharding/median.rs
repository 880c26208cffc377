//! Split points of a chunk, asked of the shard that owns it: the median (`splitVector` with
//! `force: true`, as MongoDB's `split` with `find` or `bounds` does), the key that halves the
//! chunk's documents by count; and, for the balancer's size splits, a
//! point every half chunk size of data (`splitVector` with `maxChunkSizeBytes`, as MongoDB's
//! auto-splitter asks), so a chunk of any size is cut into chunk-sized pieces in one pass.

use bson::{Bson, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Chunk, ChunkBound, Collection};

use super::key::bound_of_key;
use crate::cmd::config_db::docs::{bound_document, key_document};
use crate::error::CommandError;
use crate::state::RouterState;

/// The split point at the middle of `chunk`'s documents; CannotSplit when the chunk holds fewer
/// than two distinct shard-key values.
pub async fn median(state: &RouterState, coll: &Collection, chunk: &Chunk) -> Result<ChunkBound, CommandError> {
    let body = doc! {
        "splitVector": &coll.ns,
        "keyPattern": key_document(&coll.key),
        "min": bound_document(Some(&coll.key), &chunk.min),
        "max": bound_document(Some(&coll.key), &chunk.max),
        "force": true,
    };
    let reply = crate::balancer::stats::shard_admin_command(state, &chunk.shard, &body).await?;
    let point = reply.get_array("splitKeys").ok().and_then(|a| a.first()).and_then(Bson::as_document);
    match point {
        Some(p) => bound_of_key(&coll.key, p, "the chunk's median"),
        None => Err(CommandError::new(
            ErrorCode::CannotSplit,
            format!(
                "cannot split the chunk [{}, {}) of {} at its median: it holds fewer than two distinct shard-key \
                 values",
                chunk.min, chunk.max, coll.ns
            ),
        )),
    }
}

/// Split points cutting `chunk` into pieces of about half of `max_chunk_bytes` each, strictly
/// inside the chunk; CannotSplit when there are none (one key holds the data, or it fits).
pub async fn size_split_points(
    state: &RouterState,
    coll: &Collection,
    chunk: &Chunk,
    max_chunk_bytes: u64,
) -> Result<Vec<Vec<u8>>, CommandError> {
    let body = doc! {
        "splitVector": &coll.ns,
        "keyPattern": key_document(&coll.key),
        "min": bound_document(Some(&coll.key), &chunk.min),
        "max": bound_document(Some(&coll.key), &chunk.max),
        "maxChunkSizeBytes": i64::try_from(max_chunk_bytes).unwrap_or(i64::MAX),
    };
    let reply = crate::balancer::stats::shard_admin_command(state, &chunk.shard, &body).await?;
    let mut points = Vec::new();
    for p in reply.get_array("splitKeys").map(|a| a.as_slice()).unwrap_or_default() {
        let Some(p) = p.as_document() else { continue };
        if let ChunkBound::Key(k) = bound_of_key(&coll.key, p, "a split point")? {
            let b = ChunkBound::Key(k.clone());
            if chunk.min < b && b < chunk.max {
                points.push(k);
            }
        }
    }
    points.sort();
    points.dedup();
    if points.is_empty() {
        return Err(CommandError::new(
            ErrorCode::CannotSplit,
            format!(
                "no split point in the chunk [{}, {}) of {}: its data is on one shard-key value or fits the chunk size",
                chunk.min, chunk.max, coll.ns
            ),
        ));
    }
    Ok(points)
}
