//! The donor's catch-up filter and batching, pure and I/O-free: oplog entries of the moving
//! collection become the recipient's modifications ([`Mod`]), and modifications are cut into
//! batches bounded in documents and bytes.
//!
//! Rules (oplog entries carry full post-images, so each rule is idempotent):
//! - insert/update whose document's shard key is in `[min, max)` → upsert of that document;
//! - update whose post-image is outside the range → delete by `_id` (the document left the range;
//!   the recipient deletes only a copy that lies in the range);
//! - delete → delete by `_id` (same condition on the recipient);
//! - insert outside the range, other namespaces, `fromMigrate` entries (range deletions, data this
//!   shard itself received) → nothing;
//! - a command on the collection (drop, rename) → the migration fails.
//!
//! Must not: read storage or talk to the network (the donor does, see `donor`).

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::catalog::ChunkBound;
use shoal_query::shard_key::{self, KeyField, Missing};

/// Documents per batch sent to the recipient.
pub const BATCH_DOCS_MAX: usize = 4096;
/// Bytes of documents per batch (below the gRPC message limit with room for the envelope).
pub const BATCH_BYTES_MAX: usize = 4 << 20;

/// One modification the recipient applies, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Mod {
    /// Insert or replace by `_id`.
    Upsert(RawDocumentBuf),
    /// Delete the document with this `_id` if the recipient's copy lies in the range.
    Delete(Bson),
}

impl Mod {
    pub fn size_bytes(&self) -> usize {
        match self {
            Mod::Upsert(d) => d.as_bytes().len(),
            // An `_id` document is small; count a fixed envelope.
            Mod::Delete(_) => 64,
        }
    }
}

/// What the filter wants the donor to do with one oplog entry.
#[derive(Debug, PartialEq)]
pub enum Step {
    Skip,
    Apply(Mod),
    /// The collection was dropped or renamed under the migration.
    Fail(String),
}

/// The moving range of one collection.
pub struct RangeFilter<'a> {
    pub ns: &'a str,
    pub key: &'a [KeyField],
    pub min: &'a ChunkBound,
    pub max: &'a ChunkBound,
}

impl RangeFilter<'_> {
    /// Whether `doc`'s shard key lies in `[min, max)` (a document the key cannot be taken of is
    /// outside: the range deleter would never delete it either).
    pub fn contains(&self, doc: &Document) -> bool {
        match shard_key::of_document(self.key, doc, Missing::AsNull) {
            Ok(k) => {
                let k = ChunkBound::Key(k);
                *self.min <= k && k < *self.max
            }
            Err(_) => false,
        }
    }

    /// The step for one decoded oplog entry.
    pub fn step(&self, entry: &Document) -> Step {
        if entry.get_bool("fromMigrate").unwrap_or(false) {
            return Step::Skip;
        }
        let op = entry.get_str("op").unwrap_or("");
        let ns = entry.get_str("ns").unwrap_or("");
        if op == "c" {
            let (db, coll) = self.ns.split_once('.').unwrap_or((self.ns, ""));
            let o = entry.get_document("o").ok();
            let names_us = |field: &str| o.and_then(|o| o.get_str(field).ok()) == Some(coll);
            let renames_us = o.and_then(|o| o.get_str("renameCollection").ok()) == Some(self.ns);
            let db_cmd = ns == format!("{db}.$cmd");
            if db_cmd && (names_us("drop") || renames_us || o.is_some_and(|o| o.contains_key("dropDatabase"))) {
                return Step::Fail(format!("{} was dropped or renamed during the migration", self.ns));
            }
            return Step::Skip;
        }
        if ns != self.ns {
            return Step::Skip;
        }
        let Ok(o) = entry.get_document("o") else { return Step::Skip };
        match op {
            "i" | "u" if self.contains(o) => match RawDocumentBuf::try_from(o) {
                Ok(raw) => Step::Apply(Mod::Upsert(raw)),
                Err(e) => Step::Fail(format!("oplog document cannot be re-encoded: {e}")),
            },
            "u" | "d" => match o.get("_id") {
                Some(id) => Step::Apply(Mod::Delete(id.clone())),
                None => Step::Skip,
            },
            _ => Step::Skip,
        }
    }
}

