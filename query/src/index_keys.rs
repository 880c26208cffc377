//! Secondary-index key patterns and the keys a document produces for one.
//!
//! Owns: parsing a `key` document (`{a: 1, "b.c": -1}`, `{a: "hashed"}`), naming it as MongoDB
//! does (`a_1_b.c_-1`), and key generation with MongoDB's rules:
//! - a path reaching arrays gives one key per element (a *multikey* index); an empty array at
//!   the end of the path gives `undefined`; a missing field gives `null`;
//! - a compound key is the product of its fields' values, but at most one field may reach several
//!   values (CannotIndexParallelArrays 171);
//! - a hashed field keys the 64-bit hash of its value ([`crate::hash`]) and refuses arrays (16766);
//! - a sparse index skips documents that lack every field of the pattern.
//!
//! Keys are returned as values; the storage encoding ([`KeyPattern::encode`]) is the keystring
//! of each value, inverted for descending fields, so byte order is index order.
//!
//! Must not: decide which index a query uses (the shard's planner does) or touch storage.

use std::collections::BTreeMap;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};
use crate::keystring;
use crate::path::{LeafArrays, traverse};

/// How one field of a pattern orders its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Ascending,
    Descending,
    Hashed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KeyPattern {
    pub fields: Vec<(String, KeyKind)>,
}

/// The keys one document produces, and whether some field reached several values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DocKeys {
    pub keys: Vec<Vec<Bson>>,
    pub multikey: bool,
}

fn cannot_create(message: impl Into<String>) -> QueryError {
    QueryError::new(ErrorCode::CannotCreateIndex, message)
}

impl KeyPattern {
    pub fn parse(key: &Document) -> Result<Self> {
        if key.is_empty() {
            return Err(cannot_create("Index keys cannot be an empty object."));
        }
        let mut fields = Vec::with_capacity(key.len());
        for (name, v) in key {
            if name.is_empty() || name.starts_with('$') || name.split('.').any(str::is_empty) {
                return Err(cannot_create(format!("Index key contains an illegal field name: '{name}'")));
            }
            let kind = match v {
                Bson::String(s) if s == "hashed" => KeyKind::Hashed,
                Bson::String(s) => {
                    return Err(cannot_create(format!(
                        "Unknown index plugin '{s}' (only ascending, descending and hashed indexes are supported)"
                    )));
                }
                Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                    let n = number(v);
                    if n > 0.0 {
                        KeyKind::Ascending
                    } else if n < 0.0 {
                        KeyKind::Descending
                    } else {
                        return Err(cannot_create(format!(
                            "Values in the index key pattern can't be 0 (field '{name}')"
                        )));
                    }
                }
                other => {
                    return Err(cannot_create(format!(
                        "Values in v:2 index key pattern cannot be of type {} (field '{name}')",
                        crate::display::type_name(other)
                    )));
                }
            };
            fields.push((name.clone(), kind));
        }
        if fields.iter().filter(|(_, k)| *k == KeyKind::Hashed).count() > 1 {
            return Err(QueryError::new(
                ErrorCode::CannotCreateIndex,
                "A maximum of one index field is allowed to be hashed",
            ));
        }
        Ok(Self { fields })
    }

    /// MongoDB's default index name: `field_dir` pairs joined by `_`.
    pub fn default_name(key: &Document) -> String {
        key.iter()
            .map(|(k, v)| match v {
                Bson::String(s) => format!("{k}_{s}"),
                Bson::Double(d) if d.fract() == 0.0 => format!("{k}_{}", *d as i64),
                Bson::Double(d) => format!("{k}_{d}"),
                Bson::Int32(n) => format!("{k}_{n}"),
                Bson::Int64(n) => format!("{k}_{n}"),
                other => format!("{k}_{other}"),
            })
            .collect::<Vec<_>>()
            .join("_")
    }

    pub fn has_hashed(&self) -> bool {
        self.fields.iter().any(|(_, k)| *k == KeyKind::Hashed)
    }

    /// The keys of `doc` (deduplicated; empty for a sparse index when every field is missing).
    pub fn keys(&self, doc: &Document, sparse: bool) -> Result<DocKeys> {
        let mut per_field: Vec<Vec<Bson>> = Vec::with_capacity(self.fields.len());
        let mut all_missing = true;
        let mut multi_field: Option<&str> = None;
        let mut multikey = false;
        for (path, kind) in &self.fields {
            let reached = traverse(doc, path, LeafArrays::Elements);
            let present: Vec<&Bson> = reached.iter().flatten().copied().collect();
            if !present.is_empty() {
                all_missing = false;
            }
            let mut values: Vec<Bson> = if reached.is_empty() {
                // The path ended at (or only passed through) an empty array.
                all_missing = false;
                vec![Bson::Undefined]
            } else {
                reached.iter().map(|v| v.cloned().unwrap_or(Bson::Null)).collect()
            };
            dedupe(&mut values);
            let through_array = values.len() > 1 || reaches_array(doc, path);
            if *kind == KeyKind::Hashed {
                if through_array {
                    return Err(QueryError::new(
                        ErrorCode::Location16766,
                        format!("Error: hashed indexes do not currently support array values (field '{path}')"),
                    ));
                }
                values = values.iter().map(|v| Bson::Int64(crate::hash::hash64(v))).collect();
            }
            if values.len() > 1 {
                multikey = true;
                if let Some(other) = multi_field {
                    return Err(QueryError::new(
                        ErrorCode::CannotIndexParallelArrays,
                        format!("cannot index parallel arrays [{path}] [{other}]"),
                    ));
                }
                multi_field = Some(path);
            }
            per_field.push(values);
        }
        if sparse && all_missing {
            return Ok(DocKeys::default());
        }
        let mut keys: Vec<Vec<Bson>> = vec![Vec::with_capacity(self.fields.len())];
        for values in per_field {
            keys = keys
                .into_iter()
                .flat_map(|prefix| {
                    values.iter().map(move |v| {
                        let mut k = prefix.clone();
                        k.push(v.clone());
                        k
                    })
                })
                .collect();
        }
        Ok(DocKeys { keys, multikey })
    }

    /// The storage encoding of a key (values in pattern order).
    pub fn encode(&self, key: &[Bson]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * key.len());
        for (i, v) in key.iter().enumerate() {
            self.encode_field(i, v, &mut out);
        }
        out
    }

    /// Appends field `i`'s encoding of `v` (inverted when descending).
    pub fn encode_field(&self, i: usize, v: &Bson, out: &mut Vec<u8>) {
        let start = out.len();
        keystring::encode_into(v, out);
        if matches!(self.fields.get(i), Some((_, KeyKind::Descending))) {
            keystring::invert(&mut out[start..]);
        }
    }
}

