//! The cluster catalog's state machine, [`ClusterCatalog`] (named so: a shard's own list of its
//! collections is its `LocalCatalog`, a router's client of this one its `ClusterCatalogClient`): the cluster's shape (shards, databases, sharded collections and
//! their chunks, zones, settings, leases, replica-group terms, users and roles) and the one function that changes
//! it, [`ClusterCatalog::apply`]. Pure and I/O-free: the Raft layer feeds it committed log entries.
//!
//! ```text
//!   router / shard / balancer          config leader                  every replica
//!   ------------------------   propose(Command, now_ms)   -------->   ClusterCatalog::apply(cmd, now_ms)
//!        read versions V   -----------------------------------------> CAS on V: Ok(Reply)
//!                                                                      or Err(CatalogError), unchanged
//! ```
//!
//! Determinism: `apply` is a pure function of (catalog, command, now_ms). Everything random
//! (UUIDs, epochs) travels inside the command and `now_ms` must be the time stamped into the log
//! entry by the proposer, never the applying node's clock. The catalog's own clock only moves
//! forward (`max` of the entry times seen), so a leader with a slower clock cannot move time back.
//!
//! Invariants, checked after every change in debug builds and by the tests (`invariants.rs`):
//! - a refused command changes nothing; it is validated fully before anything is mutated;
//! - each sharded collection's chunks cover `Min..Max` without gap or overlap;
//! - chunk versions only grow: a range's version never falls below what it was, and every chunk
//!   a command creates gets a version above the collection version it replaces;
//! - fencing tokens only grow; the catalog version grows by one per effective change.

mod actionlog;
pub mod api;
mod changelog;
mod chunks;
pub mod invariants;
mod leases;
mod namespaces;
mod refine;
mod routing;
mod security;
mod settings;
mod shards;
mod zones;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use changelog::{CHANGELOG_ENTRIES_MAX, Changelog};
pub use invariants::InvariantViolation;
pub use leases::{LEASE_TTL_MS_MAX, LEASES_MAX, Leases};
// The values the catalog holds are the cluster's shared vocabulary, defined in `shoal_proto`.
pub use shoal_proto::catalog::*;

use changelog::LogDraft;

/// The whole catalog. Serialize it for a snapshot; compare two with `==`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterCatalog {
    /// Grows by one on every command that changed something; the watch stream publishes it.
    version: u64,
    clock: Clock,
    shards: BTreeMap<ShardId, Shard>,
    databases: BTreeMap<String, Database>,
    /// Sharded collections by `db.coll`. A dropped collection is removed, not kept as a tombstone:
    /// its epoch is gone, so stale requests for it get `NotSharded` or `StaleEpoch`.
    collections: BTreeMap<String, Collection>,
    /// Zone key ranges by namespace, sorted by `min`, non-overlapping.
    zone_ranges: BTreeMap<String, Vec<ZoneRange>>,
    settings: Settings,
    leases: Leases,
    changelog: Changelog,
    /// The balancer's rounds and decisions (`config.actionlog`), bounded like the changelog.
    #[serde(default)]
    actionlog: Changelog,
    #[serde(default)]
    balancer_rounds: BalancerRounds,
    /// The cluster's identity (`config.version.clusterId`), set once by the first `InitCluster`.
    #[serde(default)]
    cluster_id: Option<Epoch>,
    /// Users and user-defined roles, with their own version (`security.rs`).
    #[serde(default)]
    security: SecurityCatalog,
}

/// The catalog's notion of time: the latest log-entry time applied, and the last timestamp issued.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Clock {
    now_ms: u64,
    last_timestamp: Timestamp,
}

impl Clock {
    fn now(&self, entry_ms: u64) -> u64 {
        self.now_ms.max(entry_ms)
    }

    /// A timestamp strictly greater than every one issued before.
    fn next_timestamp(&mut self, now_ms: u64) -> Timestamp {
        let secs = u32::try_from(now_ms / 1000).unwrap_or(u32::MAX);
        let last = self.last_timestamp;
        let next = if secs > last.secs {
            Timestamp { secs, inc: 1 }
        } else {
            match last.inc.checked_add(1) {
                Some(inc) => Timestamp { secs: last.secs, inc },
                None => Timestamp { secs: last.secs.saturating_add(1), inc: 1 },
            }
        };
        self.last_timestamp = next;
        next
    }
}

