//! Order-preserving byte encoding of BSON values ("KeyString"): the storage key of `_id`,
//! secondary-index keys and shard-key chunk bounds. Ordered maps over these bytes iterate in
//! MongoDB's value order.
//!
//! Invariant (checked by proptest in `query/tests/keystring_order.rs`): for all values `a`, `b`,
//! `compare_values(a, b) == encode(a).cmp(&encode(b))`, Equal included. So numbers equal in value
//! encode identically whatever their type (`1`, `1i64`, `1.0`, `Decimal128("1.0")`), as MongoDB
//! treats `_id: 1` and `_id: 1.0` as the same key. The encoding is not decodable.
//!
//! Every encoding is prefix-free (no value's bytes are a proper prefix of another's), which is
//! what makes concatenation ([`encode_compound`]) order tuples field by field and lets a
//! descending field be stored bytewise inverted.
//!
//! Layout: one type byte, ordered like [`crate::order::canonical_type`], then:
//! ```text
//! MinKey, Undefined, Null, MaxKey, false, true   (nothing more)
//! number      see `number.rs`: class byte (NaN < -inf < negative < zero < positive < +inf),
//!             binary exponent, fraction bits in 7-bit groups
//! string      escaped bytes (0x00 -> 01 01, 0x01 -> 01 02), terminator 0x00
//! object      per field: (canonical type + 1) byte, escaped name, value; terminator 0x00
//! array       per element: value; terminator 0x00 (type bytes are never 0x00)
//! binary      length (1 byte if < 255, else 0xFF + u64 BE), subtype, bytes
//! ObjectId    12 bytes          date   i64 BE with the sign bit flipped
//! timestamp   time u32 BE, increment u32 BE
//! regex       escaped pattern, escaped options
//! DBPointer   namespace length (as binary), namespace bytes, 12 id bytes
//! code        escaped code      code-with-scope   escaped code, object body of the scope
//! ```

pub(crate) mod bignum;
pub(crate) mod decimal;
mod decode;
mod number;

pub use decode::{DecodeError, decode, decode_compound};

use bson::{Bson, Document};

use crate::order::{canonical_type, db_pointer_parts};

const TYPE_MIN_KEY: u8 = 0x0A;
const TYPE_UNDEFINED: u8 = 0x0F;
const TYPE_NULL: u8 = 0x14;
// Numbers take 0x1E..=0x23, see `number.rs`.
const TYPE_STRING: u8 = 0x3C;
const TYPE_OBJECT: u8 = 0x46;
const TYPE_ARRAY: u8 = 0x50;
const TYPE_BINARY: u8 = 0x5A;
const TYPE_OBJECT_ID: u8 = 0x64;
const TYPE_FALSE: u8 = 0x6E;
const TYPE_TRUE: u8 = 0x6F;
const TYPE_DATE: u8 = 0x78;
const TYPE_TIMESTAMP: u8 = 0x82;
const TYPE_REGEX: u8 = 0x8C;
const TYPE_DB_POINTER: u8 = 0x96;
const TYPE_CODE: u8 = 0xA0;
const TYPE_CODE_WITH_SCOPE: u8 = 0xAA;
const TYPE_MAX_KEY: u8 = 0xF0;

/// Ends strings, objects and arrays; below every type byte and every escaped byte.
const END: u8 = 0x00;

/// The encoding of MinKey: less than the encoding of every other value.
pub const MIN_KEY_ENCODING: &[u8] = &[TYPE_MIN_KEY];
/// The encoding of MaxKey: greater than the encoding of every other value.
pub const MAX_KEY_ENCODING: &[u8] = &[TYPE_MAX_KEY];

/// The order-preserving encoding of one value.
pub fn encode(v: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_into(v, &mut out);
    out
}

