//! MongoDB's total order over BSON values: the one comparison behind sort, `$gt`/`$lt`, `$min`,
//! index keys and shard-key chunk bounds.
//!
//! Owns: [`canonical_type`] (the rank of each type bracket) and [`compare_values`].
//!
//! Invariants:
//! - Values of different canonical types order by type rank alone:
//!   MinKey < Undefined < Null < numbers < string/symbol < object < array < binary < ObjectId <
//!   bool < date < timestamp < regex < DBPointer < code < code-with-scope < MaxKey.
//! - Numbers (Int32, Int64, Double, Decimal128) compare by exact mathematical value, whatever
//!   their types: `1 == 1i64 == 1.0 == Decimal128("1.00")`, `2^63 - 1` (i64) is less than the
//!   double 2^63, -0.0 equals 0. Every NaN (double or decimal) equals every other NaN and is less
//!   than every other number.
//! - Strings and symbols compare bytewise (the simple binary collation).
//! - Documents compare element by element: canonical type of the value, then field name bytes,
//!   then the value; a document that is a prefix of another is less. Arrays likewise.
//! - The order is total and consistent: [`crate::keystring::encode`] maps it onto byte order,
//!   and `query/tests/keystring_order.rs` checks the two agree on random values.

use std::cmp::Ordering;

use bson::{Bson, DbPointer, Document};

use crate::keystring::bignum::BigUint;
use crate::keystring::decimal::{self, Decimal};

/// MongoDB's canonical type rank (`canonicalizeBSONType` + 1, so MinKey is 0 and MaxKey 128).
/// Types that share a rank compare by value with each other.
pub fn canonical_type(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => 0,
        Bson::Undefined => 1,
        Bson::Null => 6,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => NUMBER_TYPE,
        Bson::String(_) | Bson::Symbol(_) => STRING_TYPE,
        Bson::Document(_) => 21,
        Bson::Array(_) => 26,
        Bson::Binary(_) => 31,
        Bson::ObjectId(_) => 36,
        Bson::Boolean(_) => 41,
        Bson::DateTime(_) => 46,
        Bson::Timestamp(_) => 48,
        Bson::RegularExpression(_) => 51,
        Bson::DbPointer(_) => 56,
        Bson::JavaScriptCode(_) => 61,
        Bson::JavaScriptCodeWithScope(_) => 66,
        Bson::MaxKey => 128,
    }
}

/// Rank of the number bracket, for callers that bracket comparisons by type.
pub const NUMBER_TYPE: u8 = 11;
/// Rank of the string/symbol bracket.
pub const STRING_TYPE: u8 = 16;

/// MongoDB's total order over values (`BSONElement::compareElementValues` with the simple
/// collation).
/// A number's value as f64 (int32, int64, double, decimal128), `None` for other types: for
/// reading numeric arguments (directions, limits, options), not for comparing values.
pub fn number_as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(f) => Some(*f),
        Bson::Decimal128(d) => d.to_string().parse().ok(),
        _ => None,
    }
}

pub fn compare_values(a: &Bson, b: &Bson) -> Ordering {
    let (ta, tb) = (canonical_type(a), canonical_type(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => compare_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => (x.time, x.increment).cmp(&(y.time, y.increment)),
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_str()
            .as_bytes()
            .cmp(y.pattern.as_str().as_bytes())
            .then_with(|| x.options.as_str().as_bytes().cmp(y.options.as_str().as_bytes())),
        (Bson::DbPointer(x), Bson::DbPointer(y)) => {
            let (xn, xi) = db_pointer_parts(x);
            let (yn, yi) = db_pointer_parts(y);
            // MongoDB memcmps the whole value after comparing sizes, so the namespace length
            // decides before its bytes do.
            xn.len().cmp(&yn.len()).then_with(|| xn.cmp(&yn)).then_with(|| xi.cmp(&yi))
        }
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => {
            x.code.as_bytes().cmp(y.code.as_bytes()).then_with(|| compare_documents(&x.scope, &y.scope))
        }
        _ if ta == NUMBER_TYPE => compare_numbers(a, b),
        // MinKey, MaxKey, Null, Undefined: one value per bracket.
        _ => Ordering::Equal,
    }
}

/// `compare_values(a, b) == Equal`: the equality of `$eq`, `$in` and unique keys.
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare_values(a, b) == Ordering::Equal
}

