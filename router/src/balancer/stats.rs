//! Chunk statistics for a balancer round: each shard is asked (`_shoalChunkStats`, contract 2)
//! about the chunks the catalog says it owns, one request per (shard, collection) and at most
//! [`STATS_RANGES_PER_REQUEST_MAX`] ranges each, all shards at once, each call bounded by
//! [`STATS_TIMEOUT`].
//!
//! A shard that does not answer contributes no statistics (logged): the policy then sees its
//! chunks without sizes and leaves them alone rather than acting on guesses.
//!
//! Also the memory of hot chunks ([`observe_hot`]) and its pruning, pure and unit-tested.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{Bson, Document, doc};
use futures::future::join_all;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Chunk, ChunkBound, ClusterCatalogView, Collection};
use shoal_proto::shard::CommandRequest;

use super::policy::{ChunkStats, Memory, Params, Stats};
use crate::cmd::config_db::docs::{bound_document, key_document};
use crate::cmd::sharding::bound_of_key;
use crate::error::CommandError;
use crate::routing;
use crate::state::RouterState;

/// Ranges asked about in one request (a reply stays far below the message size limit).
pub const STATS_RANGES_PER_REQUEST_MAX: usize = 1000;
/// One statistics call to one shard; a slower shard is skipped this round.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(10);

/// One request: a shard, a collection and a batch of the chunks it owns.
struct Ask<'a> {
    shard: &'a str,
    coll: &'a Collection,
    chunks: Vec<&'a Chunk>,
}

/// Statistics of every chunk of every sharded collection (or only of `only`), from the shards
/// that answered.
pub async fn gather(state: &RouterState, catalog: &ClusterCatalogView, only: Option<&str>) -> Stats {
    state.shards.update(catalog.shards().values());
    let mut asks = Vec::new();
    for coll in catalog.collections().values().filter(|c| only.is_none_or(|ns| c.ns == ns)) {
        let mut by_shard: BTreeMap<&str, Vec<&Chunk>> = BTreeMap::new();
        for chunk in coll.chunks.values() {
            by_shard.entry(chunk.shard.as_str()).or_default().push(chunk);
        }
        for (shard, chunks) in by_shard {
            for batch in chunks.chunks(STATS_RANGES_PER_REQUEST_MAX) {
                asks.push(Ask { shard, coll, chunks: batch.to_vec() });
            }
        }
    }
    let replies = join_all(asks.iter().map(|ask| ask_shard(state, ask))).await;
    let mut stats = Stats::default();
    for (ask, reply) in asks.iter().zip(replies) {
        match reply {
            Ok(per_chunk) => {
                let entry = stats.chunks.entry(ask.coll.ns.clone()).or_default();
                for (chunk, s) in ask.chunks.iter().zip(per_chunk) {
                    entry.insert(chunk.min.clone(), (chunk.version, s));
                }
            }
            Err(e) => tracing::warn!(shard = ask.shard, ns = %ask.coll.ns, errmsg = %e.errmsg,
                "no chunk statistics from this shard this round"),
        }
    }
    stats
}

async fn ask_shard(state: &RouterState, ask: &Ask<'_>) -> Result<Vec<ChunkStats>, CommandError> {
    let key = Some(&ask.coll.key);
    let ranges: Vec<Bson> = ask
        .chunks
        .iter()
        .map(|c| Bson::Document(doc! { "min": bound_document(key, &c.min), "max": bound_document(key, &c.max) }))
        .collect();
    let body = doc! {
        "_shoalChunkStats": &ask.coll.ns,
        "keyPattern": key_document(&ask.coll.key),
        "ranges": ranges,
    };
    let reply = tokio::time::timeout(STATS_TIMEOUT, shard_admin_command(state, ask.shard, &body))
        .await
        .map_err(|_| CommandError::new(ErrorCode::ExceededTimeLimit, "_shoalChunkStats timed out"))??;
    decode(ask.coll, &reply, ask.chunks.len())
}

/// Runs `body` on db `admin` of `shard` through its `command` RPC; the reply body or its error.
pub(crate) async fn shard_admin_command(
    state: &RouterState,
    shard: &str,
    body: &Document,
) -> Result<Document, CommandError> {
    let request = CommandRequest {
        request_id: String::new(),
        db: "admin".into(),
        body: body.to_vec().map_err(|e| CommandError::new(ErrorCode::InternalError, e.to_string()))?.into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    };
    let pool = routing::pool(state, shard).await?;
    let reply = pool.client().command(request).await.map_err(|s| pool.status_error(&s))?.into_inner();
    if let Some(e) = reply.error {
        return Err(e.into());
    }
    Document::from_reader(&mut &reply.body[..]).map_err(CommandError::from)
}

fn number(d: &Document, field: &str) -> f64 {
    match d.get(field) {
        Some(Bson::Int32(n)) => f64::from(*n),
        Some(Bson::Int64(n)) => *n as f64,
        Some(Bson::Double(f)) if f.is_finite() => *f,
        _ => 0.0,
    }
}

