//! `splitVector` and `dataSize` over a shard-key range, as MongoDB's shards answer them: where to
//! split a chunk (its median with `force`; with `force` and `bySize`, a Shoal extension, the key
//! that halves its bytes; or every half max-chunk-size of data) and how much data a range holds.
//! The router's `split` (`find`/`bounds`) asks for the median, the balancer's size-based splits
//! for the points every half chunk size.
//!
//! Without an index on the shard key (secondary indexes come later) both scan the collection and
//! compute each document's key (`query::shard_key`), so they cost one pass over the collection.

use std::ops::Bound;
use std::time::Instant;

use bson::{Bson, Document, RawDocument, doc};
use shoal_proto::ErrorCode;
use shoal_query::keystring;
use shoal_query::shard_key::{self, KeyField, Missing};

use crate::error::{ExecError, ExecResult};
use crate::exec::{Node, Request, args};

/// MongoDB's cap on the split points one `splitVector` returns unless `maxSplitPoints` says less.
pub const SPLIT_POINTS_MAX: usize = 8192;

/// The range and key pattern both commands take.
struct RangeArgs {
    ns: String,
    fields: Vec<KeyField>,
    min: Vec<u8>,
    max: Vec<u8>,
}

fn parse_range(req: &Request<'_>, cmd: &str) -> ExecResult<RangeArgs> {
    let body = &req.body;
    let ns = match body.get(cmd) {
        Some(Bson::String(ns)) if ns.contains('.') => ns.clone(),
        Some(v) => return Err(ExecError::new(ErrorCode::InvalidNamespace, format!("{cmd}: invalid namespace {v}"))),
        None => return Err(ExecError::bad_value(format!("{cmd} needs a namespace"))),
    };
    let pattern = args::opt_document(body, cmd, "keyPattern")?
        .ok_or_else(|| ExecError::bad_value(format!("{cmd} needs a keyPattern")))?;
    let fields = pattern_fields(pattern)?;
    let min = bound_key(&fields, cmd, "min", args::opt_document(body, cmd, "min")?, &Bson::MinKey)?;
    let max = bound_key(&fields, cmd, "max", args::opt_document(body, cmd, "max")?, &Bson::MaxKey)?;
    Ok(RangeArgs { ns, fields, min, max })
}

/// The key of a bound document (`{field: value, ...}` per the pattern); absent or empty:
/// `default` (MinKey or MaxKey) in every field.
pub(crate) fn bound_key(
    fields: &[KeyField],
    cmd: &str,
    name: &str,
    bound: Option<&Document>,
    default: &Bson,
) -> ExecResult<Vec<u8>> {
    match bound {
        None => Ok(shard_key::of_values(&vec![default; fields.len()])),
        Some(d) if d.is_empty() => Ok(shard_key::of_values(&vec![default; fields.len()])),
        Some(d) => {
            let values = fields
                .iter()
                .map(|f| d.get(&f.name))
                .collect::<Option<Vec<&Bson>>>()
                .ok_or_else(|| ExecError::bad_value(format!("{cmd}: {name} {d} does not match the key pattern")))?;
            Ok(shard_key::of_values(&values))
        }
    }
}

pub(crate) fn pattern_fields(pattern: &Document) -> ExecResult<Vec<KeyField>> {
    if pattern.is_empty() {
        return Err(ExecError::bad_value("keyPattern cannot be empty"));
    }
    pattern
        .iter()
        .map(|(name, v)| match v {
            Bson::String(s) if s == "hashed" => Ok(KeyField { name: name.clone(), hashed: true }),
            v if args::as_f64(v) == Some(1.0) => Ok(KeyField { name: name.clone(), hashed: false }),
            v => Err(ExecError::bad_value(format!("keyPattern field '{name}' must be 1 or \"hashed\", not {v}"))),
        })
        .collect()
}

/// Each document's key in the range with its size, in collection order. Only the key fields of
/// each raw document are decoded.
fn keys_in_range(node: &Node, r: &RangeArgs) -> ExecResult<Vec<(Vec<u8>, usize)>> {
    let Some(coll) = node.store.collection(&r.ns) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for kv in node.store.scan(&coll, Bound::Unbounded, Bound::Unbounded, false) {
        let (_, raw) = kv?;
        let doc = RawDocument::from_bytes(&raw).map_err(ExecError::from)?;
        let key = shard_key::of_raw_document(&r.fields, doc, Missing::AsNull)?;
        if key >= r.min && key < r.max {
            out.push((key, raw.len()));
        }
    }
    Ok(out)
}