/// Documents in MongoDB's order (`BSONObj::woCompare` with field names considered).
pub fn compare_documents(a: &Document, b: &Document) -> Ordering {
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = canonical_type(va)
                    .cmp(&canonical_type(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| compare_values(va, vb));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

fn compare_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    // Field names of arrays are their indexes, equal position by position.
    for (x, y) in a.iter().zip(b) {
        let o = compare_values(x, y);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// The namespace bytes and ObjectId of a DBPointer. The bson crate keeps both fields private, so
/// read them back from the value's own BSON encoding.
pub(crate) fn db_pointer_parts(p: &DbPointer) -> (Vec<u8>, [u8; 12]) {
    #[allow(clippy::expect_used, reason = "the bson crate writes every DBPointer in the layout read back")]
    encoded_db_pointer_parts(p).expect("a one-field document holding a DBPointer has the BSON spec's layout")
}

fn encoded_db_pointer_parts(p: &DbPointer) -> Option<(Vec<u8>, [u8; 12])> {
    let mut d = Document::new();
    d.insert("", Bson::DbPointer(p.clone()));
    let raw = d.to_vec().ok()?;
    // Layout: i32 total length, type byte 0x0C, key "" (one NUL), i32 string length (with
    // its NUL), namespace bytes, NUL, 12 ObjectId bytes, document NUL.
    let len_at = 6;
    let str_len = i32::from_le_bytes(raw.get(len_at..len_at + 4)?.try_into().ok()?);
    let ns_len = usize::try_from(str_len.checked_sub(1)?).ok()?;
    let ns_start = len_at + 4;
    let ns = raw.get(ns_start..ns_start + ns_len)?.to_vec();
    let oid_start = ns_start + ns_len + 1;
    let oid: [u8; 12] = raw.get(oid_start..oid_start + 12)?.try_into().ok()?;
    Some((ns, oid))
}

/// A number as MongoDB sees it for ordering.
#[derive(Debug, Clone, Copy)]
enum Num {
    NaN,
    Infinite {
        neg: bool,
    },
    Int(i64),
    /// Finite doubles only.
    Double(f64),
    /// Finite decimals: `(-1)^neg * coefficient * 10^exponent`.
    Decimal {
        neg: bool,
        coefficient: u128,
        exponent: i32,
    },
}

fn as_num(v: &Bson) -> Num {
    match v {
        Bson::Int32(i) => Num::Int(i64::from(*i)),
        Bson::Int64(i) => Num::Int(*i),
        Bson::Double(f) if f.is_nan() => Num::NaN,
        Bson::Double(f) if f.is_infinite() => Num::Infinite { neg: *f < 0.0 },
        Bson::Double(f) => Num::Double(*f),
        Bson::Decimal128(d) => match decimal::decode(d) {
            Decimal::NaN => Num::NaN,
            Decimal::Infinity { neg } => Num::Infinite { neg },
            Decimal::Finite { neg, coefficient, exponent } => Num::Decimal { neg, coefficient, exponent },
        },
        _ => unreachable!("as_num is only called on values of the number bracket"),
    }
}

/// Exact comparison of two numbers (both of the number bracket).
fn compare_numbers(a: &Bson, b: &Bson) -> Ordering {
    // Fast paths first: the common pairs need no big integers.
    match (a, b) {
        (Bson::Int32(x), Bson::Int32(y)) => return x.cmp(y),
        (Bson::Int64(x), Bson::Int64(y)) => return x.cmp(y),
        _ => {}
    }
    let (x, y) = (as_num(a), as_num(b));
    let class = |n: &Num| match n {
        Num::NaN => 0,
        Num::Infinite { neg: true } => 1,
        Num::Infinite { neg: false } => 3,
        _ => 2,
    };
    let (cx, cy) = (class(&x), class(&y));
    if cx != 2 || cy != 2 {
        return cx.cmp(&cy);
    }
    match (x, y) {
        (Num::Int(i), Num::Int(j)) => i.cmp(&j),
        // Finite (NaN and infinities were classed above): always ordered.
        (Num::Double(f), Num::Double(g)) => f.partial_cmp(&g).unwrap_or(Ordering::Equal),
        (Num::Int(i), Num::Double(f)) => compare_int_double(i, f),
        (Num::Double(f), Num::Int(i)) => compare_int_double(i, f).reverse(),
        _ => Exact::of(x).cmp(&Exact::of(y)),
    }
}

/// Exact `i` vs `f` for finite `f`, without the rounding of `i as f64`.
fn compare_int_double(i: i64, f: f64) -> Ordering {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if f >= TWO_POW_63 {
        return Ordering::Less;
    }
    if f < -TWO_POW_63 {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    // In range and integral, so the cast is exact.
    let whole_int = whole as i64;
    i.cmp(&whole_int).then_with(|| {
        let frac = f - whole;
        if frac > 0.0 {
            Ordering::Less
        } else if frac < 0.0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    })
}

/// A finite number as `(-1)^neg * magnitude * 2^pow2 * 10^pow10`, for exact comparison across
/// binary and decimal types.
struct Exact {
    neg: bool,
    magnitude: u128,
    pow2: i32,
    pow10: i32,
}

impl Exact {
    fn of(n: Num) -> Self {
        match n {
            Num::Int(i) => Exact { neg: i < 0, magnitude: u128::from(i.unsigned_abs()), pow2: 0, pow10: 0 },
            Num::Double(f) => {
                let (mantissa, exponent) = split_double(f);
                Exact { neg: f < 0.0, magnitude: u128::from(mantissa), pow2: exponent, pow10: 0 }
            }
            Num::Decimal { neg, coefficient, exponent } => {
                Exact { neg, magnitude: coefficient, pow2: 0, pow10: exponent }
            }
            Num::NaN | Num::Infinite { .. } => unreachable!("Exact holds finite numbers only"),
        }
    }

    fn sign(&self) -> i8 {
        match (self.magnitude, self.neg) {
            (0, _) => 0,
            (_, true) => -1,
            (_, false) => 1,
        }
    }

    fn cmp(&self, other: &Exact) -> Ordering {
        let (sa, sb) = (self.sign(), other.sign());
        if sa != sb || sa == 0 {
            return sa.cmp(&sb);
        }
        let magnitudes = compare_magnitudes(self, other);
        if sa < 0 { magnitudes.reverse() } else { magnitudes }
    }
}

/// `|f| = mantissa * 2^exponent` for a finite double.
pub(crate) fn split_double(f: f64) -> (u64, i32) {
    let bits = f.to_bits();
    let exponent_bits = ((bits >> 52) & 0x7FF) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    if exponent_bits == 0 { (fraction, -1074) } else { (fraction | (1u64 << 52), exponent_bits - 1075) }
}

fn compare_magnitudes(a: &Exact, b: &Exact) -> Ordering {
    // Estimated log2 of each side; far apart (the usual case) decides without big integers.
    // The estimate's error is below 1e-6 for every representable magnitude.
    let log2 =
        |e: &Exact| (e.magnitude as f64).log2() + f64::from(e.pow2) + f64::from(e.pow10) * std::f64::consts::LOG2_10;
    let (la, lb) = (log2(a), log2(b));
    if la + 1.0 < lb {
        return Ordering::Less;
    }
    if lb + 1.0 < la {
        return Ordering::Greater;
    }
    let min2 = a.pow2.min(b.pow2);
    let min10 = a.pow10.min(b.pow10);
    let scaled = |e: &Exact| {
        let mut n = BigUint::from_u128(e.magnitude);
        // Both at least the minimum: the distances are the shifts.
        n.shl(u64::from(e.pow2.abs_diff(min2)));
        n.mul_pow10(e.pow10.abs_diff(min10));
        n
    };
    scaled(a).cmp(&scaled(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{Binary, Decimal128, Regex, Timestamp, doc, oid::ObjectId, spec::BinarySubtype};

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(s.parse::<Decimal128>().expect("valid decimal literal"))
    }

    fn assert_order(a: &Bson, b: &Bson, want: Ordering) {
        assert_eq!(compare_values(a, b), want, "{a:?} vs {b:?}");
        assert_eq!(compare_values(b, a), want.reverse(), "{b:?} vs {a:?}");
    }

    fn re(pattern: &str, options: &str) -> Bson {
        Bson::RegularExpression(Regex {
            pattern: pattern.try_into().expect("pattern without NUL"),
            options: options.try_into().expect("options without NUL"),
        })
    }

    #[test]
    fn type_brackets() {
        let ascending = [
            Bson::MinKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Int32(-5),
            Bson::String(String::new()),
            Bson::Document(doc! {}),
            Bson::Array(vec![]),
            Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: vec![] }),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::DateTime(bson::DateTime::from_millis(i64::MIN)),
            Bson::Timestamp(Timestamp { time: 0, increment: 0 }),
            re("", ""),
            Bson::JavaScriptCode(String::new()),
            Bson::MaxKey,
        ];
        for w in ascending.windows(2) {
            assert_order(&w[0], &w[1], Ordering::Less);
        }
        assert_order(&Bson::Symbol("a".into()), &Bson::String("a".into()), Ordering::Equal);
    }

    #[test]
    fn numbers_compare_by_exact_value() {
        assert_order(&Bson::Int32(1), &Bson::Int64(1), Ordering::Equal);
        assert_order(&Bson::Int32(1), &Bson::Double(1.0), Ordering::Equal);
        assert_order(&Bson::Int32(1), &dec("1.000"), Ordering::Equal);
        assert_order(&Bson::Double(-0.0), &Bson::Int32(0), Ordering::Equal);
        assert_order(&dec("-0E+10"), &Bson::Double(0.0), Ordering::Equal);
        // i64::MAX rounds to 2^63 as a double; exact comparison must not.
        assert_order(&Bson::Int64(i64::MAX), &Bson::Double(9_223_372_036_854_775_808.0), Ordering::Less);
        assert_order(&Bson::Int64(i64::MIN), &Bson::Double(-9_223_372_036_854_775_808.0), Ordering::Equal);
        assert_order(&Bson::Int64((1 << 53) + 1), &Bson::Double((1u64 << 53) as f64), Ordering::Greater);
        assert_order(&Bson::Int64(3), &Bson::Double(3.5), Ordering::Less);
        assert_order(&Bson::Int64(-3), &Bson::Double(-3.5), Ordering::Greater);
        // The double nearest 0.1 is slightly above one tenth.
        assert_order(&dec("0.1"), &Bson::Double(0.1), Ordering::Less);
        assert_order(&dec("0.5"), &Bson::Double(0.5), Ordering::Equal);
        assert_order(&dec("1E+400"), &Bson::Double(f64::MAX), Ordering::Greater);
        assert_order(&dec("1E-400"), &Bson::Double(5e-324), Ordering::Less);
        assert_order(&dec("1E-400"), &Bson::Int32(0), Ordering::Greater);
        assert_order(&dec("-1E-400"), &Bson::Int32(0), Ordering::Less);
        assert_order(&dec("9223372036854775807"), &Bson::Int64(i64::MAX), Ordering::Equal);
        assert_order(&dec("9223372036854775808"), &Bson::Double(9_223_372_036_854_775_808.0), Ordering::Equal);
        assert_order(&dec("1.5"), &dec("15E-1"), Ordering::Equal);
        assert_order(&dec("1E+6111"), &dec("9999999999999999999999999999999999E+6077"), Ordering::Greater);
        assert_order(&dec("1E-6176"), &dec("0"), Ordering::Greater);
    }

    #[test]
    fn nan_and_infinities() {
        assert_order(&Bson::Double(f64::NAN), &dec("NaN"), Ordering::Equal);
        assert_order(&Bson::Double(f64::NAN), &Bson::Double(f64::NEG_INFINITY), Ordering::Less);
        assert_order(&dec("-NaN"), &Bson::Int64(i64::MIN), Ordering::Less);
        assert_order(&Bson::Double(f64::INFINITY), &dec("Infinity"), Ordering::Equal);
        assert_order(&dec("-Infinity"), &Bson::Double(f64::NEG_INFINITY), Ordering::Equal);
        assert_order(&dec("Infinity"), &dec("9.999999999999999999999999999999999E+6144"), Ordering::Greater);
        assert_order(&Bson::Double(f64::NEG_INFINITY), &Bson::Double(f64::MIN), Ordering::Less);
    }

    #[test]
    fn documents_and_arrays() {
        // Canonical type of the value decides before the field name.
        assert_order(&Bson::Document(doc! {"b": 1}), &Bson::Document(doc! {"a": "x"}), Ordering::Less);
        assert_order(&Bson::Document(doc! {"a": 1}), &Bson::Document(doc! {"b": 1}), Ordering::Less);
        assert_order(&Bson::Document(doc! {"a": 1}), &Bson::Document(doc! {"a": 1, "b": 0}), Ordering::Less);
        assert_order(&Bson::Document(doc! {"a": 1.0}), &Bson::Document(doc! {"a": 1i64}), Ordering::Equal);
        assert_order(&Bson::Array(vec![1.into(), 2.into()]), &Bson::Array(vec![1.into(), 3.into()]), Ordering::Less);
        assert_order(&Bson::Array(vec![1.into()]), &Bson::Array(vec![1.into(), Bson::MinKey]), Ordering::Less);
    }

    #[test]
    fn other_types() {
        let bin = |subtype: u8, bytes: &[u8]| {
            Bson::Binary(Binary { subtype: BinarySubtype::from(subtype), bytes: bytes.to_vec() })
        };
        assert_order(&bin(5, &[9]), &bin(0, &[0, 0]), Ordering::Less);
        assert_order(&bin(0, &[9]), &bin(5, &[0]), Ordering::Less);
        assert_order(&bin(0, &[1]), &bin(0, &[2]), Ordering::Less);
        assert_order(&Bson::String("a".into()), &Bson::String("a\0".into()), Ordering::Less);
        assert_order(&Bson::String("Z".into()), &Bson::String("a".into()), Ordering::Less);
        assert_order(
            &Bson::Timestamp(Timestamp { time: 1, increment: u32::MAX }),
            &Bson::Timestamp(Timestamp { time: 2, increment: 0 }),
            Ordering::Less,
        );
        assert_order(
            &Bson::Timestamp(Timestamp { time: u32::MAX, increment: 0 }),
            &Bson::Timestamp(Timestamp { time: 1, increment: 0 }),
            Ordering::Greater,
        );
        assert_order(
            &Bson::DateTime(bson::DateTime::from_millis(-1)),
            &Bson::DateTime(bson::DateTime::from_millis(0)),
            Ordering::Less,
        );
        assert_order(&re("a", "z"), &re("b", ""), Ordering::Less);
        assert_order(&re("a", "i"), &re("a", "m"), Ordering::Less);
    }

    /// The bson crate cannot build a DBPointer from its parts; decode one from raw bytes.
    pub(crate) fn db_pointer(ns: &str, oid: [u8; 12]) -> Bson {
        let mut body = vec![0x0C, b'p', 0];
        body.extend_from_slice(&(ns.len() as i32 + 1).to_le_bytes());
        body.extend_from_slice(ns.as_bytes());
        body.push(0);
        body.extend_from_slice(&oid);
        body.push(0);
        let mut raw = ((body.len() + 4) as i32).to_le_bytes().to_vec();
        raw.extend_from_slice(&body);
        let d = Document::from_reader(&raw[..]).expect("hand-built DBPointer document is valid");
        d.get("p").expect("field p was written").clone()
    }

    #[test]
    fn db_pointers() {
        let Bson::DbPointer(p) = db_pointer("db.coll", [7; 12]) else { panic!("not a DBPointer") };
        assert_eq!(db_pointer_parts(&p), (b"db.coll".to_vec(), [7; 12]));
        // Namespace length decides first, then its bytes, then the id.
        assert_order(&db_pointer("z", [0; 12]), &db_pointer("aa", [0; 12]), Ordering::Less);
        assert_order(&db_pointer("ab", [0; 12]), &db_pointer("ac", [0; 12]), Ordering::Less);
        assert_order(&db_pointer("ab", [1; 12]), &db_pointer("ab", [0; 12]), Ordering::Greater);
        assert_order(&db_pointer("ab", [1; 12]), &Bson::JavaScriptCode(String::new()), Ordering::Less);
    }
}
