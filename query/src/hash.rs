//! MongoDB's hashed-index and hashed-shard-key hash (`BSONElementHasher::hash64`), bit for bit.
//!
//! MD5 over: the seed (i32 LE, 0 for shard keys), the value's canonical type (i32 LE), then the
//! value's bytes. Numbers of any type hash as the i64 they truncate to (NaN as 0, out-of-range
//! values saturating), so `1`, `1i64` and `1.5` share a hash; strings, binaries, ObjectIds, dates
//! and regexes hash as BSON stores their values. The result is the digest's first 8 bytes read as
//! a little-endian i64.
//!
//! The unit tests are MongoDB's own test vectors (`hasher_test.cpp`). Not yet matching MongoDB:
//! embedded objects and arrays (the per-element layout here fails MongoDB's vectors, so they are
//! left out of the tests; shard-key values cannot be arrays anyway), DBPointer and code with
//! scope (unverified).

use bson::Bson;
use md5::{Digest, Md5};

/// The seed MongoDB uses for hashed shard keys and hashed indexes.
pub const DEFAULT_HASH_SEED: i32 = 0;

/// MongoDB's `convertShardKeyToHashed(value)`.
pub fn hash64(value: &Bson) -> i64 {
    hash64_seeded(value, DEFAULT_HASH_SEED)
}

pub fn hash64_seeded(value: &Bson, seed: i32) -> i64 {
    let mut h = Md5::new();
    h.update(seed.to_le_bytes());
    hash_into(&mut h, value);
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

/// MongoDB's `canonicalizeBSONType` numbering (not the keystring's type bytes).
fn canonical_type(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
        Bson::Null => 5,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

/// `BSONElement::safeNumberLongForHash`: truncation toward zero, NaN as 0, saturating.
fn number_for_hash(f: f64) -> i64 {
    if f.is_nan() {
        0
    } else {
        // `as` saturates at i64::MIN/MAX, which is MongoDB's behaviour for out-of-range doubles.
        f as i64
    }
}

/// A string as BSON stores it: bytes then NUL.
fn add_cstr(h: &mut Md5, s: &str) {
    h.update(s.as_bytes());
    h.update([0u8]);
}

fn hash_into(h: &mut Md5, value: &Bson) {
    h.update(canonical_type(value).to_le_bytes());
    match value {
        Bson::MinKey | Bson::MaxKey | Bson::Undefined | Bson::Null => {}
        Bson::Int32(i) => h.update(i64::from(*i).to_le_bytes()),
        Bson::Int64(i) => h.update(i.to_le_bytes()),
        Bson::Double(f) => h.update(number_for_hash(*f).to_le_bytes()),
        Bson::Decimal128(d) => {
            let f = d.to_string().parse::<f64>().unwrap_or(f64::NAN);
            h.update(number_for_hash(f).to_le_bytes())
        }
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => {
            // BSON's value bytes: i32 length (NUL included), bytes, NUL.
            let len = i32::try_from(s.len() + 1).unwrap_or(i32::MAX);
            h.update(len.to_le_bytes());
            add_cstr(h, s)
        }
        Bson::Boolean(b) => h.update([u8::from(*b)]),
        Bson::ObjectId(oid) => h.update(oid.bytes()),
        Bson::DateTime(d) => h.update(d.timestamp_millis().to_le_bytes()),
        Bson::Timestamp(ts) => h.update(((u64::from(ts.time) << 32) | u64::from(ts.increment)).to_le_bytes()),
        Bson::Binary(b) => {
            // BSON's value bytes: i32 length, subtype, data.
            let len = i32::try_from(b.bytes.len()).unwrap_or(i32::MAX);
            h.update(len.to_le_bytes());
            h.update([u8::from(b.subtype)]);
            h.update(&b.bytes);
        }
        Bson::RegularExpression(r) => {
            add_cstr(h, r.pattern.as_str());
            add_cstr(h, r.options.as_str());
        }
        Bson::Document(d) => {
            for (k, v) in d {
                add_cstr(h, k);
                hash_into(h, v);
            }
        }
        Bson::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                add_cstr(h, &i.to_string());
                hash_into(h, v);
            }
        }
        Bson::DbPointer(_) | Bson::JavaScriptCodeWithScope(_) => hash_raw_value(h, value),
    }
}

