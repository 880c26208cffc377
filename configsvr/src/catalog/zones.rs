//! Zones: named sets of shards (`AddShardToZone`, `RemoveShardFromZone`) and the key ranges of
//! a namespace assigned to them (`UpdateZoneKeyRange`). A zone exists while some shard is in it;
//! the shard list is the single source of truth, [`ClusterCatalog::zones`] derives the zone → shards map.
//!
//! Invariants: a namespace's zone ranges are sorted by `min`, non-empty (`min < max`) and do not
//! overlap; every range names a zone that some shard belongs to.

use std::collections::{BTreeMap, BTreeSet};

use shoal_proto::Namespace;

use super::CatalogError;
use super::Reply;
use super::changelog::LogDraft;
use super::{ChunkBound, ShardId, ZoneRange};
use super::{ClusterCatalog, Outcome};

/// Zones one shard may belong to.
pub const ZONES_PER_SHARD_MAX: usize = 1024;
/// Zone ranges one namespace may have.
pub const ZONE_RANGES_PER_NAMESPACE_MAX: usize = 10_000;
/// Longest zone name.
pub const ZONE_NAME_BYTES_MAX: usize = 256;

impl ClusterCatalog {
    /// Each zone and the shards in it.
    pub fn zones(&self) -> BTreeMap<String, BTreeSet<ShardId>> {
        let mut zones: BTreeMap<String, BTreeSet<ShardId>> = BTreeMap::new();
        for shard in self.shards.values() {
            for zone in &shard.zones {
                zones.entry(zone.clone()).or_default().insert(shard.id.clone());
            }
        }
        zones
    }

    fn zone_exists(&self, zone: &str) -> bool {
        self.shards.values().any(|s| s.zones.contains(zone))
    }

    /// Some namespace with a range in `zone`.
    pub(super) fn namespace_using_zone(&self, zone: &str) -> Option<String> {
        self.zone_ranges.iter().find(|(_, ranges)| ranges.iter().any(|r| r.zone == zone)).map(|(ns, _)| ns.clone())
    }

    pub(super) fn add_shard_to_zone(&mut self, id: &str, zone: &str) -> Result<Outcome, CatalogError> {
        if zone.is_empty() || zone.len() > ZONE_NAME_BYTES_MAX {
            return Err(CatalogError::bad_value("zone name", format!("must be 1..={ZONE_NAME_BYTES_MAX} bytes")));
        }
        let Some(shard) = self.shards.get_mut(id) else {
            return Err(CatalogError::ShardNotFound { shard: id.to_owned() });
        };
        if shard.zones.contains(zone) {
            return Ok(Outcome::unchanged(Reply::Done));
        }
        if shard.zones.len() >= ZONES_PER_SHARD_MAX {
            return Err(CatalogError::limit("zones per shard", ZONES_PER_SHARD_MAX));
        }
        shard.zones.insert(zone.to_owned());
        Ok(Outcome::logged(Reply::Done, LogDraft::new("addShardToZone", id).with("zone", zone)))
    }

    pub(super) fn remove_shard_from_zone(&mut self, id: &str, zone: &str) -> Result<Outcome, CatalogError> {
        let Some(shard) = self.shards.get(id) else {
            return Err(CatalogError::ShardNotFound { shard: id.to_owned() });
        };
        if !shard.zones.contains(zone) {
            if self.zone_exists(zone) {
                return Ok(Outcome::unchanged(Reply::Done));
            }
            return Err(CatalogError::ZoneNotFound { zone: zone.to_owned() });
        }
        let last_holder = !self.shards.values().any(|s| s.id != id && s.zones.contains(zone));
        if let (true, Some(ns)) = (last_holder, self.namespace_using_zone(zone)) {
            return Err(CatalogError::ZoneStillInUse { zone: zone.to_owned(), ns });
        }
        if let Some(s) = self.shards.get_mut(id) {
            s.zones.remove(zone);
        }
        Ok(Outcome::logged(Reply::Done, LogDraft::new("removeShardFromZone", id).with("zone", zone)))
    }

    pub(super) fn update_zone_key_range(
        &mut self,
        ns: &str,
        min: &ChunkBound,
        max: &ChunkBound,
        zone: Option<&str>,
    ) -> Result<Outcome, CatalogError> {
        if Namespace::parse(ns).is_err() {
            return Err(CatalogError::InvalidNamespace { ns: ns.to_owned() });
        }
        if min >= max {
            return Err(CatalogError::bad_value("zone range", format!("min {min} is not below max {max}")));
        }
        let ranges = self.zone_ranges.get(ns).map_or(&[][..], Vec::as_slice);
        let exact = ranges.iter().position(|r| r.min == *min && r.max == *max);
        let Some(zone) = zone else {
            // Removal matches the range exactly, as MongoDB's removeRangeFromZone does.
            let Some(i) = exact else { return Ok(Outcome::unchanged(Reply::Done)) };
            let log = LogDraft::new("removeRangeFromZone", ns).with("min", min.clone()).with("max", max.clone());
            if let Some(list) = self.zone_ranges.get_mut(ns) {
                list.remove(i);
                if list.is_empty() {
                    self.zone_ranges.remove(ns);
                }
            }
            return Ok(Outcome::logged(Reply::Done, log));
        };
        if !self.zone_exists(zone) {
            return Err(CatalogError::ZoneNotFound { zone: zone.to_owned() });
        }
        if let Some(i) = exact
            && ranges[i].zone == zone
        {
            return Ok(Outcome::unchanged(Reply::Done));
        }
        if let Some(r) = ranges.iter().find(|r| r.min < *max && *min < r.max) {
            return Err(CatalogError::RangeOverlap { ns: ns.to_owned(), existing_zone: r.zone.clone() });
        }
        if ranges.len() >= ZONE_RANGES_PER_NAMESPACE_MAX {
            return Err(CatalogError::limit("zone ranges per namespace", ZONE_RANGES_PER_NAMESPACE_MAX));
        }
        let at = ranges.partition_point(|r| r.min < *min);
        let range = ZoneRange { min: min.clone(), max: max.clone(), zone: zone.to_owned() };
        let log = LogDraft::new("updateZoneKeyRange", ns)
            .with("min", min.clone())
            .with("max", max.clone())
            .with("zone", zone);
        self.zone_ranges.entry(ns.to_owned()).or_default().insert(at, range);
        Ok(Outcome::logged(Reply::Done, log))
    }
}
