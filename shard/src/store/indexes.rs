//! Secondary indexes of a collection: their specifications (kept in the collection's catalog
//! record) and the entries they store.
//!
//! Entry layout in the Indexes space (see [`super::keys`]):
//! ```text
//! ident (u64 BE) ‖ key (per field keystring, inverted when descending) ‖ keystring(_id)
//!     -> BSON {i: _id, k: [key values]}
//! ```
//! Every entry ends with its document's `_id`, so entries are unique even for equal keys and a
//! unique index is checked by looking for another `_id` under the same `ident ‖ key` prefix (the
//! keystring is prefix-free, so that prefix holds exactly the entries of that key). The value
//! carries the exact `_id` (to fetch the document) and the key's values (covered reads).
//!
//! Invariants: an index's entries are written in the same batch as the document change that
//! causes them ([`super::WriteTxn`] maintains every index of the collection on each write, the
//! ones still building included); a spec with `building` set is never used by reads; `ident`s
//! are never reused (they come from the catalog's id counter), so entries of a dropped index are
//! unreachable at once and purged later.
//!
//! Must not: choose indexes for queries (`exec::plan`) or run builds (`exec::index_build`).

use std::sync::Arc;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_query::QueryError;
use shoal_query::filter::Filter;
use shoal_query::index_keys::KeyPattern;

use crate::storage::StorageError;

/// Option names `createIndexes` accepts in an index specification.
const KNOWN_SPEC_FIELDS: &[&str] = &[
    "v",
    "key",
    "name",
    "unique",
    "sparse",
    "partialFilterExpression",
    "expireAfterSeconds",
    "background",
    "ns",
    "hidden",
];

#[derive(Debug, Clone)]
pub struct IndexSpec {
    pub name: String,
    pub key: Document,
    pub pattern: KeyPattern,
    pub unique: bool,
    pub sparse: bool,
    /// `partialFilterExpression` and its parsed filter: only matching documents are indexed.
    pub partial: Option<(Document, Filter)>,
    pub expire_after_secs: Option<i64>,
    /// Where its entries live (never reused).
    pub ident: u64,
    /// Still being built: maintained by writes but not used by reads.
    pub building: bool,
    /// Some document produced several keys for one field (ranges may not be intersected).
    pub multikey: bool,
    /// Kept up to date (and enforcing uniqueness, expiring documents) but never chosen by the
    /// planner nor accepted as a hint (MongoDB 4.4's hidden indexes; `collMod` flips it).
    pub hidden: bool,
    /// `background` as given: ignored since MongoDB 4.2 (builds never block), but kept and
    /// listed as MongoDB keeps it; not part of the index's identity.
    pub background: Option<bool>,
}

fn bad_spec(code: ErrorCode, message: impl Into<String>) -> QueryError {
    QueryError::new(code, message)
}

fn as_number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Decimal128(_) => None,
        v => shoal_query::order::number_as_f64(v),
    }
}

