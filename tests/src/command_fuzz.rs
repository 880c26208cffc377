//! A seeded generator of well-formed-but-wrong commands and of mutated wire frames, for the
//! command fuzzer (`tests/tests/command_fuzz.rs`, grey-failures issue).
//!
//! Commands are built from pools of valid and invalid parts (filters with unknown operators,
//! sorts of 2, stages that do not exist, missing or mistyped required fields, ...), so most
//! commands are nearly right: the validation that decides them sits deep in a parser, where a
//! path that skips it (a database that does not exist, a sharded collection, `explain`) shows up
//! as a different answer. The generator never names the collection or database: the caller puts
//! the same command on each path.
//!
//! Frames are a generated command in an OP_MSG with one of a few mutations (bit flips, bytes set
//! to boundary values, cut or duplicated spans, length fields changed), as a fuzzer of the layer
//! below the commands.

use bson::{Bson, Document, doc};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;

/// The command kinds the fuzzer generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Find,
    Aggregate,
    Distinct,
    Count,
    Insert,
    Update,
    Delete,
    FindAndModify,
}

impl Kind {
    /// Reads change nothing, so they also run on a database that does not exist.
    pub fn is_read(self) -> bool {
        matches!(self, Kind::Find | Kind::Aggregate | Kind::Distinct | Kind::Count)
    }

    /// MongoDB's `explain` takes every kind but `insert`.
    pub fn explainable(self) -> bool {
        self != Kind::Insert
    }

    /// The command's name (its first field).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Find => "find",
            Kind::Aggregate => "aggregate",
            Kind::Distinct => "distinct",
            Kind::Count => "count",
            Kind::Insert => "insert",
            Kind::Update => "update",
            Kind::Delete => "delete",
            Kind::FindAndModify => "findAndModify",
        }
    }
}

const KINDS: [Kind; 8] = [
    Kind::Find,
    Kind::Aggregate,
    Kind::Distinct,
    Kind::Count,
    Kind::Insert,
    Kind::Update,
    Kind::Delete,
    Kind::FindAndModify,
];

/// One generated command: its kind and body without the collection name (the first field, which
/// [`Generated::on`] puts in front) and without `$db`.
#[derive(Clone, Debug)]
pub struct Generated {
    pub kind: Kind,
    pub rest: Document,
}

impl Generated {
    /// The command on collection `coll` of database `db`.
    pub fn on(&self, db: &str, coll: &str) -> Document {
        let mut d = doc! { self.kind.name(): coll };
        d.extend(self.rest.clone());
        d.insert("$db", db);
        d
    }

    /// `explain` of the command on `db.coll`.
    pub fn explained(&self, db: &str, coll: &str) -> Document {
        let mut inner = self.on(db, coll);
        inner.remove("$db");
        doc! { "explain": inner, "$db": db }
    }
}

/// The generator: a seeded source of commands.
pub struct Generator {
    rng: StdRng,
}

impl Generator {
    pub fn new(rng: StdRng) -> Generator {
        Generator { rng }
    }

    /// A fair coin weighted to `p`.
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn one_of(&mut self, pool: &[fn() -> Bson]) -> Bson {
        pool.choose(&mut self.rng).map_or(Bson::Null, |f| f())
    }

    /// A value of a wrong type for almost any field.
    fn wrong(&mut self) -> Bson {
        self.one_of(&[
            || Bson::Int32(5),
            || Bson::String("a\0b".into()),
            || Bson::String("x".into()),
            || Bson::Null,
            || Bson::MaxKey,
            || Bson::Boolean(true),
            || Bson::Array(vec![Bson::Int32(1)]),
            || Bson::Double(f64::NAN),
        ])
    }

