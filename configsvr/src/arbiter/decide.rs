//! The arbiter's decision core: given a shard's catalog group, the leader's view of it, the
//! leadership's start and the time, what to do next. No I/O and no clock of its own, so every
//! rule is unit-tested here.
//!
//! Rules, with T = catalog term and P = catalog primary:
//! - T == 0 (new shard): once any member has heartbeated, open term 1 with no primary (a shard
//!   whose members never run costs no catalog write).
//! - P set, and P silent (no heartbeat in a serving state) for `failover_timeout`, or P resigned in
//!   T, or the shard is already being deposed: depose P (no more leases), wait until the last
//!   lease grant + `lease` + `lease_margin` (not if P resigned), then open T+1 with no primary.
//! - P unset: once a majority of the listed members has heartbeated within `failover_timeout`
//!   reporting term T (frozen), promote the electable frozen member with the highest `applied`
//!   (then `durable`, then catalog order) — but only if a majority of the members have frozen at
//!   or below its optime, so it holds every write a majority had. Otherwise wait.
//!
//! A member never heard from in this leadership counts as last seen, and its shard as last granted
//! a lease, when the leadership began: a new leader waits out any lease its predecessor granted.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::ArbiterSettings;
use super::view::{DeposeReason, OpTime, ShardView, state_can_serve};
use crate::catalog::ReplicaGroup;

/// What the arbiter should do for one shard now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The primary is healthy (or there is nothing to decide).
    Stable,
    /// A new group none of whose members has heartbeated yet.
    AwaitFirstHeartbeat,
    /// Commit `SetReplicaGroupTerm(from -> to, no primary)`.
    OpenTerm { from: u64, to: u64, deposed: Option<(String, DeposeReason)> },
    /// The primary is being deposed; its lease may still be running for `remaining`.
    WaitForLease { primary: String, reason: DeposeReason, remaining: Duration },
    /// Commit `SetReplicaGroupTerm(term -> term, member)`. `compared`: every frozen member's
    /// (name, applied, durable), for the log.
    Promote { term: u64, member: String, compared: Vec<(String, OpTime, OpTime)> },
    /// Electing in `term`, but fewer than `needed` members have frozen in it.
    AwaitFrozen { term: u64, frozen: usize, needed: usize, members: usize },
    /// A frozen majority exists but no member may be promoted yet.
    NoneElectable { term: u64, frozen: usize, why: String },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Stable => write!(f, "stable"),
            Action::AwaitFirstHeartbeat => write!(f, "new group: waiting for a member's first heartbeat"),
            Action::OpenTerm { from, to, deposed: None } => write!(f, "opening term {to} (from {from})"),
            Action::OpenTerm { from, to, deposed: Some((p, why)) } => {
                write!(f, "deposing primary {p} ({why}): opening term {to} (from {from})")
            }
            Action::WaitForLease { primary, reason, remaining } => {
                write!(f, "deposing primary {primary} ({reason}): waiting for its lease ({} ms)", remaining.as_millis())
            }
            Action::Promote { term, member, .. } => write!(f, "promoting {member} in term {term}"),
            Action::AwaitFrozen { term, frozen, needed, members } => {
                write!(f, "electing in term {term}: {frozen} of {members} members frozen ({needed} needed)")
            }
            Action::NoneElectable { term, frozen, why } => {
                write!(f, "electing in term {term}: {frozen} members frozen, none electable: {why}")
            }
        }
    }
}

/// The action, and the term to mark as deposing (before the action runs, under the view's lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub depose: Option<(u64, DeposeReason)>,
}

impl Decision {
    fn act(action: Action) -> Self {
        Self { action, depose: None }
    }
}

/// Members needed for a majority of the group.
pub fn majority(members: usize) -> usize {
    members / 2 + 1
}

