//! What an index may read off a filter for one field: the values it pins (points) or the key
//! intervals its comparisons confine the field to, in keystring bytes.
//!
//! Every bound is the encoding of a real value (type brackets end at the extreme values of the
//! bracket, e.g. strings run from `""` up to, excluding, the empty document), so bounds and
//! keys are all prefix-free encodings and stay ordered when a descending index inverts them.
//!
//! Invariant (conservative, like `extract`): every document the filter matches has at least one
//! value of the field inside each returned interval; callers still apply the whole filter.
//! Predicates that match through a whole array (`{a: [1, 2]}`, comparisons with array operands)
//! give no bounds, since index keys hold array elements.

use std::ops::Bound;

use bson::{Binary, Bson, DateTime, Document, Timestamp, oid::ObjectId, spec::BinarySubtype};

use super::extract::{KeyRange, conjuncts};
use super::parse::is_operator_document;
use crate::keystring::encode;

/// The interval each conjunct on `field` confines it to (one per comparison operator, so a
/// multikey index can use any one of them; others may intersect them all). Empty when no
/// conjunct bounds the field.
pub fn field_key_intervals(filter: &Document, field: &str) -> Vec<KeyRange> {
    let mut out = Vec::new();
    for (key, value) in conjuncts(filter) {
        if key != field {
            continue;
        }
        match value {
            Bson::RegularExpression(_) | Bson::Array(_) | Bson::Undefined => {}
            Bson::Document(d) if is_operator_document(d) => {
                for (op, arg) in d {
                    if let Some(r) = comparison(op, arg) {
                        out.push(r);
                    }
                }
            }
            v => {
                let k = encode(v);
                out.push(KeyRange { lower: Bound::Included(k.clone()), upper: Bound::Included(k) });
            }
        }
    }
    out
}

/// The key bytes every string of `field` matched by an anchored, case-sensitive regex conjunct
/// begins with (`/^abc/`, `{$regex: "^ab.*"}` → the encoding of `"abc"`, `"ab"` without its
/// terminator): an index scans just the keys with that prefix. `None` without such a regex, or
/// when its literal prefix is empty. Strings are the only values such a regex matches.
pub fn regex_key_prefix(filter: &Document, field: &str) -> Option<Vec<u8>> {
    conjuncts(filter).filter(|(key, _)| *key == field).find_map(|(_, value)| {
        let (pattern, options) = match value {
            Bson::RegularExpression(r) => (r.pattern.as_str().to_owned(), r.options.as_str().to_owned()),
            Bson::Document(d) if is_operator_document(d) => match (d.get("$regex"), d.get("$options")) {
                (Some(Bson::String(p)), None) => (p.clone(), String::new()),
                (Some(Bson::String(p)), Some(Bson::String(o))) => (p.clone(), o.clone()),
                (Some(Bson::RegularExpression(r)), None) => {
                    (r.pattern.as_str().to_owned(), r.options.as_str().to_owned())
                }
                _ => return None,
            },
            _ => return None,
        };
        // Case-insensitive, multi-line (`^` after any newline) and extended syntax widen what
        // the pattern's first characters mean.
        if options.chars().any(|o| matches!(o, 'i' | 'm' | 'x')) {
            return None;
        }
        let prefix = literal_prefix(&pattern)?;
        let mut key = encode(&Bson::String(prefix));
        key.pop(); // the terminator: longer strings continue where it was
        Some(key)
    })
}

/// The literal characters right after a leading `^`, up to the first metacharacter (a
/// quantifier makes the character before it optional, so that one is dropped too); none for a
/// pattern with an alternation.
fn literal_prefix(pattern: &str) -> Option<String> {
    // An alternation may match without the anchor (`^ab|cd` matches "xcd").
    if pattern.contains('|') {
        return None;
    }
    let rest = pattern.strip_prefix('^')?;
    let mut prefix = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if "\\.^$|()[]{}*+?".contains(c) {
            if matches!(c, '*' | '?' | '{') {
                prefix.pop();
            }
            break;
        }
        if matches!(chars.peek(), Some('*' | '?' | '{')) {
            break;
        }
        prefix.push(c);
    }
    (!prefix.is_empty()).then_some(prefix)
}