/// The reply's `ranges`, in request order; a reply of the wrong length is refused whole, since
/// pairing its entries with chunks would be a guess.
fn decode(coll: &Collection, reply: &Document, expected: usize) -> Result<Vec<ChunkStats>, CommandError> {
    let bad = |why: &str| CommandError::new(ErrorCode::InternalError, format!("_shoalChunkStats reply: {why}"));
    let ranges = reply.get_array("ranges").map_err(|_| bad("no ranges array"))?;
    if ranges.len() != expected {
        return Err(bad(&format!("{} ranges for {expected} asked", ranges.len())));
    }
    ranges
        .iter()
        .map(|r| {
            let r = r.as_document().ok_or_else(|| bad("a range is not a document"))?;
            let load_split_key = match r.get("loadSplitKey") {
                Some(Bson::Document(k)) => match bound_of_key(&coll.key, k, "loadSplitKey")? {
                    ChunkBound::Key(bytes) => Some(bytes),
                    ChunkBound::Min | ChunkBound::Max => None,
                },
                _ => None,
            };
            Ok(ChunkStats {
                bytes: number(r, "bytes").max(0.0) as u64,
                docs: number(r, "docs").max(0.0) as u64,
                ops_per_sec: number(r, "opsPerSec").max(0.0),
                load_split_key,
                no_load_split_reason: r.get_str("noLoadSplitReason").ok().map(str::to_owned),
                load_unsplittable: r.get_bool("loadUnsplittable").unwrap_or(false),
            })
        })
        .collect()
}

/// Updates when each chunk became hot (at or above `load_split_ops_per_sec`): kept while it stays
/// hot, dropped when it cools or is no longer reported. Also forgets what concerns chunks or
/// boundaries that no longer exist, so the memory stays bounded by the catalog's size.
pub fn observe_hot(memory: &mut Memory, catalog: &ClusterCatalogView, stats: &Stats, params: &Params, now_ms: u64) {
    super::policy::observe_hot(memory, stats, params, now_ms);
    let exists = |ns: &str, min: &ChunkBound| catalog.collection(ns).is_some_and(|c| c.chunks.contains_key(min));
    memory.failed_splits.retain(|(ns, min, version), _| {
        exists(ns, min) && catalog.collection(ns).and_then(|c| c.chunks.get(min)).is_some_and(|c| c.version == *version)
    });
    let cooldown = params.merge_cooldown_ms;
    memory
        .load_split_boundaries
        .retain(|(ns, key), at| now_ms.saturating_sub(*at) < cooldown && exists(ns, &ChunkBound::Key(key.clone())));
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::catalog::{ChunkVersion, KeyField, KeyFieldKind, KeyPattern};

    fn coll() -> Collection {
        let key = KeyPattern { fields: vec![KeyField { name: "k".into(), kind: KeyFieldKind::Range }] };
        Collection {
            ns: "db.c".into(),
            uuid: uuid::Uuid::nil(),
            epoch: shoal_proto::catalog::Epoch([0; 12]),
            timestamp: Default::default(),
            key,
            unique: false,
            no_balance: false,
            no_auto_merge: false,
            max_chunk_size_bytes: None,
            version: ChunkVersion::ZERO,
            chunks: BTreeMap::new(),
        }
    }

    #[test]
    fn decodes_ranges_in_order_and_refuses_a_wrong_count() {
        let c = coll();
        let reply = doc! { "ok": 1, "loadWindowSecs": 10.0, "ranges": [
            { "bytes": 10_i64, "docs": 2_i64, "opsPerSec": 3.5, "samples": 4, "loadSplitKey": { "k": 5 } },
            { "bytes": 0_i64, "docs": 0_i64, "opsPerSec": 0.0, "samples": 0, "noLoadSplitReason": "few samples" },
        ] };
        let got = decode(&c, &reply, 2).expect("decodes");
        assert_eq!((got[0].bytes, got[0].docs, got[0].ops_per_sec), (10, 2, 3.5));
        let ChunkBound::Key(five) = bound_of_key(&c.key, &doc! { "k": 5 }, "k").expect("key") else { panic!() };
        assert_eq!(got[0].load_split_key.as_deref(), Some(five.as_slice()));
        assert_eq!(got[1].no_load_split_reason.as_deref(), Some("few samples"));
        assert!(decode(&c, &reply, 3).is_err());
        assert!(decode(&c, &doc! { "ok": 1 }, 0).is_err());
    }

    #[test]
    fn hot_chunks_are_remembered_while_hot() {
        let params = Params { load_split_ops_per_sec: 100.0, ..Params::default() };
        let catalog = ClusterCatalogView::default();
        let mut memory = Memory::default();
        let mut stats = Stats::default();
        let hot = ChunkStats { ops_per_sec: 150.0, ..ChunkStats::default() };
        stats.chunks.entry("db.c".into()).or_default().insert(ChunkBound::Min, (ChunkVersion::ZERO, hot));
        observe_hot(&mut memory, &catalog, &stats, &params, 1000);
        observe_hot(&mut memory, &catalog, &stats, &params, 2000);
        assert_eq!(memory.hot_since_ms.get(&("db.c".into(), ChunkBound::Min)), Some(&1000));
        stats.chunks.clear();
        observe_hot(&mut memory, &catalog, &stats, &params, 3000);
        assert!(memory.hot_since_ms.is_empty(), "a chunk no longer hot is forgotten");
    }
}
