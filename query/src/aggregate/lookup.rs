//! `$lookup` (the equality form `{from, localField, foreignField, as}`): the pure half. The stage
//! needs another collection, which only the router can reach across shards, so the pipeline
//! engine does not run it; the router asks this module which values to look up, queries the
//! foreign collection with [`Lookup::foreign_filter`] and attaches the matches with
//! [`Lookup::attach`].
//!
//! Semantics are MongoDB's: a local value that is an array matches each of its elements (and a
//! path through an array of documents collects every element's value); a missing or null local
//! value matches foreign documents whose `foreignField` is null or missing; a foreign array field
//! matches when any element equals a local value (the foreign side is matched by the query
//! language's `$in`, so equality is `order::values_equal` with array traversal, as in MongoDB).
//!
//! Must not: do I/O or hold foreign documents beyond the call.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::order::compare_values;

#[derive(Debug, Clone)]
pub struct Lookup {
    /// The foreign collection, in the aggregated collection's database.
    pub from: String,
    local_field: Vec<String>,
    foreign_field: String,
    as_field: Vec<String>,
}

impl Lookup {
    pub fn parse(arg: &Bson) -> Result<Lookup> {
        let Bson::Document(spec) = arg else {
            // MongoDB: Location40319.
            return Err(QueryError::failed_to_parse("the $lookup specification must be an object"));
        };
        let (mut from, mut local, mut foreign, mut as_field) = (None, None, None, None);
        for (k, v) in spec {
            let slot = match k.as_str() {
                "from" => &mut from,
                "localField" => &mut local,
                "foreignField" => &mut foreign,
                "as" => &mut as_field,
                "let" | "pipeline" => {
                    return Err(QueryError::new(
                        ErrorCode::NotImplemented,
                        "$lookup with 'let' and 'pipeline' is not supported yet; use localField/foreignField",
                    ));
                }
                // MongoDB: Location9.
                other => {
                    return Err(QueryError::failed_to_parse(format!("unknown argument to $lookup: {other}")));
                }
            };
            match v {
                Bson::String(s) => *slot = Some(s.clone()),
                Bson::Document(_) if k == "from" => {
                    return Err(QueryError::new(
                        ErrorCode::NotImplemented,
                        "$lookup from another database ({from: {db, coll}}) is not supported",
                    ));
                }
                // MongoDB: Location4570.
                other => {
                    return Err(QueryError::failed_to_parse(format!(
                        "$lookup argument '{k}: {other}' must be a string, is type {}",
                        crate::display::type_name(other)
                    )));
                }
            }
        }
        // MongoDB: Location4572 (as missing) and Location4571 (one of the fields missing).
        let missing = |what: &str| QueryError::failed_to_parse(format!("$lookup requires '{what}' to be specified"));
        let from = from.ok_or_else(|| missing("from"))?;
        let as_field = as_field.ok_or_else(|| missing("as"))?;
        let (local, foreign) = match (local, foreign) {
            (Some(l), Some(f)) => (l, f),
            _ => {
                return Err(QueryError::failed_to_parse(
                    "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
                ));
            }
        };
        Ok(Lookup {
            from,
            local_field: super::expr::parse_field_path(&local)?,
            foreign_field: foreign,
            as_field: super::expr::parse_field_path(&as_field)?,
        })
    }

    /// The values of `localField` that `doc` matches foreign documents on (never empty: a
    /// missing value is null).
    pub fn local_values(&self, doc: &Document) -> Vec<Bson> {
        let mut out = Vec::new();
        collect(&Bson::Document(doc.clone()), &self.local_field, &mut out);
        if out.is_empty() {
            out.push(Bson::Null);
        }
        out
    }

    /// The filter on the foreign collection that finds every match of `values`.
    pub fn foreign_filter(&self, values: &[Bson]) -> Document {
        doc! { self.foreign_field.as_str(): { "$in": values.to_vec() } }
    }

    /// `doc` with `as` set to the foreign documents (of `candidates`) it matches, in their order.
    pub fn attach(&self, mut doc: Document, candidates: &[Document]) -> Result<Document> {
        let filter = Filter::parse(&self.foreign_filter(&self.local_values(&doc)))?;
        let matches: Vec<Bson> = candidates.iter().filter(|f| filter.matches(f)).cloned().map(Bson::Document).collect();
        super::stages::set_nested(&mut doc, &self.as_field, Bson::Array(matches));
        Ok(doc)
    }
}

