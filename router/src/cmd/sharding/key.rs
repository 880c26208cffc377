//! Shard-key patterns and values as the sharding commands take them: parsing `{a: 1, b: "hashed"}`
//! into a catalog `KeyPattern`, and turning a shard-key document (`middle`, `bounds`, `find`)
//! into the chunk bound the catalog stores.
//!
//! Encoding (the catalog's `ChunkBound::Key` bytes): `keystring::encode_compound` of the key
//! fields' values in pattern order, all ascending. A hashed field's value in a split point or a
//! bound is already in hash space (a NumberLong, as MongoDB takes it); a document a user looks up
//! with `find` has its hashed field hashed first ([`key_of_document`]).

use bson::{Bson, Document};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkBound, KeyField, KeyFieldKind, KeyPattern};
use shoal_query::{hash, keystring};

use crate::error::CommandError;

/// `{a: 1, b: "hashed"}` → the catalog's pattern, refused as MongoDB refuses it.
pub fn parse_pattern(key: &Document) -> Result<KeyPattern, CommandError> {
    if key.is_empty() {
        return Err(CommandError::bad_value("Shard key cannot be empty"));
    }
    let mut fields = Vec::with_capacity(key.len());
    for (name, value) in key {
        let kind = match value {
            Bson::String(s) if s == "hashed" => KeyFieldKind::Hashed,
            v if number(v) == Some(1.0) => KeyFieldKind::Range,
            v => {
                return Err(CommandError::bad_value(format!(
                    "Shard key {key} is not valid: field '{name}' has value {v}; shard key values must be 1 or \
                     \"hashed\""
                )));
            }
        };
        if name.is_empty() || name.starts_with('$') || name.split('.').any(str::is_empty) {
            return Err(CommandError::bad_value(format!("Shard key {key} is not valid: invalid field name '{name}'")));
        }
        fields.push(KeyField { name: name.clone(), kind });
    }
    let pattern = KeyPattern { fields };
    if pattern.fields.iter().filter(|f| f.kind == KeyFieldKind::Hashed).count() > 1 {
        return Err(CommandError::bad_value(format!("Shard key {key} is not valid: at most one field may be hashed")));
    }
    Ok(pattern)
}

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(f) => Some(*f),
        _ => None,
    }
}

/// A shard-key document whose fields are exactly the pattern's (any order) → its chunk bound.
/// All-MinKey and all-MaxKey documents are the ends of the key space.
pub fn bound_of_key(pattern: &KeyPattern, key: &Document, what: &str) -> Result<ChunkBound, CommandError> {
    if key.len() != pattern.fields.len() {
        return Err(not_a_key(pattern, key, what));
    }
    let mut values = Vec::with_capacity(pattern.fields.len());
    for f in &pattern.fields {
        let v = key.get(&f.name).ok_or_else(|| not_a_key(pattern, key, what))?;
        if f.kind == KeyFieldKind::Hashed && !matches!(v, Bson::Int64(_) | Bson::MinKey | Bson::MaxKey) {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!("{what} {key}: the hashed field '{}' takes a NumberLong in hash space", f.name),
            ));
        }
        values.push(v);
    }
    Ok(bound_of_values(&values))
}

/// The shard key of a document (a `find` query's equality values), hashed field hashed.
pub fn key_of_document(pattern: &KeyPattern, doc: &Document, what: &str) -> Result<ChunkBound, CommandError> {
    let mut owned = Vec::with_capacity(pattern.fields.len());
    for f in &pattern.fields {
        let v = doc.get(&f.name).ok_or_else(|| not_a_key(pattern, doc, what))?;
        if matches!(v, Bson::Document(d) if d.keys().any(|k| k.starts_with('$'))) || matches!(v, Bson::Array(_)) {
            return Err(CommandError::new(
                ErrorCode::ShardKeyNotFound,
                format!("{what} {doc} must give each shard-key field an exact value"),
            ));
        }
        owned.push(match f.kind {
            KeyFieldKind::Hashed => Bson::Int64(hash::hash64(v)),
            KeyFieldKind::Range => v.clone(),
        });
    }
    Ok(bound_of_values(&owned.iter().collect::<Vec<_>>()))
}

