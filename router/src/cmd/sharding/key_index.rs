//! The index that supports a shard key, which `shardCollection` makes sure every shard that gets
//! chunks has, as MongoDB does: `{a: 1}` → index `a_1`, `{a: "hashed"}` → `a_hashed`
//! (`unique` when the key is). The shards read a migrating or deleted range through it instead of
//! scanning the collection (`shard::sharding::range_scan`), and queries by shard key use it.
//!
//! An index supports the key when its key pattern starts with the shard key's fields in the same
//! kinds (ascending for a range field, hashed for a hashed one) and it is neither sparse, partial
//! nor collated. `{_id: 1}` is always supported (the `_id` index).
//!
//! MongoDB refuses to shard a non-empty collection without a supporting index (InvalidOptions,
//! "Please create an index that starts with the proposed shard key"); Shoal builds it instead,
//! which is what that message asks the user to do by hand.
//!
//! Must not: drop or change an index that is there.

use bson::{Bson, Document, doc};
use shoal_proto::catalog::{KeyFieldKind, KeyPattern};

use crate::error::CommandError;
use crate::state::RouterState;

/// The `createIndexes` spec of the key's own index.
pub fn spec(key: &KeyPattern, unique: bool) -> Document {
    let mut pattern = Document::new();
    let mut name = Vec::new();
    for f in &key.fields {
        let (value, suffix) = match f.kind {
            KeyFieldKind::Range => (Bson::Int32(1), "1"),
            KeyFieldKind::Hashed => (Bson::String("hashed".into()), "hashed"),
        };
        pattern.insert(f.name.clone(), value);
        name.push(format!("{}_{suffix}", f.name));
    }
    let mut spec = doc! { "key": pattern, "name": name.join("_") };
    if unique {
        spec.insert("unique", true);
    }
    spec
}

/// Whether a listed index (`listIndexes`' shape) supports `key`.
pub fn supports(listed: &Document, key: &KeyPattern) -> bool {
    let Ok(pattern) = listed.get_document("key") else { return false };
    let plain = !matches!(listed.get("sparse"), Some(Bson::Boolean(true)))
        && !listed.contains_key("partialFilterExpression")
        && listed.get_document("collation").map_or(true, |c| c.get_str("locale").is_ok_and(|l| l == "simple"));
    plain
        && pattern.len() >= key.fields.len()
        && key.fields.iter().zip(pattern).all(|(f, (name, value))| {
            *name == f.name
                && match f.kind {
                    KeyFieldKind::Range => is_one(value),
                    KeyFieldKind::Hashed => value.as_str() == Some("hashed"),
                }
        })
}

fn is_one(v: &Bson) -> bool {
    matches!(v, Bson::Int32(1) | Bson::Int64(1)) || matches!(v, Bson::Double(d) if *d == 1.0)
}

fn is_id_key(key: &KeyPattern) -> bool {
    matches!(key.fields.as_slice(), [f] if f.name == "_id" && f.kind == KeyFieldKind::Range)
}

/// Makes sure `shard` has an index supporting `key` on `db.coll`, building it (and creating the
/// collection) when there is none.
pub async fn ensure(
    state: &RouterState,
    shard: &str,
    db: &str,
    coll: &str,
    key: &KeyPattern,
    unique: bool,
) -> Result<(), CommandError> {
    if is_id_key(key) {
        return Ok(());
    }
    let listed = crate::cmd::indexes::shard_index_specs(state, shard, db, coll).await?.unwrap_or_default();
    if listed.iter().any(|spec| supports(spec, key)) {
        return Ok(());
    }
    let request = shoal_proto::shard::CommandRequest {
        db: db.to_owned(),
        body: doc! { "createIndexes": coll, "indexes": [spec(key, unique)] }.to_vec()?.into(),
        ..Default::default()
    };
    crate::exec::call::command(state, shard, request).await?;
    tracing::info!(ns = %format!("{db}.{coll}"), %shard, "built the shard key's index");
    Ok(())
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::KeyField;

    use super::*;

    fn key(fields: &[(&str, KeyFieldKind)]) -> KeyPattern {
        KeyPattern { fields: fields.iter().map(|(n, k)| KeyField { name: (*n).into(), kind: *k }).collect() }
    }

    #[test]
    fn the_index_is_named_as_mongodb_names_it() {
        let k = key(&[("a", KeyFieldKind::Range), ("b.c", KeyFieldKind::Hashed)]);
        assert_eq!(spec(&k, false), doc! {"key": {"a": 1, "b.c": "hashed"}, "name": "a_1_b.c_hashed"});
        assert_eq!(
            spec(&key(&[("a", KeyFieldKind::Range)]), true),
            doc! {"key": {"a": 1}, "name": "a_1", "unique": true}
        );
    }

    #[test]
    fn only_a_plain_index_the_key_prefixes_supports_it() {
        let k = key(&[("a", KeyFieldKind::Range)]);
        assert!(supports(&doc! {"key": {"a": 1}, "name": "a_1"}, &k));
        assert!(supports(&doc! {"key": {"a": 1.0, "b": -1}, "name": "x"}, &k));
        assert!(supports(&doc! {"key": {"a": 1i64}, "name": "x", "collation": {"locale": "simple"}}, &k));
        assert!(!supports(&doc! {"key": {"a": -1}, "name": "x"}, &k));
        assert!(!supports(&doc! {"key": {"b": 1, "a": 1}, "name": "x"}, &k));
        assert!(!supports(&doc! {"key": {"a": "hashed"}, "name": "x"}, &k));
        assert!(!supports(&doc! {"key": {"a": 1}, "name": "x", "sparse": true}, &k));
        assert!(!supports(&doc! {"key": {"a": 1}, "name": "x", "partialFilterExpression": {"a": 1}}, &k));
        assert!(!supports(&doc! {"key": {"a": 1}, "name": "x", "collation": {"locale": "fr"}}, &k));
        let h = key(&[("a", KeyFieldKind::Hashed)]);
        assert!(supports(&doc! {"key": {"a": "hashed"}, "name": "a_hashed"}, &h));
        assert!(!supports(&doc! {"key": {"a": 1}, "name": "a_1"}, &h));
    }
}
