//! `Filter::matches` against a brute-force reference of MongoDB's rules for simple comparison
//! filters (`$eq $ne $gt $gte $lt $lte $in $nin $exists`, implicit equality) on random
//! documents with arrays, nested documents, nulls and missing fields.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::cmp::Ordering;

use bson::{Bson, Document, doc};
use proptest::prelude::*;
use shoal_query::filter::Filter;

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-2i32..=2).prop_map(Bson::Int32),
        (-2i64..=2).prop_map(Bson::Int64),
        (-4i32..=4).prop_map(|h| Bson::Double(f64::from(h) / 2.0)),
        prop_oneof![Just("x"), Just("y"), Just("")].prop_map(|s| Bson::String(s.into())),
        Just(Bson::Null),
        any::<bool>().prop_map(Bson::Boolean),
    ]
}

fn leaf_value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        3 => scalar(),
        1 => proptest::collection::vec(scalar(), 0..3).prop_map(Bson::Array),
    ]
}

/// `a` is a scalar, an array, a document `{c: ..}` or an array mixing documents and scalars.
fn document() -> impl Strategy<Value = Document> {
    let sub = || {
        proptest::option::of(leaf_value()).prop_map(|c| {
            let mut d = Document::new();
            if let Some(c) = c {
                d.insert("c", c);
            }
            Bson::Document(d)
        })
    };
    let a = prop_oneof![
        leaf_value(),
        sub(),
        proptest::collection::vec(prop_oneof![sub(), scalar()], 0..3).prop_map(Bson::Array),
    ];
    (proptest::option::of(a), proptest::option::of(leaf_value())).prop_map(|(a, b)| {
        let mut d = Document::new();
        if let Some(a) = a {
            d.insert("a", a);
        }
        if let Some(b) = b {
            d.insert("b", b);
        }
        d
    })
}

