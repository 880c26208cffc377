//! StaleConfig (13388) as a value: what a shard tells a router whose shard version it refused, in
//! the shape of MongoDB's `StaleConfigInfo` (`ns`, `vReceived`, `vWanted`, `shardId`), so that the
//! router decides its refresh from versions and never from a message.
//!
//! ```text
//!  shard: version check fails ── StaleConfig ── to_wire ──> CommandError.stale_config (shard.proto)
//!  router: CommandError.stale_config ── from_wire ──> StaleConfig ── refresh decision
//!                                                             └── ns/vReceived/vWanted/shardId in
//!                                                                 the client's error document
//! ```
//!
//! Shard versions travel as `ShardVersion` messages, an empty epoch meaning "unsharded", as in
//! requests. Must not: decide anything (the shard's check and the router's cache do).

use std::fmt;

use crate::catalog::{ChunkVersion, Epoch, PlacementVersion, ShardId, Timestamp};
use crate::shard;

/// A collection's shard version as a router sends it or a shard has it: unsharded (MongoDB's
/// `UNSHARDED`), or the collection generation with the highest chunk version on that shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectionVersion {
    Unsharded,
    Sharded(PlacementVersion),
}

/// A version or StaleConfig that came over the wire malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("epoch of {0} bytes, expected 12")]
    EpochLength(usize),
    #[error("StaleConfig info without vReceived")]
    NoReceived,
}

impl CollectionVersion {
    /// The placement version, `None` when unsharded.
    pub fn placement(&self) -> Option<&PlacementVersion> {
        match self {
            CollectionVersion::Unsharded => None,
            CollectionVersion::Sharded(p) => Some(p),
        }
    }

    /// Parses the wire form. An empty epoch means unsharded; any other length than 12 bytes is
    /// refused rather than guessed at.
    pub fn from_wire(v: &shard::ShardVersion) -> Result<Self, WireError> {
        if v.epoch.is_empty() {
            return Ok(CollectionVersion::Unsharded);
        }
        let epoch: [u8; 12] = v.epoch[..].try_into().map_err(|_| WireError::EpochLength(v.epoch.len()))?;
        Ok(CollectionVersion::Sharded(PlacementVersion {
            epoch: Epoch(epoch),
            timestamp: Timestamp { secs: v.timestamp_secs, inc: v.timestamp_inc },
            version: ChunkVersion::new(v.major, v.minor),
        }))
    }

    pub fn to_wire(&self) -> shard::ShardVersion {
        match self {
            CollectionVersion::Unsharded => shard::ShardVersion::default(),
            CollectionVersion::Sharded(p) => shard::ShardVersion {
                epoch: p.epoch.0.to_vec().into(),
                timestamp_secs: p.timestamp.secs,
                timestamp_inc: p.timestamp.inc,
                major: p.version.major,
                minor: p.version.minor,
            },
        }
    }
}

impl From<Option<PlacementVersion>> for CollectionVersion {
    fn from(v: Option<PlacementVersion>) -> Self {
        v.map_or(CollectionVersion::Unsharded, CollectionVersion::Sharded)
    }
}

/// As MongoDB prints versions in messages: `1|3||<epoch>||Timestamp(s, i)`, or `UNSHARDED`.
impl fmt::Display for CollectionVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollectionVersion::Unsharded => f.write_str("UNSHARDED"),
            CollectionVersion::Sharded(p) => write!(f, "{}||{}||{}", p.version, p.epoch, p.timestamp),
        }
    }
}

/// A shard refused a request's shard version of `ns`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "version mismatch detected for {ns}: received {received}, wanted {}",
    wanted.as_ref().map_or_else(|| "unknown".to_owned(), ToString::to_string)
)]
pub struct StaleConfig {
    pub ns: String,
    /// What the router sent (`vReceived`).
    pub received: CollectionVersion,
    /// What this shard has (`vWanted`); `None` when it does not know.
    pub wanted: Option<CollectionVersion>,
    /// The shard that answered (`shardId`).
    pub shard: ShardId,
}

