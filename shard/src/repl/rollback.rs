//! Rollback: a member whose oplog holds entries the new primary never had (it was primary, or
//! followed one, and those entries reached no majority) undoes them before following again.
//!
//! ```text
//!  1. common point: the newest entry of ours the source has with the same optime (OpTimes RPC)
//!  2. every document our later entries touched: save our version to the rollback file
//!  3. refetch each from the source (gone there: delete ours); drop our entries after the point
//!  4. follow the source from the common point; readable again once past its newest entry at (3)
//! ```
//!
//! This is MongoDB's "rollback via refetch". It relies on applying being idempotent: the
//! refetched documents may be newer than the common point, and replaying the source's entries
//! after the point converges on the source's state. Nothing is dropped silently: every local
//! version that is replaced or deleted is written to
//! `<data dir>/rollback/<ns>/removed.<unix time>.bson` first (concatenated BSON documents, as
//! MongoDB writes them; `bsondump` reads them). Rolling back collection creates or drops is not
//! done by refetch: such a member resyncs from scratch instead (initial sync).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use bson::{Bson, RawDocument, doc};
use bytes::Bytes;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_proto::shard::{CommandRequest, GetMoreRequest, OpTimesRequest};

use super::Repl;
use super::fetcher::{FetchError, connect, within};
use super::state::MemberState;
use super::wire::{from_shard, to_shard};
use crate::storage::StorageError;
use crate::store::local_catalog::CollectionInfo;
use crate::store::oplog::{EntryView, OpTime};

/// Optimes asked for per OpTimes call while looking for the common point.
const COMMON_POINT_PAGE: u32 = 1000;
/// Entries we may roll back at most; beyond that the member resyncs (MongoDB bounds rollback too).
pub const ROLLBACK_ENTRIES_MAX: usize = 100_000;
/// Documents refetched per find.
const REFETCH_BATCH: usize = 1000;

/// What our divergent entries touched.
struct Divergence {
    common: OpTime,
    /// Per collection UUID: the `_id`s touched.
    documents: BTreeMap<bson::Uuid, Vec<Bson>>,
    /// Bookkeeping records our entries wrote (retryable-write records, …): removed, the source's
    /// own are replayed after the common point.
    meta_keys: Vec<Vec<u8>>,
    entries: usize,
}

fn corrupt(detail: impl Into<String>) -> StorageError {
    StorageError::Corrupt { space: "oplog", detail: detail.into() }
}

/// Our entries after the common point, newest first, until one the source has (`theirs`).
fn scan_ours(
    repl: &Repl,
    theirs: &HashSet<OpTime>,
    from: OpTime,
) -> Result<(Option<OpTime>, Vec<Bytes>), StorageError> {
    let mut ours = Vec::new();
    for kv in repl.store.oplog_before(from.timestamp()) {
        let (_, value) = kv?;
        let optime = EntryView::parse(RawDocument::from_bytes(&value).map_err(|e| corrupt(e.to_string()))?)?.optime;
        if theirs.contains(&optime) {
            return Ok((Some(optime), ours));
        }
        ours.push(value);
        if ours.len() > ROLLBACK_ENTRIES_MAX {
            break;
        }
    }
    Ok((None, ours))
}

async fn find_divergence(repl: &Arc<Repl>, source: &str) -> Result<Option<Divergence>, FetchError> {
    let mut client = connect(repl, source).await?;
    let newest = repl.store.position().optime;
    let mut at = newest;
    let mut theirs = HashSet::new();
    loop {
        let call = client.op_times(OpTimesRequest { at: Some(to_shard(at)), limit: COMMON_POINT_PAGE });
        let reply = within(repl.settings.stream_idle_timeout, "optimes", call).await?;
        let page: Vec<OpTime> = reply.optimes.iter().map(|o| from_shard(Some(o))).collect();
        theirs.extend(page.iter().copied());
        let r = Arc::clone(repl);
        let known = theirs.clone();
        let (common, ours) = tokio::task::spawn_blocking(move || scan_ours(&r, &known, newest))
            .await
            .map_err(|e| FetchError::Transport(e.to_string()))??;
        if let Some(common) = common {
            return Ok(Some(summarize(common, &ours)?));
        }
        if ours.len() > ROLLBACK_ENTRIES_MAX || page.len() < COMMON_POINT_PAGE as usize {
            return Ok(None);
        }
        match page.last() {
            Some(oldest) => at = *oldest,
            None => return Ok(None),
        }
    }
}