/// What a handler did: the reply, and whether (and how) the catalog changed.
#[derive(Debug)]
pub(crate) struct Outcome {
    response: Reply,
    effect: Effect,
}

#[derive(Debug)]
enum Effect {
    /// A repeat of something already true: no version bump.
    Unchanged,
    /// Changed, but not worth a changelog entry (lease renewals every few seconds would flush
    /// the ring of the migrations it exists to show).
    Silent,
    Logged(LogDraft),
    /// Changed only by an entry in the action log (the balancer's own record).
    Acted(LogDraft),
}

impl Outcome {
    fn unchanged(response: Reply) -> Self {
        Self { response, effect: Effect::Unchanged }
    }
    fn silent(response: Reply) -> Self {
        Self { response, effect: Effect::Silent }
    }
    pub(crate) fn logged(response: Reply, log: LogDraft) -> Self {
        Self { response, effect: Effect::Logged(log) }
    }
    /// The same change, recorded in the action log instead of the changelog.
    pub(crate) fn into_action(self) -> Self {
        match self.effect {
            Effect::Logged(log) => Self { response: self.response, effect: Effect::Acted(log) },
            effect => Self { response: self.response, effect },
        }
    }
}

impl ClusterCatalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one committed command at log-entry time `now_ms`. On `Err` nothing changed.
    pub fn apply(&mut self, cmd: &Command, now_ms: u64) -> Result<Reply, CatalogError> {
        let now = self.clock.now(now_ms);
        #[cfg(debug_assertions)]
        let before = invariants::Before::capture(self, cmd);

        let outcome = self.dispatch(cmd, now)?;

        if !matches!(outcome.effect, Effect::Unchanged) {
            self.version += 1;
            self.clock.now_ms = now;
        }
        match outcome.effect {
            Effect::Logged(log) => self.changelog.push(log, self.version, now),
            Effect::Acted(log) => self.actionlog.push(log, self.version, now),
            Effect::Unchanged | Effect::Silent => {}
        }
        #[cfg(debug_assertions)]
        if let Err(violation) = before.verify(self) {
            // A bug in a handler, not bad input: the catalog is no longer trustworthy.
            panic!("catalog invariant broken by `{cmd}`: {violation}");
        }
        Ok(outcome.response)
    }

    fn dispatch(&mut self, cmd: &Command, now: u64) -> Result<Outcome, CatalogError> {
        use Command as C;
        match cmd {
            C::AddShard { shard, replica_set, members } => self.add_shard(shard, replica_set, members, now),
            C::RemoveShard { shard } => self.remove_shard(shard),
            C::AddShardToZone { shard, zone } => self.add_shard_to_zone(shard, zone),
            C::RemoveShardFromZone { shard, zone } => self.remove_shard_from_zone(shard, zone),
            C::UpdateZoneKeyRange { ns, min, max, zone } => self.update_zone_key_range(ns, min, max, zone.as_deref()),
            C::SetReplicaGroupTerm { shard, expected_term, new_term, primary } => {
                self.set_replica_group_term(shard, *expected_term, *new_term, primary.as_deref())
            }
            C::ReconfigReplicaGroup { shard, expected_version, change } => {
                self.reconfig_replica_group(shard, *expected_version, change)
            }
            C::PromoteMember { shard, member } => self.promote_member(shard, member),
            C::CreateDatabase { name, primary, uuid } => self.create_database(name, primary, *uuid, now),
            C::DropDatabase { name } => self.drop_database(name),
            C::MovePrimary { name, to } => self.move_primary(name, to),
            C::ShardCollection { ns, uuid, epoch, key, unique, initial } => {
                self.shard_collection(ns, *uuid, *epoch, key, *unique, initial, now)
            }
            C::DropCollection { ns } => self.drop_collection(ns),
            C::RefineShardKey { ns, epoch, new_epoch, key, bound_suffix } => {
                self.refine_shard_key(ns, *epoch, *new_epoch, key, bound_suffix, now)
            }
            C::ConfigureCollection { ns, no_balance, chunk_size_mib, enable_auto_merge } => {
                self.configure_collection(ns, *no_balance, *chunk_size_mib, *enable_auto_merge)
            }
            C::SplitChunk { ns, epoch, min, expected_version, split_points, fencing } => {
                self.check_fencing(fencing.as_ref(), now)?;
                self.split_chunk(ns, *epoch, min, *expected_version, split_points)
            }
            C::MergeChunks { ns, epoch, min, max, expected_versions, fencing } => {
                self.check_fencing(fencing.as_ref(), now)?;
                self.merge_chunks(ns, *epoch, min, max, expected_versions, now)
            }
            C::CommitMigration { ns, epoch, min, max, from, to, expected_version, fencing } => {
                self.check_fencing(fencing.as_ref(), now)?;
                self.commit_migration(ns, *epoch, min, max, from, to, *expected_version, now)
            }
            C::SetChunkJumbo { ns, epoch, min, expected_version, jumbo, fencing } => {
                self.check_fencing(fencing.as_ref(), now)?;
                self.set_chunk_jumbo(ns, *epoch, min, *expected_version, *jumbo)
            }
            C::SetSettings(update) => {
                let next = settings::updated(&self.settings, update)?;
                if next == self.settings {
                    return Ok(Outcome::unchanged(Reply::Done));
                }
                self.settings = next;
                Ok(Outcome::logged(Reply::Done, LogDraft::new("setSettings", "")))
            }
            C::InitCluster { cluster_id } => {
                if self.cluster_id.is_some() {
                    return Ok(Outcome::unchanged(Reply::Done));
                }
                self.cluster_id = Some(*cluster_id);
                Ok(Outcome::logged(Reply::Done, LogDraft::new("initCluster", "")))
            }
            C::AcquireLease { name, holder, ttl_ms } => self.acquire_lease(name, holder, *ttl_ms, now),
            C::RenewLease { name, holder, token, ttl_ms } => self.renew_lease(name, holder, *token, *ttl_ms, now),
            C::ReleaseLease { name, holder, token } => self.release_lease(name, holder, *token),
            C::LogChange { what, ns, details } => changelog::log_change(what, ns, details),
            C::LogAction { what, ns, details } => self.log_action(what, ns, details),
            C::ReportBalancerRounds { completed, in_round } => {
                Ok(self.report_balancer_rounds(*completed, *in_round, now))
            }
            C::Security(cmd) => self.security_command(cmd),
        }
    }

    fn check_fencing(&self, fencing: Option<&Fencing>, now: u64) -> Result<(), CatalogError> {
        fencing.map_or(Ok(()), |f| self.leases.check(f, now))
    }

    /// The cluster's identity, once some client has set it (`InitCluster`; the first one wins).
    pub fn cluster_id(&self) -> Option<Epoch> {
        self.cluster_id
    }

    /// The catalog version: how many effective changes have been applied.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The latest log-entry time applied (ms); lease expiry is judged against it.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms
    }

    pub fn shards(&self) -> &BTreeMap<ShardId, Shard> {
        &self.shards
    }

    pub fn shard(&self, id: &str) -> Option<&Shard> {
        self.shards.get(id)
    }

    pub fn databases(&self) -> &BTreeMap<String, Database> {
        &self.databases
    }

    pub fn database(&self, name: &str) -> Option<&Database> {
        self.databases.get(name)
    }

    /// Sharded collections by namespace.
    pub fn collections(&self) -> &BTreeMap<String, Collection> {
        &self.collections
    }

    pub fn collection(&self, ns: &str) -> Option<&Collection> {
        self.collections.get(ns)
    }

    /// The zone ranges of `ns`, sorted by `min`.
    pub fn zone_ranges(&self, ns: &str) -> &[ZoneRange] {
        self.zone_ranges.get(ns).map_or(&[], Vec::as_slice)
    }

    /// Every namespace with zone ranges.
    pub fn all_zone_ranges(&self) -> &BTreeMap<String, Vec<ZoneRange>> {
        &self.zone_ranges
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    pub fn changelog(&self) -> &Changelog {
        &self.changelog
    }

    /// The balancer's rounds and decisions (`config.actionlog`), oldest first.
    pub fn actionlog(&self) -> &Changelog {
        &self.actionlog
    }

    /// The balancer's round count and whether it was in a round at its last report.
    pub fn balancer_rounds(&self) -> &BalancerRounds {
        &self.balancer_rounds
    }
}
