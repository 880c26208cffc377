//! Full validation of received BSON, before anything else looks at it.
//!
//! Owns: [`validate`], the one place where untrusted bytes become a `&RawDocument` the rest of the
//! router may iterate without meeting a malformed element half-way through a command.
//!
//! Invariants after `validate(bytes)` returned `Ok(doc)`:
//! - `doc` spans all of `bytes`; every length prefix (document, array, string, binary, code with
//!   scope) is consistent and every (sub)document ends in NUL; every element type is known; every
//!   string and key is UTF-8 (bson's raw iterator checks all of this as it decodes values).
//! - Nesting depth is at most [`NESTING_DEPTH_MAX`] and the document is at most
//!   [`DOCUMENT_SIZE_MAX_BYTES`].
//!
//! The walk keeps its own stack instead of recursing: a 48 MB message can nest millions of empty
//! documents, which would overflow a task's stack long before the depth check fired if we
//! recursed, and a stack overflow aborts the whole process, not just one connection.

use bson::RawDocument;
use bson::raw::{RawBsonRef, RawIter};
use shoal_proto::limits::{COMMAND_OVERHEAD_BYTES, MAX_BSON_OBJECT_SIZE_BYTES};

use super::error::{WireError, WireResult};

/// Deepest nesting MongoDB accepts (`BSONDepth::kDefaultMaxAllowableDepth`); query code downstream
/// recurses over documents, so this also bounds its stack use.
pub const NESTING_DEPTH_MAX: usize = 200;

/// A document in a command may exceed `maxBsonObjectSize` by MongoDB's command overhead.
pub const DOCUMENT_SIZE_MAX_BYTES: usize = MAX_BSON_OBJECT_SIZE_BYTES + COMMAND_OVERHEAD_BYTES;

/// Validates `bytes` as exactly one well-formed BSON document (see the module invariants).
pub fn validate(bytes: &[u8]) -> WireResult<&RawDocument> {
    if bytes.len() > DOCUMENT_SIZE_MAX_BYTES {
        return Err(WireError::ObjectTooLarge { size: bytes.len(), max: DOCUMENT_SIZE_MAX_BYTES });
    }
    let doc = RawDocument::from_bytes(bytes).map_err(invalid)?;
    let mut stack: Vec<RawIter<'_>> = vec![doc.iter_elements()];
    while let Some(iter) = stack.last_mut() {
        let element = match iter.next() {
            None => {
                stack.pop();
                continue;
            }
            Some(element) => element.map_err(invalid)?,
        };
        let child = match element.value().map_err(invalid)? {
            RawBsonRef::Document(d) => d.iter_elements(),
            RawBsonRef::Array(a) => a.iter_elements(),
            RawBsonRef::JavaScriptCodeWithScope(c) => c.scope.iter_elements(),
            _ => continue,
        };
        if stack.len() >= NESTING_DEPTH_MAX {
            return Err(WireError::TooDeep(NESTING_DEPTH_MAX));
        }
        stack.push(child);
    }
    Ok(doc)
}

fn invalid(e: bson::error::Error) -> WireError {
    WireError::InvalidBson(format!("invalid BSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn accepts_well_formed_documents() {
        let doc = rawdoc! {
            "a": 1, "b": "x", "c": { "d": [1, 2, { "e": null }] }, "f": bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] },
        };
        assert!(validate(doc.as_bytes()).is_ok());
        assert!(validate(rawdoc! {}.as_bytes()).is_ok());
    }

    #[test]
    fn rejects_bad_lengths_and_terminators() {
        assert!(validate(b"").is_err());
        assert!(validate(b"\x05\0\0\0").is_err());
        assert!(validate(b"\x06\0\0\0\0").is_err(), "length prefix larger than the slice");
        assert!(validate(b"\x05\0\0\0\x01").is_err(), "no trailing NUL");
        // {a: "x"} with the string length one too long.
        let mut bytes = rawdoc! { "a": "x" }.into_bytes();
        bytes[7] = 3;
        assert!(matches!(validate(&bytes), Err(WireError::InvalidBson(_))));
    }

    #[test]
    fn rejects_malformed_nested_documents() {
        // {a: {b: 1}} with the inner element's type byte replaced by an unknown type.
        let mut bytes = rawdoc! { "a": { "b": 1 } }.into_bytes();
        let pos = bytes.iter().position(|&b| b == b'b').expect("key present") - 1;
        bytes[pos] = 0x7A;
        assert!(matches!(validate(&bytes), Err(WireError::InvalidBson(_))));
    }

    #[test]
    fn rejects_invalid_utf8() {
        let mut bytes = rawdoc! { "a": "xy" }.into_bytes();
        let pos = bytes.iter().position(|&b| b == b'x').expect("value present");
        bytes[pos] = 0xFF;
        assert!(matches!(validate(&bytes), Err(WireError::InvalidBson(_))));
    }

    #[test]
    fn depth_is_bounded_without_recursion() {
        // 100,000 nested empty documents {"": {"": ...}}: each level adds a 4-byte length, the
        // type byte, an empty key's NUL before its child and the document's NUL after it.
        let depth = 100_000usize;
        let mut bytes = Vec::with_capacity(depth * 7 + 5);
        for level in (1..=depth).rev() {
            bytes.extend_from_slice(&((5 + 7 * level) as i32).to_le_bytes());
            bytes.extend_from_slice(&[0x03, 0]);
        }
        bytes.extend_from_slice(&[5, 0, 0, 0, 0]);
        bytes.resize(bytes.len() + depth, 0);
        assert!(matches!(validate(&bytes), Err(WireError::TooDeep(_))));
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let seed = rand::random::<u64>();
        eprintln!("seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let base = rawdoc! { "insert": "c", "documents": [{ "_id": 1, "s": "abc" }], "$db": "d" }.into_bytes();
        for _ in 0..20_000 {
            let mut bytes = base.clone();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..bytes.len());
                bytes[i] = rng.random();
            }
            let _ = validate(&bytes);
        }
    }
}
