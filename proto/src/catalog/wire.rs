//! The encoding of catalog values inside the config service's client API (`config.proto`'s
//! `QueryReply.answers`): the contract between the config servers and every process that reads
//! the catalog, owned here, apart from the Raft log's and snapshots' encoding (configsvr's codec),
//! so neither can change the other by accident.
//!
//! Format: `[TAG, VERSION]`, then the value in MessagePack with named struct fields (a field added
//! with `#[serde(default)]` needs no new version; removing or retyping one does). Catalog values
//! hold BSON chunk bounds and nested maps, so they travel as this self-describing encoding of the
//! types in [`crate::catalog`] rather than as a protobuf mirror of each; the requests, the reply
//! envelope and its errors are protobuf.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// First byte of every encoded answer ("CA"talog answer).
pub const TAG: u8 = 0xCA;
/// The format [`encode`] writes.
pub const VERSION: u8 = 1;

#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {what}: {detail}")]
pub struct WireError {
    op: &'static str,
    what: &'static str,
    detail: String,
}

impl WireError {
    fn new<T: ?Sized>(op: &'static str, detail: impl ToString) -> Self {
        Self { op, what: std::any::type_name::<T>(), detail: detail.to_string() }
    }
}

pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&[TAG, VERSION]);
    rmp_serde::encode::write_named(&mut out, value).map_err(|e| WireError::new::<T>("encode", e))?;
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    match bytes {
        [TAG, VERSION, body @ ..] => rmp_serde::from_slice(body).map_err(|e| WireError::new::<T>("decode", e)),
        [TAG, other, ..] => Err(WireError::new::<T>("decode", format!("unknown format version {other}"))),
        _ => Err(WireError::new::<T>("decode", "not a catalog answer (bad header)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ChunkVersion, Database, DatabaseVersion, Settings, Timestamp};

    fn database() -> Database {
        Database {
            name: "app".into(),
            primary: "shard0".into(),
            version: DatabaseVersion {
                uuid: uuid::Uuid::from_u128(7),
                timestamp: Timestamp { secs: 5, inc: 1 },
                last_mod: 3,
            },
        }
    }

    #[test]
    fn values_round_trip() {
        let db = Some(database());
        assert_eq!(decode::<Option<Database>>(&encode(&db).unwrap()).unwrap(), db);
        let settings = Settings::default();
        assert_eq!(decode::<Settings>(&encode(&settings).unwrap()).unwrap(), settings);
        let none: Option<Database> = None;
        assert_eq!(decode::<Option<Database>>(&encode(&none).unwrap()).unwrap(), None);
    }

    /// The bytes of one value are pinned: a change to them is a change of the contract between
    /// processes, which needs a new [`VERSION`].
    #[test]
    fn golden_bytes() {
        let bytes = encode(&ChunkVersion { major: 2, minor: 1 }).unwrap();
        assert_eq!(
            bytes,
            [0xCA, 1, 0x82, 0xA5, b'm', b'a', b'j', b'o', b'r', 2, 0xA5, b'm', b'i', b'n', b'o', b'r', 1]
        );
    }

    #[test]
    fn bad_headers_are_errors() {
        assert!(decode::<Settings>(&[]).is_err());
        assert!(decode::<Settings>(&[0xCA]).is_err());
        let err = decode::<Settings>(&[0xCA, 9, 0x80]).unwrap_err();
        assert!(err.to_string().contains("unknown format version 9"), "{err}");
        assert!(decode::<Settings>(b"{}").is_err());
    }
}
