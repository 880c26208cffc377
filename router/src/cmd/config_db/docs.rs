//! The cluster catalog as MongoDB's `config` documents (docs/architecture.md, "The `config`
//! database"): pure builders from a catalog view to the shapes of `config.collections`,
//! `config.chunks`, `config.tags`, `config.changelog`, `config.locks` and `config.mongos`
//! (MongoDB 5+: chunks keyed by the collection's `uuid`).
//!
//! Chunk and zone bounds live in the catalog as keystrings of the shard-key values, one encoded
//! value per key field in pattern order, ascending (what `encode_compound` writes); they are
//! decoded back into `{field: value}` documents with MinKey/MaxKey for the ends of the key space.
//! Bytes that do not decode are shown as `{$keyString: "<hex>"}` rather than guessed at.
//!
//! Must not: read the catalog or filter documents (pure builders; `read` does both).

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DateTime, Document, doc, oid::ObjectId};
use shoal_proto::catalog::{
    ChangelogEntry, Chunk, ChunkBound, ChunkVersion, ClusterCatalogView, Collection, Detail, Epoch, KeyFieldKind,
    KeyPattern, Lease, Timestamp, ZoneRange,
};

/// `config.locks.state` of a held lock (MongoDB's "locked"); 0 is "unlocked".
const LOCK_STATE_HELD: i32 = 2;

pub fn timestamp(t: Timestamp) -> bson::Timestamp {
    bson::Timestamp { time: t.secs, increment: t.inc }
}

/// `lastmod`: Timestamp(major, minor).
pub fn version_timestamp(v: ChunkVersion) -> bson::Timestamp {
    bson::Timestamp { time: v.major, increment: v.minor }
}

pub fn uuid_binary(uuid: &uuid::Uuid) -> Binary {
    Binary { subtype: BinarySubtype::Uuid, bytes: uuid.as_bytes().to_vec() }
}

fn epoch_oid(e: Epoch) -> ObjectId {
    ObjectId::from_bytes(e.0)
}

/// `key`: `{field: 1}` per range field, `{field: "hashed"}` for the hashed one.
pub fn key_document(pattern: &KeyPattern) -> Document {
    pattern
        .fields
        .iter()
        .map(|f| {
            let v = match f.kind {
                KeyFieldKind::Range => Bson::Int32(1),
                KeyFieldKind::Hashed => Bson::String("hashed".into()),
            };
            (f.name.clone(), v)
        })
        .collect()
}

/// A chunk or zone bound as the shard-key document it stands for.
pub fn bound_document(pattern: Option<&KeyPattern>, bound: &ChunkBound) -> Document {
    let Some(pattern) = pattern else { return undecoded(bound) };
    let fill = |v: Bson| pattern.fields.iter().map(|f| (f.name.clone(), v.clone())).collect();
    match bound {
        ChunkBound::Min => fill(Bson::MinKey),
        ChunkBound::Max => fill(Bson::MaxKey),
        ChunkBound::Key(bytes) => match shoal_query::keystring::decode_compound(bytes, pattern.fields.len(), &[]) {
            Ok(values) => pattern
                .fields
                .iter()
                .zip(values)
                .map(|(f, v)| {
                    // Hashed values are NumberLong in MongoDB even when small.
                    let v = match (f.kind, v) {
                        (KeyFieldKind::Hashed, Bson::Int32(i)) => Bson::Int64(i64::from(i)),
                        (_, v) => v,
                    };
                    (f.name.clone(), v)
                })
                .collect(),
            Err(_) => undecoded(bound),
        },
    }
}

fn undecoded(bound: &ChunkBound) -> Document {
    match bound {
        ChunkBound::Min => doc! { "$keyString": "MinKey" },
        ChunkBound::Max => doc! { "$keyString": "MaxKey" },
        ChunkBound::Key(bytes) => {
            doc! { "$keyString": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() }
        }
    }
}

/// One `config.collections` document.
pub fn collection_document(c: &Collection) -> Document {
    let mut d = doc! {
        "_id": &c.ns,
        "lastmodEpoch": epoch_oid(c.epoch),
        "lastmod": DateTime::from_millis(i64::from(c.timestamp.secs) * 1000),
        "timestamp": timestamp(c.timestamp),
        "uuid": uuid_binary(&c.uuid),
        "key": key_document(&c.key),
        "unique": c.unique,
        "noBalance": c.no_balance,
    };
    if c.no_auto_merge {
        d.insert("enableAutoMerge", false);
    }
    if let Some(bytes) = c.max_chunk_size_bytes {
        d.insert("maxChunkSizeBytes", i64::try_from(bytes).unwrap_or(i64::MAX));
    }
    d
}

