//! The key encoding's one invariant: byte order equals MongoDB's value order, Equal included,
//! for values of every BSON type, and compound keys order as tuples under their directions.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::cmp::Ordering;

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Decimal128, Document, JavaScriptCodeWithScope, Regex, Timestamp, oid::ObjectId};
use proptest::prelude::*;
use shoal_query::keystring::{encode, encode_compound};
use shoal_query::order::compare_values;

fn decimal(s: &str) -> Option<Bson> {
    s.parse::<Decimal128>().ok().map(Bson::Decimal128)
}

/// A DBPointer decoded from hand-built bytes: the bson crate has no public constructor.
fn db_pointer(ns: &str, id: u8) -> Bson {
    let mut body = vec![0x0C, b'p', 0];
    body.extend_from_slice(&(ns.len() as i32 + 1).to_le_bytes());
    body.extend_from_slice(ns.as_bytes());
    body.push(0);
    body.extend_from_slice(&[id; 12]);
    body.push(0);
    let mut raw = ((body.len() + 4) as i32).to_le_bytes().to_vec();
    raw.extend_from_slice(&body);
    let d = Document::from_reader(&raw[..]).expect("hand-built DBPointer document is valid");
    d.get("p").expect("field p was written").clone()
}

/// The same few values written as every numeric type, so that Equal comes up often.
fn small_number() -> impl Strategy<Value = Bson> {
    (-4i64..=4, 0..4u8, 0..3u32).prop_filter_map("representable", |(n, ty, zeros)| match ty {
        0 => Some(Bson::Int32(n as i32)),
        1 => Some(Bson::Int64(n)),
        2 => Some(Bson::Double(n as f64)),
        _ => decimal(&format!("{}{}E-{zeros}", n, "0".repeat(zeros as usize))),
    })
}

fn boundary_number() -> impl Strategy<Value = Bson> {
    let ints = prop_oneof![
        Just(i64::MAX),
        Just(i64::MIN),
        Just(i64::MAX - 1),
        Just(i64::MIN + 1),
        Just(1i64 << 53),
        Just((1i64 << 53) + 1),
        Just(-(1i64 << 53) - 1),
        Just(i32::MAX as i64),
        Just(i32::MIN as i64),
        Just(0),
    ];
    prop_oneof![
        ints.clone().prop_map(Bson::Int64),
        ints.clone().prop_map(|i| Bson::Double(i as f64)),
        ints.prop_filter_map("decimal", |i| decimal(&i.to_string())),
        prop_oneof![
            Just(f64::NAN),
            Just(-f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(f64::MIN_POSITIVE),
            Just(5e-324),
            Just(9_223_372_036_854_775_808.0),
            Just(18_446_744_073_709_551_616.0),
            Just(0.1),
            Just(0.5),
            Just(1.5),
        ]
        .prop_map(Bson::Double),
        prop_oneof![
            Just("NaN"),
            Just("-NaN"),
            Just("Infinity"),
            Just("-Infinity"),
            Just("-0"),
            Just("0E-6176"),
            Just("0E+6111"),
            Just("9223372036854775808"),
            Just("-9223372036854775809"),
            Just("18446744073709551616"),
            Just("0.1"),
            Just("0.10"),
            Just("-0.1"),
            Just("0.5"),
            Just("1.5"),
            Just("1E-6176"),
            Just("9999999999999999999999999999999999E+6111"),
            Just("-9999999999999999999999999999999999E+6111"),
            Just("1E+308"),
            Just("1.797693134862315708145274237317044E+308"),
            Just("4.940656458412465441765687928682213E-324"),
            Just("5E-324"),
        ]
        .prop_filter_map("decimal", decimal),
    ]
}

/// Random decimals next to the double nearest to them, to exercise near-ties.
fn near_number() -> impl Strategy<Value = Bson> {
    (any::<u64>(), 1u32..=34, -40i32..40, any::<bool>(), any::<bool>()).prop_filter_map(
        "representable",
        |(raw, digits, exp, neg, as_double)| {
            let coefficient = u128::from(raw) % 10u128.pow(digits.min(19));
            let coefficient = coefficient * 10u128.pow(digits.saturating_sub(19).min(15));
            let s = format!("{}{coefficient}E{exp}", if neg { "-" } else { "" });
            if as_double { s.parse::<f64>().ok().map(Bson::Double) } else { decimal(&s) }
        },
    )
}

fn any_number() -> impl Strategy<Value = Bson> {
    prop_oneof![
        small_number(),
        boundary_number(),
        near_number(),
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        any::<f64>().prop_map(Bson::Double),
        (-1000i32..1000).prop_map(|n| Bson::Double(f64::from(n) / 8.0)),
        (any::<u64>(), -6176i32..=6111, any::<bool>())
            .prop_filter_map("decimal", |(c, e, neg)| { decimal(&format!("{}{c}E{e}", if neg { "-" } else { "" })) }),
        any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(Decimal128::from_bytes(b))),
    ]
}

fn short_string() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[\\x00\\x01a-c\\u{FF}\\u{10FFFF}]{0,4}").expect("valid regex")
}

