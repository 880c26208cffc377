//! `decode` inverts `encode`: encode → decode → encode gives the same bytes for every supported
//! value (numbers come back as a canonical type of the same value, so bytes are what compare).

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DateTime, Decimal128, Timestamp, oid::ObjectId};
use proptest::prelude::*;
use shoal_query::keystring::{decode, decode_compound, encode, encode_compound};

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        any::<f64>().prop_map(Bson::Double),
        // Above 127 significant bits (an i64 coefficient times 10^21 and up) is not decoded.
        (any::<i64>(), -40i32..20).prop_filter_map("decimal", |(c, e)| {
            format!("{c}E{e}").parse::<Decimal128>().ok().map(Bson::Decimal128)
        }),
        ".{0,12}".prop_map(Bson::String),
        any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
        any::<bool>().prop_map(Bson::Boolean),
        any::<i64>().prop_map(|ms| Bson::DateTime(DateTime::from_millis(ms))),
        (any::<u32>(), any::<u32>()).prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
        proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|bytes| Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes })),
        Just(Bson::Null),
        Just(Bson::MinKey),
        Just(Bson::MaxKey),
        Just(Bson::Undefined),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            proptest::collection::vec(("[a-z]{1,3}", inner), 0..4)
                .prop_map(|fields| Bson::Document(fields.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_decode_encode(v in value()) {
        let bytes = encode(&v);
        let back = decode(&bytes).map_err(|e| TestCaseError::fail(format!("{v:?}: {e}")))?;
        prop_assert_eq!(encode(&back), bytes);
    }

    #[test]
    fn compound_round_trip(a in scalar(), b in scalar(), dir_a: bool, dir_b: bool) {
        let bytes = encode_compound(&[&a, &b], &[dir_a, dir_b]);
        let back = decode_compound(&bytes, 2, &[dir_a, dir_b]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(encode_compound(&[&back[0], &back[1]], &[dir_a, dir_b]), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok(v) = decode(&bytes) {
            prop_assert_eq!(encode(&v), bytes);
        }
    }
}
