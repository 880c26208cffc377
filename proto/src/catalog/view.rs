//! [`ClusterCatalogView`]: named parts of the cluster catalog read at one version, the answer to
//! `config.proto`'s `view` query. It serves the readers that need more than one value, and all of them consistent:
//! the balancer's round, the router's `config` database and sharding status commands.
//!
//! A view holds only the parts it was asked for. Its accessors are those of the config service's
//! state machine, so a reader asks for what it reads; asking an accessor for a part the view does
//! not hold is a bug of the caller, caught by a debug assertion (and an empty answer in release).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::log::{BalancerRounds, ChangelogEntry, Lease};
use super::settings::Settings;
use super::types::{Collection, Database, Epoch, Shard, ShardId, ZoneRange};
use crate::config::CatalogPart;

/// A set of [`CatalogPart`]s.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parts(u32);

impl Parts {
    pub const ALL: Parts = Parts(u32::MAX);

    pub fn of(parts: &[CatalogPart]) -> Self {
        Parts(parts.iter().fold(0, |bits, p| bits | Self::bit(*p)))
    }

    /// The parts a `view` query names (unknown values, from a newer client, are ignored).
    pub fn from_wire(parts: &[i32]) -> Self {
        Parts(parts.iter().filter_map(|p| CatalogPart::try_from(*p).ok()).fold(0, |bits, p| bits | Self::bit(p)))
    }

    /// The parts as `ViewQuery.parts`.
    pub fn to_wire(self) -> Vec<i32> {
        ALL_PARTS.iter().filter(|p| self.has(**p)).map(|p| *p as i32).collect()
    }

    pub fn has(self, part: CatalogPart) -> bool {
        self.0 & Self::bit(part) != 0
    }

    fn bit(part: CatalogPart) -> u32 {
        match part {
            CatalogPart::Unspecified => 0,
            p => 1 << (p as i32),
        }
    }
}

const ALL_PARTS: [CatalogPart; 8] = [
    CatalogPart::Shards,
    CatalogPart::Databases,
    CatalogPart::Collections,
    CatalogPart::Zones,
    CatalogPart::Settings,
    CatalogPart::Leases,
    CatalogPart::Changelog,
    CatalogPart::Actionlog,
];

/// Named parts of the catalog at one version. Built by the config service
/// ([`ClusterCatalogView::new`] and the `with_*` setters, each of which marks its part as held).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterCatalogView {
    held: Parts,
    now_ms: u64,
    cluster_id: Option<Epoch>,
    balancer_rounds: BalancerRounds,
    shards: BTreeMap<ShardId, Shard>,
    databases: BTreeMap<String, Database>,
    collections: BTreeMap<String, Collection>,
    zone_ranges: BTreeMap<String, Vec<ZoneRange>>,
    settings: Settings,
    leases: BTreeMap<String, Lease>,
    changelog: Vec<ChangelogEntry>,
    actionlog: Vec<ChangelogEntry>,
}

impl ClusterCatalogView {
    /// A view holding no part yet: the catalog's clock (ms), identity and balancer round count.
    pub fn new(now_ms: u64, cluster_id: Option<Epoch>, balancer_rounds: BalancerRounds) -> Self {
        Self { now_ms, cluster_id, balancer_rounds, ..Self::default() }
    }

    fn hold(mut self, part: CatalogPart) -> Self {
        self.held = Parts(self.held.0 | Parts::bit(part));
        self
    }

    fn check(&self, part: CatalogPart) {
        debug_assert!(self.held.has(part), "a catalog view read {part:?} without asking for it");
    }

    pub fn with_shards(self, shards: BTreeMap<ShardId, Shard>) -> Self {
        Self { shards, ..self.hold(CatalogPart::Shards) }
    }

    pub fn with_databases(self, databases: BTreeMap<String, Database>) -> Self {
        Self { databases, ..self.hold(CatalogPart::Databases) }
    }

    pub fn with_collections(self, collections: BTreeMap<String, Collection>) -> Self {
        Self { collections, ..self.hold(CatalogPart::Collections) }
    }

    pub fn with_zone_ranges(self, zone_ranges: BTreeMap<String, Vec<ZoneRange>>) -> Self {
        Self { zone_ranges, ..self.hold(CatalogPart::Zones) }
    }

    pub fn with_settings(self, settings: Settings) -> Self {
        Self { settings, ..self.hold(CatalogPart::Settings) }
    }

    pub fn with_leases(self, leases: BTreeMap<String, Lease>) -> Self {
        Self { leases, ..self.hold(CatalogPart::Leases) }
    }

