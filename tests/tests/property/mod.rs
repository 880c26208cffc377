//! The grammar of `sharded_vs_unsharded`: random documents, filters, finds, expressions and
//! pipelines, and the comparison of two answers.
//!
//! The grammar only produces queries whose answer is determined by the data: `$skip`/`$limit`
//! only after a total order (a sort ending in a unique `_id`), accumulators that depend on input
//! order (`$first $last $push`) only right after such a sort, and arrays whose order MongoDB
//! leaves open (`$addToSet`, `$push` without an order) under names starting `u_`, compared as
//! multisets.

use std::cmp::Ordering;
use std::fmt;

use bson::{Bson, Document, bson, doc};
use rand::Rng;
use rand::rngs::StdRng;
use shoal_query::order::compare_values;

pub struct Gen(pub StdRng);

#[allow(clippy::large_enum_variant)] // a few hundred cases, built once
pub enum Case {
    Find {
        filter: Document,
        sort: Option<Document>,
        skip: u64,
        limit: i64,
        projection: Option<Document>,
        /// English at this strength (1 or 2), or the simple collation.
        collation: Option<i32>,
    },
    Pipeline {
        stages: Vec<Document>,
        ordered: bool,
    },
}

impl Case {
    /// Whether the answer's order is determined (compared in order) or not (as a multiset).
    pub fn ordered(&self) -> bool {
        match self {
            Case::Find { sort, .. } => sort.is_some(),
            Case::Pipeline { ordered, .. } => *ordered,
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Case::Find { filter, sort, skip, limit, projection, collation } => write!(
                f,
                "find {filter} sort {} skip {skip} limit {limit} projection {} collation {collation:?}",
                sort.as_ref().map_or("-".to_owned(), |s| s.to_string()),
                projection.as_ref().map_or("-".to_owned(), |p| p.to_string())
            ),
            Case::Pipeline { stages, .. } => {
                write!(f, "aggregate [{}]", stages.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
            }
        }
    }
}

pub enum Outcome {
    Docs(Vec<Document>),
    /// The server's code and message (only the code is compared).
    Error(i32, String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Error(code, message) => write!(f, "error {code}: {message}"),
            Outcome::Docs(docs) => {
                let shown: Vec<String> = docs.iter().take(6).map(|d| d.to_string()).collect();
                write!(f, "{} docs [{}{}]", docs.len(), shown.join(", "), if docs.len() > 6 { ", …" } else { "" })
            }
        }
    }
}

const STRINGS: &[&str] = &["a", "b", "ab", "B", "", "ba"];
const FIELDS: &[&str] = &["a", "b", "c", "a.x", "b.y", "c.x", "k"];
const TOP_FIELDS: &[&str] = &["a", "b", "c"];