impl StaleConfig {
    pub fn to_wire(&self) -> shard::StaleConfigInfo {
        shard::StaleConfigInfo {
            ns: self.ns.clone(),
            v_received: Some(self.received.to_wire()),
            v_wanted: self.wanted.as_ref().map(CollectionVersion::to_wire),
            shard_id: self.shard.clone(),
        }
    }

    pub fn from_wire(info: &shard::StaleConfigInfo) -> Result<Self, WireError> {
        let received = info.v_received.as_ref().ok_or(WireError::NoReceived)?;
        Ok(Self {
            ns: info.ns.clone(),
            received: CollectionVersion::from_wire(received)?,
            wanted: info.v_wanted.as_ref().map(CollectionVersion::from_wire).transpose()?,
            shard: info.shard_id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn pv(epoch: u8, ts: u32, major: u32, minor: u32) -> PlacementVersion {
        PlacementVersion {
            epoch: Epoch([epoch; 12]),
            timestamp: Timestamp { secs: ts, inc: 1 },
            version: ChunkVersion::new(major, minor),
        }
    }

    /// Through the typed wire message and its protobuf bytes, as a reply travels.
    fn round_trip(s: &StaleConfig) -> StaleConfig {
        let e = shard::CommandError::stale_config(s);
        let bytes = e.encode_to_vec();
        let back = shard::CommandError::decode(bytes.as_slice()).unwrap();
        assert!(back.is(crate::ErrorCode::StaleConfig));
        assert_eq!(back.errmsg, s.to_string());
        StaleConfig::from_wire(&back.stale_config.unwrap()).unwrap()
    }

    #[test]
    fn every_kind_of_version_round_trips() {
        let cases = [
            (CollectionVersion::Sharded(pv(7, 5, 2, 1)), Some(CollectionVersion::Sharded(pv(7, 5, 3, 0)))),
            (CollectionVersion::Unsharded, Some(CollectionVersion::Sharded(pv(1, 1, 0, 0)))),
            (CollectionVersion::Sharded(pv(1, 1, 1, 0)), Some(CollectionVersion::Unsharded)),
            (CollectionVersion::Sharded(pv(2, 9, 4, 4)), None),
        ];
        for (received, wanted) in cases {
            let s = StaleConfig { ns: "db.c".into(), received, wanted, shard: "s1".into() };
            assert_eq!(round_trip(&s), s);
        }
    }

    #[test]
    fn malformed_wire_is_refused() {
        let bad = shard::ShardVersion { epoch: vec![1, 2, 3].into(), ..Default::default() };
        assert_eq!(CollectionVersion::from_wire(&bad), Err(WireError::EpochLength(3)));
        let mut info =
            StaleConfig { ns: "db.c".into(), received: CollectionVersion::Unsharded, wanted: None, shard: "s0".into() }
                .to_wire();
        info.v_wanted = Some(bad);
        assert_eq!(StaleConfig::from_wire(&info), Err(WireError::EpochLength(3)));
        info.v_received = None;
        assert_eq!(StaleConfig::from_wire(&info), Err(WireError::NoReceived));
    }

    #[test]
    fn messages_print_versions_as_mongodb_does() {
        let s = StaleConfig {
            ns: "db.c".into(),
            received: CollectionVersion::Unsharded,
            wanted: Some(CollectionVersion::Sharded(pv(7, 5, 2, 1))),
            shard: "s0".into(),
        };
        assert_eq!(
            s.to_string(),
            "version mismatch detected for db.c: received UNSHARDED, \
             wanted 2|1||070707070707070707070707||Timestamp(5, 1)"
        );
        assert!(StaleConfig { wanted: None, ..s }.to_string().ends_with("wanted unknown"));
    }

    #[test]
    fn other_errors_carry_no_stale_config() {
        assert!(shard::CommandError::new(crate::ErrorCode::StaleConfig, "no chunk").stale_config.is_none());
    }
}