impl IndexSpec {
    /// A specification as `createIndexes` receives it; `ident` is assigned by the caller.
    pub fn from_user(spec: &Document) -> Result<Self, QueryError> {
        for k in spec.keys() {
            if !KNOWN_SPEC_FIELDS.contains(&k.as_str()) {
                let code = if k == "collation" || k == "weights" || k.starts_with("2d") {
                    ErrorCode::NotImplemented
                } else {
                    ErrorCode::InvalidIndexSpecificationOption
                };
                return Err(bad_spec(code, format!("The field '{k}' is not valid for an index specification")));
            }
        }
        let key = match spec.get("key") {
            Some(Bson::Document(d)) => d.clone(),
            Some(_) => return Err(bad_spec(ErrorCode::TypeMismatch, "The 'key' field must be an object")),
            None => {
                return Err(bad_spec(
                    ErrorCode::FailedToParse,
                    "The 'key' field is a required property of an index specification",
                ));
            }
        };
        let pattern = KeyPattern::parse(&key)?;
        let name = match spec.get("name") {
            Some(Bson::String(s)) if !s.is_empty() => s.clone(),
            Some(Bson::String(_)) => return Err(bad_spec(ErrorCode::CannotCreateIndex, "index name cannot be empty")),
            Some(_) => return Err(bad_spec(ErrorCode::TypeMismatch, "The 'name' field must be a string")),
            None => KeyPattern::default_name(&key),
        };
        let flag = |field: &str| -> Result<bool, QueryError> {
            match spec.get(field) {
                None => Ok(false),
                Some(Bson::Boolean(b)) => Ok(*b),
                Some(v) => match as_number(v) {
                    Some(n) => Ok(n != 0.0),
                    None => Err(bad_spec(ErrorCode::TypeMismatch, format!("The field '{field}' must be a boolean"))),
                },
            }
        };
        let unique = flag("unique")?;
        let sparse = flag("sparse")?;
        let hidden = flag("hidden")?;
        let background = if spec.contains_key("background") { Some(flag("background")?) } else { None };
        let partial = match spec.get("partialFilterExpression") {
            None => None,
            Some(Bson::Document(d)) => {
                check_partial(d, 0)?;
                Some((d.clone(), Filter::parse(d)?))
            }
            Some(_) => {
                return Err(bad_spec(ErrorCode::TypeMismatch, "The field 'partialFilterExpression' must be an object"));
            }
        };
        if partial.is_some() && sparse {
            return Err(bad_spec(
                ErrorCode::CannotCreateIndex,
                "cannot mix \"partialFilterExpression\" and \"sparse\" options",
            ));
        }
        if unique && pattern.has_hashed() {
            return Err(bad_spec(ErrorCode::CannotCreateIndex, "Currently hashed indexes cannot guarantee uniqueness"));
        }
        let expire_after_secs = match spec.get("expireAfterSeconds") {
            None => None,
            Some(v) => match as_number(v) {
                Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= i32::MAX as f64 => Some(n as i64),
                _ => {
                    return Err(bad_spec(
                        ErrorCode::CannotCreateIndex,
                        "TTL index 'expireAfterSeconds' option must be a non-negative integer",
                    ));
                }
            },
        };
        if expire_after_secs.is_some() && (pattern.fields.len() != 1 || pattern.has_hashed()) {
            return Err(bad_spec(
                ErrorCode::CannotCreateIndex,
                "TTL indexes are single-field indexes, compound indexes do not support TTL",
            ));
        }
        if name == "_id_" || key == doc! {"_id": 1} {
            return Err(bad_spec(ErrorCode::BadValue, "the _id index always exists and cannot be redefined"));
        }
        Ok(Self {
            name,
            key,
            pattern,
            unique,
            sparse,
            partial,
            expire_after_secs,
            ident: 0,
            building: false,
            multikey: false,
            hidden,
            background,
        })
    }

    /// The specification as `listIndexes` shows it (and as migrations and oplog entries carry it).
    pub fn listing(&self) -> Document {
        let mut d = doc! { "v": 2, "key": self.key.clone(), "name": &self.name };
        if self.unique {
            d.insert("unique", true);
        }
        if self.sparse {
            d.insert("sparse", true);
        }
        if let Some((p, _)) = &self.partial {
            d.insert("partialFilterExpression", p.clone());
        }
        if let Some(s) = self.expire_after_secs {
            d.insert("expireAfterSeconds", s);
        }
        if self.hidden {
            d.insert("hidden", true);
        }
        if let Some(b) = self.background {
            d.insert("background", b);
        }
        d
    }

    /// The catalog record form: the listing plus local state.
    pub fn to_record(&self) -> Document {
        let mut d = self.listing();
        d.insert("ident", self.ident as i64);
        d.insert("building", self.building);
        d.insert("multikey", self.multikey);
        d
    }

    pub fn from_record(record: &Document) -> Result<Self, StorageError> {
        let corrupt =
            |detail: String| StorageError::Corrupt { space: "meta", detail: format!("index record: {detail}") };
        let mut listing = record.clone();
        let ident = listing.remove("ident").and_then(|v| as_number(&v)).ok_or_else(|| corrupt("ident".into()))? as u64;
        let building = matches!(listing.remove("building"), Some(Bson::Boolean(true)));
        let multikey = matches!(listing.remove("multikey"), Some(Bson::Boolean(true)));
        let mut spec = Self::from_user(&listing).map_err(|e| corrupt(e.message))?;
        spec.ident = ident;
        spec.building = building;
        spec.multikey = multikey;
        Ok(spec)
    }

    /// Same key, name and options (a repeated `createIndexes` is a no-op).
    pub fn same_definition(&self, other: &IndexSpec) -> bool {
        let identity = |s: &IndexSpec| {
            let mut d = s.listing();
            d.remove("background");
            d
        };
        identity(self) == identity(other)
    }

    pub fn is_hashed(&self) -> bool {
        self.pattern.has_hashed()
    }

    /// The `{field: value}` document of a key, for error messages and `keyValue`.
    pub fn key_value(&self, key: &[Bson]) -> Document {
        self.pattern.fields.iter().zip(key).map(|((f, _), v)| (f.clone(), v.clone())).collect()
    }