fn number(v: &Bson) -> f64 {
    crate::order::number_as_f64(v).unwrap_or(0.0)
}

/// Whether `path` passes through or ends at an array in `doc` (a one-element array still makes
/// the index multikey, as in MongoDB).
fn reaches_array(doc: &Document, path: &str) -> bool {
    let mut cur: Option<&Bson> = None;
    for (i, part) in path.split('.').enumerate() {
        let next = match (i, cur) {
            (0, _) => doc.get(part),
            (_, Some(Bson::Document(d))) => d.get(part),
            (_, Some(Bson::Array(_))) => return true,
            _ => return false,
        };
        match next {
            Some(v) => cur = Some(v),
            None => return false,
        }
    }
    matches!(cur, Some(Bson::Array(_)))
}

/// Removes values equal in MongoDB's order (`1` and `1.0` are one key).
fn dedupe(values: &mut Vec<Bson>) {
    if values.len() < 2 {
        return;
    }
    let mut seen: BTreeMap<Vec<u8>, ()> = BTreeMap::new();
    values.retain(|v| seen.insert(keystring::encode(v), ()).is_none());
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn pattern(key: Document) -> KeyPattern {
        KeyPattern::parse(&key).expect("valid pattern")
    }

    #[test]
    fn parses_and_names() {
        assert_eq!(pattern(doc! {"a": 1, "b": -1.0}).fields[1].1, KeyKind::Descending);
        assert_eq!(KeyPattern::default_name(&doc! {"a": 1, "b.c": -1}), "a_1_b.c_-1");
        assert_eq!(KeyPattern::default_name(&doc! {"a": "hashed"}), "a_hashed");
        for bad in [doc! {}, doc! {"a": 0}, doc! {"a": "text"}, doc! {"$a": 1}, doc! {"a": true}] {
            let e = KeyPattern::parse(&bad).expect_err("invalid");
            assert_eq!(e.code, ErrorCode::CannotCreateIndex, "{bad}");
        }
        assert!(KeyPattern::parse(&doc! {"a": "hashed", "b": "hashed"}).is_err());
    }

    #[test]
    fn keys_follow_mongodb_rules() {
        let p = pattern(doc! {"a": 1});
        assert_eq!(p.keys(&doc! {"a": 5}, false).expect("keys").keys, vec![vec![Bson::Int32(5)]]);
        assert_eq!(p.keys(&doc! {}, false).expect("keys").keys, vec![vec![Bson::Null]]);
        assert!(p.keys(&doc! {}, true).expect("keys").keys.is_empty());
        let multi = p.keys(&doc! {"a": [1, 2, 1.0]}, false).expect("keys");
        assert!(multi.multikey);
        assert_eq!(multi.keys, vec![vec![Bson::Int32(1)], vec![Bson::Int32(2)]]);
        assert_eq!(p.keys(&doc! {"a": []}, false).expect("keys").keys, vec![vec![Bson::Undefined]]);
        let nested = pattern(doc! {"a.b": 1});
        let k = nested.keys(&doc! {"a": [{"b": 1}, {"c": 2}]}, false).expect("keys");
        assert_eq!(k.keys, vec![vec![Bson::Int32(1)], vec![Bson::Null]]);
        let compound = pattern(doc! {"a": 1, "b": -1});
        let k = compound.keys(&doc! {"a": [1, 2], "b": "x"}, false).expect("keys");
        assert_eq!(k.keys.len(), 2);
        let e = compound.keys(&doc! {"a": [1, 2], "b": [3, 4]}, false).expect_err("parallel");
        assert_eq!(e.code, ErrorCode::CannotIndexParallelArrays);
        let hashed = pattern(doc! {"a": "hashed"});
        assert_eq!(
            hashed.keys(&doc! {"a": 1}, false).expect("keys").keys,
            vec![vec![Bson::Int64(crate::hash::hash64(&Bson::Int32(1)))]]
        );
        assert_eq!(hashed.keys(&doc! {"a": [1]}, false).expect_err("array").code, ErrorCode::Location16766);
    }

    #[test]
    fn descending_fields_invert_the_order() {
        let p = pattern(doc! {"a": -1});
        assert!(p.encode(&[Bson::Int32(1)]) > p.encode(&[Bson::Int32(2)]));
        let asc = pattern(doc! {"a": 1, "b": -1});
        let k = |a: i32, b: i32| asc.encode(&[Bson::Int32(a), Bson::Int32(b)]);
        assert!(k(1, 9) < k(2, 0));
        assert!(k(1, 9) < k(1, 0));
    }
}