    fn filter(&mut self) -> Bson {
        if self.chance(0.08) {
            return self.wrong();
        }
        let pool: &[fn() -> Bson] = &[
            || Bson::Document(doc! {}),
            || Bson::Document(doc! { "a": 1 }),
            || Bson::Document(doc! { "a": { "$gt": 1 }, "k": { "$lt": 50 } }),
            || Bson::Document(doc! { "k": 7 }),
            || Bson::Document(doc! { "a": { "$fuzzOp": 1 } }),
            || Bson::Document(doc! { "$where": "this.a == 1" }),
            || Bson::Document(doc! { "a": { "$regex": "a**" } }),
            || Bson::Document(doc! { "a": { "$regex": "(" } }),
            || Bson::Document(doc! { "a": { "$regex": "^a", "$options": "z" } }),
            || Bson::Document(doc! { "$and": [] }),
            || Bson::Document(doc! { "$and": 5 }),
            || Bson::Document(doc! { "$or": [{ "a": 1 }, 5] }),
            || Bson::Document(doc! { "a": { "$in": 5 } }),
            || Bson::Document(doc! { "a": { "$size": -1 } }),
            || Bson::Document(doc! { "a": { "$type": "nope" } }),
            || Bson::Document(doc! { "a": { "$elemMatch": 5 } }),
            || Bson::Document(doc! { "a": { "$mod": [0, 1] } }),
            || Bson::Document(doc! { "a": { "$mod": [2] } }),
            || Bson::Document(doc! { "$expr": { "$fuzzExpr": 1 } }),
            || Bson::Document(doc! { "$expr": { "$eq": ["$a", 1] } }),
            || Bson::Document(doc! { "$expr": { "$add": [1] , "x": 1 } }),
            || Bson::Document(doc! { "a": { "$exists": true }, "b": { "$not": { "$gt": 1 } } }),
            || Bson::Document(doc! { "a": { "$not": 5 } }),
            || Bson::Document(doc! { "$nor": [] }),
            || Bson::Document(doc! { "a": { "$all": 5 } }),
            || Bson::Document(doc! { "a": { "$bitsAllSet": -1 } }),
            || Bson::Document(doc! { "$comment": "fuzz", "a": 1 }),
            || Bson::Document(doc! { "$fuzzTop": 1 }),
        ];
        self.one_of(pool)
    }

    fn sort(&mut self) -> Bson {
        self.one_of(&[
            || Bson::Document(doc! { "a": 1 }),
            || Bson::Document(doc! { "a": -1, "k": 1 }),
            || Bson::Document(doc! { "a": 2 }),
            || Bson::Document(doc! { "a": "up" }),
            || Bson::Document(doc! { "a": 0 }),
            || Bson::Document(doc! { "$natural": 1 }),
            || Bson::Document(doc! { "a": { "$meta": "fuzzScore" } }),
            || Bson::Document(doc! {}),
            || Bson::Int32(5),
        ])
    }

    fn projection(&mut self) -> Bson {
        self.one_of(&[
            || Bson::Document(doc! { "a": 1 }),
            || Bson::Document(doc! { "a": 0 }),
            || Bson::Document(doc! { "a": 1, "b": 0 }),
            || Bson::Document(doc! { "a": { "$slice": 2 } }),
            || Bson::Document(doc! { "a": { "$slice": "x" } }),
            || Bson::Document(doc! { "a": { "$fuzzProj": 1 } }),
            || Bson::Document(doc! { "a.$": 1 }),
            || Bson::Document(doc! { "x": { "$add": [1, 2] } }),
            || Bson::Document(doc! { "$x": 1 }),
            || Bson::Int32(5),
        ])
    }

    fn count_value(&mut self) -> Bson {
        self.one_of(&[
            || Bson::Int32(1),
            || Bson::Int32(0),
            || Bson::Int32(-1),
            || Bson::Int64(i64::MAX),
            || Bson::Double(1.5),
            || Bson::String("x".into()),
            || Bson::Null,
        ])
    }