fn leaf() -> impl Strategy<Value = Bson> {
    prop_oneof![
        4 => any_number(),
        1 => Just(Bson::MinKey),
        1 => Just(Bson::MaxKey),
        1 => Just(Bson::Null),
        1 => Just(Bson::Undefined),
        1 => any::<bool>().prop_map(Bson::Boolean),
        2 => short_string().prop_map(Bson::String),
        1 => short_string().prop_map(Bson::Symbol),
        1 => (0u8..3, proptest::collection::vec(0u8..3, 0..3)).prop_map(|(s, bytes)| {
            Bson::Binary(Binary { subtype: BinarySubtype::from([0u8, 4, 0x80][s as usize]), bytes })
        }),
        1 => (0u8..3).prop_map(|b| Bson::ObjectId(ObjectId::from_bytes([b; 12]))),
        1 => prop_oneof![any::<i64>(), -2i64..2].prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
        1 => (prop_oneof![any::<u32>(), 0u32..2], prop_oneof![any::<u32>(), 0u32..2])
            .prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
        1 => ("[ab]{0,2}", "[im]{0,2}").prop_map(|(p, o): (String, String)| {
            Bson::RegularExpression(Regex {
                pattern: p.try_into().expect("no NUL"),
                options: o.try_into().expect("no NUL"),
            })
        }),
        1 => ("[ab]{0,2}", 0u8..2).prop_map(|(ns, id): (String, u8)| db_pointer(&ns, id)),
        1 => short_string().prop_map(Bson::JavaScriptCode),
        1 => ("[ab]{0,2}", 0i32..2).prop_map(|(code, x): (String, i32)| {
            let mut scope = Document::new();
            if x > 0 {
                scope.insert("x", x);
            }
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope })
        }),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            proptest::collection::vec(("[ab\\x00]{0,2}", inner), 0..4)
                .prop_map(|fields| { Bson::Document(fields.into_iter().collect::<Document>()) }),
        ]
    })
}

fn check_pair(a: &Bson, b: &Bson) -> Result<(), TestCaseError> {
    let want = compare_values(a, b);
    prop_assert_eq!(want, compare_values(b, a).reverse(), "asymmetric: {:?} vs {:?}", a, b);
    prop_assert_eq!(want, encode(a).cmp(&encode(b)), "{:?} vs {:?}", a, b);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn numbers_encode_in_value_order(a in any_number(), b in any_number()) {
        check_pair(&a, &b)?;
    }

    #[test]
    fn values_encode_in_value_order(a in value(), b in value()) {
        check_pair(&a, &b)?;
    }

    #[test]
    fn decimals_next_to_doubles_and_to_each_other(
        raw in any::<u128>(),
        exp in prop_oneof![-40i32..10, -6176i32..=6111],
        neg in any::<bool>(),
        step in -2i128..=2,
    ) {
        // A full 34-digit coefficient and its neighbours: near-equal non-dyadic decimals that
        // share their first 113 bits, and the doubles closest to them.
        let c = 10u128.pow(33) + raw % (9 * 10u128.pow(33));
        let sign = if neg { "-" } else { "" };
        let s = format!("{sign}{c}E{exp}");
        let t = format!("{sign}{}E{exp}", c.saturating_add_signed(step).min(10u128.pow(34) - 1));
        if let (Some(a), Some(b)) = (decimal(&s), decimal(&t)) {
            check_pair(&a, &b)?;
            if let Ok(f) = s.parse::<f64>() {
                check_pair(&a, &Bson::Double(f))?;
                check_pair(&a, &Bson::Double(f.next_up()))?;
                check_pair(&a, &Bson::Double(f.next_down()))?;
                if f.abs() < 9.2e18 {
                    check_pair(&a, &Bson::Int64(f as i64))?;
                }
            }
        }
    }

    #[test]
    fn order_is_transitive(a in any_number(), b in any_number(), c in any_number()) {
        let (ab, bc) = (compare_values(&a, &b), compare_values(&b, &c));
        if ab == bc || bc == Ordering::Equal {
            prop_assert_eq!(compare_values(&a, &c), ab, "{:?} {:?} {:?}", a, b, c);
        }
    }

    #[test]
    fn compound_keys_order_as_tuples(
        a in proptest::collection::vec(value(), 3),
        b in proptest::collection::vec(value(), 3),
        directions in proptest::collection::vec(any::<bool>(), 3),
    ) {
        let want = a.iter().zip(&b).zip(&directions).fold(Ordering::Equal, |acc, ((x, y), asc)| {
            acc.then_with(|| {
                let o = compare_values(x, y);
                if *asc { o } else { o.reverse() }
            })
        });
        let ka = encode_compound(&a.iter().collect::<Vec<_>>(), &directions);
        let kb = encode_compound(&b.iter().collect::<Vec<_>>(), &directions);
        prop_assert_eq!(want, ka.cmp(&kb), "{:?} vs {:?} ({:?})", a, b, directions);
    }
}

#[test]
fn one_and_friends_are_one_key() {
    let keys: Vec<Vec<u8>> = [
        Bson::Int32(1),
        Bson::Int64(1),
        Bson::Double(1.0),
        decimal("1").expect("valid"),
        decimal("1.0000").expect("valid"),
        decimal("0.01E+2").expect("valid"),
    ]
    .iter()
    .map(encode)
    .collect();
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
}