/// Cuts `mods` into batches of at most [`BATCH_DOCS_MAX`] modifications and about
/// [`BATCH_BYTES_MAX`] bytes (a single larger document still goes, alone), keeping their order.
pub fn batches(mods: Vec<Mod>) -> Vec<Vec<Mod>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for m in mods {
        let size = m.size_bytes();
        if !current.is_empty() && (current.len() >= BATCH_DOCS_MAX || bytes + size > BATCH_BYTES_MAX) {
            out.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(m);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The `{_id}` document a delete travels as.
pub fn id_document(id: &Bson) -> Document {
    doc! { "_id": id.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Timestamp;

    fn key() -> Vec<KeyField> {
        vec![KeyField { name: "k".into(), hashed: false }]
    }

    fn bound(v: i32) -> ChunkBound {
        ChunkBound::Key(shard_key::of_document(&key(), &doc! {"k": v}, Missing::AsNull).unwrap())
    }

    fn entry(op: &str, ns: &str, o: Document) -> Document {
        doc! { "ts": Timestamp { time: 1, increment: 1 }, "op": op, "ns": ns, "o": o }
    }

    #[test]
    fn oplog_entries_become_upserts_and_deletes_of_the_range() {
        let (k, min, max) = (key(), bound(10), bound(20));
        let f = RangeFilter { ns: "db.c", key: &k, min: &min, max: &max };
        let inside = doc! {"_id": 1, "k": 15};
        let up = |d: &Document| Step::Apply(Mod::Upsert(RawDocumentBuf::try_from(d).unwrap()));
        assert_eq!(f.step(&entry("i", "db.c", inside.clone())), up(&inside));
        assert_eq!(f.step(&entry("u", "db.c", inside.clone())), up(&inside));
        // Bounds: min is in, max is out.
        let at_min = doc! {"_id": 2, "k": 10};
        assert_eq!(f.step(&entry("i", "db.c", at_min.clone())), up(&at_min));
        assert_eq!(f.step(&entry("i", "db.c", doc! {"_id": 3, "k": 20})), Step::Skip);
        // An update that moved the document out of the range deletes the recipient's copy.
        assert_eq!(f.step(&entry("u", "db.c", doc! {"_id": 1, "k": 25})), Step::Apply(Mod::Delete(Bson::Int32(1))));
        assert_eq!(f.step(&entry("d", "db.c", doc! {"_id": 7})), Step::Apply(Mod::Delete(Bson::Int32(7))));
        // Other collections and the migration's own writes are not ours.
        assert_eq!(f.step(&entry("i", "db.other", inside.clone())), Step::Skip);
        let mut from_migrate = entry("i", "db.c", inside);
        from_migrate.insert("fromMigrate", true);
        assert_eq!(f.step(&from_migrate), Step::Skip);
        // A missing key field counts as null, which sorts below 10.
        assert_eq!(f.step(&entry("i", "db.c", doc! {"_id": 9})), Step::Skip);
    }

    #[test]
    fn dropping_the_collection_fails_the_migration() {
        let (k, min, max) = (key(), ChunkBound::Min, ChunkBound::Max);
        let f = RangeFilter { ns: "db.c", key: &k, min: &min, max: &max };
        assert!(matches!(f.step(&entry("c", "db.$cmd", doc! {"drop": "c"})), Step::Fail(_)));
        assert!(matches!(f.step(&entry("c", "db.$cmd", doc! {"dropDatabase": 1})), Step::Fail(_)));
        assert_eq!(f.step(&entry("c", "db.$cmd", doc! {"drop": "other"})), Step::Skip);
        assert_eq!(f.step(&entry("c", "db.$cmd", doc! {"create": "c"})), Step::Skip);
    }

    #[test]
    fn batches_are_bounded_in_count_and_bytes_and_keep_order() {
        let mods: Vec<Mod> = (0..10_000).map(|i| Mod::Delete(Bson::Int32(i))).collect();
        let out = batches(mods);
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![4096, 4096, 1808]);
        assert_eq!(out[1][0], Mod::Delete(Bson::Int32(4096)));
        let big = RawDocumentBuf::try_from(&doc! {"_id": 1, "pad": "x".repeat(3 << 20)}).unwrap();
        let out = batches(vec![Mod::Upsert(big.clone()), Mod::Upsert(big.clone()), Mod::Delete(Bson::Int32(1))]);
        assert_eq!(out.len(), 2, "two 3 MiB documents do not share a 4 MiB batch");
        assert_eq!(out[1].len(), 2);
        assert!(batches(Vec::new()).is_empty());
    }
}
