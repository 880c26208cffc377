//! Shard membership and replica-group arbitration: `AddShard`, `RemoveShard` (MongoDB's
//! draining state machine), `SetReplicaGroupTerm`, and a group's own membership
//! (`ReconfigReplicaGroup`, `PromoteMember`).
//!
//! ```text
//!  ReconfigReplicaGroup Add(m)    --> m pending (heartbeats, initial-syncs, counts toward nothing)
//!  PromoteMember m (the arbiter)  --> m a voting member, once it caught up
//!  ReconfigReplicaGroup Remove(m) --> m gone (never the primary; never the last member)
//! ```
//!
//! ```text
//!  AddShard --> Active --RemoveShard--> Draining --RemoveShard (nothing left)--> removed
//!                                          |  RemoveShard while chunks or databases remain: "ongoing"
//! ```
//!
//! Invariants: a host belongs to at most one shard; a draining shard receives no chunk and no
//! database; a shard is removed only when it owns no chunk, is no database's primary, and is not
//! the last holder of a zone that still has key ranges. Replica-group terms only grow, and a term
//! has at most one primary, always a voting member. A group changes by one member per
//! configuration version, so any two consecutive majorities overlap.

use std::collections::BTreeSet;

use super::CatalogError;
use super::changelog::LogDraft;
use super::{ClusterCatalog, Outcome};
use super::{MemberChange, ReplicaGroup, Shard, ShardState};
use super::{RemoveShardProgress, RemoveShardState, Reply};

/// MongoDB's replica-set member limit.
pub const REPLICA_GROUP_MEMBERS_MAX: usize = 50;
/// Longest shard id or replica-set name.
pub const SHARD_ID_BYTES_MAX: usize = 128;

fn check_id(what: &str, id: &str) -> Result<(), CatalogError> {
    let bad = id.is_empty()
        || id.len() > SHARD_ID_BYTES_MAX
        || id.chars().any(|c| c == '/' || c == ',' || c.is_whitespace() || c.is_control());
    if bad {
        return Err(CatalogError::bad_value(
            what,
            format!("'{id}' must be 1..={SHARD_ID_BYTES_MAX} bytes without '/', ',' or spaces"),
        ));
    }
    Ok(())
}

/// `host:port`, port 1..=65535; the host may be a bracketed IPv6 address.
fn check_member(member: &str) -> Result<(), CatalogError> {
    let ok = member.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host.chars().any(|c| c == '/' || c == ',' || c.is_whitespace() || c.is_control())
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    });
    if ok { Ok(()) } else { Err(CatalogError::bad_value("member", format!("'{member}' is not host:port"))) }
}

impl ClusterCatalog {
    pub(super) fn add_shard(
        &mut self,
        id: &str,
        replica_set: &str,
        members: &[String],
        now: u64,
    ) -> Result<Outcome, CatalogError> {
        check_id("shard id", id)?;
        check_id("replica set name", replica_set)?;
        if id == "config" {
            return Err(CatalogError::bad_value("shard id", "'config' is reserved"));
        }
        if members.is_empty() || members.len() > REPLICA_GROUP_MEMBERS_MAX {
            return Err(CatalogError::bad_value(
                "members",
                format!("a replica group has 1..={REPLICA_GROUP_MEMBERS_MAX} members"),
            ));
        }
        let mut seen = BTreeSet::new();
        for m in members {
            check_member(m)?;
            if !seen.insert(m.as_str()) {
                return Err(CatalogError::bad_value("members", format!("'{m}' is listed twice")));
            }
        }
        if let Some(existing) = self.shards.get(id) {
            let same_members = existing.group.members.iter().map(String::as_str).collect::<BTreeSet<_>>() == seen;
            if existing.replica_set == replica_set && same_members {
                return Ok(Outcome::unchanged(Reply::ShardAdded { shard: id.to_owned() }));
            }
            return Err(CatalogError::ShardExists { shard: id.to_owned() });
        }
        for other in self.shards.values() {
            if let Some(m) = other.group.members.iter().chain(&other.group.pending).find(|m| seen.contains(m.as_str()))
            {
                return Err(CatalogError::HostInUse { host: m.clone(), shard: other.id.clone() });
            }
        }
        let shard = Shard {
            id: id.to_owned(),
            replica_set: replica_set.to_owned(),
            group: ReplicaGroup::new(members.to_vec()),
            state: ShardState::Active,
            zones: BTreeSet::new(),
            topology_time: self.clock.next_timestamp(now),
        };
        let log = LogDraft::new("addShard", id).with("host", shard.host_string());
        self.shards.insert(id.to_owned(), shard);
        Ok(Outcome::logged(Reply::ShardAdded { shard: id.to_owned() }, log))
    }