    /// The entries `doc` (with `_id` `id`) has in this index: (full entry key, value), and
    /// whether it made the index multikey. A document outside the partial filter has none.
    pub fn entries(&self, id: &Bson, doc: &Document) -> Result<(Vec<Entry>, bool), QueryError> {
        if let Some((_, filter)) = &self.partial
            && !filter.matches(doc)
        {
            return Ok((Vec::new(), false));
        }
        let keys = self.pattern.keys(doc, self.sparse)?;
        let id_enc = shoal_query::keystring::encode(id);
        let mut out = Vec::with_capacity(keys.keys.len());
        for key in keys.keys {
            let mut prefix = Vec::with_capacity(8 + 16 * key.len() + id_enc.len());
            prefix.extend_from_slice(&self.ident.to_be_bytes());
            for (i, v) in key.iter().enumerate() {
                self.pattern.encode_field(i, v, &mut prefix);
            }
            let key_len = prefix.len();
            prefix.extend_from_slice(&id_enc);
            let value = doc! { "i": id.clone(), "k": key.clone() };
            out.push(Entry { key: prefix, key_len, value, values: key });
        }
        Ok((out, keys.multikey))
    }
}

/// Operators MongoDB allows in a `partialFilterExpression` (on a field).
const PARTIAL_FIELD_OPERATORS: &[&str] = &["$eq", "$exists", "$gt", "$gte", "$lt", "$lte", "$type", "$in"];