/// The key document for `bytes` (hashed fields as NumberLong, as MongoDB shows them).
pub(crate) fn key_document(fields: &[KeyField], bytes: &[u8]) -> ExecResult<Document> {
    let values = keystring::decode_compound(bytes, fields.len(), &[])
        .map_err(|e| ExecError::new(ErrorCode::InternalError, format!("undecodable shard key: {e}")))?;
    Ok(fields
        .iter()
        .zip(values)
        .map(|(f, v)| {
            let v = match (f.hashed, v) {
                (true, Bson::Int32(i)) => Bson::Int64(i64::from(i)),
                (_, v) => v,
            };
            (f.name.clone(), v)
        })
        .collect())
}

/// `{splitVector: ns, keyPattern, min, max, force [bySize] | maxChunkSizeBytes | maxChunkSize (MiB),
/// maxSplitPoints, maxChunkObjects}` → `{splitKeys: [...]}`.
pub fn split_vector(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let body = &req.body;
    let r = parse_range(req, "splitVector")?;
    let force = args::opt_bool(body, "splitVector", "force")?.unwrap_or(false);
    let by_size = args::opt_bool(body, "splitVector", "bySize")?.unwrap_or(false);
    let max_bytes = match (body.get("maxChunkSizeBytes"), body.get("maxChunkSize")) {
        (Some(v), _) => args::as_f64(v).map(|b| b as u64),
        (None, Some(v)) => args::as_f64(v).map(|mib| (mib * f64::from(1 << 20)) as u64),
        (None, None) => None,
    };
    if !force && max_bytes.is_none_or(|b| b == 0) {
        return Err(ExecError::bad_value("splitVector needs force: true or a positive maxChunkSizeBytes"));
    }
    let max_points = args::opt_non_negative(body, "splitVector", "maxSplitPoints")?
        .map_or(SPLIT_POINTS_MAX, |n| (n as usize).clamp(1, SPLIT_POINTS_MAX));
    let max_objects = args::opt_non_negative(body, "splitVector", "maxChunkObjects")?.map(|n| n as usize);

    let mut keys = keys_in_range(node, &r)?;
    keys.sort_unstable();
    let points = match (force, by_size) {
        (true, true) => half_bytes_point(&keys),
        (true, false) => median_point(&keys),
        (false, _) => size_points(&keys, max_bytes.unwrap_or(0), max_objects),
    };
    let split_keys = points
        .into_iter()
        .take(max_points)
        .map(|k| key_document(&r.fields, k).map(Bson::Document))
        .collect::<ExecResult<Vec<Bson>>>()?;
    Ok(doc! { "splitKeys": split_keys })
}

/// The key at the middle document, if it differs from the smallest key (a split point must be
/// strictly inside the chunk).
fn median_point(keys: &[(Vec<u8>, usize)]) -> Vec<&[u8]> {
    let Some((first, _)) = keys.first() else { return Vec::new() };
    let mid = &keys[keys.len() / 2].0;
    if mid != first {
        return vec![mid.as_slice()];
    }
    // Many documents share the smallest key: split at the first larger key, if any.
    keys.iter().map(|(k, _)| k).find(|k| *k != first).map(|k| vec![k.as_slice()]).unwrap_or_default()
}

/// The key that best halves the bytes of the sorted `keys`: among the distinct keys above the
/// smallest (a split point must be strictly inside the chunk), the one whose documents below it
/// hold closest to half the total.
fn half_bytes_point(keys: &[(Vec<u8>, usize)]) -> Vec<&[u8]> {
    let total: u64 = keys.iter().map(|(_, n)| *n as u64).sum();
    let mut below = 0u64;
    let mut best: Option<(u64, &[u8])> = None;
    for (i, (key, n)) in keys.iter().enumerate() {
        if i > 0 && *key != keys[i - 1].0 {
            let off = (2 * below).abs_diff(total);
            if best.is_none_or(|(b, _)| off < b) {
                best = Some((off, key));
            }
            if 2 * below >= total {
                break;
            }
        }
        below += *n as u64;
    }
    best.map(|(_, k)| vec![k]).unwrap_or_default()
}

/// A split point each time half a max chunk of data (or `max_objects` documents) has gone by,
/// as MongoDB's splitVector does; duplicate keys never start a new chunk.
fn size_points(keys: &[(Vec<u8>, usize)], max_bytes: u64, max_objects: Option<usize>) -> Vec<&[u8]> {
    let total: u64 = keys.iter().map(|(_, n)| *n as u64).sum();
    if total <= max_bytes || keys.is_empty() {
        return Vec::new();
    }
    let avg = (total / keys.len() as u64).max(1);
    let mut per_chunk = ((max_bytes / 2) / avg).max(1) as usize;
    if let Some(m) = max_objects.filter(|m| *m > 0) {
        per_chunk = per_chunk.min(m);
    }
    let mut out: Vec<&[u8]> = Vec::new();
    let mut count = 0;
    for (i, (key, _)) in keys.iter().enumerate() {
        count += 1;
        if count > per_chunk && i > 0 && *key != keys[i - 1].0 && out.last().is_none_or(|l| *l != key.as_slice()) {
            out.push(key);
            count = 1;
        }
    }
    out
}

