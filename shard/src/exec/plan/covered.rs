//! Covered queries: when an index holds every field a `find` filters on, sorts by, returns and
//! (on a sharded collection) needs for the orphan check, its entries answer the query without
//! reading documents. Entries keep their key's exact values (`{i, k}`), so the rebuilt document
//! has the stored types.
//!
//! Not covered: multikey indexes (an entry holds one element, not the array), hashed fields (an
//! entry holds the hash), projections that compute or exclude fields other than `_id`, and
//! filters with operators that look past the named fields (`$expr`, `$where`, `$or`...).

use bson::{Bson, Document};

use crate::exec::args;
use crate::exec::plan::IndexScan;
use crate::sharding::Ownership;

/// Whether the scan can answer the query from its entries alone.
pub fn covers(
    scan: &IndexScan,
    filter: &Document,
    projection: &Document,
    sort: &Document,
    owned: Option<&Ownership>,
) -> bool {
    let spec = &scan.spec;
    if spec.multikey || spec.is_hashed() || projection.is_empty() {
        return false;
    }
    let fields: Vec<&str> = spec.pattern.fields.iter().map(|(f, _)| f.as_str()).collect();
    let indexed = |f: &str| fields.contains(&f);
    let mut id_kept = true;
    for (k, v) in projection {
        let include = match v {
            Bson::Boolean(b) => *b,
            v => match args::as_f64(v) {
                Some(n) => n != 0.0,
                None => return false,
            },
        };
        if k == "_id" {
            id_kept = include;
            continue;
        }
        if !include || !indexed(k) {
            return false;
        }
    }
    if id_kept && !indexed("_id") {
        return false;
    }
    filter_fields_indexed(filter, &indexed)
        && sort.keys().all(|k| indexed(k))
        && owned.is_none_or(|o| o.key.iter().all(|f| indexed(&f.name)))
}

fn filter_fields_indexed(filter: &Document, indexed: &impl Fn(&str) -> bool) -> bool {
    filter.iter().all(|(k, v)| match (k.as_str(), v) {
        ("$and", Bson::Array(items)) => {
            items.iter().all(|i| matches!(i, Bson::Document(d) if filter_fields_indexed(d, indexed)))
        }
        (k, _) if k.starts_with('$') => false,
        (k, _) => indexed(k),
    })
}

/// The document an entry stands for: its key's values at their (dotted) paths.
pub fn document_of(fields: &[(String, shoal_query::index_keys::KeyKind)], values: Vec<Bson>) -> Document {
    let mut doc = Document::new();
    for ((path, _), value) in fields.iter().zip(values) {
        set_path(&mut doc, path, value);
    }
    doc
}

fn set_path(doc: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(doc.get(head), Some(Bson::Document(_))) {
                doc.insert(head, Document::new());
            }
            if let Some(Bson::Document(inner)) = doc.get_mut(head) {
                set_path(inner, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bson::doc;

    use super::*;
    use crate::store::indexes::IndexSpec;

    fn scan(key: Document) -> IndexScan {
        let spec = Arc::new(IndexSpec::from_user(&doc! {"key": key}).expect("spec"));
        IndexScan { spec, intervals: Vec::new(), planned: Arc::new(Vec::new()), shown: Document::new(), covered: false }
    }

    #[test]
    fn covers_only_what_the_index_holds() {
        let s = scan(doc! {"a": 1, "b.c": -1});
        assert!(covers(&s, &doc! {"a": 1}, &doc! {"a": 1, "b.c": 1, "_id": 0}, &doc! {}, None));
        assert!(!covers(&s, &doc! {"a": 1}, &doc! {"a": 1}, &doc! {}, None), "_id is not in the index");
        assert!(!covers(&s, &doc! {"x": 1}, &doc! {"a": 1, "_id": 0}, &doc! {}, None));
        assert!(!covers(&s, &doc! {"$or": [{"a": 1}]}, &doc! {"a": 1, "_id": 0}, &doc! {}, None));
        assert!(!covers(&s, &doc! {"a": 1}, &doc! {"a": 0}, &doc! {}, None));
        assert!(!covers(&s, &doc! {"a": 1}, &doc! {}, &doc! {}, None));
        assert_eq!(
            document_of(&s.spec.pattern.fields, vec![Bson::Int32(1), Bson::String("x".into())]),
            doc! {"a": 1, "b": {"c": "x"}}
        );
    }
}