/// A stable `_id` for a chunk: the catalog keeps none, and a chunk is named by its collection and
/// `min` (MongoDB's unique index {uuid, min}), so hash those (FNV-1a, two seeds for 12 bytes).
fn chunk_id(c: &Collection, chunk: &Chunk) -> ObjectId {
    let mut input = c.uuid.as_bytes().to_vec();
    match &chunk.min {
        ChunkBound::Min => input.push(0),
        ChunkBound::Key(bytes) => {
            input.push(1);
            input.extend_from_slice(bytes);
        }
        ChunkBound::Max => input.push(2),
    }
    let fnv = |seed: u64| input.iter().fold(seed, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let (a, b) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4));
    let mut id = [0u8; 12];
    id[..8].copy_from_slice(&a.to_be_bytes());
    id[8..].copy_from_slice(&b.to_be_bytes()[..4]);
    ObjectId::from_bytes(id)
}

/// One `config.chunks` document.
pub fn chunk_document(c: &Collection, chunk: &Chunk) -> Document {
    let history: Vec<Document> =
        chunk.history.iter().map(|h| doc! { "validAfter": timestamp(h.valid_after), "shard": &h.shard }).collect();
    let mut d = doc! {
        "_id": chunk_id(c, chunk),
        "uuid": uuid_binary(&c.uuid),
        "min": bound_document(Some(&c.key), &chunk.min),
        "max": bound_document(Some(&c.key), &chunk.max),
        "shard": &chunk.shard,
        "lastmod": version_timestamp(chunk.version),
        "onCurrentShardSince": timestamp(chunk.on_current_shard_since),
        "history": history,
    };
    if chunk.jumbo {
        d.insert("jumbo", true);
    }
    d
}

/// One `config.tags` document.
pub fn zone_document(ns: &str, pattern: Option<&KeyPattern>, range: &ZoneRange) -> Document {
    let min = bound_document(pattern, &range.min);
    doc! {
        "_id": { "ns": ns, "min": min.clone() },
        "ns": ns,
        "min": min,
        "max": bound_document(pattern, &range.max),
        "tag": &range.zone,
    }
}

/// A `config.actionlog` document (the balancer's rounds and decisions): the changelog's shape,
/// with the details as MongoDB's balancer writes them.
pub fn action_document(catalog: &ClusterCatalogView, e: &ChangelogEntry) -> Document {
    let mut d = changelog_document(catalog, e);
    d.insert("_id", format!("balancer-{}-{}", e.time_ms, e.seq));
    d.insert("server", "balancer");
    d.remove("shard");
    d.remove("clientAddr");
    d
}

/// One `config.changelog` document; bounds in the details are decoded with the namespace's key
/// pattern when it names a sharded collection.
pub fn changelog_document(catalog: &ClusterCatalogView, e: &ChangelogEntry) -> Document {
    let pattern = catalog.collection(&e.ns).map(|c| &c.key);
    let details: Document = e.details.iter().map(|(k, v)| (k.clone(), detail_value(pattern, v))).collect();
    let time = DateTime::from_millis(i64::try_from(e.time_ms).unwrap_or(i64::MAX));
    doc! {
        "_id": format!("config-{}-{}", e.time_ms, e.seq),
        "server": "config",
        "shard": "config",
        "clientAddr": "",
        "time": time,
        "what": &e.what,
        "ns": &e.ns,
        "details": details,
    }
}

fn detail_value(pattern: Option<&KeyPattern>, v: &Detail) -> Bson {
    match v {
        Detail::Str(s) => Bson::String(s.clone()),
        Detail::Int(i) => Bson::Int64(*i),
        Detail::Bool(b) => Bson::Boolean(*b),
        Detail::Bound(b) => Bson::Document(bound_document(pattern, b)),
        Detail::Version(v) => Bson::Timestamp(version_timestamp(*v)),
        Detail::List(items) => Bson::Array(items.iter().map(|i| detail_value(pattern, i)).collect()),
    }
}

/// One `config.locks` document per catalog lease: held (state 2) while live at the catalog's
/// clock, else 0; `when` is when its holder acquired it (mongosh's `sh.status()` prints it). The
/// lease's fencing token and expiry are shown as they are.
pub fn lock_document(name: &str, lease: &Lease, now_ms: u64) -> Document {
    let millis = |ms: u64| DateTime::from_millis(i64::try_from(ms).unwrap_or(i64::MAX));
    let expires = millis(lease.expires_at_ms);
    doc! {
        "_id": name,
        "state": if lease.is_live(now_ms) { LOCK_STATE_HELD } else { 0 },
        "process": &lease.holder,
        "who": &lease.holder,
        "why": "lease",
        "when": millis(lease.acquired_at_ms),
        "token": i64::try_from(lease.token).unwrap_or(i64::MAX),
        "expiresAt": expires,
    }
}