    pub(super) fn remove_shard(&mut self, id: &str) -> Result<Outcome, CatalogError> {
        let Some(shard) = self.shards.get(id) else {
            return Err(CatalogError::ShardNotFound { shard: id.to_owned() });
        };
        if !shard.is_draining() {
            if !self.shards.values().any(|s| s.id != id && !s.is_draining()) {
                return Err(CatalogError::LastShard { shard: id.to_owned() });
            }
            let mut progress = self.drain_progress(id);
            progress.state = RemoveShardState::Started;
            if let Some(s) = self.shards.get_mut(id) {
                s.state = ShardState::Draining;
            }
            return Ok(Outcome::logged(Reply::RemoveShard(progress), LogDraft::new("removeShard.start", id)));
        }
        let progress = self.drain_progress(id);
        if progress.remaining_chunks > 0 || !progress.databases_to_move.is_empty() {
            return Ok(Outcome::unchanged(Reply::RemoveShard(progress)));
        }
        // Removing the last shard of a zone would leave that zone's ranges with nowhere to go.
        for zone in &shard.zones {
            let others_have_it = self.shards.values().any(|s| s.id != id && s.zones.contains(zone));
            if let (false, Some(ns)) = (others_have_it, self.namespace_using_zone(zone)) {
                return Err(CatalogError::ZoneStillInUse { zone: zone.clone(), ns });
            }
        }
        self.shards.remove(id);
        let done = RemoveShardProgress { state: RemoveShardState::Completed, ..progress };
        Ok(Outcome::logged(Reply::RemoveShard(done), LogDraft::new("removeShard", id)))
    }

    fn drain_progress(&self, id: &str) -> RemoveShardProgress {
        let owned = self.collections.values().flat_map(|c| c.chunks.values()).filter(|c| c.shard == id);
        let (mut chunks, mut jumbo) = (0u64, 0u64);
        for c in owned {
            chunks += 1;
            jumbo += u64::from(c.jumbo);
        }
        RemoveShardProgress {
            state: RemoveShardState::Ongoing,
            remaining_chunks: chunks,
            remaining_jumbo_chunks: jumbo,
            databases_to_move: self.databases.values().filter(|d| d.primary == id).map(|d| d.name.clone()).collect(),
        }
    }

    pub(super) fn set_replica_group_term(
        &mut self,
        id: &str,
        expected_term: u64,
        new_term: u64,
        primary: Option<&str>,
    ) -> Result<Outcome, CatalogError> {
        let Some(shard) = self.shards.get(id) else {
            return Err(CatalogError::ShardNotFound { shard: id.to_owned() });
        };
        let group = &shard.group;
        if group.term != expected_term {
            return Err(CatalogError::StaleTerm { shard: id.to_owned(), expected: expected_term, current: group.term });
        }
        if new_term < expected_term {
            return Err(CatalogError::bad_value(
                "term",
                format!("{new_term} is below the current term {expected_term}"),
            ));
        }
        // Within one term at most one member is ever primary, so the same term may only fill in a
        // primary that is still missing (step 3 of failover after step 1 opened the term).
        if new_term == expected_term && (primary.is_none() || group.primary.is_some()) {
            return Err(CatalogError::bad_value(
                "term",
                format!("term {new_term} already has a primary or the request names none"),
            ));
        }
        if let Some(p) = primary
            && !group.members.iter().any(|m| m == p)
        {
            return Err(CatalogError::bad_value("primary", format!("'{p}' is not a member of shard '{id}'")));
        }
        let log =
            LogDraft::new("replicaGroup.term", id).with("term", new_term).with("primary", primary.unwrap_or_default());
        if let Some(s) = self.shards.get_mut(id) {
            s.group.term = new_term;
            s.group.primary = primary.map(str::to_owned);
        }
        let response = Reply::ReplicaGroup { term: new_term, primary: primary.map(str::to_owned) };
        Ok(Outcome::logged(response, log))
    }

