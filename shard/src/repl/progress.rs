//! The majority commit point: the newest entry a majority of the group has on disk, counted only
//! once that entry is of the primary's own term.
//!
//! Why the term rule (Raft's, and MongoDB's): an older term's entry on a majority can still be
//! lost if a member that never saw it has a newer-term entry and is promoted (Raft's "figure 8").
//! Once an entry of the current term — the new primary's no-op first of all — is on a majority,
//! any member promoted later has it (the config service promotes the highest optime among a
//! majority, and optimes order by term first), and so everything before it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::state::PeerProgress;
use crate::store::oplog::OpTime;

/// The commit point the durable optimes support, if it is of `term`. `members` lists the whole
/// group (this member included); members that never reported count as having nothing.
pub fn commit_point(
    members: &[String],
    me: &str,
    own_durable: OpTime,
    peers: &HashMap<String, PeerProgress>,
    term: i64,
) -> Option<OpTime> {
    let mut durable: Vec<OpTime> = members
        .iter()
        .map(|m| if m == me { own_durable } else { peers.get(m).map_or(OpTime::ZERO, |p| p.durable) })
        .collect();
    if durable.is_empty() {
        return None;
    }
    durable.sort_unstable_by(|a, b| b.cmp(a));
    let majority = durable.len() / 2 + 1;
    let candidate = durable[majority - 1];
    (candidate.term == term && !candidate.is_zero()).then_some(candidate)
}

/// Whether a primary still hears from a majority of its group (itself included): a secondary
/// counts if its last report on the replication stream is younger than `window`. Secondaries
/// report at least every keepalive interval, idle or not (`fetcher::report_progress`).
pub fn sees_majority(
    members: &[String],
    me: &str,
    peers: &HashMap<String, PeerProgress>,
    now: Instant,
    window: Duration,
) -> bool {
    let heard = members
        .iter()
        .filter(|m| *m != me)
        .filter_map(|m| peers.get(m).and_then(|p| p.seen))
        .filter(|seen| now.saturating_duration_since(*seen) < window)
        .count();
    // This member, and the secondaries heard from, against a majority (`n / 2 + 1`).
    heard + 1 > members.len() / 2
}

#[cfg(test)]
mod tests {
    use bson::Timestamp;

    use super::*;

    fn at(term: i64, secs: u32) -> OpTime {
        OpTime::new(term, Timestamp { time: secs, increment: 1 })
    }

    fn peers(list: &[(&str, OpTime)]) -> HashMap<String, PeerProgress> {
        list.iter().map(|(m, o)| (m.to_string(), PeerProgress { applied: *o, durable: *o, seen: None })).collect()
    }

    fn group() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn majority_of_three_is_the_second_highest() {
        let p = peers(&[("b", at(2, 5)), ("c", at(2, 3))]);
        assert_eq!(commit_point(&group(), "a", at(2, 9), &p, 2), Some(at(2, 5)));
    }

    #[test]
    fn silent_members_count_as_nothing() {
        assert_eq!(commit_point(&group(), "a", at(2, 9), &HashMap::new(), 2), None);
        assert_eq!(commit_point(&["a".to_string()], "a", at(2, 9), &HashMap::new(), 2), Some(at(2, 9)));
    }

    #[test]
    fn an_older_term_entry_on_a_majority_does_not_count() {
        let p = peers(&[("b", at(1, 8)), ("c", at(1, 3))]);
        assert_eq!(commit_point(&group(), "a", at(2, 9), &p, 2), None);
        let p = peers(&[("b", at(2, 8)), ("c", at(1, 3))]);
        assert_eq!(commit_point(&group(), "a", at(2, 9), &p, 2), Some(at(2, 8)));
    }

    #[test]
    fn terms_order_before_timestamps() {
        // A clock that went back in a later term still sorts after the earlier term.
        let p = peers(&[("b", at(3, 1)), ("c", at(2, 100))]);
        assert_eq!(commit_point(&group(), "a", at(3, 2), &p, 3), Some(at(3, 1)));
    }

    #[test]
    fn a_primary_sees_a_majority_only_through_recent_reports() {
        let members: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let now = Instant::now();
        let window = Duration::from_secs(10);
        let seen = |ago: u64| PeerProgress { seen: now.checked_sub(Duration::from_secs(ago)), ..Default::default() };
        let peers = |list: &[(&str, PeerProgress)]| list.iter().map(|(m, p)| (m.to_string(), *p)).collect();
        assert!(sees_majority(&members, "a", &peers(&[("b", seen(1)), ("c", seen(30))]), now, window));
        assert!(!sees_majority(&members, "a", &peers(&[("b", seen(11)), ("c", seen(30))]), now, window));
        assert!(!sees_majority(&members, "a", &HashMap::new(), now, window));
        // Alone in its group, a member is its own majority.
        assert!(sees_majority(&members[..1], "a", &HashMap::new(), now, window));
    }
}
