//! `$graphLookup {from, startWith, connectFromField, connectToField, as, maxDepth, depthField,
//! restrictSearchWithMatch}`: the pure half, a breadth-first search driven by the router.
//!
//! ```text
//!   router, per input document:
//!     Search::new ──> next_query() ──> find on `from` (routed)
//!                          ▲                    │
//!                          └── feed(found) <────┘   until next_query() is None
//!     finish(doc) -> doc with `as` = every document reached
//! ```
//!
//! Semantics are MongoDB's: `startWith` (an array is each of its elements) is matched against
//! `connectToField` (array fields match any element) under `restrictSearchWithMatch`; each
//! document reached adds its `connectFromField` values to the next round; a document (by `_id`)
//! is reached once, at its smallest depth; `maxDepth` 0 stops after the first round;
//! `depthField` holds the depth as a long. The order of `as` is unspecified (here: as reached).
//!
//! Must not: do I/O, or hold more than the documents of one search (the router bounds them).

use bson::{Bson, Document, doc};

use super::expr::Expr;
use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::order::compare_values;

#[derive(Debug, Clone)]
pub struct GraphLookup {
    /// The collection searched, in the aggregated collection's database.
    pub from: String,
    start_with: Expr,
    connect_from: Vec<String>,
    connect_to: String,
    as_field: Vec<String>,
    max_depth: Option<i64>,
    depth_field: Option<Vec<String>>,
    restrict: Option<Document>,
}

fn bad(message: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(message)
}

impl GraphLookup {
    pub fn parse(arg: &Bson) -> Result<GraphLookup> {
        let Bson::Document(spec) = arg else {
            return Err(bad("the $graphLookup stage specification must be an object"));
        };
        let (mut from, mut start, mut cfrom, mut cto, mut as_f) = (None, None, None, None, None);
        let (mut max_depth, mut depth_field, mut restrict) = (None, None, None);
        for (k, v) in spec {
            let string = || match v {
                Bson::String(s) if !s.starts_with('$') => Ok(s.clone()),
                // MongoDB: Location40103.
                _ => Err(QueryError::failed_to_parse(format!("expected string as argument for {k}, found: {v}"))),
            };
            match k.as_str() {
                "from" => match v {
                    Bson::String(s) => from = Some(s.clone()),
                    Bson::Document(_) => {
                        return Err(QueryError::new(
                            shoal_proto::ErrorCode::NotImplemented,
                            "$graphLookup from another database is not supported",
                        ));
                    }
                    _ => return Err(bad(format!("expected string as argument for from, found: {v}"))),
                },
                "startWith" => start = Some(Expr::parse(v)?),
                "connectFromField" => cfrom = Some(super::expr::parse_field_path(&string()?)?),
                "connectToField" => cto = Some(string()?),
                "as" => as_f = Some(super::expr::parse_field_path(&string()?)?),
                "depthField" => depth_field = Some(super::expr::parse_field_path(&string()?)?),
                "maxDepth" => {
                    let n = match v {
                        Bson::Int32(n) => i64::from(*n),
                        Bson::Int64(n) => *n,
                        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9e15 => *f as i64,
                        // MongoDB: Location40100 / 40101.
                        _ => {
                            return Err(bad(format!(
                                "maxDepth must be numeric, found type: {}",
                                crate::display::type_name(v)
                            )));
                        }
                    };
                    if n < 0 {
                        return Err(bad(format!("maxDepth requires a nonnegative argument, found: {n}")));
                    }
                    max_depth = Some(n);
                }
                "restrictSearchWithMatch" => match v {
                    Bson::Document(d) => {
                        Filter::parse(d)?;
                        restrict = Some(d.clone());
                    }
                    // MongoDB: Location40185.
                    _ => {
                        return Err(bad(format!(
                            "restrictSearchWithMatch must be an object, found {}",
                            crate::display::type_name(v)
                        )));
                    }
                },
                // MongoDB: Location40104.
                other => return Err(bad(format!("Unknown argument to $graphLookup: {other}"))),
            }
        }
        let (Some(from), Some(start_with), Some(connect_from), Some(connect_to), Some(as_field)) =
            (from, start, cfrom, cto, as_f)
        else {
            // MongoDB: Location40105.
            return Err(bad(
                "$graphLookup requires 'from', 'startWith', 'connectFromField', 'connectToField' and 'as'",
            ));
        };
        super::expr::parse_field_path(&connect_to)?;
        Ok(GraphLookup { from, start_with, connect_from, connect_to, as_field, max_depth, depth_field, restrict })
    }

    /// The search for one input document.
    pub fn search(&self, doc: &Document, scope: &[(String, Bson)]) -> Result<Search<'_>> {
        let start = self.start_with.eval_in(doc, Some(&super::expr::Scope::Many(scope)))?.unwrap_or(Bson::Null);
        let frontier = match start {
            Bson::Array(items) => items,
            v => vec![v],
        };
        let mut s = Search {
            spec: self,
            queried: Vec::new(),
            frontier: Vec::new(),
            found: Vec::new(),
            seen_ids: Vec::new(),
            depth: 0,
        };
        s.push_values(frontier);
        Ok(s)
    }
}

/// One breadth-first search in progress.
pub struct Search<'a> {
    spec: &'a GraphLookup,
    /// Every value already asked for, sorted (each is asked once).
    queried: Vec<Bson>,
    frontier: Vec<Bson>,
    found: Vec<Document>,
    seen_ids: Vec<Bson>,
    depth: i64,
}