fn summarize(common: OpTime, ours: &[Bytes]) -> Result<Divergence, StorageError> {
    let mut documents: BTreeMap<bson::Uuid, Vec<Bson>> = BTreeMap::new();
    let mut meta_keys = Vec::new();
    for raw in ours {
        let doc = RawDocument::from_bytes(raw).map_err(|e| corrupt(e.to_string()))?;
        meta_keys.extend(crate::store::oplog::meta_writes(doc)?.into_iter().map(|(key, _)| key));
        let entry = EntryView::parse(doc)?;
        let id_source = match entry.op {
            "i" | "d" => entry.o,
            "u" => entry.o2.unwrap_or(entry.o),
            "n" => continue,
            other => return Err(corrupt(format!("cannot roll back a '{other}' entry by refetching"))),
        };
        let id = id_source
            .get("_id")
            .ok()
            .flatten()
            .and_then(|v| Bson::try_from(v).ok())
            .ok_or_else(|| corrupt("no _id"))?;
        let uuid = entry.uuid.ok_or_else(|| corrupt("no ui"))?;
        let ids = documents.entry(uuid).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(Divergence { common, documents, meta_keys, entries: ours.len() })
}

/// The source's current version of each `_id` (absent: it has none).
async fn refetch(
    repl: &Repl,
    source: &str,
    coll: &CollectionInfo,
    ids: &[Bson],
) -> Result<Vec<(Bson, Option<Bytes>)>, FetchError> {
    let endpoint = tonic::transport::Endpoint::from_shared(shoal_proto::endpoint::uri(source))
        .map_err(|e| FetchError::Transport(e.to_string()))?
        .connect_timeout(repl.settings.connect_timeout);
    let channel = shoal_cluster::net::channel_now(&endpoint).await.map_err(|e| FetchError::Transport(e.to_string()))?;
    let mut client =
        ShardClient::new(channel).max_decoding_message_size(shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES);
    let mut out = Vec::new();
    for chunk in ids.chunks(REFETCH_BATCH) {
        let body = doc! { "find": &coll.ns.coll, "filter": { "_id": { "$in": chunk.to_vec() } }, "batchSize": REFETCH_BATCH as i32 };
        let req = CommandRequest {
            request_id: "rollback".into(),
            db: coll.ns.db.clone(),
            body: body.to_vec().map_err(|e| FetchError::Transport(e.to_string()))?.into(),
            ..Default::default()
        };
        let mut reply = within(repl.settings.stream_idle_timeout, "refetch", client.find(req)).await?;
        let mut found: Vec<Bytes> = Vec::new();
        loop {
            if let Some(e) = reply.error {
                return Err(FetchError::Transport(format!("refetch from {source}: {}", e.errmsg)));
            }
            found.extend(reply.documents);
            if reply.cursor_id == 0 {
                break;
            }
            let more = GetMoreRequest {
                request_id: "rollback".into(),
                cursor_id: reply.cursor_id,
                batch_size: 0,
                ns: coll.full_name(),
                client: None,
            };
            reply = within(repl.settings.stream_idle_timeout, "refetch", client.get_more(more)).await?;
        }
        let mut by_id = Vec::new();
        for raw in found {
            let id = RawDocument::from_bytes(&raw)
                .ok()
                .and_then(|d| d.get("_id").ok().flatten())
                .and_then(|v| Bson::try_from(v).ok());
            if let Some(id) = id {
                by_id.push((id, raw));
            }
        }
        for id in chunk {
            let version = by_id.iter().find(|(i, _)| i == id).map(|(_, raw)| raw.clone());
            out.push((id.clone(), version));
        }
    }
    Ok(out)
}

/// Appends our current versions of `ids` to the collection's rollback file.
fn save_ours(repl: &Repl, coll: &CollectionInfo, ids: &[Bson]) -> Result<usize, StorageError> {
    let dir = repl.rollback_dir.join(coll.full_name());
    std::fs::create_dir_all(&dir)?;
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let path = dir.join(format!("removed.{secs}.bson"));
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let mut saved = 0;
    for id in ids {
        if let Some(doc) = repl.store.get(coll, id)? {
            file.write_all(&doc)?;
            saved += 1;
        }
    }
    file.sync_all()?;
    Ok(saved)
}

/// Rolls this member back to its common point with `source`; afterwards the fetcher follows the
/// source from there.
pub async fn run(repl: &Arc<Repl>, source: &str) -> Result<(), FetchError> {
    repl.set_state(MemberState::Rollback, format!("rollback against {source}: finding the common point"));
    let Some(div) = find_divergence(repl, source).await? else {
        tracing::warn!(%source, "no common point within reach: resyncing from scratch");
        let store = Arc::clone(&repl.store);
        tokio::task::spawn_blocking(move || store.wipe()).await.map_err(|e| FetchError::Transport(e.to_string()))??;
        repl.set_state(MemberState::Secondary, String::new());
        return Ok(());
    };
    tracing::warn!(%source, common = %div.common, entries = div.entries, "rolling back entries no majority had");
    let mut updates = Vec::new();
    let mut saved = 0;
    for (uuid, ids) in &div.documents {
        let Some(coll) = repl.store.all_collections().into_iter().find(|c| c.uuid == *uuid) else { continue };
        let r = Arc::clone(repl);
        let (c, i) = (Arc::clone(&coll), ids.clone());
        saved += tokio::task::spawn_blocking(move || save_ours(&r, &c, &i))
            .await
            .map_err(|e| FetchError::Transport(e.to_string()))??;
        for (id, version) in refetch(repl, source, &coll, ids).await? {
            updates.push((Arc::clone(&coll), id, version));
        }
    }
    // Readable again only past everything the refetched versions may reflect.
    let mut client = connect(repl, source).await?;
    let end = OpTime::new(i64::MAX, bson::Timestamp { time: u32::MAX, increment: u32::MAX });
    let call = client.op_times(OpTimesRequest { at: Some(to_shard(end)), limit: 1 });
    let newest = within(repl.settings.stream_idle_timeout, "optimes", call)
        .await?
        .optimes
        .first()
        .map(|o| from_shard(Some(o)))
        .unwrap_or(div.common);
    let store = Arc::clone(&repl.store);
    let common = div.common;
    let meta_keys = div.meta_keys;
    tokio::task::spawn_blocking(move || store.rollback_to(common, updates, meta_keys))
        .await
        .map_err(|e| FetchError::Transport(e.to_string()))??;
    tracing::warn!(%source, %common, documents_saved = saved, dir = %repl.rollback_dir.display(), "rolled back; catching up");
    repl.lock().min_valid = Some(newest);
    repl.set_progress(format!("rolled back {} entries to {common}; catching up to {newest}", div.entries));
    Ok(())
}
