//! The config service's serialization: openraft messages between config servers, log entries and
//! snapshots on disk, and (until the client API has its own messages) the catalog commands and
//! replies its clients exchange with it.
//!
//! Format: a two-byte header, [`TAG`] then a format version, followed by the value in MessagePack
//! (`rmp-serde`, structs as maps with field names, so `#[serde(default)]` fields can be added
//! without a new version). `0xC1` is the one byte MessagePack never uses and JSON never starts
//! with, so the header cannot be mistaken for a value of the format that came before.
//!
//! Earlier versions wrote plain JSON (serde_json); [`decode`] still reads it, so a data directory
//! or a snapshot written by them loads. Processes of the two versions cannot talk to each other
//! (an old one cannot read the new format): upgrade a cluster by restarting all of it.
//!
//! MessagePack rather than a non-self-describing format (postcard, bincode) because the catalog's
//! chunk maps and openraft's types are deserialized through `deserialize_any`-style visitors, and a
//! self-describing format keeps old entries readable when a field is added.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// First byte of every value this module writes.
pub const TAG: u8 = 0xC1;
/// The format [`encode`] writes: MessagePack with named struct fields.
pub const VERSION: u8 = 1;

#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {what}: {detail}")]
pub struct CodecError {
    op: &'static str,
    what: &'static str,
    detail: String,
}

impl CodecError {
    fn new<T: ?Sized>(op: &'static str, detail: impl ToString) -> Self {
        Self { op, what: std::any::type_name::<T>(), detail: detail.to_string() }
    }
}

pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&[TAG, VERSION]);
    rmp_serde::encode::write_named(&mut out, value).map_err(|e| CodecError::new::<T>("encode", e))?;
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match bytes {
        [TAG, VERSION, body @ ..] => rmp_serde::from_slice(body).map_err(|e| CodecError::new::<T>("decode", e)),
        [TAG, other, ..] => Err(CodecError::new::<T>("decode", format!("unknown format version {other}"))),
        [TAG] => Err(CodecError::new::<T>("decode", "truncated header")),
        // Written before the binary format: JSON.
        legacy => serde_json::from_slice(legacy).map_err(|e| CodecError::new::<T>("decode", e)),
    }
}

impl From<CodecError> for std::io::Error {
    fn from(e: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