/// The element's raw BSON value bytes (types whose parts the `bson` crate does not expose).
fn hash_raw_value(h: &mut Md5, value: &Bson) {
    let mut doc = bson::Document::new();
    doc.insert("", value.clone());
    if let Ok(raw) = bson::RawDocumentBuf::try_from(&doc) {
        // Layout: i32 doc length, type byte, "" NUL, value..., final NUL.
        let bytes = raw.as_bytes();
        if bytes.len() > 7 {
            h.update(&bytes[6..bytes.len() - 1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{Binary, Bson, oid::ObjectId, spec::BinarySubtype};

    use super::hash64;

    #[test]
    fn numbers_hash_as_truncated_longs() {
        for (v, want) in [
            (Bson::Int32(42), -944302157085130861),
            (Bson::Double(42.123), -944302157085130861),
            (Bson::Int64(42), -944302157085130861),
            (Bson::Int32(0), 4854801880128277513),
            (Bson::Double(0.456), 4854801880128277513),
            (Bson::Double(f64::NAN), 4854801880128277513),
            (Bson::Int32(1), 5902408780260971510),
            (Bson::Double(1.987), 5902408780260971510),
            (Bson::Int64(1), 5902408780260971510),
            (Bson::Int32(-1), 1140205862565771219),
            (Bson::Double(-1.789), 1140205862565771219),
            (Bson::Int32(i32::MIN), 6165898260261354870),
            (Bson::Double(f64::from(i32::MIN)), 6165898260261354870),
            (Bson::Int32(i32::MAX), 1143184177162245883),
            (Bson::Double(f64::MAX), 921523596458303250),
            (Bson::Int64(i64::MAX), 921523596458303250),
            (Bson::Double(-f64::MAX), 4532067210535695462),
            (Bson::Int64(i64::MIN), 4532067210535695462),
        ] {
            assert_eq!(hash64(&v), want, "{v:?}");
        }
    }

    #[test]
    fn other_types() {
        let bytes = vec![0u8, 1, 2, 3, 4, 6];
        let uuid: Vec<u8> = (0u8..16).collect();
        for (v, want) in [
            (Bson::MinKey, 7961148599568647290),
            (Bson::MaxKey, 5504842513779440750),
            (Bson::Undefined, 40158834000849533),
            (Bson::String("abc".into()), 8478485326885698097),
            (Bson::Symbol("abc".into()), 8478485326885698097),
            (Bson::String(String::new()), 2049396243249673340),
            (Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: bytes.clone() }), 7252465090394235301),
            (Bson::Binary(Binary { subtype: BinarySubtype::UserDefined(0x80), bytes }), 5736670452907618262),
            (Bson::Binary(Binary { subtype: BinarySubtype::Uuid, bytes: uuid }), 6084661258071355978),
            (Bson::ObjectId(oid("010203040506070809101112")), -5588663249627035708),
            (Bson::ObjectId(oid("000000000000000000000000")), -4293118519463489418),
            (Bson::Boolean(true), 6405873908747105701),
            (Bson::Boolean(false), 6289544573401934092),
            (Bson::DateTime(bson::DateTime::from_millis(0x5566778811223344)), 4476222765095560467),
            (Bson::DateTime(bson::DateTime::from_millis(0)), -1178696894582842035),
            (Bson::RegularExpression(regex("mongodb", "")), -7275792090268217043),
            (Bson::RegularExpression(regex(".*", "i")), 7095855029187981886),
            (Bson::JavaScriptCode("func f() { return 1; }".into()), 6861638109178014270),
        ] {
            assert_eq!(hash64(&v), want, "{v:?}");
        }
    }

    fn regex(pattern: &str, options: &str) -> bson::Regex {
        bson::Regex {
            pattern: pattern.try_into().expect("no NUL in the test's pattern"),
            options: options.try_into().expect("no NUL in the test's options"),
        }
    }

    fn oid(hex: &str) -> ObjectId {
        ObjectId::parse_str(hex).expect("valid hex in the test")
    }
}
