//! Merge, the fourth step of a read: combines the shards' [`Answers`] into one result
//! ([`Merged`]). One shard's answer passes through untouched; open cursors become a merge
//! cursor ([`cursor`]) and its first batch; counts are summed, distinct values unioned, and a
//! pipeline's gathered output is merged in order ([`sorted`], pure) and run through the router's
//! part of the pipeline (`exec::pipeline`).
//!
//! Must not: choose shards, or shape the client's reply (`exec::reply` does).

pub mod cursor;
pub mod sorted;

use bson::{Bson, Document, RawDocumentBuf};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::ShardId;
use shoal_proto::shard::CursorReply;

use crate::error::CommandError;
use crate::exec::call::member::Served;
use crate::exec::call::read::Answers;
use crate::exec::parse::{Merge, Read, RouterPart, number};
use crate::exec::pipeline;
use crate::state::RouterState;
use cursor::{MergeCursor, Source};

/// One result for the client, before it is shaped as a reply.
pub enum Merged {
    /// No shard was asked: the empty answer of the read's kind.
    Nothing,
    /// One shard's cursor, passed on as the shard sent it.
    ShardCursor {
        shard: ShardId,
        reply: CursorReply,
        served: Served,
    },
    /// One shard's document and its `writeConcernError`.
    Document(Document, Option<CommandError>),
    /// A merge cursor's first batch and, when documents remain, the cursor for the `getMore`s.
    Merging {
        first: Vec<Document>,
        rest: Option<MergeCursor>,
    },
    /// A result the router holds whole; `batch` documents go in the first reply.
    Buffered {
        docs: Vec<Document>,
        batch: usize,
    },
    Count(i64),
    Values(Vec<Bson>),
    /// Already the client's reply.
    Reply(RawDocumentBuf),
}

/// Combines `answers` to `read`.
pub async fn read(state: &RouterState, read: &Read<'_>, answers: Answers) -> Result<Merged, CommandError> {
    Ok(match answers {
        Answers::Nothing => Merged::Nothing,
        Answers::ShardCursor { shard, reply, served } => Merged::ShardCursor { shard, reply, served },
        Answers::Document(doc, wce) => Merged::Document(doc, wce),
        Answers::Reply(reply) => Merged::Reply(reply),
        Answers::Cursors { sources, merge } => merging(state, read, sources, merge).await?,
        Answers::Streams { streams, rest } => {
            Merged::Buffered { batch: rest.batch, docs: router_part(state, read, streams, rest).await? }
        }
        Answers::Counts { replies, skip, limit } => {
            let total = replies.iter().map(|r| number(r.get("n"))).fold(0_i64, i64::saturating_add);
            let n = total.saturating_sub(skip).max(0);
            Merged::Count(if limit > 0 { n.min(limit) } else { n })
        }
        Answers::Values { replies, collation } => {
            let answers = replies
                .iter()
                .map(|r| match r.get("values") {
                    Some(Bson::Array(a)) => a.clone(),
                    _ => Vec::new(),
                })
                .collect();
            Merged::Values(sorted::union_values_collated(answers, collation))
        }
    })
}

/// A merge cursor over `sources` and its first batch; the cursor is killed when nothing is left
/// for a `getMore` (or the batch failed).
async fn merging(
    state: &RouterState,
    read: &Read<'_>,
    sources: Vec<Source>,
    merge: Merge,
) -> Result<Merged, CommandError> {
    let Merge { sort, projection, skip, limit, batch, single_batch } = merge;
    let mut cursor = MergeCursor {
        ns: read.ns.clone(),
        request_id: read.cmd.request_id.to_string(),
        sort,
        projection,
        skip,
        limit,
        sources,
        client: crate::exec::call::request::client(read.cmd),
    };
    // `batchSize: 0` asks for an empty first batch; a single batch takes everything.
    let first = if batch == 0 && !single_batch {
        Ok(Vec::new())
    } else {
        cursor.next_batch(state, if single_batch { 0 } else { batch }).await
    };
    let first = match first {
        Ok(docs) => docs,
        Err(e) => {
            cursor.kill(state).await;
            return Err(e);
        }
    };
    if cursor.has_more() && !single_batch {
        return Ok(Merged::Merging { first, rest: Some(cursor) });
    }
    cursor.kill(state).await;
    Ok(Merged::Merging { first, rest: None })
}

/// The shards' gathered output merged in order and run through the router's part of the
/// pipeline, within the aggregation memory limit unless `allowDiskUse`.
async fn router_part(
    state: &RouterState,
    read: &Read<'_>,
    streams: Vec<Vec<Document>>,
    rest: RouterPart,
) -> Result<Vec<Document>, CommandError> {
    let held: usize = streams.iter().flatten().map(shoal_query::aggregate::doc_size).sum();
    let limit_bytes = shoal_query::aggregate::memory_limit_bytes();
    if !rest.allow_disk_use && held > limit_bytes {
        return Err(CommandError::new(
            ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
            format!(
                "the shards' output for the router's part of the pipeline ({held} bytes) exceeds the memory \
                 limit of {limit_bytes} bytes; pass allowDiskUse:true to opt in"
            ),
        ));
    }
    let merged = sorted::merge_sorted(streams, &rest.sort, 0, None);
    pipeline::run_router_part(state, read.cmd, &rest.stages, merged, rest.allow_disk_use, rest.lets.as_ref()).await
}