impl Gen {
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.0.random_range(0..items.len())]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.0.random_bool(p)
    }

    /// Halves, so that sums are exact whatever order shards add them in.
    fn scalar(&mut self) -> Bson {
        match self.0.random_range(0..10) {
            0..=3 => Bson::Int32(self.0.random_range(-3..4)),
            4 => Bson::Int64(self.0.random_range(-3..4)),
            5 => Bson::Double(f64::from(self.0.random_range(-6..7)) / 2.0),
            6 | 7 => Bson::String((*self.pick(STRINGS)).to_owned()),
            8 => Bson::Null,
            _ => Bson::Boolean(self.chance(0.5)),
        }
    }

    fn value(&mut self) -> Bson {
        match self.0.random_range(0..10) {
            0..=5 => self.scalar(),
            6 | 7 => Bson::Array((0..self.0.random_range(0..4)).map(|_| self.scalar()).collect()),
            _ => {
                let mut d = Document::new();
                for f in ["x", "y"] {
                    if self.chance(0.75) {
                        d.insert(f, self.scalar());
                    }
                }
                Bson::Document(d)
            }
        }
    }

    pub fn document(&mut self, id: i32) -> Document {
        let mut d = doc! {"_id": id, "k": self.0.random_range(0..100)};
        for f in TOP_FIELDS {
            if self.chance(0.8) {
                d.insert(*f, self.value());
            }
        }
        d
    }

    fn field(&mut self) -> String {
        (*self.pick(FIELDS)).to_owned()
    }

    fn leaf_filter(&mut self) -> Document {
        let path = self.field();
        let v = self.scalar();
        let operand = match self.0.random_range(0..19) {
            0 | 1 => v,
            2 => bson!({"$eq": v}),
            3 => bson!({"$ne": v}),
            4 => bson!({"$gt": v}),
            5 => bson!({"$gte": v}),
            6 => bson!({"$lt": v}),
            7 => bson!({"$lte": v}),
            8 => bson!({"$in": [v, self.scalar()]}),
            9 => bson!({"$nin": [v, self.scalar()]}),
            10 => bson!({"$exists": self.chance(0.5)}),
            11 => bson!({"$type": *self.pick(&["string", "number", "array", "object", "null", "bool", "int"])}),
            12 => bson!({"$size": self.0.random_range(0..3)}),
            13 => bson!({"$elemMatch": {"$gte": self.0.random_range(-2..3)}}),
            14 => bson!({"$not": {"$gt": self.0.random_range(-2..3)}}),
            15 => bson!({"$all": [v, self.scalar()]}),
            16 => bson!({"$mod": [self.0.random_range(2..4), self.0.random_range(0..2)]}),
            17 => bson!({"$elemMatch": {"x": {"$gte": self.0.random_range(-2..3)}}}),
            _ => bson!({"$regex": *self.pick(&["^a", "b$", "^$"])}),
        };
        if self.chance(0.08) {
            let (x, y) = (self.pick(TOP_FIELDS).to_string(), self.pick(TOP_FIELDS).to_string());
            return doc! {"$expr": {"$gt": [format!("${x}"), format!("${y}")]}};
        }
        doc! {path: operand}
    }

    pub fn filter(&mut self, depth: u32) -> Document {
        if depth >= 2 || self.chance(0.6) {
            return self.leaf_filter();
        }
        let n = self.0.random_range(1..3);
        let children: Vec<Document> = (0..n).map(|_| self.filter(depth + 1)).collect();
        match self.0.random_range(0..4) {
            0 => doc! {"$and": children},
            1 => doc! {"$or": children},
            2 => doc! {"$nor": children},
            // Two fields in one filter document: an implicit $and.
            _ => {
                let mut d = self.leaf_filter();
                d.extend(self.leaf_filter());
                d
            }
        }
    }

    /// A total order: some keys, then the unique `_id`.
    fn total_sort(&mut self, fields: &[&str]) -> Document {
        let mut s = Document::new();
        for _ in 0..self.0.random_range(0..3) {
            let f = *self.pick(fields);
            if f != "_id" {
                s.insert(f, if self.chance(0.5) { 1 } else { -1 });
            }
        }
        s.insert("_id", if self.chance(0.7) { 1 } else { -1 });
        s
    }

    pub fn find_case(&mut self) -> Case {
        let filter = if self.chance(0.1) { Document::new() } else { self.filter(0) };
        let sort = self.chance(0.6).then(|| self.total_sort(FIELDS));
        let (skip, limit) = match &sort {
            Some(_) => (
                if self.chance(0.3) { self.0.random_range(0..20) } else { 0 },
                if self.chance(0.4) { self.0.random_range(1..30) } else { 0 },
            ),
            None => (0, 0),
        };
        let projection = match self.0.random_range(0..6) {
            0 => Some(doc! {"a": 1}),
            1 => Some(doc! {"b": 0, "c": 0}),
            2 => Some(doc! {"a.x": 1, "k": 1}),
            3 => Some(doc! {"_id": 0, "k": 1, "b": 1}),
            _ => None,
        };
        let collation = self.chance(0.15).then(|| self.0.random_range(1..3));
        Case::Find { filter, sort, skip, limit, projection, collation }
    }

    /// An expression over the current document's fields; mostly total (no type errors), a few
    /// that fail on some types, so error answers are compared too.
    fn expr(&mut self, depth: u32) -> Bson {
        let f = format!("${}", self.pick(TOP_FIELDS));
        if depth >= 2 {
            return match self.0.random_range(0..3) {
                0 => Bson::String(f),
                1 => Bson::Int32(self.0.random_range(-2..3)),
                _ => Bson::String(format!("${}", self.pick(&["a.x", "b.y", "k"]))),
            };
        }
        let a = self.expr(depth + 1);
        let b = self.expr(depth + 1);
        match self.0.random_range(0..12) {
            0 => bson!({"$ifNull": [a, 0]}),
            1 => bson!({"$type": a}),
            2 => bson!({"$cond": [{"$gt": [a, 1]}, "big", "small"]}),
            3 => bson!({"$eq": [a, b]}),
            4 => bson!({"$lte": [a, b]}),
            5 => bson!({"$in": [a, [1, "a", null]]}),
            6 => bson!({"$eq": [{"$type": a}, "array"]}),
            7 => bson!({"$add": [{"$ifNull": [a, 0]}, 1]}),
            8 => bson!({"$and": [a, b]}),
            9 => bson!({"$size": {"$ifNull": [a, []]}}),
            10 => bson!({"$multiply": ["$k", 2]}),
            _ => Bson::String(f),
        }
    }

    fn group_key(&mut self) -> Bson {
        match self.0.random_range(0..5) {
            0 => Bson::Null,
            // Not an array: a sort on an array `_id` would not be a total order.
            1 => bson!({"$cond": [{"$eq": [{"$type": "$b"}, "array"]}, "array", "$b"]}),
            2 => bson!({"$type": "$a"}),
            3 => bson!({"x": "$a.x", "t": {"$type": "$c"}}),
            _ => bson!({"$mod": ["$k", 5]}),
        }
    }

    fn group_key_b(&self) -> Bson {
        bson!({"$cond": [{"$eq": [{"$type": "$b"}, "array"]}, "array", "$b"]})
    }

    fn group(&mut self, after_total_sort: bool) -> Document {
        let mut spec = doc! {"_id": self.group_key(), "n": {"$sum": 1}};
        let acc = |g: &mut Gen| -> (String, Bson) {
            let f = format!("${}", g.pick(&["a", "b", "c", "k", "a.x"]));
            match g.0.random_range(0..8) {
                0 => ("s".into(), bson!({"$sum": f})),
                1 => ("av".into(), bson!({"$avg": f})),
                2 => ("mn".into(), bson!({"$min": f})),
                3 => ("mx".into(), bson!({"$max": f})),
                4 => ("u_set".into(), bson!({"$addToSet": f})),
                5 => ("sd".into(), bson!({"$stdDevPop": f})),
                6 => ("cnt".into(), bson!({"$count": {}})),
                _ => ("u_push".into(), bson!({"$push": f})),
            }
        };
        for _ in 0..self.0.random_range(1..4) {
            let (name, a) = acc(self);
            spec.insert(name, a);
        }
        if after_total_sort && self.chance(0.5) {
            spec.insert("first", bson!({"$first": "$a"}));
            spec.insert("last", bson!({"$last": "$k"}));
            spec.insert("pushed", bson!({"$push": "$_id"}));
        }
        doc! {"$group": spec}
    }

    /// A multi-document `update` or `delete` of `coll` (never touching the shard key `k`, never
    /// failing halfway: a partly applied failure would differ between shards by timing), maybe
    /// with `let` variables used by `$expr` and by a pipeline update.
    pub fn write_case(&mut self, coll: &str) -> Document {
        let v = self.scalar();
        let q = match self.0.random_range(0..4) {
            0 => doc! {"$expr": {"$eq": [{"$mod": ["$k", 7]}, {"$ifNull": ["$$v", 0]}]}},
            1 => Document::new(),
            _ => self.filter(0),
        };
        if self.chance(0.2) {
            return doc! {"delete": coll, "deletes": [{"q": q, "limit": 0}], "let": {"v": v}};
        }
        let u = match self.0.random_range(0..5) {
            0 => bson!({"$set": {"w": self.scalar()}}),
            1 => bson!({"$inc": {"n": 1}}),
            2 => bson!({"$unset": {*self.pick(TOP_FIELDS): ""}}),
            3 => bson!([{"$set": {"t": {"$ifNull": ["$a", "$$v"]}, "e": {"$eq": ["$b", "$$v"]}}}]),
            _ => bson!({"$push": {"p": self.scalar()}}),
        };
        doc! {"update": coll, "updates": [{"q": q, "u": u, "multi": true}], "let": {"v": v}}
    }

    /// 1 to 4 stages. `ordered` tracks whether the stream's order is determined so far; `unique`
    /// whether `_id` is still unique (a sort on it is then total).
    pub fn pipeline_case(&mut self) -> Case {
        let mut stages = Vec::new();
        let (mut ordered, mut unique) = (false, true);
        let n = self.0.random_range(1..5);
        for i in 0..n {
            let last = i + 1 == n;
            let stage = match self.0.random_range(0..16) {
                0 | 1 => doc! {"$match": self.filter(0)},
                2 => doc! {"$project": {"a": 1, "k": 1, "t": self.expr(0)}},
                3 => doc! {"$addFields": {"t": self.expr(0)}},
                4 => doc! {"$set": {"b": self.expr(0)}},
                5 => doc! {"$unset": *self.pick(TOP_FIELDS)},
                6 => {
                    unique = false;
                    ordered = false;
                    doc! {"$unwind": {"path": "$c", "preserveNullAndEmptyArrays": self.chance(0.5)}}
                }
                7 | 8 => {
                    let after_total_sort = ordered;
                    (ordered, unique) = (false, true);
                    self.group(after_total_sort)
                }
                9 if unique => {
                    ordered = true;
                    doc! {"$sort": self.total_sort(&["a", "b", "k", "a.x", "t", "n"])}
                }
                10 if ordered => doc! {"$skip": self.0.random_range(0..10)},
                11 if ordered => doc! {"$limit": self.0.random_range(1..20)},
                12 if last => {
                    (ordered, unique) = (true, true);
                    doc! {"$count": "total"}
                }
                13 => {
                    (ordered, unique) = (false, true);
                    // Keys that are never arrays: sorting on the output's `_id` is then total.
                    let key = self.pick(&[bson!("$k"), bson!({"$type": "$a"}), self.group_key_b()]).clone();
                    doc! {"$sortByCount": key}
                }
                14 => {
                    (ordered, unique) = (false, true);
                    doc! {"$bucket": {
                        "groupBy": *self.pick(&["$a", "$k", "$a.x"]),
                        "boundaries": [-10, 0, 2, 50, 100],
                        "default": "other",
                        "output": {"n": {"$sum": 1}, "u_ids": {"$push": "$_id"}},
                    }}
                }
                15 if last => {
                    (ordered, unique) = (true, true);
                    let f1 = vec![doc! {"$match": self.filter(1)}, doc! {"$count": "n"}];
                    let f2 = vec![self.group(false)];
                    doc! {"$facet": {"u_count": f1, "u_groups": f2}}
                }
                _ => {
                    unique = false;
                    ordered = false;
                    doc! {"$replaceRoot": {"newRoot": {"v": "$b", "k": "$k", "w": self.expr(0)}}}
                }
            };
            stages.push(stage);
        }
        // Without a later order, the answer is a multiset.
        Case::Pipeline { stages, ordered }
    }
}

