//! Sort specifications (`{a: 1, "b.c": -1}`) and ordering documents by them, with MongoDB's
//! semantics.
//!
//! Owns: parsing a sort spec, extracting a document's sort key, comparing documents, stable
//! full sorts and bounded top-k (sort followed by limit).
//!
//! Invariants:
//! - The sort key of a field is drawn from every value the path reaches, arrays of documents
//!   traversed as an index would: ascending uses the smallest, descending the largest. A missing
//!   field (or a document in an array without it) contributes null; an empty array at the end of
//!   the path contributes `undefined`, which sorts before null as in MongoDB.
//! - `compare` is a total preorder whenever `order::compare_values` is a total order, so sorts are
//!   deterministic and never panic; ties keep input order.

use std::cmp::Ordering;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::collation::Collation;
use crate::error::{QueryError, Result};

static NULL: Bson = Bson::Null;
static UNDEFINED: Bson = Bson::Undefined;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SortSpec {
    keys: Vec<SortKey>,
    /// How strings compare (binary unless the command gave a collation).
    collation: Collation,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SortKey {
    pub path: String,
    parts: Vec<String>,
    pub descending: bool,
}

const BAD_ORDERING: &str = "$sort key ordering must be 1 (for ascending) or -1 (for descending)";

impl SortSpec {
    /// Parses `{field: 1 | -1, ...}`; directions may be any numeric type. `{}` means no sort.
    pub fn parse(spec: &Document) -> Result<SortSpec> {
        let mut keys = Vec::with_capacity(spec.len());
        for (path, dir) in spec {
            let descending = match dir {
                Bson::Document(d) if d.contains_key("$meta") => {
                    return Err(QueryError::new(ErrorCode::NotImplemented, "$meta sort keys are not supported yet"));
                }
                other => match as_f64(other) {
                    Some(1.0) => false,
                    Some(-1.0) => true,
                    _ => return Err(QueryError::bad_value(BAD_ORDERING)),
                },
            };
            let parts: Vec<String> = path.split('.').map(str::to_string).collect();
            if parts.iter().any(String::is_empty) {
                return Err(QueryError::new(
                    ErrorCode::Location15998,
                    "FieldPath field names may not be empty strings.",
                ));
            }
            if parts.iter().any(|p| p.starts_with('$')) {
                // MongoDB reports Location16410, which proto does not list yet.
                return Err(QueryError::bad_value(format!(
                    "FieldPath field names may not start with '$'. Consider using $getField or \
                     $setField. (in '{path}')"
                )));
            }
            keys.push(SortKey { path: path.clone(), parts, descending });
        }
        Ok(SortSpec { keys, collation: Collation::Simple })
    }

    /// Parses the `sort` option of `find`, which must be a document.
    pub fn parse_value(spec: &Bson) -> Result<SortSpec> {
        match spec {
            Bson::Document(d) => Self::parse(d),
            other => Err(QueryError::type_mismatch(format!(
                "BSON field 'FindCommandRequest.sort' is the wrong type '{}', expected type 'object'",
                crate::display::type_name(other)
            ))),
        }
    }

    /// The spec comparing strings under `collation` (the command's).
    pub fn with_collation(mut self, collation: Collation) -> SortSpec {
        self.collation = collation;
        self
    }

    pub fn keys(&self) -> &[SortKey] {
        &self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Compares two documents by this spec (`Equal` for every pair when the spec is empty).
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        for key in &self.keys {
            let ord = self.collation.compare(key.extract(a, self.collation), key.extract(b, self.collation));
            let ord = if key.descending { ord.reverse() } else { ord };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }

    /// The values a document sorts by, one per key; what routers compare when merging the
    /// already-sorted streams of several shards.
    pub fn sort_key<'d>(&self, doc: &'d Document) -> Vec<&'d Bson> {
        self.keys.iter().map(|k| k.extract(doc, self.collation)).collect()
    }

    /// Compares two keys produced by [`SortSpec::sort_key`].
    pub fn compare_keys(&self, a: &[&Bson], b: &[&Bson]) -> Ordering {
        for ((key, x), y) in self.keys.iter().zip(a).zip(b) {
            let ord = self.collation.compare(x, y);
            let ord = if key.descending { ord.reverse() } else { ord };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

impl SortKey {
    /// The value this key sorts `doc` by.
    fn extract<'d>(&self, doc: &'d Document, collation: Collation) -> &'d Bson {
        let mut candidates = Vec::new();
        match doc.get(&self.parts[0]) {
            Some(v) => collect(v, &self.parts[1..], &mut candidates),
            None => candidates.push(&NULL),
        }
        let pick = |best: &'d Bson, c: &'d Bson| {
            let ord = collation.compare(c, best);
            let better = if self.descending { ord == Ordering::Greater } else { ord == Ordering::Less };
            if better { c } else { best }
        };
        let mut it = candidates.into_iter();
        let first = it.next().unwrap_or(&NULL);
        it.fold(first, pick)
    }
}

/// Every value `rest` reaches from `cur`, as MongoDB's key generator finds them.
fn collect<'d>(cur: &'d Bson, rest: &[String], out: &mut Vec<&'d Bson>) {
    let Some((part, tail)) = rest.split_first() else {
        match cur {
            Bson::Array(a) if a.is_empty() => out.push(&UNDEFINED),
            Bson::Array(a) => out.extend(a.iter()),
            v => out.push(v),
        }
        return;
    };
    match cur {
        Bson::Document(d) => match d.get(part) {
            Some(v) => collect(v, tail, out),
            None => out.push(&NULL),
        },
        Bson::Array(a) => {
            // A numeric component selects that element, as `a.0` does in an index key pattern.
            if let Some(e) = part.parse::<usize>().ok().and_then(|i| a.get(i)) {
                collect(e, tail, out);
                return;
            }
            if a.is_empty() {
                out.push(&NULL);
            }
            for e in a {
                match e {
                    Bson::Document(_) => collect(e, rest, out),
                    _ => out.push(&NULL),
                }
            }
        }
        _ => out.push(&NULL),
    }
}

fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Decimal128(_) => None,
        v => crate::order::number_as_f64(v),
    }
}

/// Sorts `docs` in place by `spec`; stable. Keys are extracted once per document.
pub fn sort_documents(docs: &mut [Document], spec: &SortSpec) {
    if spec.is_empty() || docs.len() < 2 {
        return;
    }
    let mut order: Vec<usize> = (0..docs.len()).collect();
    {
        let keys: Vec<Vec<&Bson>> = docs.iter().map(|d| spec.sort_key(d)).collect();
        order.sort_by(|&i, &j| spec.compare_keys(&keys[i], &keys[j]));
    }
    let mut taken: Vec<Document> = docs.iter_mut().map(std::mem::take).collect();
    for (slot, i) in docs.iter_mut().zip(order) {
        *slot = std::mem::take(&mut taken[i]);
    }
}

/// The first `k` documents of `docs` in `spec` order, as a stable sort followed by a limit would
/// give them, holding at most `2 * k` documents at a time.
pub fn top_k(docs: impl IntoIterator<Item = Document>, spec: &SortSpec, k: usize) -> Vec<Document> {
    if k == 0 {
        return Vec::new();
    }
    let mut kept: Vec<Document> = Vec::new();
    for doc in docs {
        kept.push(doc);
        // Sorting a buffer of 2k and keeping k costs O(log k) per document, amortised; earlier
        // documents stay ahead of later equal ones, so the result is stable.
        if kept.len() >= k.saturating_mul(2) {
            sort_documents(&mut kept, spec);
            kept.truncate(k);
        }
    }
    sort_documents(&mut kept, spec);
    kept.truncate(k);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn sorted(spec: Document, docs: Vec<Document>) -> Vec<Bson> {
        let mut docs = docs;
        sort_documents(&mut docs, &SortSpec::parse(&spec).unwrap());
        docs.into_iter().map(|d| d.get("_id").cloned().unwrap_or(Bson::Null)).collect()
    }

    fn ids(v: &[i32]) -> Vec<Bson> {
        v.iter().map(|i| Bson::Int32(*i)).collect()
    }

    #[test]
    fn parses_directions_of_any_numeric_type() {
        for spec in [doc! {"a": 1}, doc! {"a": 1i64}, doc! {"a": 1.0}, doc! {"a": -1.0}] {
            assert!(SortSpec::parse(&spec).is_ok(), "{spec}");
        }
        assert!(SortSpec::parse(&doc! {}).unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_directions() {
        for spec in [doc! {"a": 2}, doc! {"a": 0}, doc! {"a": "x"}, doc! {"a": 1.5}, doc! {"a": {"b": 1}}] {
            let err = SortSpec::parse(&spec).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadValue, "{spec}");
            assert_eq!(err.message, BAD_ORDERING);
        }
        assert_eq!(SortSpec::parse(&doc! {"a": {"$meta": "textScore"}}).unwrap_err().code, ErrorCode::NotImplemented);
        assert_eq!(SortSpec::parse(&doc! {"a..b": 1}).unwrap_err().code, ErrorCode::Location15998);
        assert_eq!(SortSpec::parse_value(&Bson::Int32(1)).unwrap_err().code, ErrorCode::TypeMismatch);
    }

    #[test]
    fn ascending_descending_and_numbers_across_types() {
        let docs = vec![doc! {"_id": 1, "a": 3}, doc! {"_id": 2, "a": 1.5}, doc! {"_id": 3, "a": 2i64}];
        assert_eq!(sorted(doc! {"a": 1}, docs.clone()), ids(&[2, 3, 1]));
        assert_eq!(sorted(doc! {"a": -1}, docs), ids(&[1, 3, 2]));
    }

    #[test]
    fn missing_sorts_as_null_and_empty_array_before_null() {
        let docs = vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2}, doc! {"_id": 3, "a": []}, doc! {"_id": 4, "a": "s"}];
        assert_eq!(sorted(doc! {"a": 1}, docs.clone()), ids(&[3, 2, 1, 4]));
        assert_eq!(sorted(doc! {"a": -1}, docs), ids(&[4, 1, 2, 3]));
    }

    #[test]
    fn arrays_use_min_ascending_and_max_descending() {
        let docs = vec![doc! {"_id": 1, "a": [1, 10]}, doc! {"_id": 2, "a": [5, 6]}];
        assert_eq!(sorted(doc! {"a": 1}, docs.clone()), ids(&[1, 2]));
        assert_eq!(sorted(doc! {"a": -1}, docs), ids(&[1, 2]));
        let docs = vec![doc! {"_id": 1, "a": [2, 3]}, doc! {"_id": 2, "a": [1, 4]}];
        assert_eq!(sorted(doc! {"a": 1}, docs.clone()), ids(&[2, 1]));
        assert_eq!(sorted(doc! {"a": -1}, docs), ids(&[2, 1]));
    }

    #[test]
    fn dotted_paths_through_documents_and_arrays() {
        let docs = vec![
            doc! {"_id": 1, "a": {"b": 5}},
            doc! {"_id": 2, "a": [{"b": 9}, {"b": 1}]},
            doc! {"_id": 3, "a": {"b": 3}},
        ];
        assert_eq!(sorted(doc! {"a.b": 1}, docs.clone()), ids(&[2, 3, 1]));
        assert_eq!(sorted(doc! {"a.b": -1}, docs), ids(&[2, 1, 3]));
        // An array element without the field contributes null.
        let docs = vec![doc! {"_id": 1, "a": [{"b": 2}, {"c": 1}]}, doc! {"_id": 2, "a": [{"b": 1}]}];
        assert_eq!(sorted(doc! {"a.b": 1}, docs), ids(&[1, 2]));
        // A numeric component picks the element.
        let docs = vec![doc! {"_id": 1, "a": [5, 0]}, doc! {"_id": 2, "a": [1, 9]}];
        assert_eq!(sorted(doc! {"a.0": 1}, docs), ids(&[2, 1]));
    }

    #[test]
    fn several_keys_and_stability() {
        let docs = vec![
            doc! {"_id": 1, "a": 1, "b": 1},
            doc! {"_id": 2, "a": 0, "b": 1},
            doc! {"_id": 3, "a": 1, "b": 2},
            doc! {"_id": 4, "a": 0, "b": 1},
        ];
        assert_eq!(sorted(doc! {"a": 1, "b": -1}, docs.clone()), ids(&[2, 4, 3, 1]));
        assert_eq!(sorted(doc! {"b": 1}, docs), ids(&[1, 2, 4, 3]));
    }

    #[test]
    fn top_k_matches_sort_then_limit() {
        let docs: Vec<Document> = (0..50).map(|i| doc! {"_id": i, "a": (i * 7) % 10}).collect();
        let spec = SortSpec::parse(&doc! {"a": -1}).unwrap();
        for k in [0, 1, 3, 10, 49, 50, 80] {
            let mut all = docs.clone();
            sort_documents(&mut all, &spec);
            all.truncate(k);
            assert_eq!(top_k(docs.clone(), &spec, k), all, "k={k}");
        }
    }

    #[test]
    fn collation_orders_strings_case_insensitively() {
        let docs = vec![
            doc! {"_id": 1, "s": "b"},
            doc! {"_id": 2, "s": "B"},
            doc! {"_id": 3, "s": "a"},
            doc! {"_id": 4, "s": ["C", "A"]},
            doc! {"_id": 5, "s": 1},
        ];
        let ci = Collation::parse(&doc! {"locale": "en", "strength": 2}).unwrap();
        let spec = SortSpec::parse(&doc! {"s": 1}).unwrap().with_collation(ci);
        let mut got = docs.clone();
        sort_documents(&mut got, &spec);
        let got: Vec<Bson> = got.iter().map(|d| d.get("_id").cloned().unwrap()).collect();
        // Numbers first; "A" of doc 4 ties with "a" (stable); "b" and "B" tie.
        assert_eq!(got, ids(&[5, 3, 4, 1, 2]));
        assert_eq!(sorted(doc! {"s": 1}, docs), ids(&[5, 4, 2, 3, 1]));
    }
}
