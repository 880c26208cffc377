//! The leader's in-memory view of replica groups: what each member last reported, which shards
//! are being deposed, and when each shard's primary was last granted a lease.
//!
//! The view belongs to one leadership (a Raft term of this node as leader, its "epoch"): it starts
//! empty when this node becomes leader and is dropped when it stops being one, so nothing a past
//! leadership saw is trusted. Until a member heartbeats in this epoch, the epoch's start stands in
//! for its last heartbeat and for its shard's last lease grant (see `decide`).
//!
//! Invariant: a lease is recorded (`grant_lease`) and a shard is marked deposing under the same
//! lock, so once the arbiter has marked a shard, no later grant can extend its primary's lease.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use shoal_proto::config as pb;
use tokio::time::Instant;

use crate::catalog::ReplicaGroup;

/// A position in a shard's oplog, ordered by term first, then timestamp (as MongoDB compares
/// optimes across terms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpTime {
    pub term: i64,
    pub ts_secs: u32,
    pub ts_inc: u32,
}

impl OpTime {
    pub fn new(term: i64, ts_secs: u32, ts_inc: u32) -> Self {
        Self { term, ts_secs, ts_inc }
    }

    pub fn from_proto(o: Option<&pb::OpTime>) -> Self {
        o.map_or_else(Self::default, |o| Self { term: o.term, ts_secs: o.ts_secs, ts_inc: o.ts_inc })
    }

    pub fn to_proto(self) -> pb::OpTime {
        pb::OpTime { ts_secs: self.ts_secs, ts_inc: self.ts_inc, term: self.term }
    }
}

impl fmt::Display for OpTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{t: {}, ts: {}.{}}}", self.term, self.ts_secs, self.ts_inc)
    }
}

/// Member states that can hold or take the primary role; anything else (STARTUP, STARTUP2 initial
/// sync, ROLLBACK, RECOVERING) cannot.
pub fn state_can_serve(state: &str) -> bool {
    matches!(state, "PRIMARY" | "SECONDARY")
}

/// Longest stepDown window honoured; a larger `unelectable_for_ms` is clamped to it.
pub const UNELECTABLE_FOR_MAX: Duration = Duration::from_secs(24 * 3600);
/// Longest progress text kept per member (the view must stay small whatever members send).
pub const PROGRESS_BYTES_MAX: usize = 1024;

/// One member's last heartbeat.
#[derive(Debug, Clone)]
pub struct MemberReport {
    pub last_heartbeat: Instant,
    /// The highest replica-group term the member has learnt.
    pub term: u64,
    pub state: String,
    pub applied: OpTime,
    pub durable: OpTime,
    pub commit_point: OpTime,
    pub progress: String,
    /// The primary of `term` gave up its lease.
    pub resign: bool,
    pub unelectable_until: Instant,
    /// The interval the member says it heartbeats at.
    pub heartbeat_interval: Duration,
    /// The group configuration version the member runs with.
    pub config_version: u64,
}

impl MemberReport {
    pub fn from_request(req: &pb::HeartbeatRequest, now: Instant) -> Self {
        let unelectable_for = Duration::from_millis(req.unelectable_for_ms).min(UNELECTABLE_FOR_MAX);
        let mut progress = req.progress.clone();
        if progress.len() > PROGRESS_BYTES_MAX {
            let mut end = PROGRESS_BYTES_MAX;
            while !progress.is_char_boundary(end) {
                end -= 1;
            }
            progress.truncate(end);
        }
        Self {
            last_heartbeat: now,
            term: req.term,
            state: req.state.clone(),
            applied: OpTime::from_proto(req.applied.as_ref()),
            durable: OpTime::from_proto(req.durable.as_ref()),
            commit_point: OpTime::from_proto(req.commit_point.as_ref()),
            progress,
            resign: req.resign,
            unelectable_until: now + unelectable_for,
            heartbeat_interval: shoal_proto::heartbeat::interval_of(req.heartbeat_interval_ms),
            config_version: req.config_version,
        }
    }

    /// May be promoted now: in a serving state and outside any stepDown window.
    pub fn electable(&self, now: Instant) -> bool {
        state_can_serve(&self.state) && now >= self.unelectable_until
    }
}

/// Why a shard's primary is being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeposeReason {
    /// No heartbeat in a serving state for this long when deposing began.
    Silent {
        for_ms: u64,
    },
    Resigned,
}

