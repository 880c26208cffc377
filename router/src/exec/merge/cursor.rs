//! A router cursor over several shard cursors: a `find` on several shards keeps each shard's
//! cursor open and merges their streams in sort order as the client asks for batches, pulling
//! more from a shard (`getMore`) only when its buffered documents run out. Skip and limit apply
//! to the merged stream; a projection that would drop sort fields is applied after the merge.
//!
//! Must not: hold more than one batch per shard (the shards keep the rest), or retry (a shard
//! cursor lost mid-stream fails the client's cursor, as in MongoDB).

use std::cmp::Ordering;
use std::collections::VecDeque;

use bson::Document;
use shoal_proto::shard::{GetMoreRequest, KillCursorsRequest};
use shoal_query::projection::Projection;
use shoal_query::sort::SortSpec;

use crate::error::CommandError;
use crate::state::RouterState;

/// One shard's stream.
pub struct Source {
    pub shard: String,
    /// The member holding the shard cursor (`None`: the primary), see `member::Served`.
    pub member: Option<String>,
    /// 0 once the shard's cursor is exhausted.
    pub cursor_id: i64,
    pub buffered: VecDeque<Document>,
}

pub struct MergeCursor {
    pub ns: String,
    pub request_id: String,
    pub sort: SortSpec,
    pub projection: Option<Projection>,
    pub skip: usize,
    /// Documents still to return (`None`: no limit).
    pub limit: Option<usize>,
    pub sources: Vec<Source>,
    /// The client of the command that opened it, named in each shard `getMore`.
    pub client: Option<shoal_proto::shard::ClientInfo>,
}

impl MergeCursor {
    /// Whether documents may remain.
    pub fn has_more(&self) -> bool {
        self.limit != Some(0) && self.sources.iter().any(|s| !s.buffered.is_empty() || s.cursor_id != 0)
    }

    /// Refills every open source whose buffer is empty (all at once).
    async fn refill(&mut self, state: &RouterState) -> Result<(), CommandError> {
        let ns = self.ns.clone();
        let rid = self.request_id.clone();
        let client = self.client.clone();
        let calls = self.sources.iter_mut().filter(|s| s.buffered.is_empty() && s.cursor_id != 0).map(|s| {
            let ns = ns.clone();
            let rid = rid.clone();
            let client = client.clone();
            async move {
                let pool = crate::exec::call::member::cursor_pool(state, &s.shard, s.member.as_deref()).await?;
                let req = GetMoreRequest { request_id: rid, cursor_id: s.cursor_id, batch_size: 0, ns, client };
                let reply = pool.client().get_more(req).await.map_err(|st| pool.status_error(&st))?.into_inner();
                if let Some(e) = reply.error {
                    s.cursor_id = 0;
                    return Err(CommandError::from(e));
                }
                s.cursor_id = reply.cursor_id;
                for d in &reply.documents {
                    s.buffered.push_back(Document::from_reader(&mut d.as_ref())?);
                }
                Ok::<(), CommandError>(())
            }
        });
        for r in futures::future::join_all(calls).await {
            r?;
        }
        Ok(())
    }

    /// Up to `batch` documents (0: as many as there are), in merged order.
    pub async fn next_batch(&mut self, state: &RouterState, batch: usize) -> Result<Vec<Document>, CommandError> {
        let want = if batch == 0 { usize::MAX } else { batch };
        let mut out = Vec::new();
        while out.len() < want && self.limit != Some(0) {
            self.refill(state).await?;
            let mut best: Option<(usize, &Document)> = None;
            for (i, s) in self.sources.iter().enumerate() {
                let Some(head) = s.buffered.front() else { continue };
                best = match best {
                    Some((b, current))
                        if self.sort.is_empty() || self.sort.compare(head, current) != Ordering::Less =>
                    {
                        Some((b, current))
                    }
                    _ => Some((i, head)),
                };
            }
            let Some(i) = best.map(|(i, _)| i) else { break };
            let Some(doc) = self.sources[i].buffered.pop_front() else { break };
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            if let Some(l) = self.limit.as_mut() {
                *l -= 1;
            }
            out.push(match &self.projection {
                Some(p) => p.apply(&doc)?,
                None => doc,
            });
        }
        Ok(out)
    }

    /// Kills the shard cursors still open (best effort: shards reap idle cursors anyway).
    pub async fn kill(&mut self, state: &RouterState) {
        kill_all(state, &self.request_id, &mut self.sources).await;
    }
}

/// Kills the shard cursors of `sources` still open (best effort: shards reap idle cursors anyway).
pub async fn kill_all(state: &RouterState, request_id: &str, sources: &mut [Source]) {
    for s in sources.iter_mut().filter(|s| s.cursor_id != 0) {
        let pool = match &s.member {
            Some(addr) => state.members.pool(addr).ok(),
            None => state.shards.get(&s.shard),
        };
        if let Some(pool) = pool {
            let req = KillCursorsRequest { request_id: request_id.to_owned(), cursor_ids: vec![s.cursor_id] };
            if let Err(status) = pool.client().kill_cursors(req).await {
                pool.status_error(&status);
            }
        }
        s.cursor_id = 0;
    }
}
