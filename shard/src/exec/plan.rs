//! Access paths for a filter: documents are clustered by `_id` (their keys are the
//! order-preserving encoding of `_id`), so an `_id` equality is a point read and an `_id` range a
//! range scan; everything else scans the collection. The full filter is always applied to what an
//! access path returns, so paths only need to return a superset.

use std::ops::Bound;

use bson::{Bson, Document};

use crate::store::catalog::CollectionInfo;
use crate::store::keys;

#[derive(Debug, Clone, PartialEq)]
pub enum AccessPath {
    /// The one document whose `_id` equals this value, if any.
    Point(Bson),
    /// Document keys within these bounds (already prefixed by the collection id).
    Range { lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>> },
}

impl AccessPath {
    pub fn full() -> Self {
        AccessPath::Range { lower: Bound::Unbounded, upper: Bound::Unbounded }
    }
}

/// Chooses the access path for `filter` on `coll`.
pub fn choose(coll: &CollectionInfo, filter: &Document) -> AccessPath {
    if let Some(id) = shoal_query::filter::id_equality(filter) {
        return AccessPath::Point(id.clone());
    }
    match shoal_query::filter::id_range(filter) {
        Some(range) => {
            let prefixed = |b: Bound<Vec<u8>>| match b {
                Bound::Included(k) => Bound::Included([&keys::collection_prefix(coll.id)[..], &k].concat()),
                Bound::Excluded(k) => Bound::Excluded([&keys::collection_prefix(coll.id)[..], &k].concat()),
                Bound::Unbounded => Bound::Unbounded,
            };
            AccessPath::Range { lower: prefixed(range.lower), upper: prefixed(range.upper) }
        }
        None => AccessPath::full(),
    }
}

/// True when matching `filter` is implied by the access path alone (`{_id: v}` read by point).
pub fn path_implies_filter(path: &AccessPath, filter: &Document) -> bool {
    matches!(path, AccessPath::Point(_))
        && filter.len() == 1
        && matches!(filter.get("_id"), Some(v) if !matches!(v, Bson::Document(_) | Bson::Array(_) | Bson::RegularExpression(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use shoal_proto::Namespace;

    fn coll() -> CollectionInfo {
        CollectionInfo {
            id: 7,
            ns: Namespace::new("d", "c").expect("valid"),
            uuid: bson::Uuid::new(),
            options: doc! {},
        }
    }

    #[test]
    fn chooses_paths() {
        let c = coll();
        assert_eq!(choose(&c, &doc! {"_id": 5}), AccessPath::Point(Bson::Int32(5)));
        assert_eq!(choose(&c, &doc! {"_id": {"$eq": "x"}}), AccessPath::Point(Bson::String("x".into())));
        assert_eq!(choose(&c, &doc! {"a": 1}), AccessPath::full());
        assert_eq!(choose(&c, &doc! {"_id": {"$in": [1, 2]}}), AccessPath::full());
        match choose(&c, &doc! {"_id": {"$gte": 1, "$lt": 9}}) {
            AccessPath::Range { lower: Bound::Included(_), upper: Bound::Excluded(_) } => {}
            other => panic!("unexpected {other:?}"),
        }
        // A subdocument equality is a point too (documents are valid _id values).
        assert_eq!(choose(&c, &doc! {"_id": {"a": 1}}), AccessPath::Point(Bson::Document(doc! {"a": 1})));
        assert!(path_implies_filter(&AccessPath::Point(Bson::Int32(5)), &doc! {"_id": 5}));
        assert!(!path_implies_filter(&AccessPath::Point(Bson::Int32(5)), &doc! {"_id": 5, "a": 1}));
        assert!(!path_implies_filter(&AccessPath::Point(Bson::Int32(1)), &doc! {"$and": [{"_id": 1}, {"a": 2}]}));
    }
}
