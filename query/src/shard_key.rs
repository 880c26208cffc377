//! Shard keys of documents: the order-preserving bytes (`keystring`) that chunk bounds are made
//! of. The router (targeting inserts and equality queries) and the shards (ownership filter,
//! migration, range deletion) both compute a document's key here, so they always agree on which
//! chunk a document belongs to.
//!
//! A key is the compound `keystring` encoding of the pattern's field values in pattern order, all
//! ascending; a hashed field contributes `NumberLong(hash64(value))`.

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};
use crate::{hash, keystring, path};

/// One field of a shard-key pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    /// Dotted path.
    pub name: String,
    pub hashed: bool,
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

#[cfg(test)]
mod tests {
    use bson::doc;

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
}