/// Whether two answers agree: the same error code, or the same documents (in order when
/// `ordered`, else as multisets).
pub fn same(a: &Outcome, b: &Outcome, ordered: bool) -> bool {
    match (a, b) {
        (Outcome::Error(x, _), Outcome::Error(y, _)) => x == y,
        (Outcome::Docs(x), Outcome::Docs(y)) => {
            if x.len() != y.len() {
                return false;
            }
            let (mut x, mut y): (Vec<Bson>, Vec<Bson>) =
                (x.iter().map(normalize_doc).collect(), y.iter().map(normalize_doc).collect());
            if !ordered {
                x.sort_by(compare_values);
                y.sort_by(compare_values);
            }
            x.iter().zip(&y).all(|(p, q)| approx_equal(p, q))
        }
        _ => false,
    }
}

/// Arrays under `u_` names sorted (their order is unspecified); numbers as doubles.
fn normalize_doc(d: &Document) -> Bson {
    Bson::Document(d.iter().map(|(k, v)| (k.clone(), normalize(v, k.starts_with("u_")))).collect())
}

fn normalize(v: &Bson, unordered: bool) -> Bson {
    match v {
        Bson::Int32(i) => Bson::Double(f64::from(*i)),
        Bson::Int64(i) => Bson::Double(*i as f64),
        Bson::Document(d) => normalize_doc(d),
        Bson::Array(a) => {
            let mut items: Vec<Bson> = a.iter().map(|e| normalize(e, false)).collect();
            if unordered {
                items.sort_by(compare_values);
            }
            Bson::Array(items)
        }
        other => other.clone(),
    }
}

fn approx_equal(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => {
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((ka, va), (kb, vb))| ka == kb && approx_equal(va, vb))
        }
        (Bson::Array(x), Bson::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| approx_equal(p, q)),
        _ => compare_values(a, b) == Ordering::Equal && std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}