pub fn decide(
    group: &ReplicaGroup,
    view: Option<&ShardView>,
    epoch_start: Instant,
    now: Instant,
    settings: &ArbiterSettings,
) -> Decision {
    let term = group.term;
    let empty = ShardView::default();
    let view = view.unwrap_or(&empty);
    if term == 0 {
        if view.members.is_empty() {
            return Decision::act(Action::AwaitFirstHeartbeat);
        }
        return Decision::act(Action::OpenTerm { from: 0, to: 1, deposed: None });
    }
    match &group.primary {
        Some(primary) => depose_if_needed(term, primary, view, epoch_start, now, settings),
        None => elect(group, view, now, settings),
    }
}

fn depose_if_needed(
    term: u64,
    primary: &str,
    view: &ShardView,
    epoch_start: Instant,
    now: Instant,
    settings: &ArbiterSettings,
) -> Decision {
    let report = view.members.get(primary);
    let resigned = report.is_some_and(|r| r.resign && r.term == term);
    let reason = match view.deposing {
        Some((t, _)) if t == term && resigned => DeposeReason::Resigned,
        Some((t, why)) if t == term => why,
        _ if resigned => DeposeReason::Resigned,
        _ => {
            // Only a heartbeat in a state that can serve shows the primary is still doing its job.
            let last_seen = report.filter(|r| state_can_serve(&r.state)).map_or(epoch_start, |r| r.last_heartbeat);
            let silent = now.saturating_duration_since(last_seen.max(epoch_start));
            if silent < settings.failover_timeout {
                return Decision::act(Action::Stable);
            }
            DeposeReason::Silent { for_ms: silent.as_millis() as u64 }
        }
    };
    let depose = Some((term, reason));
    if reason != DeposeReason::Resigned {
        let last_grant = view.last_grant.unwrap_or(epoch_start).max(epoch_start);
        let lease_end = last_grant + settings.lease + settings.lease_margin;
        if now < lease_end {
            let remaining = lease_end - now;
            return Decision {
                action: Action::WaitForLease { primary: primary.to_owned(), reason, remaining },
                depose,
            };
        }
    }
    let deposed = Some((primary.to_owned(), reason));
    Decision { action: Action::OpenTerm { from: term, to: term + 1, deposed }, depose }
}

fn elect(group: &ReplicaGroup, view: &ShardView, now: Instant, settings: &ArbiterSettings) -> Decision {
    let term = group.term;
    let needed = majority(group.members.len());
    // Frozen: heard from recently, in this term, so it no longer pulls from the old primary.
    let frozen: Vec<(usize, &String, &super::MemberReport)> = group
        .members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| view.members.get(m).map(|r| (i, m, r)))
        .filter(|(_, _, r)| {
            r.term == term && now.saturating_duration_since(r.last_heartbeat) < settings.failover_timeout
        })
        .collect();
    if frozen.len() < needed {
        return Decision::act(Action::AwaitFrozen { term, frozen: frozen.len(), needed, members: group.members.len() });
    }
    let best = frozen.iter().filter(|(_, _, r)| r.electable(now)).max_by(|(ia, _, a), (ib, _, b)| {
        (a.applied, a.durable, std::cmp::Reverse(*ia)).cmp(&(b.applied, b.durable, std::cmp::Reverse(*ib)))
    });
    let Some((_, member, report)) = best else {
        let why = "every frozen member is in a stepDown window or not in a serving state".to_owned();
        return Decision::act(Action::NoneElectable { term, frozen: frozen.len(), why });
    };
    // Promoting a member behind a majority could lose a majority-acknowledged write that only
    // the skipped (unelectable) members hold.
    let behind_or_equal = frozen.iter().filter(|(_, _, r)| r.applied <= report.applied).count();
    if behind_or_equal < needed {
        let why =
            format!("the best electable member {member} at {} is behind the members a majority needs", report.applied);
        return Decision::act(Action::NoneElectable { term, frozen: frozen.len(), why });
    }
    let compared = frozen.iter().map(|(_, m, r)| ((*m).clone(), r.applied, r.durable)).collect();
    Decision::act(Action::Promote { term, member: (*member).clone(), compared })
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
