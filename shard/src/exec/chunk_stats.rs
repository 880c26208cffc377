//! `_shoalChunkStats`: what the balancer needs to know about a collection's ranges on this shard,
//! in one command per collection and round (contract 2 of issue 6):
//!
//! ```text
//!  {_shoalChunkStats: "db.coll", keyPattern: {..}, ranges: [{min: {..}, max: {..}}, ..]}
//!  -> {ok: 1, loadWindowSecs, ranges: [{bytes, docs, opsPerSec, samples,
//!                                       loadSplitKey | noLoadSplitReason + loadUnsplittable},
//!                                      ..]}   (request order)
//! ```
//!
//! Sizes count every document whose shard key falls in the range (orphans too), from one pass over
//! the collection that computes each key once; the answer is cached and reused while the store
//! has committed nothing since ([`SizeCache`]). Load comes from the sampler
//! ([`crate::sharding::load`]). An unknown namespace answers zeros.
//!
//! Must not: change anything, or answer for ranges it was not asked about.

use std::ops::Bound;
use std::time::Instant;

use bson::{Bson, Document, RawDocument, doc};
use shoal_proto::ErrorCode;
use shoal_query::shard_key::{self, KeyField, Missing};

use crate::error::{ExecError, ExecResult};
use crate::exec::split_vector::{bound_key, key_document, pattern_fields};
use crate::exec::{Node, Request};
use crate::sharding::load::sizes::{RangeSize, SizeCache, Tally};

const CMD: &str = "_shoalChunkStats";

/// Ranges one request may ask about (a collection's chunks on one shard).
pub const CHUNK_STATS_RANGES_MAX: usize = 100_000;

struct Args {
    ns: String,
    fields: Vec<KeyField>,
    pattern: Vec<u8>,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

fn parse(body: &Document) -> ExecResult<Args> {
    let ns = match body.get(CMD) {
        Some(Bson::String(ns)) if ns.contains('.') && !ns.starts_with('.') && !ns.ends_with('.') => ns.clone(),
        Some(v) => return Err(ExecError::new(ErrorCode::InvalidNamespace, format!("{CMD}: invalid namespace {v}"))),
        None => return Err(ExecError::bad_value(format!("{CMD} needs a namespace"))),
    };
    let pattern = crate::exec::args::opt_document(body, CMD, "keyPattern")?
        .ok_or_else(|| ExecError::bad_value(format!("{CMD} needs a keyPattern")))?;
    let fields = pattern_fields(pattern)?;
    let items = match body.get("ranges") {
        Some(Bson::Array(items)) => items,
        Some(v) => return Err(crate::exec::args::wrong_type(CMD, "ranges", v, "array")),
        None => return Err(ExecError::bad_value(format!("{CMD} needs ranges"))),
    };
    if items.len() > CHUNK_STATS_RANGES_MAX {
        return Err(ExecError::bad_value(format!("{CMD}: more than {CHUNK_STATS_RANGES_MAX} ranges")));
    }
    let ranges = items
        .iter()
        .map(|item| {
            let Bson::Document(r) = item else {
                return Err(crate::exec::args::wrong_type(CMD, "ranges", item, "array of objects"));
            };
            let side = |name: &str| match r.get(name) {
                Some(Bson::Document(d)) => Ok(d),
                Some(v) => Err(crate::exec::args::wrong_type(CMD, name, v, "object")),
                None => Err(ExecError::bad_value(format!("{CMD}: range {r} needs {name}"))),
            };
            let min = bound_key(&fields, CMD, "min", Some(side("min")?), &Bson::MinKey)?;
            let max = bound_key(&fields, CMD, "max", Some(side("max")?), &Bson::MaxKey)?;
            Ok((min, max))
        })
        .collect::<ExecResult<Vec<_>>>()?;
    Ok(Args { ns, fields, pattern: pattern.to_vec()?, ranges })
}

/// Bytes and documents per range: the cached answer while it may stand (see [`SizeCache::get`]),
/// else one scan.
fn sizes(node: &Node, a: &Args, cache: &SizeCache) -> ExecResult<Vec<RangeSize>> {
    let generation = node.store.write_generation();
    let started = Instant::now();
    if let Some(hit) = cache.get(&a.ns, generation, &a.pattern, &a.ranges, started) {
        return Ok(hit);
    }
    let mut tally = Tally::new(&a.ranges).map_err(|i| {
        ExecError::bad_value(format!("{CMD}: range {i} is empty or overlaps another (ranges must be disjoint)"))
    })?;
    if let Some(coll) = node.store.collection(&a.ns) {
        // Straight over the raw documents: only the key fields are decoded.
        for kv in node.store.scan(&coll, Bound::Unbounded, Bound::Unbounded, false) {
            let (_, raw) = kv?;
            let doc = RawDocument::from_bytes(&raw).map_err(ExecError::from)?;
            // A document whose key cannot be computed (an array in a key field) is in no range.
            if let Ok(key) = shard_key::of_raw_document(&a.fields, doc, Missing::AsNull) {
                tally.add(&key, raw.len());
            }
        }
    }
    cache.put(&a.ns, generation, started, &a.pattern, &a.ranges, &tally.sizes);
    Ok(tally.sizes)
}

pub fn chunk_stats(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let a = parse(&req.body)?;
    let sizes = sizes(node, &a, &node.sharding.sizes)?;
    let (window_secs, loads) = node.sharding.load.ranges(&a.ns, &a.ranges);
    let ranges = sizes
        .iter()
        .zip(loads)
        .map(|(size, load)| {
            let mut d = doc! {
                "bytes": size.bytes as i64,
                "docs": size.docs as i64,
                "opsPerSec": load.ops_per_sec,
                "samples": load.samples as i32,
            };
            match load.split {
                Ok(key) => match key_document(&a.fields, &key) {
                    Ok(k) => {
                        d.insert("loadSplitKey", k);
                    }
                    // Sampled before refineCollectionShardKey lengthened the key: the window
                    // ages such samples out within LOAD_WINDOW_MS.
                    Err(_) => {
                        d.insert("noLoadSplitReason", "the sampled keys predate the collection's current shard key");
                    }
                },
                Err(why) => {
                    d.insert("loadUnsplittable", why.is_unsplittable());
                    d.insert("noLoadSplitReason", why.to_string());
                }
            }
            Ok(Bson::Document(d))
        })
        .collect::<ExecResult<Vec<Bson>>>()?;
    Ok(doc! { "ok": 1.0, "loadWindowSecs": window_secs, "ranges": ranges })
}