/// `{dataSize: ns, keyPattern, min, max}` → `{size, numObjects, millis}`.
pub fn data_size(node: &Node, req: &Request<'_>) -> ExecResult<Document> {
    let started = Instant::now();
    let r = parse_range(req, "dataSize")?;
    let keys = keys_in_range(node, &r)?;
    let size: u64 = keys.iter().map(|(_, n)| *n as u64).sum();
    Ok(doc! {
        "size": size as i64,
        "numObjects": keys.len() as i64,
        "millis": started.elapsed().as_millis() as i64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(values: &[i32]) -> Vec<(Vec<u8>, usize)> {
        values.iter().map(|v| (shard_key::of_values(&[&Bson::Int32(*v)]), 100)).collect()
    }

    #[test]
    fn the_median_is_strictly_inside() {
        let k = keys(&[1, 2, 3, 4, 5]);
        assert_eq!(median_point(&k), vec![k[2].0.as_slice()]);
        let same = keys(&[7, 7, 7, 7, 9]);
        assert_eq!(median_point(&same), vec![same[4].0.as_slice()]);
        assert!(median_point(&keys(&[7, 7, 7])).is_empty());
        assert!(median_point(&[]).is_empty());
    }

    fn sized(values: &[(i32, usize)]) -> Vec<(Vec<u8>, usize)> {
        values.iter().map(|(v, n)| (shard_key::of_values(&[&Bson::Int32(*v)]), *n)).collect()
    }

    #[test]
    fn half_bytes_point_halves_the_bytes_not_the_count() {
        // Ten small documents then two large ones: the median by count is 6, by bytes 10.
        let mut v: Vec<(i32, usize)> = (0..10).map(|i| (i, 100)).collect();
        v.extend([(10, 1000), (11, 1000)]);
        let k = sized(&v);
        assert_eq!(half_bytes_point(&k), vec![k[10].0.as_slice()]);
        assert_eq!(median_point(&k), vec![k[6].0.as_slice()]);
        let even = sized(&[(1, 10), (2, 10), (3, 10), (4, 10)]);
        assert_eq!(half_bytes_point(&even), vec![even[2].0.as_slice()]);
        let two = sized(&[(1, 10), (2, 1000)]);
        assert_eq!(half_bytes_point(&two), vec![two[1].0.as_slice()], "the only interior key");
        assert!(half_bytes_point(&sized(&[(5, 10), (5, 20)])).is_empty(), "one distinct key");
        assert!(half_bytes_point(&[]).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn half_bytes_point_is_inside_and_best(mut v in proptest::collection::vec((0i32..50, 1usize..1000), 0..60)) {
            v.sort_unstable();
            let k = sized(&v);
            let total: u64 = k.iter().map(|(_, n)| *n as u64).sum();
            let below = |key: &[u8]| k.iter().filter(|(x, _)| x.as_slice() < key).map(|(_, n)| *n as u64).sum::<u64>();
            match half_bytes_point(&k).as_slice() {
                [] => proptest::prop_assert!(k.first().is_none_or(|f| k.iter().all(|(x, _)| *x == f.0))),
                [p] => {
                    proptest::prop_assert!(*p > k[0].0.as_slice());
                    let off = (2 * below(p)).abs_diff(total);
                    for (x, _) in k.iter().filter(|(x, _)| *x > k[0].0) {
                        proptest::prop_assert!(off <= (2 * below(x)).abs_diff(total));
                    }
                }
                _ => proptest::prop_assert!(false, "one key at most"),
            }
        }
    }

    #[test]
    fn size_points_cut_every_half_chunk_and_skip_duplicates() {
        // 10 documents of 100 B, max chunk 400 B: a point every 2 documents.
        let k = keys(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let points = size_points(&k, 400, None);
        assert_eq!(points, vec![k[2].0.as_slice(), k[4].0.as_slice(), k[6].0.as_slice(), k[8].0.as_slice()]);
        assert!(size_points(&k, 1000, None).is_empty(), "a chunk under the max is not split");
        let dup = keys(&[1, 1, 1, 1, 1, 1, 2]);
        assert_eq!(size_points(&dup, 200, None), vec![dup[6].0.as_slice()]);
        assert_eq!(size_points(&k, 400, Some(5)).len(), 4);
        assert_eq!(size_points(&k, 10_000_000, Some(3)).len(), 0);
    }
}
