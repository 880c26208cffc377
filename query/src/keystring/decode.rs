//! Decoding keystrings back into values, for showing chunk and zone bounds (`config.chunks.min`)
//! as the shard-key values they stand for.
//!
//! Invariant (proptest in `query/tests/keystring_decode.rs`): `encode(decode(b)) == b` for every
//! `b` produced by [`encode`](super::encode) from a supported value. Equal numbers share one
//! encoding, so the type comes back canonical: an integer as Int32 (or Int64 when it needs the
//! range), any other number as the Double it equals, else as a Decimal128. Regexes, DBPointers
//! and code with scope are not decoded (no shard key holds them), nor integers of more than 127
//! significant bits (huge Decimal128s such as 9E+40): they give [`DecodeError`].

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DateTime, Document, Timestamp, oid::ObjectId};

use super::{
    END, TYPE_ARRAY, TYPE_BINARY, TYPE_CODE, TYPE_DATE, TYPE_FALSE, TYPE_MAX_KEY, TYPE_MIN_KEY, TYPE_NULL, TYPE_OBJECT,
    TYPE_OBJECT_ID, TYPE_STRING, TYPE_TIMESTAMP, TYPE_TRUE, TYPE_UNDEFINED, number,
};

/// Why bytes could not be decoded: truncated, malformed, or of a type this decoder does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode key bytes at offset {offset}: {reason}")]
pub struct DecodeError {
    pub offset: usize,
    pub reason: &'static str,
}

/// Reads bytes, each XORed with `mask` (0xFF inside a descending field or a negative number).
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    pub(super) mask: u8,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0, mask: 0 }
    }

    pub(super) fn error(&self, reason: &'static str) -> DecodeError {
        DecodeError { offset: self.pos, reason }
    }

    pub(super) fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.error("truncated"))?;
        self.pos += 1;
        Ok(b ^ self.mask)
    }

    fn peek(&self) -> Result<u8, DecodeError> {
        self.bytes.get(self.pos).map(|b| b ^ self.mask).ok_or_else(|| self.error("truncated"))
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        for b in &mut out {
            *b = self.byte()?;
        }
        Ok(out)
    }

    fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

/// The value `bytes` encode; all of `bytes` must be one value.
pub fn decode(bytes: &[u8]) -> Result<Bson, DecodeError> {
    let mut r = Reader::new(bytes);
    let v = value(&mut r)?;
    if !r.done() {
        return Err(r.error("trailing bytes after the value"));
    }
    Ok(v)
}

/// The values of a compound key written by [`encode_compound`](super::encode_compound) with the
/// same `directions` (missing means ascending); `count` values must use up all of `bytes`.
pub fn decode_compound(bytes: &[u8], count: usize, directions: &[bool]) -> Result<Vec<Bson>, DecodeError> {
    let mut r = Reader::new(bytes);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        r.mask = if directions.get(i).copied().unwrap_or(true) { 0 } else { 0xFF };
        out.push(value(&mut r)?);
    }
    if !r.done() {
        return Err(r.error("trailing bytes after the last key field"));
    }
    Ok(out)
}