impl fmt::Display for DeposeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeposeReason::Silent { for_ms } => write!(f, "silent for {for_ms} ms"),
            DeposeReason::Resigned => write!(f, "resigned"),
        }
    }
}

/// One shard as the leader sees it.
#[derive(Debug, Clone, Default)]
pub struct ShardView {
    pub members: BTreeMap<String, MemberReport>,
    /// The term whose primary is being deposed, and why: no lease is granted in it any more.
    pub deposing: Option<(u64, DeposeReason)>,
    /// When this epoch last granted the shard's primary a lease.
    pub last_grant: Option<Instant>,
}

/// The view of every shard during one leadership.
#[derive(Debug, Default)]
pub struct View {
    /// This node's Raft term as leader, and when it noticed the leadership.
    epoch: Option<(u64, Instant)>,
    shards: BTreeMap<String, ShardView>,
}

/// Whether `member`, reporting `term` and `state`, is the one the catalog group names primary of
/// its current term and still willing to serve.
pub fn lease_eligible(group: &ReplicaGroup, member: &str, term: u64, state: &str, resign: bool) -> bool {
    group.term > 0
        && term == group.term
        && group.primary.as_deref() == Some(member)
        && state_can_serve(state)
        && !resign
}

impl View {
    /// Follows this node's leadership (`Some(raft term)` while leader): a new or lost leadership
    /// drops everything seen before. Returns the epoch's start while leader.
    pub fn observe_leadership(&mut self, leader_term: Option<u64>, now: Instant) -> Option<Instant> {
        match (leader_term, self.epoch) {
            (None, _) => {
                if self.epoch.is_some() {
                    tracing::info!("no longer the config leader: dropping the replica-group view");
                }
                self.epoch = None;
                self.shards.clear();
                None
            }
            (Some(term), Some((current, since))) if term == current => Some(since),
            (Some(term), Some((current, _))) if term < current => None,
            (Some(term), _) => {
                tracing::info!(raft_term = term, "became the config leader: replica-group view starts empty");
                self.epoch = Some((term, now));
                self.shards.clear();
                Some(now)
            }
        }
    }

    pub fn epoch_start(&self) -> Option<Instant> {
        self.epoch.map(|(_, since)| since)
    }

    pub fn shard(&self, shard: &str) -> Option<&ShardView> {
        self.shards.get(shard)
    }

    pub fn shard_mut(&mut self, shard: &str) -> &mut ShardView {
        self.shards.entry(shard.to_owned()).or_default()
    }

    /// Forgets shards the catalog no longer has and members no longer listed.
    pub fn retain(&mut self, groups: &BTreeMap<String, ReplicaGroup>) {
        self.shards.retain(|id, view| match groups.get(id) {
            Some(group) => {
                view.members.retain(|m, _| group.has(m));
                true
            }
            None => false,
        });
    }

    pub fn record(&mut self, shard: &str, member: &str, report: MemberReport) {
        self.shard_mut(shard).members.insert(member.to_owned(), report);
    }

    /// Grants a lease if `raft_term` is still this view's leadership, the member is eligible and
    /// its shard is not being deposed; records the grant.
    pub fn grant_lease(
        &mut self,
        raft_term: u64,
        shard: &str,
        group: &ReplicaGroup,
        req: &pb::HeartbeatRequest,
        now: Instant,
    ) -> bool {
        if self.epoch.map(|(t, _)| t) != Some(raft_term) {
            return false;
        }
        if !lease_eligible(group, &req.member, req.term, &req.state, req.resign) {
            return false;
        }
        let view = self.shard_mut(shard);
        if view.deposing.is_some_and(|(term, _)| term == group.term) {
            return false;
        }
        view.last_grant = Some(now);
        true
    }

