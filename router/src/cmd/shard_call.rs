//! One gRPC call to one shard by id, its transport and top-level errors mapped to
//! [`CommandError`]s (StaleConfig included, for the caller's retry loop), and draining a shard
//! cursor for a merge.
//!
//! Must not: choose shards or retry.

use bytes::Bytes;
use shoal_proto::shard::{CommandRequest, CursorReply, GetMoreRequest, KillCursorsRequest, WriteReply};

use crate::error::CommandError;
use crate::routing;
use crate::state::RouterState;

/// Bytes a merged (scatter) result may hold on the router.
pub const MERGE_BYTES_MAX: usize = 256 << 20;

#[derive(Debug, Clone, Copy)]
pub enum WriteKind {
    Insert,
    Update,
    Delete,
}

pub async fn write(
    state: &RouterState,
    shard: &str,
    kind: WriteKind,
    req: CommandRequest,
) -> Result<WriteReply, CommandError> {
    let pool = routing::pool(state, shard).await?;
    let mut client = pool.client();
    let reply = match kind {
        WriteKind::Insert => client.insert(req).await,
        WriteKind::Update => client.update(req).await,
        WriteKind::Delete => client.delete(req).await,
    }
    .map_err(|s| pool.status_error(&s))?
    .into_inner();
    match reply.error {
        Some(e) => Err(e.into()),
        None => Ok(reply),
    }
}

/// A command whose reply is one document.
pub async fn command(state: &RouterState, shard: &str, req: CommandRequest) -> Result<bson::Document, CommandError> {
    let pool = routing::pool(state, shard).await?;
    let reply = pool.client().command(req).await.map_err(|s| pool.status_error(&s))?.into_inner();
    if let Some(e) = reply.error {
        return Err(e.into());
    }
    Ok(bson::Document::from_reader(&mut reply.body.as_ref())?)
}

/// `find` (`aggregate: false`) or `aggregate`.
pub async fn cursor(
    state: &RouterState,
    shard: &str,
    req: CommandRequest,
    aggregate: bool,
) -> Result<CursorReply, CommandError> {
    let pool = routing::pool(state, shard).await?;
    let mut client = pool.client();
    let reply = if aggregate { client.aggregate(req).await } else { client.find(req).await }
        .map_err(|s| pool.status_error(&s))?
        .into_inner();
    match reply.error {
        Some(e) => Err(e.into()),
        None => Ok(reply),
    }
}

/// Every document of a shard cursor, starting with its first batch.
pub async fn drain(
    state: &RouterState,
    shard: &str,
    request_id: &str,
    first: CursorReply,
) -> Result<Vec<Bytes>, CommandError> {
    let pool = routing::pool(state, shard).await?;
    let mut docs = first.documents;
    let mut bytes: usize = docs.iter().map(Bytes::len).sum();
    let mut cursor_id = first.cursor_id;
    while cursor_id != 0 {
        if bytes > MERGE_BYTES_MAX {
            let req = KillCursorsRequest { request_id: request_id.to_owned(), cursor_ids: vec![cursor_id] };
            let _ = pool.client().kill_cursors(req).await;
            return Err(CommandError::new(
                shoal_proto::ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!("a multi-shard result exceeds the router's merge limit of {MERGE_BYTES_MAX} bytes"),
            ));
        }
        let req = GetMoreRequest { request_id: request_id.to_owned(), cursor_id, batch_size: 0, ns: first.ns.clone() };
        let reply = pool.client().get_more(req).await.map_err(|s| pool.status_error(&s))?.into_inner();
        if let Some(e) = reply.error {
            return Err(e.into());
        }
        bytes += reply.documents.iter().map(Bytes::len).sum::<usize>();
        docs.extend(reply.documents);
        cursor_id = reply.cursor_id;
    }
    Ok(docs)
}