fn comparison(op: &str, arg: &Bson) -> Option<KeyRange> {
    if matches!(arg, Bson::RegularExpression(_) | Bson::Undefined | Bson::Array(_)) {
        return None;
    }
    let (lo, hi) = bracket(arg);
    let k = encode(arg);
    let (lower, upper) = match op {
        "$eq" => (Bound::Included(k.clone()), Bound::Included(k)),
        "$gt" => (Bound::Excluded(k), hi),
        "$gte" => (Bound::Included(k), hi),
        "$lt" => (lo, Bound::Excluded(k)),
        "$lte" => (lo, Bound::Included(k)),
        _ => return None,
    };
    Some(KeyRange { lower, upper })
}

/// The extremes of `v`'s type bracket as encodings of real values.
fn bracket(v: &Bson) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let inc = |b: Bson| Bound::Included(encode(&b));
    let exc = |b: Bson| Bound::Excluded(encode(&b));
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            (inc(Bson::Double(f64::NAN)), inc(Bson::Double(f64::INFINITY)))
        }
        Bson::String(_) | Bson::Symbol(_) => (inc(Bson::String(String::new())), exc(Bson::Document(Document::new()))),
        Bson::Document(_) => (inc(Bson::Document(Document::new())), exc(Bson::Array(Vec::new()))),
        Bson::Binary(_) => (
            inc(Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: Vec::new() })),
            exc(Bson::ObjectId(ObjectId::from_bytes([0; 12]))),
        ),
        Bson::ObjectId(_) => {
            (inc(Bson::ObjectId(ObjectId::from_bytes([0; 12]))), inc(Bson::ObjectId(ObjectId::from_bytes([0xFF; 12]))))
        }
        Bson::Boolean(_) => (inc(Bson::Boolean(false)), inc(Bson::Boolean(true))),
        Bson::DateTime(_) => (inc(Bson::DateTime(DateTime::MIN)), inc(Bson::DateTime(DateTime::MAX))),
        Bson::Timestamp(_) => (
            inc(Bson::Timestamp(Timestamp { time: 0, increment: 0 })),
            inc(Bson::Timestamp(Timestamp { time: u32::MAX, increment: u32::MAX })),
        ),
        Bson::Null => (inc(Bson::Null), inc(Bson::Null)),
        _ => (Bound::Unbounded, Bound::Unbounded),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn one_interval_per_comparison() {
        let r = field_key_intervals(&doc! {"a": {"$gt": 5, "$lte": 9}, "b": 1}, "a");
        assert_eq!(r.len(), 2);
        assert!(r[0].contains(&encode(&Bson::Int32(6))) && !r[0].contains(&encode(&Bson::Int32(5))));
        assert!(r[0].contains(&encode(&Bson::Double(f64::INFINITY))));
        assert!(!r[0].contains(&encode(&Bson::String("x".into()))), "brackets end with numbers");
        assert!(r[1].contains(&encode(&Bson::Int32(9))) && !r[1].contains(&encode(&Bson::Int32(10))));
        let s = field_key_intervals(&doc! {"a": {"$gte": "m"}}, "a");
        assert!(s[0].contains(&encode(&Bson::String("zzz".into()))));
        assert!(!s[0].contains(&encode(&Bson::Document(doc! {}))));
        assert!(field_key_intervals(&doc! {"a": [1, 2]}, "a").is_empty());
        assert!(field_key_intervals(&doc! {"a": {"$ne": 1}}, "a").is_empty());
        assert_eq!(field_key_intervals(&doc! {"$and": [{"a": 1}, {"a": {"$lt": 3}}]}, "a").len(), 2);
    }

    #[test]
    fn anchored_regexes_give_key_prefixes() {
        let re = |p: &str, o: &str| {
            Bson::RegularExpression(bson::Regex {
                pattern: p.try_into().expect("no NUL"),
                options: o.try_into().expect("no NUL"),
            })
        };
        let prefix_of = |v: Bson| regex_key_prefix(&doc! {"a": v}, "a");
        let key = prefix_of(re("^abc", "")).expect("prefix");
        for s in ["abc", "abcd", "abc\u{0}x"] {
            assert!(encode(&Bson::String(s.into())).starts_with(&key), "{s}");
        }
        assert!(!encode(&Bson::String("abd".into())).starts_with(&key));
        assert_eq!(prefix_of(re("^ab?c", "")), prefix_of(re("^a", "")), "b is optional");
        assert_eq!(prefix_of(Bson::Document(doc! {"$regex": "^ab.*"})), prefix_of(re("^ab", "")));
        assert!(prefix_of(re("^abc", "i")).is_none());
        assert!(prefix_of(re("abc", "")).is_none());
        assert!(prefix_of(re("^.bc", "")).is_none());
        assert!(prefix_of(re("^ab|cd", "")).is_none(), "the alternative is unanchored");
    }
}
