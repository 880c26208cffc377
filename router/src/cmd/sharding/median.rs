//! The median of a chunk, asked of the shard that owns it (`splitVector` with `force: true`, as
//! MongoDB's `split` with `find` or `bounds` does): the key that halves the chunk's documents,
//! by count, or (`bySize`, for the balancer's size splits) by bytes.

use bson::{Bson, doc};
use shoal_configsvr::catalog::{Chunk, ChunkBound, Collection};
use shoal_proto::ErrorCode;

use super::key::bound_of_key;
use crate::cmd::config_docs::{bound_document, key_document};
use crate::error::CommandError;
use crate::state::RouterState;

/// The split point at the middle of `chunk`'s documents; CannotSplit when the chunk holds fewer
/// than two distinct shard-key values.
pub async fn median(state: &RouterState, coll: &Collection, chunk: &Chunk) -> Result<ChunkBound, CommandError> {
    split_key(state, coll, chunk, false).await
}

/// The median by count, or with `by_size` the key where the chunk's cumulative bytes reach half.
pub async fn split_key(
    state: &RouterState,
    coll: &Collection,
    chunk: &Chunk,
    by_size: bool,
) -> Result<ChunkBound, CommandError> {
    let mut body = doc! {
        "splitVector": &coll.ns,
        "keyPattern": key_document(&coll.key),
        "min": bound_document(Some(&coll.key), &chunk.min),
        "max": bound_document(Some(&coll.key), &chunk.max),
        "force": true,
    };
    if by_size {
        body.insert("bySize", true);
    }
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