fn value(r: &mut Reader<'_>) -> Result<Bson, DecodeError> {
    let ty = r.peek()?;
    if number::is_number_type(ty) {
        let (start, mask) = (r.pos, r.mask);
        let v = number::decode_number(r)?;
        // A number read back must be the one written: the type chosen may not hold it exactly.
        let written = r.bytes[start..r.pos].iter().map(|b| b ^ mask);
        if !super::encode(&v).into_iter().eq(written) {
            return Err(DecodeError { offset: start, reason: "a number no BSON type holds exactly" });
        }
        return Ok(v);
    }
    r.byte()?;
    Ok(match ty {
        TYPE_MIN_KEY => Bson::MinKey,
        TYPE_UNDEFINED => Bson::Undefined,
        TYPE_NULL => Bson::Null,
        TYPE_MAX_KEY => Bson::MaxKey,
        TYPE_FALSE => Bson::Boolean(false),
        TYPE_TRUE => Bson::Boolean(true),
        TYPE_STRING => Bson::String(string(r)?),
        TYPE_CODE => Bson::JavaScriptCode(string(r)?),
        TYPE_OBJECT => Bson::Document(object_body(r)?),
        TYPE_ARRAY => {
            let mut items = Vec::new();
            while r.peek()? != END {
                items.push(value(r)?);
            }
            r.byte()?;
            Bson::Array(items)
        }
        TYPE_BINARY => {
            let len = length(r)?;
            let subtype = BinarySubtype::from(r.byte()?);
            let mut bytes = Vec::with_capacity(len.min(r.bytes.len()));
            for _ in 0..len {
                bytes.push(r.byte()?);
            }
            Bson::Binary(Binary { subtype, bytes })
        }
        TYPE_OBJECT_ID => Bson::ObjectId(ObjectId::from_bytes(r.array()?)),
        TYPE_DATE => {
            let flipped = u64::from_be_bytes(r.array()?) ^ (1u64 << 63);
            Bson::DateTime(DateTime::from_millis(flipped as i64))
        }
        TYPE_TIMESTAMP => {
            let time = u32::from_be_bytes(r.array()?);
            let increment = u32::from_be_bytes(r.array()?);
            Bson::Timestamp(Timestamp { time, increment })
        }
        _ => return Err(r.error("a type the decoder does not read (regex, DBPointer, code with scope) or no type")),
    })
}

fn object_body(r: &mut Reader<'_>) -> Result<Document, DecodeError> {
    let mut d = Document::new();
    while r.byte()? != END {
        let name = string(r)?;
        let v = value(r)?;
        d.insert(name, v);
    }
    Ok(d)
}

/// Escaped bytes up to the 0x00 terminator, as UTF-8.
fn string(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let mut out = Vec::new();
    loop {
        match r.byte()? {
            END => break,
            1 => match r.byte()? {
                1 => out.push(0),
                2 => out.push(1),
                _ => return Err(r.error("bad escape in a string")),
            },
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| r.error("a string that is not UTF-8"))
}

fn length(r: &mut Reader<'_>) -> Result<usize, DecodeError> {
    match r.byte()? {
        0xFF => usize::try_from(u64::from_be_bytes(r.array()?)).map_err(|_| r.error("binary length overflows")),
        n => Ok(usize::from(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{encode, encode_compound};
    use super::*;

    #[test]
    fn shard_key_values_come_back() {
        for v in [
            Bson::Int32(-7),
            Bson::Int64(1 << 40),
            Bson::Double(2.5),
            Bson::String("user\u{0}42".into()),
            Bson::MinKey,
            Bson::MaxKey,
            Bson::ObjectId(ObjectId::from_bytes([7; 12])),
            Bson::Document(bson::doc! { "a": 1, "b": [true, null] }),
        ] {
            assert_eq!(decode(&encode(&v)), Ok(v.clone()), "{v:?}");
        }
        assert_eq!(decode(&encode(&Bson::Int64(5))), Ok(Bson::Int32(5)));
        assert_eq!(decode(&encode(&Bson::Double(3.0))), Ok(Bson::Int32(3)));
    }

    #[test]
    fn compound_keys_split_per_field() {
        let (a, b) = (Bson::String("x".into()), Bson::Int32(-3));
        let bytes = encode_compound(&[&a, &b], &[true, false]);
        assert_eq!(decode_compound(&bytes, 2, &[true, false]), Ok(vec![a, b]));
        assert!(decode_compound(&bytes, 1, &[true]).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [&[][..], &[0x3C, b'a'], &[0x02], &[0x22, 0x80, 0x03], &[0x5A, 0xFF, 1, 2]] {
            assert!(decode(bytes).is_err(), "{bytes:?}");
        }
    }
}
