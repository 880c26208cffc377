//! The one serialization format of the config service: openraft messages on the wire, log entries
//! and snapshots on disk, catalog commands and responses in the client API.
//!
//! JSON (serde_json) because it handles every serde shape the catalog and openraft use
//! (`deserialize_any`, untagged enums) and is readable in a hex dump. Switching to a binary format
//! is a change to this file plus a storage-format migration.

use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {what}: {source}")]
pub struct CodecError {
    op: &'static str,
    what: &'static str,
    #[source]
    source: serde_json::Error,
}

pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    serde_json::to_vec(value).map_err(|source| CodecError { op: "encode", what: std::any::type_name::<T>(), source })
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    serde_json::from_slice(bytes).map_err(|source| CodecError {
        op: "decode",
        what: std::any::type_name::<T>(),
        source,
    })
}

impl From<CodecError> for std::io::Error {
    fn from(e: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}