    fn stage(&mut self) -> Bson {
        let pool: &[fn() -> Bson] = &[
            || Bson::Document(doc! { "$match": { "a": 1 } }),
            || Bson::Document(doc! { "$match": { "a": { "$fuzzOp": 1 } } }),
            || Bson::Document(doc! { "$match": 5 }),
            || Bson::Document(doc! { "$project": { "a": 1 } }),
            || Bson::Document(doc! { "$project": {} }),
            || Bson::Document(doc! { "$project": { "x": { "$fuzzExpr": 1 } } }),
            || Bson::Document(doc! { "$addFields": { "x": { "$concat": ["a", "b"] } } }),
            || Bson::Document(doc! { "$addFields": { "$x": 1 } }),
            || Bson::Document(doc! { "$group": { "_id": "$a", "n": { "$sum": 1 } } }),
            || Bson::Document(doc! { "$group": { "_id": null, "n": { "$fuzzAcc": 1 } } }),
            || Bson::Document(doc! { "$group": { "n": { "$sum": 1 } } }),
            || Bson::Document(doc! { "$group": { "_id": null, "n": { "$sum": 1, "$avg": 1 } } }),
            || Bson::Document(doc! { "$sort": { "a": 1 } }),
            || Bson::Document(doc! { "$sort": { "a": 2 } }),
            || Bson::Document(doc! { "$sort": {} }),
            || Bson::Document(doc! { "$limit": 1 }),
            || Bson::Document(doc! { "$limit": 0 }),
            || Bson::Document(doc! { "$limit": "x" }),
            || Bson::Document(doc! { "$skip": -1 }),
            || Bson::Document(doc! { "$unwind": "$a" }),
            || Bson::Document(doc! { "$unwind": "a" }),
            || Bson::Document(doc! { "$unwind": 5 }),
            || Bson::Document(doc! { "$count": "n" }),
            || Bson::Document(doc! { "$count": "" }),
            || Bson::Document(doc! { "$count": "$n" }),
            || Bson::Document(doc! { "$sample": { "size": -1 } }),
            || Bson::Document(doc! { "$sample": { "size": 2 } }),
            || {
                Bson::Document(
                    doc! { "$lookup": { "from": "other", "localField": "a", "foreignField": "b", "as": "c" } },
                )
            },
            || Bson::Document(doc! { "$lookup": { "from": "other", "as": 5 } }),
            || Bson::Document(doc! { "$facet": { "f": [{ "$limit": 1 }] } }),
            || Bson::Document(doc! { "$facet": { "f": [{ "$fuzzStage": {} }] } }),
            || Bson::Document(doc! { "$bucket": { "groupBy": "$a", "boundaries": [2, 1] } }),
            || Bson::Document(doc! { "$replaceRoot": { "newRoot": "$a" } }),
            || Bson::Document(doc! { "$replaceRoot": {} }),
            || Bson::Document(doc! { "$fuzzStage": {} }),
            || Bson::Document(doc! { "$match": { "a": 1 }, "$limit": 1 }),
            || Bson::Document(doc! {}),
            || Bson::Int32(5),
        ];
        self.one_of(pool)
    }

    fn pipeline(&mut self) -> Bson {
        if self.chance(0.05) {
            return self.wrong();
        }
        let n = self.rng.random_range(0..4);
        Bson::Array((0..n).map(|_| self.stage()).collect())
    }

    fn update(&mut self) -> Bson {
        if self.chance(0.1) {
            return self.pipeline();
        }
        self.one_of(&[
            || Bson::Document(doc! { "$set": { "a": 1 } }),
            || Bson::Document(doc! { "$inc": { "a": "x" } }),
            || Bson::Document(doc! { "$inc": { "n": 1 }, "$set": { "n": 2 } }),
            || Bson::Document(doc! { "$fuzzUpdate": { "a": 1 } }),
            || Bson::Document(doc! { "$set": {} }),
            || Bson::Document(doc! { "$set": 5 }),
            || Bson::Document(doc! {}),
            || Bson::Document(doc! { "b": 1 }),
            || Bson::Document(doc! { "b": 1, "$set": { "a": 1 } }),
            || Bson::Document(doc! { "$set": { "$x": 1 } }),
            || Bson::Document(doc! { "$rename": { "a": "a" } }),
            || Bson::Document(doc! { "$unset": { "": 1 } }),
            || Bson::Document(doc! { "$push": { "a": { "$each": 5 } } }),
            || Bson::Document(doc! { "$set": { "_id": 5 } }),
            || Bson::Int32(5),
        ])
    }

    fn document(&mut self) -> Bson {
        self.one_of(&[
            || Bson::Document(doc! { "a": 1, "k": 3 }),
            || Bson::Document(doc! { "a": "s" }),
            || Bson::Document(doc! { "_id": [1] }),
            || Bson::Document(doc! { "_id": { "$x": 1 } }),
            || Bson::Document(doc! { "_id": { "$regex": "a" } }),
            || Bson::Document(doc! { "$a": 1 }),
            || Bson::Int32(5),
        ])
    }

    /// Optional field `name` set from `value` with probability `p`.
    fn maybe(&mut self, d: &mut Document, p: f64, name: &str, value: impl FnOnce(&mut Self) -> Bson) {
        if self.chance(p) {
            let v = value(self);
            d.insert(name, v);
        }
    }