#[derive(Debug, Clone)]
enum Op {
    Implicit(Bson),
    Cmp(&'static str, Bson),
    In(&'static str, Vec<Bson>),
    Exists(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        leaf_value().prop_map(Op::Implicit),
        (prop_oneof![Just("$eq"), Just("$ne")], leaf_value()).prop_map(|(o, v)| Op::Cmp(o, v)),
        (prop_oneof![Just("$gt"), Just("$gte"), Just("$lt"), Just("$lte")], scalar()).prop_map(|(o, v)| Op::Cmp(o, v)),
        (prop_oneof![Just("$in"), Just("$nin")], proptest::collection::vec(leaf_value(), 0..3))
            .prop_map(|(o, v)| Op::In(o, v)),
        any::<bool>().prop_map(Op::Exists),
    ]
}

fn filter_of(path: &str, op: &Op) -> Document {
    match op {
        Op::Implicit(v) => doc! {path: v.clone()},
        Op::Cmp(o, v) => doc! {path: {*o: v.clone()}},
        Op::In(o, vs) => doc! {path: {*o: vs.clone()}},
        Op::Exists(b) => doc! {path: {"$exists": *b}},
    }
}

// ---- the reference ----

/// Values a path reaches; `None` marks a missing field. Only `x` and `a.c`-style paths.
fn reach(doc: &Document, path: &str) -> Vec<Option<Bson>> {
    let (head, tail) = match path.split_once('.') {
        Some((h, t)) => (h, Some(t)),
        None => (path, None),
    };
    match (doc.get(head), tail) {
        (None, _) => vec![None],
        (Some(Bson::Array(items)), None) => {
            let mut out: Vec<Option<Bson>> = items.iter().cloned().map(Some).collect();
            out.push(Some(Bson::Array(items.clone())));
            out
        }
        (Some(v), None) => vec![Some(v.clone())],
        (Some(Bson::Document(d)), Some(t)) => reach(d, t),
        (Some(Bson::Array(items)), Some(t)) => items
            .iter()
            .filter_map(|e| if let Bson::Document(d) = e { Some(reach(d, t)) } else { None })
            .flatten()
            .collect(),
        (Some(_), Some(_)) => vec![None],
    }
}

fn class(v: &Bson) -> u8 {
    match v {
        Bson::Null => 1,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => 2,
        Bson::String(_) => 3,
        Bson::Document(_) => 4,
        Bson::Array(_) => 5,
        Bson::Boolean(_) => 6,
        _ => unreachable!("not generated"),
    }
}

fn number(v: &Bson) -> f64 {
    match v {
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => *i as f64,
        Bson::Double(f) => *f,
        _ => unreachable!("not a number"),
    }
}

/// Order within one class, for the generated values only.
fn cmp_same_class(a: &Bson, b: &Bson) -> Ordering {
    match (a, b) {
        (Bson::Null, Bson::Null) => Ordering::Equal,
        (Bson::String(x), Bson::String(y)) => x.cmp(y),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::Array(x), Bson::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = class(p).cmp(&class(q)).then_with(|| cmp_same_class(p, q));
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Bson::Document(x), Bson::Document(y)) if x.is_empty() && y.is_empty() => Ordering::Equal,
        (Bson::Document(_), Bson::Document(_)) => unreachable!("documents are never operands"),
        _ => number(a).partial_cmp(&number(b)).expect("no NaN generated"),
    }
}

fn compare_ok(op: &str, rhs: &Bson, v: &Option<Bson>) -> bool {
    let inclusive = matches!(op, "$eq" | "$gte" | "$lte");
    let Some(v) = v else {
        return matches!(rhs, Bson::Null) && inclusive;
    };
    if class(v) != class(rhs) {
        return false;
    }
    let o = cmp_same_class(v, rhs);
    match op {
        "$eq" => o == Ordering::Equal,
        "$gt" => o == Ordering::Greater,
        "$gte" => o != Ordering::Less,
        "$lt" => o == Ordering::Less,
        "$lte" => o != Ordering::Greater,
        _ => unreachable!("not a comparison"),
    }
}

fn reference(doc: &Document, path: &str, op: &Op) -> bool {
    let values = reach(doc, path);
    let any_eq = |rhs: &Bson| values.iter().any(|v| compare_ok("$eq", rhs, v));
    match op {
        Op::Implicit(rhs) => any_eq(rhs),
        Op::Cmp("$ne", rhs) => !any_eq(rhs),
        Op::Cmp(o, rhs) => values.iter().any(|v| compare_ok(o, rhs, v)),
        Op::In("$in", list) => list.iter().any(any_eq),
        Op::In(_, list) => !list.iter().any(any_eq),
        Op::Exists(b) => values.iter().any(Option::is_some) == *b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn matches_agrees_with_reference(
        doc in document(),
        path in prop_oneof![Just("a"), Just("b"), Just("a.c"), Just("z")],
        op in op(),
    ) {
        let filter = filter_of(path, &op);
        let parsed = Filter::parse(&filter).map_err(|e| TestCaseError::fail(format!("{filter}: {e}")))?;
        prop_assert_eq!(parsed.matches(&doc), reference(&doc, path, &op), "filter {} on {}", filter, doc);
    }

    #[test]
    fn conjunctions_and_negations_compose(
        doc in document(),
        first in op(),
        second in op(),
    ) {
        let (f1, f2) = (filter_of("a", &first), filter_of("b", &second));
        let m1 = reference(&doc, "a", &first);
        let m2 = reference(&doc, "b", &second);
        let check = |filter: Document, want: bool| -> Result<(), TestCaseError> {
            let parsed = Filter::parse(&filter).map_err(|e| TestCaseError::fail(format!("{filter}: {e}")))?;
            prop_assert_eq!(parsed.matches(&doc), want, "filter {} on {}", filter, doc);
            Ok(())
        };
        check(doc! {"$and": [f1.clone(), f2.clone()]}, m1 && m2)?;
        check(doc! {"$or": [f1.clone(), f2.clone()]}, m1 || m2)?;
        check(doc! {"$nor": [f1, f2]}, !(m1 || m2))?;
    }
}
