use bson::{Bson, bson, doc};
use proptest::prelude::*;
use shoal_proto::ErrorCode;

use super::*;

fn en(strength: i32) -> Collation {
    Collation::parse(&doc! {"locale": "en", "strength": strength}).unwrap()
}

fn code(spec: bson::Document) -> ErrorCode {
    Collation::parse(&spec).unwrap_err().code
}

#[test]
fn parses_what_is_supported_and_refuses_the_rest() {
    assert_eq!(Collation::parse(&doc! {"locale": "simple"}).unwrap(), Collation::Simple);
    assert_eq!(Collation::parse(&doc! {}).unwrap(), Collation::Simple);
    assert_eq!(en(1), Collation::English { base_only: true });
    assert_eq!(en(2), Collation::English { base_only: false });
    assert!(
        Collation::parse(&doc! {"locale": "en_US", "strength": 2, "caseFirst": "off", "normalization": true}).is_ok()
    );
    assert_eq!(code(doc! {"locale": "en"}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "en", "strength": 3}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "fr", "strength": 1}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "en", "strength": 2, "numericOrdering": true}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "en", "strength": 2, "caseLevel": true}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "en", "strength": 1, "caseFirst": "upper"}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "en", "strength": 1, "alternate": "shifted"}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "en", "strength": 1, "backwards": true}), ErrorCode::NotImplemented);
    assert_eq!(code(doc! {"locale": "xx"}), ErrorCode::BadValue);
    assert_eq!(code(doc! {"locale": "en", "strength": 9}), ErrorCode::BadValue);
    assert_eq!(code(doc! {"locale": "simple", "strength": 1}), ErrorCode::BadValue);
    assert_eq!(code(doc! {"locale": 1}), ErrorCode::TypeMismatch);
    assert_eq!(code(doc! {"strength": 1}), ErrorCode::Location40414);
    assert_eq!(code(doc! {"locale": "en", "bogus": 1}), ErrorCode::Location40415);
    let body = doc! {"find": "c", "collation": 5};
    assert_eq!(Collation::from_command(&body, "find").unwrap_err().code, ErrorCode::TypeMismatch);
}

#[test]
fn strength_two_ignores_case_only() {
    let c = en(2);
    assert_eq!(c.key("Hello"), c.key("hELLO"));
    assert_ne!(c.key("cote"), c.key("coté"));
    assert_eq!(c.key("Café"), c.key("cafe\u{301}"));
    // ICU's non-French secondary order.
    let mut words = vec!["côté", "coté", "côte", "cote"];
    words.sort_by_key(|w| c.key(w));
    assert_eq!(words, ["cote", "coté", "côte", "côté"]);
}

#[test]
fn strength_one_ignores_case_and_diacritics() {
    let c = en(1);
    assert_eq!(c.key("Résumé"), c.key("resume"));
    assert_eq!(c.key("STRASSE"), c.key("straße"));
    assert_ne!(c.key("a"), c.key("b"));
}

#[test]
fn icu_root_order_for_ascii() {
    let c = en(2);
    let mut chars: Vec<String> = (0x20u8..0x7f).map(|b| char::from(b).to_string()).collect();
    chars.sort_by_key(|s| c.key(s));
    chars.dedup_by_key(|s| c.key(s));
    let got: String = chars.concat().to_lowercase();
    assert_eq!(got, " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz");
    // Shorter first when one is a prefix of the other; letters after digits and punctuation.
    let mut words = vec!["ab", "a", "B", "a-b", "a1", "Zebra", "apple"];
    words.sort_by_key(|w| c.key(w));
    assert_eq!(words, ["a", "a-b", "a1", "ab", "apple", "B", "Zebra"]);
}

#[test]
fn collate_maps_nested_strings_and_leaves_others() {
    let c = en(2);
    let v = bson!({"a": ["X", {"b": "Y"}], "n": 1});
    let got = c.collate(&v).into_owned();
    assert_eq!(got, bson!({"a": [c.key("X"), {"b": c.key("Y")}], "n": 1}));
    assert!(matches!(Collation::Simple.collate(&v), Cow::Borrowed(_)));
    assert!(matches!(c.collate(&Bson::Int32(1)), Cow::Borrowed(_)));
    assert_eq!(c.compare(&bson!("abc"), &bson!("ABC")), Ordering::Equal);
    assert_eq!(c.compare(&bson!(["a", "B"]), &bson!(["A", "b"])), Ordering::Equal);
    assert_eq!(c.compare(&bson!("a"), &bson!(1)), Ordering::Greater);
}

proptest! {
    #[test]
    fn keys_are_case_insensitive_and_a_total_order(a in "[a-zA-Zé -~]{0,8}", b in "[a-zA-Zé -~]{0,8}") {
        for c in [en(1), en(2)] {
            prop_assert_eq!(c.key(&a.to_uppercase()), c.key(&a.to_lowercase()));
            let ab = c.key(&a).cmp(&c.key(&b));
            prop_assert_eq!(ab.reverse(), c.key(&b).cmp(&c.key(&a)));
        }
        // Strength 1 is coarser than strength 2.
        if en(2).key(&a) == en(2).key(&b) {
            prop_assert_eq!(en(1).key(&a), en(1).key(&b));
        }
    }
}