/// This router's `config.mongos` document.
pub fn mongos_document(host_port: &str, now: DateTime, up_secs: u64, version: &str) -> Document {
    let up = i64::try_from(up_secs).unwrap_or(i64::MAX);
    let created = DateTime::from_millis(now.timestamp_millis().saturating_sub(up.saturating_mul(1000)));
    doc! {
        "_id": host_port,
        "ping": now,
        "up": up,
        "waiting": true,
        "mongoVersion": version,
        "advisoryHostFQDNs": [],
        "created": created,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use shoal_proto::catalog::ChunkHistoryEntry;
    use shoal_query::keystring::encode_compound;

    fn collection() -> Collection {
        let key = KeyPattern::range(&["region", "n"]);
        let cut = ChunkBound::key(encode_compound(&[&Bson::String("eu".into()), &Bson::Int64(10)], &[]));
        let chunk = |min: ChunkBound, max: ChunkBound, shard: &str, minor| Chunk {
            min,
            max,
            shard: shard.into(),
            version: ChunkVersion::new(1, minor),
            history: vec![ChunkHistoryEntry { valid_after: Timestamp { secs: 5, inc: 1 }, shard: shard.into() }],
            jumbo: minor == 1,
            on_current_shard_since: Timestamp { secs: 5, inc: 1 },
        };
        let chunks = BTreeMap::from([
            (ChunkBound::Min, chunk(ChunkBound::Min, cut.clone(), "a", 0)),
            (cut.clone(), chunk(cut, ChunkBound::Max, "b", 1)),
        ]);
        Collection {
            ns: "db.c".into(),
            uuid: uuid::Uuid::from_bytes([3; 16]),
            epoch: Epoch([9; 12]),
            timestamp: Timestamp { secs: 100, inc: 2 },
            key,
            unique: false,
            no_balance: true,
            no_auto_merge: false,
            max_chunk_size_bytes: Some(1 << 20),
            version: ChunkVersion::new(1, 1),
            chunks,
        }
    }

    #[test]
    fn collection_shape() {
        let d = collection_document(&collection());
        assert_eq!(d.get_str("_id").ok(), Some("db.c"));
        assert_eq!(d.get_object_id("lastmodEpoch").ok(), Some(ObjectId::from_bytes([9; 12])));
        assert_eq!(d.get_datetime("lastmod").map(|t| t.timestamp_millis()).ok(), Some(100_000));
        assert_eq!(d.get_timestamp("timestamp").ok(), Some(bson::Timestamp { time: 100, increment: 2 }));
        assert!(matches!(d.get("uuid"), Some(Bson::Binary(b)) if b.subtype == BinarySubtype::Uuid));
        assert_eq!(d.get_document("key").ok(), Some(&doc! { "region": 1, "n": 1 }));
        assert_eq!(d.get_bool("noBalance").ok(), Some(true));
        assert_eq!(d.get_i64("maxChunkSizeBytes").ok(), Some(1 << 20));
    }

    #[test]
    fn chunk_bounds_are_key_values() {
        let c = collection();
        let docs: Vec<Document> = c.chunks.values().map(|ch| chunk_document(&c, ch)).collect();
        assert_eq!(docs[0].get_document("min").ok(), Some(&doc! { "region": Bson::MinKey, "n": Bson::MinKey }));
        assert_eq!(docs[0].get_document("max").ok(), Some(&doc! { "region": "eu", "n": 10 }));
        assert_eq!(docs[1].get_document("max").ok(), Some(&doc! { "region": Bson::MaxKey, "n": Bson::MaxKey }));
        assert_eq!(docs[1].get_timestamp("lastmod").ok(), Some(bson::Timestamp { time: 1, increment: 1 }));
        assert_eq!(docs[1].get_bool("jumbo").ok(), Some(true));
        assert!(!docs[0].contains_key("jumbo"));
        assert_ne!(docs[0].get_object_id("_id").ok(), docs[1].get_object_id("_id").ok());
        assert_eq!(
            docs[0].get_object_id("_id").ok(),
            chunk_document(&c, &c.chunks[&ChunkBound::Min]).get_object_id("_id").ok()
        );
    }

    #[test]
    fn undecodable_and_unpatterned_bounds_are_shown_raw() {
        let pattern = KeyPattern::range(&["x"]);
        let bad = ChunkBound::key(vec![0x3C, b'a']);
        assert_eq!(bound_document(Some(&pattern), &bad), doc! { "$keyString": "3c61" });
        assert_eq!(bound_document(None, &ChunkBound::Min), doc! { "$keyString": "MinKey" });
        let hashed = KeyPattern::hashed("h");
        let k = ChunkBound::key(encode_compound(&[&Bson::Int64(-5)], &[]));
        assert_eq!(bound_document(Some(&hashed), &k), doc! { "h": Bson::Int64(-5) });
    }
}
