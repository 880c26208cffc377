//! The stored-document rules: the raw walk and the parsed check give the same answers, and the
//! raw walk refuses bytes that parsing refuses.

use bson::{Bson, Document, RawDocument, doc};
use proptest::prelude::*;
use shoal_proto::ErrorCode;

use crate::exec::stored_doc::{STORED_NESTING_DEPTH_MAX, validate_document, validate_raw};

fn code_of_raw(d: &Document) -> Option<ErrorCode> {
    let bytes = d.to_vec().expect("encode");
    validate_raw(RawDocument::from_bytes(&bytes).expect("raw")).err().map(|e| e.code)
}

fn code_of_parsed(d: &Document) -> Option<ErrorCode> {
    validate_document(d).err().map(|e| e.code)
}

fn regex(pattern: &str) -> Bson {
    Bson::RegularExpression(bson::Regex {
        pattern: pattern.to_string().try_into().expect("no NUL"),
        options: "i".to_string().try_into().expect("no NUL"),
    })
}

/// `{a: {a: ... {}}}` with `levels` levels counting the outer document.
fn nested(levels: usize) -> Document {
    let mut d = Document::new();
    for _ in 1..levels {
        d = doc! { "a": d };
    }
    d
}

#[test]
fn each_rule_gives_its_code_on_both_paths() {
    let cases = [
        (doc! { "_id": 1, "a": {"$b": 1} }, None),
        (doc! { "_id": [1] }, Some(ErrorCode::InvalidIdField)),
        (doc! { "a": 1, "_id": Bson::Undefined }, Some(ErrorCode::InvalidIdField)),
        (doc! { "_id": regex("x") }, Some(ErrorCode::InvalidIdField)),
        (doc! { "_id": {"x": [1]} }, None),
        // MongoDB 5.0+: `$` and `.` in field names are stored, but not `$` inside `_id`.
        (doc! { "a": 1, "$set": 1, "b.c": {"$d": 1} }, None),
        (doc! { "_id": {"$a": 1} }, Some(ErrorCode::DollarPrefixedFieldName)),
        (doc! { "x": 1, "_id": {"k": [{"$a": 1}]} }, Some(ErrorCode::DollarPrefixedFieldName)),
        (doc! { "_id": {"$ref": "c", "$id": 1, "$db": "d"} }, None),
        (nested(STORED_NESTING_DEPTH_MAX), None),
        (nested(STORED_NESTING_DEPTH_MAX + 1), Some(ErrorCode::Overflow)),
        (doc! { "x": [nested(STORED_NESTING_DEPTH_MAX - 1)] }, Some(ErrorCode::Overflow)),
        (doc! { "x": [nested(STORED_NESTING_DEPTH_MAX - 2)] }, None),
    ];
    for (d, want) in cases {
        assert_eq!(code_of_raw(&d), want, "raw: {d}");
        assert_eq!(code_of_parsed(&d), want, "parsed: {d}");
    }
}

#[test]
fn malformed_bytes_are_invalid_bson() {
    let good = doc! { "_id": 1, "s": "abc", "d": {"t": "xyz"} }.to_vec().expect("encode");
    // A string's bytes made invalid UTF-8, deep inside: only a walk of every level sees it.
    let at = good.windows(3).position(|w| w == b"xyz").expect("xyz");
    let mut bad = good.clone();
    bad[at] = 0xff;
    assert!(Document::from_reader(&mut &bad[..]).is_err(), "parsing refuses it");
    let raw = RawDocument::from_bytes(&bad).expect("outer lengths are fine");
    assert_eq!(validate_raw(raw).err().map(|e| e.code), Some(ErrorCode::InvalidBSON));
    // An embedded document's length pointing past its end.
    let at = good.windows(1).rposition(|w| w == [0x03]).expect("embedded tag") + 3;
    let mut bad = good;
    bad[at] = 0x7f;
    let raw = RawDocument::from_bytes(&bad).expect("the outer document is still well-framed");
    assert_eq!(validate_raw(raw).err().map(|e| e.code), Some(ErrorCode::InvalidBSON));
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![Just("_id".to_string()), Just("$x".to_string()), "[a-c]{1,2}", "\\$[a-c]"]
}

fn value() -> impl Strategy<Value = Bson> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        "[a-z]{0,4}".prop_map(Bson::String),
        Just(Bson::Undefined),
        Just(Bson::Null),
        Just(regex("a")),
    ];
    leaf.prop_recursive(6, 48, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            proptest::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Bson::Document(kv.into_iter().collect::<Document>())),
        ]
    })
}

proptest! {
    #[test]
    fn the_raw_walk_agrees_with_the_parsed_check(
        fields in proptest::collection::vec((key(), value()), 0..6),
        depth in 0usize..4,
    ) {
        let mut d: Document = fields.into_iter().collect();
        // Push some documents near the nesting limit.
        if depth > 0 {
            d.insert("deep", nested(STORED_NESTING_DEPTH_MAX - 2 + depth));
        }
        prop_assert_eq!(code_of_raw(&d), code_of_parsed(&d), "{}", d);
    }
}
