//! The shard-version decision, without I/O: given what a router sent and what this shard's cached
//! metadata says, accept the request, refresh the metadata and compare again, or answer
//! StaleConfig (13388). [`super::ShardingState::check`] runs it, refreshes at most once, and
//! turns a final mismatch into [`ShardingError::StaleConfig`].
//!
//! The rules follow MongoDB's placement versions (docs/architecture.md, "Config service"): the generation (epoch and
//! timestamp) must match; within a generation the major must match, and minor differences (splits)
//! are compatible. A router that is *newer* than the shard makes the shard refresh; a router that
//! is older gets StaleConfig and refreshes itself.
//!
//! ```text
//!  received \ shard   unknown    unsharded     sharded (same gen)         sharded (other gen)
//!  unsharded          Refresh    Accept        Refresh                    Refresh
//!  sharded            Refresh    Refresh       major =: Accept             ts newer: Refresh
//!                                              major >: Refresh            else: Stale
//!                                              major <: Stale
//! ```
//! "Refresh" becomes "Stale" when the metadata was just refreshed.

use shoal_proto::catalog::PlacementVersion;
use shoal_proto::shard::ShardVersion;
use shoal_proto::stale_config::CollectionVersion;

use super::error::ShardingError;

/// What the shard's cache says about a namespace, as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// Never loaded (or forgotten).
    Unknown,
    Unsharded,
    /// Sharded; this shard's version (`0|0` if it owns no chunk).
    Sharded(PlacementVersion),
}

/// A router's shard version: `None` when it believes the collection is unsharded (empty epoch).
pub type Received = Option<PlacementVersion>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    /// The router may know more than this shard: refresh, then decide again.
    Refresh,
    /// The router is behind (or the shard still disagrees after refreshing).
    Stale,
}

/// Parses the wire form ([`CollectionVersion::from_wire`]): a malformed epoch is bad input.
pub fn received(v: &ShardVersion) -> Result<Received, ShardingError> {
    let v = CollectionVersion::from_wire(v).map_err(|e| ShardingError::BadShardVersion(e.to_string()))?;
    Ok(v.placement().copied())
}

/// The wire form of a placement version (what routers send).
pub fn to_wire(v: Option<&PlacementVersion>) -> ShardVersion {
    CollectionVersion::from(v.copied()).to_wire()
}

/// The decision. `just_refreshed`: the shard's metadata was loaded for this very request, so a
/// disagreement that would ask for a refresh is final.
pub fn decide(received: &Received, known: &Known, just_refreshed: bool) -> Decision {
    let d = match (received, known) {
        (_, Known::Unknown) => Decision::Refresh,
        (None, Known::Unsharded) => Decision::Accept,
        // Either side may be behind (sharded since / dropped since): only the catalog can tell.
        (None, Known::Sharded(_)) | (Some(_), Known::Unsharded) => Decision::Refresh,
        (Some(r), Known::Sharded(w)) => {
            if r.epoch == w.epoch && r.timestamp == w.timestamp {
                match r.version.major.cmp(&w.version.major) {
                    std::cmp::Ordering::Equal => Decision::Accept,
                    std::cmp::Ordering::Greater => Decision::Refresh,
                    std::cmp::Ordering::Less => Decision::Stale,
                }
            } else if r.timestamp > w.timestamp {
                Decision::Refresh
            } else {
                Decision::Stale
            }
        }
    };
    if d == Decision::Refresh && just_refreshed { Decision::Stale } else { d }
}

#[cfg(test)]
mod tests {
    use shoal_proto::catalog::{ChunkVersion, Epoch, Timestamp};

    use super::*;

    fn pv(epoch: u8, ts: u32, major: u32, minor: u32) -> PlacementVersion {
        PlacementVersion {
            epoch: Epoch([epoch; 12]),
            timestamp: Timestamp { secs: ts, inc: 1 },
            version: ChunkVersion::new(major, minor),
        }
    }

    #[test]
    fn unknown_metadata_is_loaded_first() {
        assert_eq!(decide(&None, &Known::Unknown, false), Decision::Refresh);
        assert_eq!(decide(&Some(pv(1, 1, 1, 0)), &Known::Unknown, false), Decision::Refresh);
        assert_eq!(decide(&None, &Known::Unknown, true), Decision::Stale);
    }

    #[test]
    fn unsharded_on_both_sides_is_accepted() {
        assert_eq!(decide(&None, &Known::Unsharded, false), Decision::Accept);
        assert_eq!(decide(&None, &Known::Unsharded, true), Decision::Accept);
    }

    #[test]
    fn sharded_versus_unsharded_refreshes_then_is_stale() {
        let w = Known::Sharded(pv(1, 1, 1, 0));
        assert_eq!(decide(&None, &w, false), Decision::Refresh);
        assert_eq!(decide(&None, &w, true), Decision::Stale);
        assert_eq!(decide(&Some(pv(1, 1, 1, 0)), &Known::Unsharded, false), Decision::Refresh);
        assert_eq!(decide(&Some(pv(1, 1, 1, 0)), &Known::Unsharded, true), Decision::Stale);
    }

    #[test]
    fn same_generation_compares_majors_only() {
        let w = Known::Sharded(pv(1, 1, 3, 2));
        assert_eq!(decide(&Some(pv(1, 1, 3, 2)), &w, false), Decision::Accept);
        // Splits only change minors: compatible either way.
        assert_eq!(decide(&Some(pv(1, 1, 3, 0)), &w, false), Decision::Accept);
        assert_eq!(decide(&Some(pv(1, 1, 3, 7)), &w, true), Decision::Accept);
        // Router newer: the shard refreshes, and if still behind, says so.
        assert_eq!(decide(&Some(pv(1, 1, 4, 0)), &w, false), Decision::Refresh);
        assert_eq!(decide(&Some(pv(1, 1, 4, 0)), &w, true), Decision::Stale);
        // Router older: stale at once, no refresh.
        assert_eq!(decide(&Some(pv(1, 1, 2, 9)), &w, false), Decision::Stale);
    }

    #[test]
    fn a_shard_owning_nothing_has_version_zero() {
        let w = Known::Sharded(pv(1, 1, 0, 0));
        assert_eq!(decide(&Some(pv(1, 1, 0, 0)), &w, false), Decision::Accept);
        assert_eq!(decide(&Some(pv(1, 1, 2, 0)), &w, false), Decision::Refresh);
    }

    #[test]
    fn other_generations_compare_timestamps() {
        let w = Known::Sharded(pv(1, 10, 3, 0));
        assert_eq!(decide(&Some(pv(2, 11, 1, 0)), &w, false), Decision::Refresh);
        assert_eq!(decide(&Some(pv(2, 11, 1, 0)), &w, true), Decision::Stale);
        assert_eq!(decide(&Some(pv(2, 9, 5, 0)), &w, false), Decision::Stale);
        // Same timestamp, other epoch: not the same collection generation.
        assert_eq!(decide(&Some(pv(2, 10, 3, 0)), &w, false), Decision::Stale);
    }

    #[test]
    fn wire_form_round_trips_and_rejects_bad_epochs() {
        let p = pv(7, 5, 2, 1);
        assert_eq!(received(&to_wire(Some(&p))).unwrap(), Some(p));
        assert_eq!(received(&to_wire(None)).unwrap(), None);
        let bad = ShardVersion { epoch: vec![1, 2, 3].into(), ..Default::default() };
        assert!(matches!(received(&bad), Err(ShardingError::BadShardVersion(_))));
    }
}