    /// `replSetReconfig {shard}`: adds one pending member or removes one voting member.
    pub(super) fn reconfig_replica_group(
        &mut self,
        id: &str,
        expected_version: u64,
        change: &MemberChange,
    ) -> Result<Outcome, CatalogError> {
        let Some(shard) = self.shards.get(id) else {
            return Err(CatalogError::ShardNotFound { shard: id.to_owned() });
        };
        let incompatible = |reason: String| CatalogError::IncompatibleReplicaConfig { shard: id.to_owned(), reason };
        let group = &shard.group;
        if group.config_version != expected_version {
            return Err(incompatible(format!(
                "the configuration is at version {}, the change was made from version {expected_version}",
                group.config_version
            )));
        }
        let mut next = group.clone();
        let (what, member) = match change {
            MemberChange::Add(member) => {
                check_member(member)?;
                if group.has(member) {
                    return Err(incompatible(format!("'{member}' is already a member")));
                }
                if let Some(other) = self.shards.values().find(|s| s.id != id && s.group.has(member)) {
                    return Err(CatalogError::HostInUse { host: member.clone(), shard: other.id.clone() });
                }
                if group.members.len() + group.pending.len() >= REPLICA_GROUP_MEMBERS_MAX {
                    return Err(CatalogError::limit("members of a replica group", REPLICA_GROUP_MEMBERS_MAX));
                }
                next.pending.push(member.clone());
                ("replicaGroup.add", member)
            }
            MemberChange::Remove(member) => {
                if group.pending.contains(member) {
                    next.pending.retain(|m| m != member);
                } else if !group.members.contains(member) {
                    return Err(incompatible(format!("'{member}' is not a member")));
                } else if group.primary.as_deref() == Some(member.as_str()) {
                    return Err(incompatible(format!(
                        "'{member}' is the primary; step it down (replSetStepDown) before removing it"
                    )));
                } else if group.members.len() == 1 {
                    return Err(incompatible(format!("'{member}' is the last voting member")));
                } else {
                    next.members.retain(|m| m != member);
                }
                ("replicaGroup.remove", member)
            }
        };
        next.config_version += 1;
        let log = LogDraft::new(what, id).with("member", member.as_str()).with("version", next.config_version);
        Ok(self.replace_group(id, next, log))
    }

    /// Moves a caught-up pending member into the voting members (the arbiter's decision).
    /// Repeating it once done changes nothing.
    pub(super) fn promote_member(&mut self, id: &str, member: &str) -> Result<Outcome, CatalogError> {
        let Some(shard) = self.shards.get(id) else {
            return Err(CatalogError::ShardNotFound { shard: id.to_owned() });
        };
        let group = &shard.group;
        if group.members.iter().any(|m| m == member) {
            return Ok(Outcome::unchanged(members_reply(group)));
        }
        if !group.pending.iter().any(|m| m == member) {
            return Err(CatalogError::bad_value(
                "member",
                format!("'{member}' is not a pending member of shard '{id}'"),
            ));
        }
        let mut next = group.clone();
        next.pending.retain(|m| m != member);
        next.members.push(member.to_owned());
        next.config_version += 1;
        let log = LogDraft::new("replicaGroup.promote", id).with("member", member).with("version", next.config_version);
        Ok(self.replace_group(id, next, log))
    }

    fn replace_group(&mut self, id: &str, group: ReplicaGroup, log: LogDraft) -> Outcome {
        let reply = members_reply(&group);
        if let Some(s) = self.shards.get_mut(id) {
            s.group = group;
        }
        Outcome::logged(reply, log)
    }
}

fn members_reply(group: &ReplicaGroup) -> Reply {
    Reply::ReplicaGroupMembers {
        members: group.members.clone(),
        pending: group.pending.clone(),
        config_version: group.config_version,
    }
}