    /// Oldest first.
    pub fn with_changelog(self, changelog: Vec<ChangelogEntry>) -> Self {
        Self { changelog, ..self.hold(CatalogPart::Changelog) }
    }

    /// Oldest first.
    pub fn with_actionlog(self, actionlog: Vec<ChangelogEntry>) -> Self {
        Self { actionlog, ..self.hold(CatalogPart::Actionlog) }
    }

    /// The parts this view holds.
    pub fn held(&self) -> Parts {
        self.held
    }

    /// The catalog's clock when the view was read (ms since the epoch, never moving back).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The cluster's identity (`config.version.clusterId`), once set.
    pub fn cluster_id(&self) -> Option<Epoch> {
        self.cluster_id
    }

    pub fn balancer_rounds(&self) -> &BalancerRounds {
        &self.balancer_rounds
    }

    pub fn shards(&self) -> &BTreeMap<ShardId, Shard> {
        self.check(CatalogPart::Shards);
        &self.shards
    }

    pub fn shard(&self, id: &str) -> Option<&Shard> {
        self.shards().get(id)
    }

    pub fn databases(&self) -> &BTreeMap<String, Database> {
        self.check(CatalogPart::Databases);
        &self.databases
    }

    pub fn database(&self, name: &str) -> Option<&Database> {
        self.databases().get(name)
    }

    /// Sharded collections by `db.collection`, with their chunks.
    pub fn collections(&self) -> &BTreeMap<String, Collection> {
        self.check(CatalogPart::Collections);
        &self.collections
    }

    pub fn collection(&self, ns: &str) -> Option<&Collection> {
        self.collections().get(ns)
    }

    /// The zone ranges of `ns`, sorted by `min`.
    pub fn zone_ranges(&self, ns: &str) -> &[ZoneRange] {
        self.all_zone_ranges().get(ns).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn all_zone_ranges(&self) -> &BTreeMap<String, Vec<ZoneRange>> {
        self.check(CatalogPart::Zones);
        &self.zone_ranges
    }

    pub fn settings(&self) -> &Settings {
        self.check(CatalogPart::Settings);
        &self.settings
    }

    pub fn leases(&self) -> &BTreeMap<String, Lease> {
        self.check(CatalogPart::Leases);
        &self.leases
    }

    pub fn lease(&self, name: &str) -> Option<&Lease> {
        self.leases().get(name)
    }

    /// `config.changelog`, oldest first.
    pub fn changelog(&self) -> &[ChangelogEntry] {
        self.check(CatalogPart::Changelog);
        &self.changelog
    }

    /// `config.actionlog`, oldest first.
    pub fn actionlog(&self) -> &[ChangelogEntry] {
        self.check(CatalogPart::Actionlog);
        &self.actionlog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_through_the_wire() {
        let parts = Parts::of(&[CatalogPart::Shards, CatalogPart::Changelog]);
        assert!(parts.has(CatalogPart::Shards) && parts.has(CatalogPart::Changelog));
        assert!(!parts.has(CatalogPart::Collections));
        assert_eq!(Parts::from_wire(&parts.to_wire()), parts);
        // A part this version does not know is ignored, not an error.
        assert_eq!(Parts::from_wire(&[1, 99]), Parts::of(&[CatalogPart::Shards]));
        assert_eq!(Parts::from_wire(&Parts::ALL.to_wire()).to_wire().len(), ALL_PARTS.len());
    }

    #[test]
    fn setters_mark_their_part_as_held() {
        let view = ClusterCatalogView::new(5, None, BalancerRounds::default()).with_settings(Settings::default());
        assert_eq!(view.held(), Parts::of(&[CatalogPart::Settings]));
        assert_eq!(view.settings(), &Settings::default());
        assert_eq!(view.now_ms(), 5);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "without asking")]
    fn reading_a_part_not_asked_for_is_caught() {
        let view = ClusterCatalogView::new(0, None, BalancerRounds::default());
        let _ = view.shards();
    }

    #[test]
    fn a_view_round_trips_through_the_wire_encoding() {
        let view = ClusterCatalogView::new(7, Some(Epoch([3; 12])), BalancerRounds::default())
            .with_shards(BTreeMap::new())
            .with_changelog(Vec::new());
        let back: ClusterCatalogView =
            crate::catalog::wire::decode(&crate::catalog::wire::encode(&view).unwrap()).unwrap();
        assert_eq!(back, view);
    }
}