/// The distinct values of `values`, in first-seen order.
pub fn distinct(values: impl IntoIterator<Item = Bson>) -> Vec<Bson> {
    let mut seen: Vec<Bson> = Vec::new();
    let mut sorted: Vec<Bson> = Vec::new();
    for v in values {
        if let Err(at) = sorted.binary_search_by(|s| compare_values(s, &v)) {
            sorted.insert(at, v.clone());
            seen.push(v);
        }
    }
    seen
}

fn collect(v: &Bson, path: &[String], out: &mut Vec<Bson>) {
    let Some((first, rest)) = path.split_first() else {
        match v {
            Bson::Array(items) => out.extend(items.iter().cloned()),
            other => out.push(other.clone()),
        }
        return;
    };
    match v {
        Bson::Document(d) => {
            if let Some(next) = d.get(first) {
                collect(next, rest, out);
            }
        }
        Bson::Array(items) => {
            for item in items.iter().filter(|i| matches!(i, Bson::Document(_))) {
                collect(item, path, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use bson::bson;

    use super::*;

    fn lookup(local: &str, foreign: &str) -> Lookup {
        Lookup::parse(&bson!({"from": "f", "localField": local, "foreignField": foreign, "as": "out"})).unwrap()
    }

    #[test]
    fn parse_errors() {
        let err = |spec: Bson| Lookup::parse(&spec).unwrap_err().code;
        assert_eq!(err(bson!(1)), ErrorCode::FailedToParse);
        assert_eq!(err(bson!({"from": "f", "localField": "a", "foreignField": "b"})), ErrorCode::FailedToParse);
        assert_eq!(err(bson!({"from": "f", "localField": "a", "as": "x"})), ErrorCode::FailedToParse);
        assert_eq!(
            err(bson!({"from": 1, "localField": "a", "foreignField": "b", "as": "x"})),
            ErrorCode::FailedToParse
        );
        assert_eq!(err(bson!({"from": "f", "pipeline": [], "as": "x"})), ErrorCode::NotImplemented);
        assert_eq!(
            err(bson!({"from": "f", "localField": "a", "foreignField": "b", "as": "x", "y": 1})),
            ErrorCode::FailedToParse
        );
    }

    #[test]
    fn local_values_follow_mongodb() {
        let l = lookup("a.b", "x");
        assert_eq!(l.local_values(&doc! {"a": {"b": 1}}), vec![Bson::Int32(1)]);
        assert_eq!(l.local_values(&doc! {"a": {"b": [1, 2]}}), vec![Bson::Int32(1), Bson::Int32(2)]);
        assert_eq!(l.local_values(&doc! {"a": [{"b": 1}, {"c": 2}, {"b": 3}]}), vec![Bson::Int32(1), Bson::Int32(3)]);
        assert_eq!(l.local_values(&doc! {"z": 1}), vec![Bson::Null]);
        assert_eq!(
            distinct([Bson::Int32(1), Bson::Double(1.0), Bson::Null, Bson::Null]),
            vec![Bson::Int32(1), Bson::Null]
        );
    }

    #[test]
    fn attach_matches_equal_values_nulls_and_arrays() {
        let foreign = vec![
            doc! {"_id": 1, "x": 1},
            doc! {"_id": 2, "x": [1, 5]},
            doc! {"_id": 3, "x": Bson::Null},
            doc! {"_id": 4},
            doc! {"_id": 5, "x": 2},
        ];
        let ids = |d: Document| -> Vec<i32> {
            d.get_array("out").unwrap().iter().map(|f| f.as_document().unwrap().get_i32("_id").unwrap()).collect()
        };
        let l = lookup("a", "x");
        assert_eq!(ids(l.attach(doc! {"a": 1}, &foreign).unwrap()), [1, 2]);
        assert_eq!(ids(l.attach(doc! {"a": [2, 5]}, &foreign).unwrap()), [2, 5]);
        assert_eq!(ids(l.attach(doc! {"b": 1}, &foreign).unwrap()), [3, 4]);
        assert_eq!(ids(l.attach(doc! {"a": Bson::Null}, &foreign).unwrap()), [3, 4]);
        assert_eq!(ids(l.attach(doc! {"a": 9}, &foreign).unwrap()), Vec::<i32>::new());
        let nested = lookup("a", "x").attach(doc! {"a": 2}, &foreign).unwrap();
        assert_eq!(nested.get_array("out").unwrap().len(), 1);
    }
}