impl Search<'_> {
    fn push_values(&mut self, values: Vec<Bson>) {
        for v in values {
            if let Err(at) = self.queried.binary_search_by(|q| compare_values(q, &v)) {
                self.queried.insert(at, v.clone());
                self.frontier.push(v);
            }
        }
    }

    /// The filter of the next round's query on `from`, `None` when the search is over.
    pub fn next_query(&mut self) -> Option<Document> {
        if self.frontier.is_empty() || self.spec.max_depth.is_some_and(|m| self.depth > m) {
            return None;
        }
        let values = std::mem::take(&mut self.frontier);
        let by_value = doc! { self.spec.connect_to.as_str(): { "$in": values } };
        Some(match &self.spec.restrict {
            Some(r) => doc! { "$and": [by_value, r.clone()] },
            None => by_value,
        })
    }

    /// The documents the last query found; returns the bytes newly held.
    pub fn feed(&mut self, found: Vec<Document>) -> usize {
        let mut grew = 0usize;
        let mut next = Vec::new();
        for mut d in found {
            let id = d.get("_id").cloned().unwrap_or(Bson::Null);
            match self.seen_ids.binary_search_by(|s| compare_values(s, &id)) {
                Ok(_) => continue,
                Err(at) => self.seen_ids.insert(at, id),
            }
            super::lookup::collect(&Bson::Document(d.clone()), &self.spec.connect_from, &mut next);
            if let Some(f) = &self.spec.depth_field {
                super::stages::set_nested(&mut d, f, Bson::Int64(self.depth));
            }
            grew = grew.saturating_add(super::doc_size(&d));
            self.found.push(d);
        }
        self.depth += 1;
        self.push_values(next);
        grew
    }

    /// `doc` with `as` set to every document reached.
    pub fn finish(self, mut doc: Document) -> Document {
        let found = self.found.into_iter().map(Bson::Document).collect();
        super::stages::set_nested(&mut doc, &self.spec.as_field, Bson::Array(found));
        doc
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use super::*;

    /// Runs a search over `coll` in memory, as the router does over the network.
    fn run(spec: Bson, start: Document, coll: &[Document]) -> Document {
        let g = GraphLookup::parse(&spec).unwrap();
        let mut s = g.search(&start, &[]).unwrap();
        while let Some(q) = s.next_query() {
            let f = Filter::parse(&q).unwrap();
            s.feed(coll.iter().filter(|d| f.matches(d)).cloned().collect());
        }
        s.finish(start)
    }

    fn names(d: &Document) -> Vec<(String, i64)> {
        let mut v: Vec<_> = d
            .get_array("chain")
            .unwrap()
            .iter()
            .map(|e| {
                let e = e.as_document().unwrap();
                (e.get_str("name").unwrap().to_owned(), e.get_i64("depth").unwrap_or(-1))
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn walks_the_reporting_chain_with_depths_and_max_depth() {
        let coll = vec![
            doc! {"_id": 1, "name": "Dev"},
            doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
            doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
            doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
            doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
        ];
        let spec = bson!({"from": "e", "startWith": "$reportsTo", "connectFromField": "reportsTo",
            "connectToField": "name", "as": "chain", "depthField": "depth"});
        let out = run(spec, doc! {"name": "Asya", "reportsTo": "Ron"}, &coll);
        assert_eq!(names(&out), vec![("Dev".into(), 2), ("Eliot".into(), 1), ("Ron".into(), 0)]);
        let spec = bson!({"from": "e", "startWith": "$reportsTo", "connectFromField": "reportsTo",
            "connectToField": "name", "as": "chain", "depthField": "depth", "maxDepth": 0});
        let out = run(spec, doc! {"name": "Asya", "reportsTo": "Ron"}, &coll);
        assert_eq!(names(&out), vec![("Ron".into(), 0)]);
    }

    #[test]
    fn cycles_end_and_restrict_filters() {
        let coll = vec![doc! {"_id": 1, "name": "a", "to": "b"}, doc! {"_id": 2, "name": "b", "to": "a", "x": 1}];
        let spec =
            bson!({"from": "c", "startWith": "a", "connectFromField": "to", "connectToField": "name", "as": "chain"});
        assert_eq!(names(&run(spec, doc! {}, &coll)).len(), 2);
        let spec = bson!({"from": "c", "startWith": "a", "connectFromField": "to", "connectToField": "name",
            "as": "chain", "restrictSearchWithMatch": {"x": {"$exists": false}}});
        assert_eq!(names(&run(spec, doc! {}, &coll)), vec![("a".into(), -1)]);
    }

    #[test]
    fn bad_specs_are_refused() {
        for spec in [
            bson!(1),
            bson!({"from": "c", "startWith": "$a", "connectFromField": "a", "connectToField": "b"}),
            bson!({"from": "c", "startWith": "$a", "connectFromField": "a", "connectToField": "b", "as": "x", "maxDepth": -1}),
            bson!({"from": "c", "startWith": "$a", "connectFromField": "$a", "connectToField": "b", "as": "x"}),
            bson!({"from": "c", "startWith": "$a", "connectFromField": "a", "connectToField": "b", "as": "x", "bogus": 1}),
            bson!({"from": "c", "startWith": "$a", "connectFromField": "a", "connectToField": "b", "as": "x",
                "restrictSearchWithMatch": {"$bogus": 1}}),
        ] {
            assert!(GraphLookup::parse(&spec).is_err(), "{spec}");
        }
    }
}
