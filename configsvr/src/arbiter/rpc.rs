//! The `Heartbeat` and `GroupStatus` handlers of the `Config` service (leader only).
//!
//! ```text
//!  Heartbeat: leader? --no--> NotWritablePrimary + leader hint (the client follows it)
//!     | look up shard and member in the applied catalog (ShardNotFound / NoSuchKey)
//!     | record the report in the view
//!     | primary of the term, serving, not resigning, shard not being deposed?
//!     |    --yes--> confirm leadership with a quorum (ReadIndex, <= lease_confirm_timeout)
//!     |             --> re-read the group, grant under the view's lock, record last_grant
//!     +--> reply {catalog term, primary, members, lease_ms}
//! ```
//!
//! The grant is recorded after the quorum confirmation, so it is later than the member's send
//! instant, from which the member counts its lease: the arbiter's wait from `last_grant` always
//! covers the member's own lease. Nothing here writes to Raft.

use shoal_proto::config::{GroupStatusReply, HeartbeatReply, HeartbeatRequest};
use tokio::time::Instant;

use super::decide::decide;
use super::task::leader_term;
use super::view::{MemberReport, lease_eligible};
use crate::catalog::{CatalogError, ReplicaGroup};
use crate::error::ServiceError;
use crate::service::{ApiResult, ConfigService};

impl ConfigService {
    /// The shard's group from the applied catalog, checking that `member` belongs to it (voting or
    /// pending: a pending member heartbeats to learn the primary it initial-syncs from).
    fn group_of(&self, shard: &str, member: Option<&str>) -> ApiResult<ReplicaGroup> {
        let applied = self.state.read();
        let Some(s) = applied.catalog.shard(shard) else {
            return Err(CatalogError::ShardNotFound { shard: shard.to_owned() }.into());
        };
        if let Some(m) = member
            && !s.group.has(m)
        {
            return Err(ServiceError::NotAMember { shard: shard.to_owned(), member: m.to_owned() });
        }
        Ok(s.group.clone())
    }

    pub(crate) async fn heartbeat_local(&self, req: HeartbeatRequest) -> ApiResult<HeartbeatReply> {
        let Some(raft_term) = leader_term(&self.raft) else {
            return Err(self.not_leader(None));
        };
        let mut group = self.group_of(&req.shard, Some(&req.member))?;
        let now = Instant::now();
        let wants_lease = {
            let mut view = self.arbiter.view();
            if view.observe_leadership(Some(raft_term), now).is_none() {
                return Err(self.not_leader(None));
            }
            view.record(&req.shard, &req.member, MemberReport::from_request(&req, now));
            let deposing = view.shard(&req.shard).and_then(|v| v.deposing).is_some_and(|(t, _)| t == group.term);
            !deposing && lease_eligible(&group, &req.member, req.term, &req.state, req.resign)
        };
        let mut lease_ms = 0;
        if wants_lease {
            let settings = self.arbiter.settings();
            self.linearize_within(settings.lease_confirm_timeout).await?;
            // The applied catalog is now at least as new as anything committed before the check.
            group = self.group_of(&req.shard, Some(&req.member))?;
            if self.arbiter.view().grant_lease(raft_term, &req.shard, &group, &req, Instant::now()) {
                lease_ms = u64::try_from(settings.lease.as_millis()).unwrap_or(u64::MAX);
            }
        }
        Ok(HeartbeatReply {
            error: None,
            term: group.term,
            primary: group.primary.unwrap_or_default(),
            lease_ms,
            members: group.members,
            config_version: group.config_version,
        })
    }

    pub(crate) fn group_status_local(&self, shard: &str) -> ApiResult<GroupStatusReply> {
        let Some(raft_term) = leader_term(&self.raft) else {
            return Err(self.not_leader(None));
        };
        let group = self.group_of(shard, None)?;
        let now = Instant::now();
        let mut view = self.arbiter.view();
        let Some(epoch_start) = view.observe_leadership(Some(raft_term), now) else {
            return Err(self.not_leader(None));
        };
        let phase = decide(&group, view.shard(shard), epoch_start, now, self.arbiter.settings()).action.to_string();
        let (members, commit_point) = view.status(shard, &group, now);
        Ok(GroupStatusReply {
            error: None,
            term: group.term,
            primary: group.primary.unwrap_or_default(),
            members,
            phase,
            config_version: group.config_version,
            commit_point: Some(commit_point.to_proto()),
        })
    }
}