/// Refuses what MongoDB refuses in a partial filter (`$expr`, `$jsonSchema`, `$ne`, `$regex`,
/// `$exists: false`, ...): CannotCreateIndex (67).
fn check_partial(filter: &Document, depth: usize) -> Result<(), QueryError> {
    let refuse = |what: &str| {
        bad_spec(
            ErrorCode::CannotCreateIndex,
            format!("Error in specification: Expression not supported in partial index: {what}"),
        )
    };
    for (k, v) in filter {
        match (k.as_str(), v) {
            ("$and" | "$or", Bson::Array(items)) if depth < 4 => {
                for item in items {
                    match item {
                        Bson::Document(d) => check_partial(d, depth + 1)?,
                        _ => return Err(refuse(k)),
                    }
                }
            }
            (k, _) if k.starts_with('$') => return Err(refuse(k)),
            (_, Bson::RegularExpression(_)) => return Err(refuse("$regex")),
            (_, Bson::Document(ops)) if ops.keys().next().is_some_and(|o| o.starts_with('$')) => {
                for (op, arg) in ops {
                    // `$exists` only as `true`: documents lacking the field are not indexed.
                    let exists_ok = op != "$exists" || matches!(arg, Bson::Boolean(true));
                    let ok = PARTIAL_FIELD_OPERATORS.contains(&op.as_str()) && exists_ok;
                    if !ok {
                        return Err(refuse(&format!("{k}: {{ {op}: {arg} }}")));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// One index entry of a document.
#[derive(Debug, Clone)]
pub struct Entry {
    /// ident ‖ key ‖ keystring(_id).
    pub key: Vec<u8>,
    /// Length of `ident ‖ key` (the unique-check prefix).
    pub key_len: usize,
    pub value: Document,
    pub values: Vec<Bson>,
}

impl Entry {
    pub fn prefix(&self) -> &[u8] {
        &self.key[..self.key_len]
    }
}

/// The `_id` stored in an entry's value.
pub fn entry_id(value: &[u8]) -> Result<Bson, StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt { space: "indexes", detail };
    let raw = bson::RawDocument::from_bytes(value).map_err(|e| corrupt(e.to_string()))?;
    let id = raw.get("i").map_err(|e| corrupt(e.to_string()))?.ok_or_else(|| corrupt("entry without i".into()))?;
    Bson::try_from(id).map_err(|e| corrupt(e.to_string()))
}

/// The key values stored in an entry's value (pattern order).
pub fn entry_values(value: &[u8]) -> Result<Vec<Bson>, StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt { space: "indexes", detail };
    let d = Document::from_reader(&mut &value[..]).map_err(|e| corrupt(e.to_string()))?;
    match d.get("k") {
        Some(Bson::Array(a)) => Ok(a.clone()),
        _ => Err(corrupt("entry without k".into())),
    }
}

/// The wire form of a collection's built indexes: BSON `{indexes: [listing, ...]}`, empty
/// bytes when it has none.
pub fn encode_listings(specs: &[Arc<IndexSpec>]) -> Vec<u8> {
    let listings: Vec<Document> = specs.iter().filter(|s| !s.building).map(|s| s.listing()).collect();
    if listings.is_empty() {
        return Vec::new();
    }
    doc! { "indexes": listings }.to_vec().unwrap_or_default()
}

/// Specs sent by [`encode_listings`].
pub fn decode_listings(bytes: &[u8]) -> Result<Vec<IndexSpec>, QueryError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let d = Document::from_reader(&mut &bytes[..]).map_err(|e| QueryError::bad_value(e.to_string()))?;
    let Ok(items) = d.get_array("indexes") else { return Ok(Vec::new()) };
    items
        .iter()
        .map(|b| match b {
            Bson::Document(spec) => IndexSpec::from_user(spec),
            _ => Err(QueryError::bad_value("an index listing is not a document")),
        })
        .collect()
}

/// Specs of a collection record's `indexes` array.
pub fn from_records(records: Option<&Bson>) -> Result<Vec<Arc<IndexSpec>>, StorageError> {
    let Some(Bson::Array(items)) = records else { return Ok(Vec::new()) };
    items
        .iter()
        .map(|b| match b {
            Bson::Document(d) => IndexSpec::from_record(d).map(Arc::new),
            _ => Err(StorageError::Corrupt { space: "meta", detail: "index record is not a document".into() }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_validate_like_mongodb() {
        let ok = IndexSpec::from_user(&doc! {"key": {"a": 1}, "name": "a_1", "unique": true}).expect("valid");
        assert!(ok.unique);
        let named = IndexSpec::from_user(&doc! {"key": {"a": 1, "b": -1}}).expect("valid");
        assert_eq!(named.name, "a_1_b_-1");
        let cases = [
            (doc! {"key": {"a": 1}, "bogus": 1}, ErrorCode::InvalidIndexSpecificationOption),
            (doc! {"key": {"a": 1}, "sparse": true, "partialFilterExpression": {"a": 1}}, ErrorCode::CannotCreateIndex),
            (doc! {"key": {"a": "hashed"}, "unique": true}, ErrorCode::CannotCreateIndex),
            (doc! {"key": {"a": 1, "b": 1}, "expireAfterSeconds": 5}, ErrorCode::CannotCreateIndex),
            (doc! {"key": {"a": 1}, "expireAfterSeconds": -1}, ErrorCode::CannotCreateIndex),
            (doc! {"name": "x"}, ErrorCode::FailedToParse),
            (doc! {"key": {"a": 1}, "collation": {"locale": "en"}}, ErrorCode::NotImplemented),
            (
                doc! {"key": {"a": 1}, "partialFilterExpression": {"$expr": {"$gt": ["$a", 1]}}},
                ErrorCode::CannotCreateIndex,
            ),
            (doc! {"key": {"a": 1}, "partialFilterExpression": {"a": {"$ne": 1}}}, ErrorCode::CannotCreateIndex),
            (
                doc! {"key": {"a": 1}, "partialFilterExpression": {"a": {"$exists": false}}},
                ErrorCode::CannotCreateIndex,
            ),
        ];
        for (spec, code) in cases {
            assert_eq!(IndexSpec::from_user(&spec).expect_err("invalid").code, code, "{spec}");
        }
    }

    #[test]
    fn records_round_trip_and_entries_end_with_the_id() {
        let mut spec =
            IndexSpec::from_user(&doc! {"key": {"a": 1}, "partialFilterExpression": {"b": {"$gt": 1}}}).expect("valid");
        spec.ident = 42;
        spec.multikey = true;
        let back = IndexSpec::from_record(&spec.to_record()).expect("round trip");
        assert_eq!(back.ident, 42);
        assert!(back.multikey && !back.building);
        assert!(back.same_definition(&spec));
        let (entries, multikey) = spec.entries(&Bson::Int32(7), &doc! {"_id": 7, "a": [1, 2], "b": 5}).expect("keys");
        assert!(multikey);
        assert_eq!(entries.len(), 2);
        assert!(entries[0].key.starts_with(&42u64.to_be_bytes()));
        assert!(entries[0].key.ends_with(&shoal_query::keystring::encode(&Bson::Int32(7))));
        let bytes = entries[0].value.to_vec().expect("bson");
        assert_eq!(entry_id(&bytes).expect("id"), Bson::Int32(7));
        let (none, _) = spec.entries(&Bson::Int32(8), &doc! {"_id": 8, "a": 1, "b": 0}).expect("keys");
        assert!(none.is_empty(), "outside the partial filter");
    }
}
