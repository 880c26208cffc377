//! Shard keys of documents: the order-preserving bytes (`keystring`) that chunk bounds are made
//! of. The router (targeting inserts and equality queries) and the shards (ownership filter,
//! migration, range deletion) both compute a document's key here, so they always agree on which
//! chunk a document belongs to.
//!
//! A key is the compound `keystring` encoding of the pattern's field values in pattern order, all
//! ascending; a hashed field contributes `NumberLong(hash64(value))`.

use bson::{Bson, Document, RawDocument};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{KeyFieldKind, KeyPattern};

use crate::error::{QueryError, Result};
use crate::{hash, keystring, path};

/// One field of a shard-key pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    /// Dotted path.
    pub name: String,
    pub hashed: bool,
}

impl KeyField {
    /// The fields of a catalog key pattern, in pattern order (the one conversion router and
    /// shards use).
    pub fn of(pattern: &KeyPattern) -> Vec<KeyField> {
        pattern
            .fields
            .iter()
            .map(|f| KeyField { name: f.name.clone(), hashed: f.kind == KeyFieldKind::Hashed })
            .collect()
    }
}

/// What to do with a document that lacks a shard-key field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Refuse with ShardKeyNotFound (61): inserts must carry the whole key.
    Refuse,
    /// Treat the field as null, as MongoDB does for documents written before the collection was
    /// sharded (ownership checks and range deletion must still place them somewhere).
    AsNull,
}

/// The key bytes of the given field values (already in hash space for hashed fields).
pub fn of_values(values: &[&Bson]) -> Vec<u8> {
    keystring::encode_compound(values, &[])
}

/// The shard key of `doc` under `fields`.
pub fn of_document(fields: &[KeyField], doc: &Document, missing: Missing) -> Result<Vec<u8>> {
    let null = Bson::Null;
    let mut hashed = Vec::new();
    let mut values: Vec<&Bson> = Vec::with_capacity(fields.len());
    for f in fields {
        let v = match (path::get_path(doc, &f.name), missing) {
            (Some(v), _) => v,
            (None, Missing::AsNull) => &null,
            (None, Missing::Refuse) => {
                return Err(QueryError::new(
                    ErrorCode::ShardKeyNotFound,
                    format!("document {} does not contain shard key field '{}'", crate::display::document(doc), f.name),
                ));
            }
        };
        if matches!(v, Bson::Array(_)) {
            return Err(QueryError::bad_value(format!(
                "Shard key cannot contain array values or array descendants: field '{}'",
                f.name
            )));
        }
        if f.hashed {
            hashed.push((values.len(), Bson::Int64(hash::hash64(v))));
        }
        values.push(v);
    }
    for (i, h) in &hashed {
        values[*i] = h;
    }
    Ok(of_values(&values))
}

/// The shard key of a raw document, as [`of_document`] computes it, without decoding the fields
/// the key does not use (a scan of large documents then costs little more than reading them).
/// Only the top-level fields the key paths start in are decoded; a malformed document is an error.
pub fn of_raw_document(fields: &[KeyField], raw: &RawDocument, missing: Missing) -> Result<Vec<u8>> {
    let mut keyed = Document::new();
    for f in fields {
        let head = f.name.split('.').next().unwrap_or(&f.name);
        if keyed.contains_key(head) {
            continue;
        }
        let bad = |e: bson::error::Error| QueryError::bad_value(format!("malformed document: {e}"));
        if let Some(v) = raw.get(head).map_err(bad)? {
            keyed.insert(head, Bson::try_from(v).map_err(bad)?);
        }
    }
    of_document(fields, &keyed, missing)
}

#[cfg(test)]
mod tests {
    use bson::{RawDocumentBuf, doc};
    use proptest::prelude::*;

    use super::*;

    fn fields(spec: &[(&str, bool)]) -> Vec<KeyField> {
        spec.iter().map(|(n, h)| KeyField { name: (*n).to_owned(), hashed: *h }).collect()
    }

    #[test]
    fn compound_keys_follow_the_pattern_order() {
        let f = fields(&[("b", false), ("a.x", false)]);
        let d = doc! { "a": { "x": 2 }, "b": "k" };
        let key = of_document(&f, &d, Missing::Refuse).unwrap();
        assert_eq!(key, of_values(&[&Bson::String("k".into()), &Bson::Int32(2)]));
    }

    #[test]
    fn hashed_fields_are_hashed() {
        let f = fields(&[("h", true)]);
        let key = of_document(&f, &doc! { "h": 5 }, Missing::Refuse).unwrap();
        assert_eq!(key, of_values(&[&Bson::Int64(hash::hash64(&Bson::Int32(5)))]));
    }

    #[test]
    fn missing_fields_are_refused_or_null() {
        let f = fields(&[("a", false)]);
        let err = of_document(&f, &doc! { "b": 1 }, Missing::Refuse).unwrap_err();
        assert_eq!(err.code, ErrorCode::ShardKeyNotFound);
        let key = of_document(&f, &doc! { "b": 1 }, Missing::AsNull).unwrap();
        assert_eq!(key, of_values(&[&Bson::Null]));
    }

    #[test]
    fn arrays_are_refused() {
        let f = fields(&[("a", false)]);
        assert_eq!(of_document(&f, &doc! { "a": [1] }, Missing::Refuse).unwrap_err().code, ErrorCode::BadValue);
    }

    fn raw(d: &Document) -> RawDocumentBuf {
        RawDocumentBuf::try_from(d).expect("encodable")
    }

    #[test]
    fn raw_documents_key_as_decoded_ones() {
        let f = fields(&[("b", false), ("a.x", false), ("a.y", true)]);
        for d in [
            doc! { "a": { "x": 2, "y": "s" }, "b": "k", "pad": "x".repeat(100) },
            doc! { "b": 1 },
            doc! { "a": [{ "x": 1 }], "b": 1 },
            doc! { "a": 5, "b": null },
        ] {
            for missing in [Missing::Refuse, Missing::AsNull] {
                let want = of_document(&f, &d, missing).map_err(|e| e.code);
                assert_eq!(of_raw_document(&f, &raw(&d), missing).map_err(|e| e.code), want, "{d}");
            }
        }
    }

    proptest! {
        #[test]
        fn raw_and_decoded_keys_agree(a in any::<i64>(), b in ".{0,8}", nested in any::<bool>(), hashed in any::<bool>()) {
            let d = if nested { doc! { "k": { "a": a }, "b": &b } } else { doc! { "k": a, "b": &b } };
            let f = fields(&[(if nested { "k.a" } else { "k" }, hashed), ("b", false)]);
            let want = of_document(&f, &d, Missing::AsNull).map_err(|e| e.code);
            prop_assert_eq!(of_raw_document(&f, &raw(&d), Missing::AsNull).map_err(|e| e.code), want);
        }
    }
}
