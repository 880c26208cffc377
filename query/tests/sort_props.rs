//! Property: for single-field specs over scalar values, `SortSpec::compare` is a total preorder
//! that agrees with `order::compare_values` (missing sorting as null), `sort_documents` is a
//! stable sort by it, and `top_k` equals sort-then-limit.

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use proptest::prelude::*;
use shoal_query::order::compare_values;
use shoal_query::sort::{SortSpec, sort_documents, top_k};

fn scalar() -> impl Strategy<Value = Option<Bson>> {
    prop_oneof![
        Just(None),
        Just(Some(Bson::Null)),
        any::<i32>().prop_map(|i| Some(Bson::Int32(i % 5))),
        any::<i64>().prop_map(|i| Some(Bson::Int64(i % 5))),
        prop_oneof![Just(f64::NAN), Just(-0.0), Just(2.5), Just(f64::INFINITY), any::<f64>()]
            .prop_map(|f| Some(Bson::Double(f))),
        "[ab]{0,2}".prop_map(|s| Some(Bson::String(s))),
        any::<bool>().prop_map(|b| Some(Bson::Boolean(b))),
        (0i64..3).prop_map(|ms| Some(Bson::DateTime(DateTime::from_millis(ms)))),
        Just(Some(Bson::ObjectId(ObjectId::from_bytes([7; 12])))),
        Just(Some(Bson::MinKey)),
        Just(Some(Bson::MaxKey)),
    ]
}

fn docs_of(values: &[Option<Bson>]) -> Vec<Document> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut d = doc! {"_id": i as i32};
            if let Some(v) = v {
                d.insert("a", v.clone());
            }
            d
        })
        .collect()
}

fn key(d: &Document) -> Bson {
    d.get("a").cloned().unwrap_or(Bson::Null)
}

fn id(d: &Document) -> i32 {
    d.get_i32("_id").unwrap_or(-1)
}

proptest! {
    #[test]
    fn compare_agrees_with_compare_values(a in scalar(), b in scalar(), c in scalar()) {
        let asc = SortSpec::parse(&doc! {"a": 1}).unwrap();
        let desc = SortSpec::parse(&doc! {"a": -1}).unwrap();
        let d = docs_of(&[a, b, c]);
        for x in &d {
            for y in &d {
                let want = compare_values(&key(x), &key(y));
                prop_assert_eq!(asc.compare(x, y), want);
                prop_assert_eq!(desc.compare(x, y), want.reverse());
                prop_assert_eq!(asc.compare(x, y), asc.compare(y, x).reverse());
            }
        }
        let (x, y, z) = (&d[0], &d[1], &d[2]);
        if asc.compare(x, y) != Ordering::Greater && asc.compare(y, z) != Ordering::Greater {
            prop_assert_ne!(asc.compare(x, z), Ordering::Greater);
        }
    }

    #[test]
    fn sort_is_ordered_and_stable(values in proptest::collection::vec(scalar(), 0..40), descending in any::<bool>()) {
        let spec = SortSpec::parse(&doc! {"a": if descending { -1 } else { 1 }}).unwrap();
        let mut docs = docs_of(&values);
        sort_documents(&mut docs, &spec);
        prop_assert_eq!(docs.len(), values.len());
        for pair in docs.windows(2) {
            let ord = compare_values(&key(&pair[0]), &key(&pair[1]));
            let ord = if descending { ord.reverse() } else { ord };
            prop_assert_ne!(ord, Ordering::Greater);
            if ord == Ordering::Equal {
                prop_assert!(id(&pair[0]) < id(&pair[1]), "ties keep input order");
            }
        }
    }

    #[test]
    fn top_k_is_sort_then_limit(values in proptest::collection::vec(scalar(), 0..40), k in 0usize..45) {
        let spec = SortSpec::parse(&doc! {"a": 1}).unwrap();
        let docs = docs_of(&values);
        let mut sorted = docs.clone();
        sort_documents(&mut sorted, &spec);
        sorted.truncate(k);
        // Compared by _id: NaN values make documents unequal to themselves.
        let ids = |v: &[Document]| v.iter().map(id).collect::<Vec<_>>();
        prop_assert_eq!(ids(&top_k(docs, &spec, k)), ids(&sorted));
    }
}
