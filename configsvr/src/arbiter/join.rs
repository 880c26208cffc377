//! When a member being added (a group's `pending` member, MongoDB's `newlyAdded`) may start to
//! count: the pure rule the arbiter task applies every tick, committing `PromoteMember`.
//!
//! A pending member is promoted once it has caught up: it reported SECONDARY recently, with the
//! group's current configuration version, and an applied optime at or past the commit point the
//! primary last reported. And only while the primary runs with the current configuration version,
//! so the primary never counts a majority over a configuration two changes old (every change of
//! a group is one member, so consecutive majorities overlap; two at once would not).
//!
//! Must not: promote more than one member per decision, or any member while the group has no
//! primary (a failover is running).

use tokio::time::Instant;

use super::ArbiterSettings;
use super::view::ShardView;
use crate::catalog::ReplicaGroup;

/// The pending member to promote now, if any.
pub fn joinable(
    group: &ReplicaGroup,
    view: Option<&ShardView>,
    now: Instant,
    settings: &ArbiterSettings,
) -> Option<String> {
    let view = view?;
    let primary = view.members.get(group.primary.as_ref()?)?;
    let fresh = |at: Instant| now.saturating_duration_since(at) < settings.failover_timeout;
    if primary.state != "PRIMARY" || primary.config_version != group.config_version || !fresh(primary.last_heartbeat) {
        return None;
    }
    group
        .pending
        .iter()
        .find(|m| {
            view.members.get(*m).is_some_and(|r| {
                r.state == "SECONDARY"
                    && r.config_version == group.config_version
                    && fresh(r.last_heartbeat)
                    && r.applied >= primary.commit_point
            })
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::arbiter::view::{MemberReport, OpTime};

    fn report(state: &str, applied: u32, commit_point: u32, config_version: u64, at: Instant) -> MemberReport {
        let optime = |ts: u32| OpTime { term: 1, ts_secs: ts, ts_inc: 0 };
        MemberReport {
            last_heartbeat: at,
            term: 1,
            state: state.into(),
            applied: optime(applied),
            durable: optime(applied),
            commit_point: optime(commit_point),
            progress: String::new(),
            resign: false,
            unelectable_until: at,
            heartbeat_interval: shoal_proto::heartbeat::INTERVAL_DEFAULT,
            config_version,
        }
    }

    fn group() -> ReplicaGroup {
        ReplicaGroup {
            term: 1,
            primary: Some("a:1".into()),
            pending: vec!["d:1".into()],
            config_version: 2,
            ..ReplicaGroup::new(vec!["a:1".into(), "b:1".into(), "c:1".into()])
        }
    }

    fn view(primary: MemberReport, pending: MemberReport) -> ShardView {
        let mut view = ShardView::default();
        view.members.insert("a:1".into(), primary);
        view.members.insert("d:1".into(), pending);
        view
    }

    #[test]
    fn a_pending_member_joins_once_it_has_the_primarys_commit_point() {
        let now = Instant::now();
        let settings = ArbiterSettings::default();
        let primary = report("PRIMARY", 100, 90, 2, now);
        let syncing = view(primary.clone(), report("STARTUP2", 0, 0, 2, now));
        assert_eq!(joinable(&group(), Some(&syncing), now, &settings), None);
        let behind = view(primary.clone(), report("SECONDARY", 89, 0, 2, now));
        assert_eq!(joinable(&group(), Some(&behind), now, &settings), None);
        let caught_up = view(primary, report("SECONDARY", 90, 0, 2, now));
        assert_eq!(joinable(&group(), Some(&caught_up), now, &settings), Some("d:1".into()));
    }

    #[test]
    fn nobody_joins_while_the_primary_runs_an_older_configuration_or_is_gone() {
        let now = Instant::now();
        let settings = ArbiterSettings::default();
        let caught_up = report("SECONDARY", 100, 0, 2, now);
        let old_primary = view(report("PRIMARY", 100, 90, 1, now), caught_up.clone());
        assert_eq!(joinable(&group(), Some(&old_primary), now, &settings), None);
        let mut no_primary = group();
        no_primary.primary = None;
        let current = view(report("PRIMARY", 100, 90, 2, now), caught_up.clone());
        assert_eq!(joinable(&no_primary, Some(&current), now, &settings), None);
        let later = now + settings.failover_timeout + Duration::from_millis(1);
        assert_eq!(joinable(&group(), Some(&current), later, &settings), None);
        let stale_member = view(report("PRIMARY", 100, 90, 2, now), report("SECONDARY", 100, 0, 1, now));
        assert_eq!(joinable(&group(), Some(&stale_member), now, &settings), None);
    }
}