    /// `GroupStatus`'s member list, in catalog order, and the highest commit point reported.
    pub fn status(&self, shard: &str, group: &ReplicaGroup, now: Instant) -> (Vec<pb::MemberStatus>, OpTime) {
        let view = self.shards.get(shard);
        let mut commit_point = OpTime::default();
        let members = group
            .members
            .iter()
            .chain(&group.pending)
            .map(|m| (m, group.pending.contains(m)))
            .map(|(m, pending)| match view.and_then(|v| v.members.get(m)) {
                Some(r) => {
                    commit_point = commit_point.max(r.commit_point);
                    let ago = now.saturating_duration_since(r.last_heartbeat).as_millis();
                    pb::MemberStatus {
                        member: m.clone(),
                        last_heartbeat_ms_ago: i64::try_from(ago).unwrap_or(i64::MAX),
                        term: r.term,
                        state: r.state.clone(),
                        applied: Some(r.applied.to_proto()),
                        durable: Some(r.durable.to_proto()),
                        progress: r.progress.clone(),
                        unelectable: !r.electable(now),
                        heartbeat_interval_ms: shoal_proto::heartbeat::report(r.heartbeat_interval),
                        config_version: r.config_version,
                        pending,
                    }
                }
                None => pb::MemberStatus {
                    member: m.clone(),
                    last_heartbeat_ms_ago: -1,
                    state: "UNKNOWN".to_owned(),
                    unelectable: true,
                    pending,
                    ..Default::default()
                },
            })
            .collect();
        (members, commit_point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> ReplicaGroup {
        ReplicaGroup { term: 3, primary: Some("a:1".into()), ..ReplicaGroup::new(vec!["a:1".into(), "b:1".into()]) }
    }

    fn hb(member: &str, term: u64, state: &str) -> pb::HeartbeatRequest {
        pb::HeartbeatRequest {
            shard: "s".into(),
            member: member.into(),
            term,
            state: state.into(),
            ..Default::default()
        }
    }

    #[test]
    fn reports_are_bounded() {
        let now = Instant::now();
        let mut req = hb("a:1", 1, "SECONDARY");
        req.unelectable_for_ms = u64::MAX;
        req.progress = "é".repeat(PROGRESS_BYTES_MAX);
        let r = MemberReport::from_request(&req, now);
        assert_eq!(r.unelectable_until, now + UNELECTABLE_FOR_MAX);
        assert!(!r.electable(now + UNELECTABLE_FOR_MAX - Duration::from_millis(1)));
        assert!(r.progress.len() <= PROGRESS_BYTES_MAX && r.progress.starts_with('é'));
    }

    #[test]
    fn optimes_compare_term_first() {
        assert!(OpTime::new(2, 1, 0) > OpTime::new(1, 99, 99));
        assert!(OpTime::new(1, 5, 2) > OpTime::new(1, 5, 1));
        assert!(OpTime::new(1, 6, 0) > OpTime::new(1, 5, 9));
    }

    #[test]
    fn leases_only_to_the_primary_of_the_term_and_not_while_deposing() {
        let now = Instant::now();
        let mut view = View::default();
        view.observe_leadership(Some(7), now);
        let g = group();
        assert!(view.grant_lease(7, "s", &g, &hb("a:1", 3, "PRIMARY"), now));
        assert!(view.grant_lease(7, "s", &g, &hb("a:1", 3, "SECONDARY"), now), "becoming primary");
        assert!(!view.grant_lease(7, "s", &g, &hb("b:1", 3, "PRIMARY"), now), "not the primary");
        assert!(!view.grant_lease(7, "s", &g, &hb("a:1", 2, "PRIMARY"), now), "stale term");
        assert!(!view.grant_lease(7, "s", &g, &hb("a:1", 3, "ROLLBACK"), now));
        let mut resigning = hb("a:1", 3, "PRIMARY");
        resigning.resign = true;
        assert!(!view.grant_lease(7, "s", &g, &resigning, now));
        assert!(!view.grant_lease(6, "s", &g, &hb("a:1", 3, "PRIMARY"), now), "leadership changed");
        view.shard_mut("s").deposing = Some((3, DeposeReason::Resigned));
        let later = now + Duration::from_millis(10);
        assert!(!view.grant_lease(7, "s", &g, &hb("a:1", 3, "PRIMARY"), later));
        assert_eq!(view.shard("s").and_then(|v| v.last_grant), Some(now));
    }

    #[test]
    fn a_new_leadership_starts_empty() {
        let now = Instant::now();
        let mut view = View::default();
        assert_eq!(view.observe_leadership(Some(4), now), Some(now));
        view.record("s", "a:1", MemberReport::from_request(&hb("a:1", 3, "PRIMARY"), now));
        let later = now + Duration::from_millis(5);
        assert_eq!(view.observe_leadership(Some(4), later), Some(now));
        assert!(view.shard("s").is_some());
        assert_eq!(view.observe_leadership(Some(5), later), Some(later));
        assert!(view.shard("s").is_none());
        view.record("s", "a:1", MemberReport::from_request(&hb("a:1", 3, "PRIMARY"), later));
        assert_eq!(view.observe_leadership(None, later), None);
        assert!(view.shard("s").is_none() && view.epoch_start().is_none());
    }
}