    /// A required field: present and right most of the time, absent or of the wrong type
    /// otherwise.
    fn required(&mut self, d: &mut Document, name: &str, value: impl FnOnce(&mut Self) -> Bson) {
        let roll = self.rng.random_range(0..20);
        if roll == 0 {
            return;
        }
        let v = if roll == 1 { self.wrong() } else { value(self) };
        d.insert(name, v);
    }

    fn statements(&mut self, each: impl Fn(&mut Self) -> Bson) -> Bson {
        let n = self.rng.random_range(0..3);
        if n == 0 && self.chance(0.5) {
            return self.wrong();
        }
        Bson::Array((0..n.max(1)).map(|_| each(self)).collect())
    }

    fn update_statement(&mut self) -> Bson {
        if self.chance(0.05) {
            return self.wrong();
        }
        let mut s = Document::new();
        self.required(&mut s, "q", Self::filter);
        self.required(&mut s, "u", Self::update);
        self.maybe(&mut s, 0.3, "multi", |g| Bson::Boolean(g.chance(0.5)));
        self.maybe(&mut s, 0.2, "upsert", |g| Bson::Boolean(g.chance(0.5)));
        self.maybe(&mut s, 0.1, "arrayFilters", |g| {
            if g.chance(0.5) { Bson::Array(vec![Bson::Document(doc! { "x.a": 1 })]) } else { g.wrong() }
        });
        self.maybe(&mut s, 0.05, "fuzzOption", |_| Bson::Int32(1));
        Bson::Document(s)
    }

    fn delete_statement(&mut self) -> Bson {
        if self.chance(0.05) {
            return self.wrong();
        }
        let mut s = Document::new();
        self.required(&mut s, "q", Self::filter);
        self.required(&mut s, "limit", |g| {
            g.one_of(&[|| Bson::Int32(0), || Bson::Int32(1), || Bson::Int32(2), || Bson::String("1".into())])
        });
        self.maybe(&mut s, 0.05, "fuzzOption", |_| Bson::Int32(1));
        Bson::Document(s)
    }

    /// The next command.
    pub fn command(&mut self) -> Generated {
        let kind = KINDS.choose(&mut self.rng).copied().unwrap_or(Kind::Find);
        let mut d = Document::new();
        match kind {
            Kind::Find => {
                self.maybe(&mut d, 0.7, "filter", Self::filter);
                self.maybe(&mut d, 0.3, "sort", Self::sort);
                self.maybe(&mut d, 0.3, "projection", Self::projection);
                self.maybe(&mut d, 0.2, "limit", Self::count_value);
                self.maybe(&mut d, 0.2, "skip", Self::count_value);
                self.maybe(&mut d, 0.2, "batchSize", Self::count_value);
                self.maybe(&mut d, 0.05, "singleBatch", |g| g.wrong());
                self.maybe(&mut d, 0.05, "fuzzOption", |_| Bson::Int32(1));
            }
            Kind::Aggregate => {
                self.required(&mut d, "pipeline", Self::pipeline);
                self.required(&mut d, "cursor", |g| {
                    if g.chance(0.7) {
                        Bson::Document(doc! {})
                    } else {
                        Bson::Document(doc! { "batchSize": g.count_value() })
                    }
                });
                self.maybe(&mut d, 0.05, "allowDiskUse", |g| g.wrong());
                self.maybe(&mut d, 0.05, "fuzzOption", |_| Bson::Int32(1));
            }
            Kind::Distinct => {
                self.required(&mut d, "key", |g| {
                    g.one_of(&[|| Bson::String("a".into()), || Bson::String("".into()), || Bson::String("$a".into())])
                });
                self.maybe(&mut d, 0.5, "query", Self::filter);
            }
            Kind::Count => {
                self.maybe(&mut d, 0.7, "query", Self::filter);
                self.maybe(&mut d, 0.2, "limit", Self::count_value);
                self.maybe(&mut d, 0.2, "skip", Self::count_value);
            }
            Kind::Insert => {
                let docs = self.statements(Self::document);
                self.required(&mut d, "documents", |_| docs);
                self.maybe(&mut d, 0.1, "ordered", |g| g.wrong());
            }
            Kind::Update => {
                let updates = self.statements(Self::update_statement);
                self.required(&mut d, "updates", |_| updates);
                self.maybe(&mut d, 0.1, "ordered", |g| g.wrong());
            }
            Kind::Delete => {
                let deletes = self.statements(Self::delete_statement);
                self.required(&mut d, "deletes", |_| deletes);
            }
            Kind::FindAndModify => {
                self.maybe(&mut d, 0.7, "query", Self::filter);
                match self.rng.random_range(0..5) {
                    0 => {}
                    1 => {
                        d.insert("remove", true);
                        d.insert("update", self.update());
                    }
                    2 => {
                        d.insert("remove", self.wrong());
                    }
                    3 => {
                        d.insert("remove", true);
                    }
                    _ => {
                        d.insert("update", self.update());
                    }
                }
                self.maybe(&mut d, 0.3, "new", |g| Bson::Boolean(g.chance(0.5)));
                self.maybe(&mut d, 0.2, "upsert", |g| Bson::Boolean(g.chance(0.5)));
                self.maybe(&mut d, 0.2, "sort", Self::sort);
                self.maybe(&mut d, 0.2, "fields", Self::projection);
            }
        }
        Generated { kind, rest: d }
    }