fn bound_of_values(values: &[&Bson]) -> ChunkBound {
    if values.iter().all(|v| matches!(v, Bson::MinKey)) {
        ChunkBound::Min
    } else if values.iter().all(|v| matches!(v, Bson::MaxKey)) {
        ChunkBound::Max
    } else {
        ChunkBound::Key(keystring::encode_compound(values, &[]))
    }
}

fn not_a_key(pattern: &KeyPattern, key: &Document, what: &str) -> CommandError {
    let names: Vec<&str> = pattern.fields.iter().map(|f| f.name.as_str()).collect();
    CommandError::new(
        ErrorCode::InvalidOptions,
        format!("{what} {key} is not a shard key: it must have exactly the fields {names:?}"),
    )
}

/// MongoDB's initial split points for a hashed key (`calculateHashedSplitPoints`): `n` chunks of
/// equal width over the i64 hash space, symmetric around 0.
pub fn hashed_split_points(n: u32) -> Vec<i64> {
    if n < 2 {
        return Vec::new();
    }
    let n = i64::from(n);
    let interval = (i64::MAX / n) * 2;
    let mut points = Vec::new();
    let mut current = 0i64;
    if n % 2 == 0 {
        points.push(0);
        current += interval;
    } else {
        current += interval / 2;
    }
    for _ in 0..(n - 1) / 2 {
        points.push(current);
        points.push(-current);
        current = current.saturating_add(interval);
    }
    points.sort_unstable();
    points
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn patterns() {
        assert_eq!(parse_pattern(&doc! {"a": 1}).expect("range"), KeyPattern::range(&["a"]));
        assert_eq!(parse_pattern(&doc! {"a": 1.0, "b": 1i64}).expect("compound"), KeyPattern::range(&["a", "b"]));
        assert_eq!(parse_pattern(&doc! {"a": "hashed"}).expect("hashed"), KeyPattern::hashed("a"));
        for bad in [doc! {}, doc! {"a": -1}, doc! {"a": "text"}, doc! {"a": "hashed", "b": "hashed"}, doc! {"$a": 1}] {
            assert_eq!(parse_pattern(&bad).expect_err("refused").code, ErrorCode::BadValue.code(), "{bad}");
        }
    }

    #[test]
    fn bounds() {
        let p = KeyPattern::range(&["a", "b"]);
        assert_eq!(bound_of_key(&p, &doc! {"a": Bson::MinKey, "b": Bson::MinKey}, "x").expect("min"), ChunkBound::Min);
        assert_eq!(bound_of_key(&p, &doc! {"b": 2, "a": 1}, "x"), bound_of_key(&p, &doc! {"a": 1.0, "b": 2i64}, "x"));
        assert_eq!(bound_of_key(&p, &doc! {"a": 1}, "x").expect_err("partial").code, ErrorCode::InvalidOptions.code());
        let h = KeyPattern::hashed("a");
        assert!(bound_of_key(&h, &doc! {"a": "s"}, "x").is_err());
        assert_eq!(
            key_of_document(&h, &doc! {"a": 1}, "x").expect("hash"),
            ChunkBound::Key(keystring::encode(&Bson::Int64(5902408780260971510)))
        );
    }

    #[test]
    fn hashed_points_are_even_and_sorted() {
        assert_eq!(hashed_split_points(1), Vec::<i64>::new());
        assert_eq!(hashed_split_points(2), vec![0]);
        let four = hashed_split_points(4);
        assert_eq!(four, vec![-(i64::MAX / 4) * 2, 0, (i64::MAX / 4) * 2]);
        for n in 1..50 {
            let p = hashed_split_points(n);
            assert_eq!(p.len(), n as usize - 1);
            assert!(p.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
