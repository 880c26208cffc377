//! The documents of a collection that may lie in a shard-key range, read the cheapest way the
//! collection allows: what a migration's clone and the range deleter walk, batch by batch.
//!
//! ```text
//!  shard key {_id: 1}            -> the documents' own key range (stored by keystring(_id))
//!  a ready index the key prefixes -> that index's entries in [ident ‖ min, ident ‖ max), each
//!   (same fields, hashed or          document fetched by its _id
//!    ascending; not sparse, partial
//!    or multikey)
//!  otherwise                      -> every document of the collection
//! ```
//!
//! A chunk bound is the shard key's values in `keystring::encode_compound`, and an index entry's
//! key begins with the same values in the same encoding, so a range of the shard key is a range
//! of such an index. The candidates are a superset of the range's documents; callers still test
//! each one's shard key ([`crate::migration::mods::RangeFilter`]).
//!
//! Resume positions are tagged with the path that produced them; a position from another path
//! (the index was dropped, or built, between two batches) starts the walk over, so nothing is
//! skipped (the callers' steps are idempotent: a clone's upsert, the deleter's re-checked delete).
//!
//! Must not: decide what is in the range, or write.

use std::ops::Bound;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use shoal_proto::catalog::ChunkBound;
use shoal_query::index_keys::KeyKind;
use shoal_query::shard_key::KeyField;

use crate::storage::{KvIter, prefix_upper_bound};
use crate::store::indexes::{IndexSpec, entry_id};
use crate::store::local_catalog::CollectionInfo;
use crate::store::{Store, keys};

/// How the candidates are read.
#[derive(Debug, Clone, PartialEq)]
pub enum Path {
    /// The shard key is `{_id: 1}`: the documents' key range.
    Documents,
    /// The index with this ident, whose pattern the shard key prefixes.
    Index(u64),
    /// Every document of the collection.
    Collection,
}

impl Path {
    /// The cheapest path for `key` on `coll` as it is now.
    pub fn choose(coll: &CollectionInfo, key: &[KeyField]) -> Path {
        if let [f] = key
            && f.name == "_id"
            && !f.hashed
        {
            return Path::Documents;
        }
        coll.ready_indexes().find(|i| supports(i, key)).map_or(Path::Collection, |i| Path::Index(i.ident))
    }

    fn tag(&self) -> Vec<u8> {
        match self {
            Path::Documents => vec![b'd'],
            Path::Index(ident) => [&b"i"[..], &ident.to_be_bytes()].concat(),
            Path::Collection => vec![b'c'],
        }
    }
}

/// Whether every document with a shard key under `key` has exactly one entry in `index`, with
/// the shard key's encoding first.
fn supports(index: &IndexSpec, key: &[KeyField]) -> bool {
    let fields = &index.pattern.fields;
    !index.sparse
        && index.partial.is_none()
        && !index.multikey
        && fields.len() >= key.len()
        && key.iter().zip(fields).all(|(k, (name, kind))| {
            *name == k.name && *kind == if k.hashed { KeyKind::Hashed } else { KeyKind::Ascending }
        })
}

/// Candidates of `[min, max)` on `coll` (its indexes as the store has them now) after `after` (a
/// position an earlier call yielded): `(position, document)` pairs in the path's order.
pub fn candidates<'a>(
    store: &'a Store,
    coll: &CollectionInfo,
    key: &[KeyField],
    min: &ChunkBound,
    max: &ChunkBound,
    after: Option<&[u8]>,
) -> KvIter<'a> {
    let now = current(store, coll);
    let coll = now.as_deref().unwrap_or(coll);
    let path = Path::choose(coll, key);
    if let Path::Index(ident) = path {
        let after = after.and_then(|a| a.strip_prefix(path.tag().as_slice()));
        let (lower, upper) = bounds(&ident.to_be_bytes(), min, max, after);
        let entries = store.index_scan(as_ref(&lower), as_ref(&upper), false);
        // The iterator reads the index as it is now; its entries cover every document only if
        // the index is still there (maintained by every write up to this read).
        let kept = current(store, coll).is_some_and(|c| c.ready_indexes().any(|i| i.ident == ident));
        if kept {
            let (coll, tag) = (coll.clone(), path.tag());
            return Box::new(entries.filter_map(move |kv| {
                let fetched = kv.and_then(|(k, v)| {
                    let id = entry_id(&v)?;
                    Ok(store.get(&coll, &id)?.map(|doc| (tagged(&tag, &k), doc)))
                });
                // An entry whose document is gone (deleted since) is no candidate.
                fetched.transpose()
            }));
        }
        return documents(store, coll, &Path::Collection, min, max, None);
    }
    documents(store, coll, &path, min, max, after)
}

/// The collection's record as the store has it now (`None` once dropped or re-created).
fn current(store: &Store, coll: &CollectionInfo) -> Option<Arc<CollectionInfo>> {
    store.collection(&coll.full_name()).filter(|c| c.id == coll.id)
}

/// Candidates read from the documents themselves (`Documents` or `Collection`).
fn documents<'a>(
    store: &'a Store,
    coll: &CollectionInfo,
    path: &Path,
    min: &ChunkBound,
    max: &ChunkBound,
    after: Option<&[u8]>,
) -> KvIter<'a> {
    let tag = path.tag();
    // A position from another path starts the walk over.
    let after = after.and_then(|a| a.strip_prefix(tag.as_slice()));
    let (lower, upper) = match path {
        Path::Documents => bounds(&keys::collection_prefix(coll.id), min, max, after),
        _ => (after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_vec())), Bound::Unbounded),
    };
    Box::new(store.scan(coll, lower, upper, false).map(move |kv| kv.map(|(k, v)| (tagged(&tag, &k), v))))
}

fn tagged(tag: &[u8], key: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(tag.len() + key.len());
    b.put_slice(tag);
    b.put_slice(key);
    b.freeze()
}

/// `prefix ‖ min` up to `prefix ‖ max` (the whole prefix for MinKey / MaxKey), starting after
/// `after` when given.
fn bounds(prefix: &[u8], min: &ChunkBound, max: &ChunkBound, after: Option<&[u8]>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lower = match (after, min) {
        (Some(a), _) => Bound::Excluded(a.to_vec()),
        (None, ChunkBound::Key(k)) => Bound::Included([prefix, k].concat()),
        (None, ChunkBound::Min) => Bound::Included(prefix.to_vec()),
        // Nothing is at or above MaxKey: an empty range.
        (None, ChunkBound::Max) => Bound::Excluded(prefix_upper_bound(prefix).unwrap_or_default()),
    };
    let upper = match max {
        ChunkBound::Key(k) => Bound::Excluded([prefix, k].concat()),
        ChunkBound::Min => Bound::Excluded(prefix.to_vec()),
        ChunkBound::Max => prefix_upper_bound(prefix).map_or(Bound::Unbounded, Bound::Excluded),
    };
    (lower, upper)
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

#[cfg(test)]
#[path = "range_scan_tests.rs"]
mod tests;