/// Appends the encoding of `v` to `out`.
pub fn encode_into(v: &Bson, out: &mut Vec<u8>) {
    match v {
        Bson::MinKey => out.push(TYPE_MIN_KEY),
        Bson::Undefined => out.push(TYPE_UNDEFINED),
        Bson::Null => out.push(TYPE_NULL),
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => number::encode_number(v, out),
        Bson::String(s) | Bson::Symbol(s) => {
            out.push(TYPE_STRING);
            push_escaped(s.as_bytes(), out);
        }
        Bson::Document(d) => {
            out.push(TYPE_OBJECT);
            push_object_body(d, out);
        }
        Bson::Array(a) => {
            out.push(TYPE_ARRAY);
            for e in a {
                encode_into(e, out);
            }
            out.push(END);
        }
        Bson::Binary(b) => {
            out.push(TYPE_BINARY);
            push_length(b.bytes.len(), out);
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&b.bytes);
        }
        Bson::ObjectId(o) => {
            out.push(TYPE_OBJECT_ID);
            out.extend_from_slice(&o.bytes());
        }
        Bson::Boolean(b) => out.push(if *b { TYPE_TRUE } else { TYPE_FALSE }),
        Bson::DateTime(d) => {
            out.push(TYPE_DATE);
            let flipped = (d.timestamp_millis() as u64) ^ (1u64 << 63);
            out.extend_from_slice(&flipped.to_be_bytes());
        }
        Bson::Timestamp(t) => {
            out.push(TYPE_TIMESTAMP);
            out.extend_from_slice(&t.time.to_be_bytes());
            out.extend_from_slice(&t.increment.to_be_bytes());
        }
        Bson::RegularExpression(r) => {
            out.push(TYPE_REGEX);
            push_escaped(r.pattern.as_str().as_bytes(), out);
            push_escaped(r.options.as_str().as_bytes(), out);
        }
        Bson::DbPointer(p) => {
            out.push(TYPE_DB_POINTER);
            let (ns, id) = db_pointer_parts(p);
            push_length(ns.len(), out);
            out.extend_from_slice(&ns);
            out.extend_from_slice(&id);
        }
        Bson::JavaScriptCode(c) => {
            out.push(TYPE_CODE);
            push_escaped(c.as_bytes(), out);
        }
        Bson::JavaScriptCodeWithScope(c) => {
            out.push(TYPE_CODE_WITH_SCOPE);
            push_escaped(c.code.as_bytes(), out);
            push_object_body(&c.scope, out);
        }
        Bson::MaxKey => out.push(TYPE_MAX_KEY),
    }
}

/// The encoding of a compound key: each value's encoding in turn, the bytes of a descending
/// field (`directions[i] == false`) inverted. A missing direction means ascending.
pub fn encode_compound(values: &[&Bson], directions: &[bool]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 * values.len());
    for (i, v) in values.iter().enumerate() {
        let start = out.len();
        encode_into(v, &mut out);
        if !directions.get(i).copied().unwrap_or(true) {
            invert(&mut out[start..]);
        }
    }
    out
}

pub fn invert(bytes: &mut [u8]) {
    for b in bytes {
        *b = !*b;
    }
}

fn push_object_body(d: &Document, out: &mut Vec<u8>) {
    for (k, v) in d {
        // +1 keeps the rank byte above END even for MinKey (rank 0).
        out.push(canonical_type(v) + 1);
        push_escaped(k.as_bytes(), out);
        encode_into(v, out);
    }
    out.push(END);
}

/// Bytes with 0x00 and 0x01 escaped, so that no content byte is 0x00, then a 0x00 terminator:
/// order is preserved (00 -> 01 01 < 01 -> 01 02 < 02..) and a shorter string sorts first.
fn push_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    if !bytes.iter().any(|&b| b <= 1) {
        out.extend_from_slice(bytes);
    } else {
        for &b in bytes {
            match b {
                0 => out.extend_from_slice(&[1, 1]),
                1 => out.extend_from_slice(&[1, 2]),
                _ => out.push(b),
            }
        }
    }
    out.push(END);
}

fn push_length(len: usize, out: &mut Vec<u8>) {
    if len < 0xFF {
        out.push(len as u8);
    } else {
        out.push(0xFF);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{Decimal128, oid::ObjectId};

    #[test]
    fn common_keys_are_compact() {
        assert_eq!(encode(&Bson::Int32(0)).len(), 1);
        assert_eq!(encode(&Bson::Int32(1)).len(), 3);
        assert_eq!(encode(&Bson::Int64(1000)).len(), 3);
        assert_eq!(encode(&Bson::Int64(i64::MAX)).len(), 11);
        assert_eq!(encode(&Bson::ObjectId(ObjectId::new())).len(), 13);
        assert_eq!(encode(&Bson::String("user42".into())).len(), 8);
    }

    #[test]
    fn equal_numbers_encode_identically() {
        let one = encode(&Bson::Int32(1));
        assert_eq!(one, encode(&Bson::Int64(1)));
        assert_eq!(one, encode(&Bson::Double(1.0)));
        let d: Decimal128 = "1.000".parse().expect("valid decimal literal");
        assert_eq!(one, encode(&Bson::Decimal128(d)));
        assert_eq!(encode(&Bson::Double(-0.0)), encode(&Bson::Int32(0)));
    }

    #[test]
    fn compound_descending_reverses_only_its_field() {
        let k = |a: i32, b: &str| encode_compound(&[&Bson::Int32(a), &Bson::String(b.into())], &[true, false]);
        assert!(k(1, "b") < k(1, "a"));
        assert!(k(1, "a") < k(2, "b"));
        // "a" is a prefix of "ab" as a string, not as an encoding.
        assert!(k(1, "ab") < k(1, "a"));
    }

    #[test]
    fn min_and_max_bound_everything() {
        for v in [Bson::Null, Bson::Double(f64::NAN), Bson::Boolean(true), Bson::String("\u{10FFFF}".into())] {
            assert!(MIN_KEY_ENCODING < encode(&v).as_slice());
            assert!(MAX_KEY_ENCODING > encode(&v).as_slice());
        }
    }
}