    /// An OP_MSG frame (`request_id`) carrying a generated command on `db.coll`, mutated once.
    pub fn frame(&mut self, request_id: i32, db: &str, coll: &str) -> Vec<u8> {
        let body = self.command().on(db, coll).to_vec().unwrap_or_default();
        let mut frame = crate::wire::op_msg(request_id, 0, &body, &[]);
        self.mutate(&mut frame);
        frame
    }

    /// One mutation of `bytes`: bit flips, boundary bytes, a span cut or repeated, or a length
    /// field (the header's or a document's) changed, keeping the header's length right or not.
    fn mutate(&mut self, bytes: &mut Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let at = self.rng.random_range(0..bytes.len());
        match self.rng.random_range(0..6) {
            0 => {
                for _ in 0..self.rng.random_range(1..4) {
                    let i = self.rng.random_range(0..bytes.len());
                    bytes[i] ^= 1 << self.rng.random_range(0..8);
                }
            }
            1 => bytes[at] = *[0x00, 0x01, 0x7f, 0x80, 0xff].choose(&mut self.rng).unwrap_or(&0),
            2 => {
                let end = (at + self.rng.random_range(1..16)).min(bytes.len());
                bytes.drain(at..end);
            }
            3 => {
                let end = (at + self.rng.random_range(1..16)).min(bytes.len());
                let span: Vec<u8> = bytes[at..end].to_vec();
                bytes.splice(at..at, span);
            }
            4 => {
                // A document's length (the body starts after the header, flags and kind byte).
                let i = 21.min(bytes.len().saturating_sub(4));
                let delta: i32 = *[-1, 1, -5, 1 << 20, i32::MIN].choose(&mut self.rng).unwrap_or(&1);
                let old = i32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or([0; 4]));
                bytes[i..i + 4].copy_from_slice(&old.wrapping_add(delta).to_le_bytes());
            }
            _ => {
                let opcode: i32 = *[2004, 2012, 2013, 1, 9999].choose(&mut self.rng).unwrap_or(&2013);
                if bytes.len() >= 16 {
                    bytes[12..16].copy_from_slice(&opcode.to_le_bytes());
                }
            }
        }
        // Most frames keep a header length that matches what is sent, so the server reads the
        // whole mutated message rather than waiting for bytes that never come.
        if bytes.len() >= 4 && self.chance(0.9) {
            let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
            bytes[0..4].copy_from_slice(&len.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_same_seed_generates_the_same_commands() {
        let mut a = Generator::new(StdRng::seed_from_u64(7));
        let mut b = Generator::new(StdRng::seed_from_u64(7));
        for _ in 0..200 {
            // Bytes, not documents: a NaN is not equal to itself.
            assert_eq!(a.command().on("d", "c").to_vec().unwrap(), b.command().on("d", "c").to_vec().unwrap());
            assert_eq!(a.frame(1, "d", "c"), b.frame(1, "d", "c"));
        }
    }

    #[test]
    fn every_kind_comes_up_and_commands_name_their_collection_first() {
        let mut g = Generator::new(StdRng::seed_from_u64(1));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..400 {
            let c = g.command();
            let d = c.on("d", "c");
            assert_eq!(d.keys().next().map(String::as_str), Some(c.kind.name()));
            assert_eq!(d.get_str("$db").ok(), Some("d"));
            seen.insert(c.kind.name());
        }
        assert_eq!(seen.len(), KINDS.len());
    }
}
