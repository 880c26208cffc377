//! Unit tests of the decision core: one per rule, on hand-built views and virtual instants.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::arbiter::MemberReport;

const A: &str = "a:1";
const B: &str = "b:1";
const C: &str = "c:1";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn settings() -> ArbiterSettings {
    ArbiterSettings::default()
}

fn group(term: u64, primary: Option<&str>) -> ReplicaGroup {
    ReplicaGroup { term, primary: primary.map(str::to_owned), ..ReplicaGroup::new(vec![A.into(), B.into(), C.into()]) }
}

fn report(at: Instant, term: u64, state: &str, applied: OpTime) -> MemberReport {
    MemberReport {
        last_heartbeat: at,
        term,
        state: state.into(),
        applied,
        durable: applied,
        commit_point: OpTime::default(),
        progress: String::new(),
        resign: false,
        unelectable_until: at,
        heartbeat_interval: shoal_proto::heartbeat::INTERVAL_DEFAULT,
        config_version: 1,
    }
}

fn view(reports: &[(&str, MemberReport)]) -> ShardView {
    let mut v = ShardView::default();
    for (m, r) in reports {
        v.members.insert((*m).to_owned(), r.clone());
    }
    v
}

fn op(term: i64, secs: u32) -> OpTime {
    OpTime::new(term, secs, 0)
}

#[test]
fn a_new_shard_gets_term_one_once_a_member_heartbeats() {
    let t0 = Instant::now();
    let d = decide(&group(0, None), None, t0, t0, &settings());
    assert_eq!(d.action, Action::AwaitFirstHeartbeat);
    let v = view(&[(C, report(t0, 0, "STARTUP", OpTime::default()))]);
    let d = decide(&group(0, None), Some(&v), t0, t0, &settings());
    assert_eq!(d.action, Action::OpenTerm { from: 0, to: 1, deposed: None });
    assert_eq!(d.depose, None);
}

#[test]
fn a_heartbeating_primary_is_stable() {
    let t0 = Instant::now();
    let now = t0 + ms(5000);
    let v = view(&[(A, report(now - ms(300), 2, "PRIMARY", op(2, 10)))]);
    let d = decide(&group(2, Some(A)), Some(&v), t0, now, &settings());
    assert_eq!(d, Decision { action: Action::Stable, depose: None });
}

#[test]
fn a_silent_primary_is_deposed_after_its_lease() {
    let t0 = Instant::now();
    let mut v = view(&[(A, report(t0 + ms(100), 2, "PRIMARY", op(2, 10)))]);
    v.last_grant = Some(t0 + ms(900));
    // 999 ms of silence: still fine.
    let d = decide(&group(2, Some(A)), Some(&v), t0, t0 + ms(1099), &settings());
    assert_eq!(d.action, Action::Stable);
    // Silent for the timeout, but the lease granted at 900 runs until 900 + 800 + 100.
    let d = decide(&group(2, Some(A)), Some(&v), t0, t0 + ms(1100), &settings());
    let reason = DeposeReason::Silent { for_ms: 1000 };
    assert_eq!(d.action, Action::WaitForLease { primary: A.into(), reason, remaining: ms(700) });
    assert_eq!(d.depose, Some((2, reason)));
    v.deposing = d.depose;
    // Once deposing, it continues even if the primary heartbeats again.
    v.members.insert(A.into(), report(t0 + ms(1500), 2, "PRIMARY", op(2, 11)));
    let d = decide(&group(2, Some(A)), Some(&v), t0, t0 + ms(1799), &settings());
    assert!(matches!(d.action, Action::WaitForLease { remaining, .. } if remaining == ms(1)));
    let d = decide(&group(2, Some(A)), Some(&v), t0, t0 + ms(1800), &settings());
    assert_eq!(d.action, Action::OpenTerm { from: 2, to: 3, deposed: Some((A.into(), reason)) });
}

#[test]
fn a_new_leader_waits_out_a_lease_its_predecessor_may_have_granted() {
    // Leadership began at t0 and the primary has not been heard from since (nothing in the view):
    // t0 stands in for its last heartbeat and for the last lease grant.
    let t0 = Instant::now();
    let s = ArbiterSettings { lease: ms(950), ..settings() };
    let d = decide(&group(4, Some(B)), None, t0, t0 + ms(999), &s);
    assert_eq!(d.action, Action::Stable, "silence is counted from the leadership's start");
    let reason = DeposeReason::Silent { for_ms: 1000 };
    let d = decide(&group(4, Some(B)), None, t0, t0 + ms(1000), &s);
    assert_eq!(d.action, Action::WaitForLease { primary: B.into(), reason, remaining: ms(50) });
    // A grant recorded before the leadership began (impossible in a fresh view, but a stale
    // value must not shorten the wait) counts as granted at t0.
    let mut v = ShardView { last_grant: Some(t0 - ms(5000)), ..ShardView::default() };
    v.deposing = d.depose;
    let d = decide(&group(4, Some(B)), Some(&v), t0, t0 + ms(1049), &s);
    assert!(matches!(d.action, Action::WaitForLease { .. }));
    let d = decide(&group(4, Some(B)), Some(&v), t0, t0 + ms(1050), &s);
    assert!(matches!(d.action, Action::OpenTerm { from: 4, to: 5, .. }));
}

#[test]
fn a_resigning_primary_is_replaced_without_waiting() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    let mut r = report(now, 3, "PRIMARY", op(3, 7));
    r.resign = true;
    let mut v = view(&[(A, r)]);
    v.last_grant = Some(now - ms(10));
    let d = decide(&group(3, Some(A)), Some(&v), t0, now, &settings());
    assert_eq!(d.action, Action::OpenTerm { from: 3, to: 4, deposed: Some((A.into(), DeposeReason::Resigned)) });
    assert_eq!(d.depose, Some((3, DeposeReason::Resigned)));
    // A resignation from an older term means nothing now.
    let mut old = report(now, 2, "PRIMARY", op(2, 7));
    old.resign = true;
    let v = view(&[(A, old)]);
    assert_eq!(decide(&group(3, Some(A)), Some(&v), t0, now, &settings()).action, Action::Stable);
}

#[test]
fn a_primary_heard_only_in_a_state_that_cannot_serve_counts_as_silent() {
    let t0 = Instant::now();
    let now = t0 + ms(3000);
    let v = view(&[(A, report(now, 3, "ROLLBACK", op(3, 1)))]);
    let d = decide(&group(3, Some(A)), Some(&v), t0, now, &settings());
    assert!(matches!(d.action, Action::OpenTerm { from: 3, to: 4, .. }), "{:?}", d.action);
}

#[test]
fn the_frozen_member_with_the_highest_optime_is_promoted() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    let v = view(&[
        (A, report(now, 5, "SECONDARY", op(4, 10))),
        (B, report(now, 5, "SECONDARY", op(4, 12))),
        (C, report(now, 5, "SECONDARY", op(4, 11))),
    ]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    let Action::Promote { term, member, compared } = d.action else { panic!("{:?}", d.action) };
    assert_eq!((term, member.as_str(), compared.len()), (5, B, 3));
}

#[test]
fn highest_optime_compares_term_first() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    let v = view(&[
        (A, report(now, 5, "SECONDARY", OpTime::new(3, 900, 9))),
        (B, report(now, 5, "SECONDARY", OpTime::new(4, 100, 0))),
    ]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert!(matches!(&d.action, Action::Promote { member, .. } if member == B), "{:?}", d.action);
}

#[test]
fn ties_go_to_higher_durable_then_catalog_order() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    let mut b = report(now, 5, "SECONDARY", op(4, 10));
    b.durable = op(4, 9);
    let c = report(now, 5, "SECONDARY", op(4, 10));
    let v = view(&[(B, b.clone()), (C, c.clone())]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert!(matches!(&d.action, Action::Promote { member, .. } if member == C), "durable decides: {:?}", d.action);
    b.durable = c.durable;
    let v = view(&[(B, b), (C, c)]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert!(matches!(&d.action, Action::Promote { member, .. } if member == B), "catalog order: {:?}", d.action);
}

#[test]
fn a_minority_frozen_does_nothing() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    let v = view(&[
        (A, report(now, 5, "SECONDARY", op(4, 10))),
        // Not frozen: still in the old term, or not heard from within the failover timeout.
        (B, report(now, 4, "SECONDARY", op(4, 12))),
        (C, report(now - ms(1000), 5, "SECONDARY", op(4, 11))),
    ]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert_eq!(d.action, Action::AwaitFrozen { term: 5, frozen: 1, needed: 2, members: 3 });
}

#[test]
fn unelectable_members_are_skipped() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    let mut a = report(now, 5, "SECONDARY", op(4, 12));
    a.unelectable_until = now + ms(1); // stepDown window
    let v = view(&[(A, a), (B, report(now, 5, "STARTUP2", op(0, 0))), (C, report(now, 5, "SECONDARY", op(4, 12)))]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert!(matches!(&d.action, Action::Promote { member, .. } if member == C), "{:?}", d.action);
}

#[test]
fn no_promotion_that_would_lose_what_a_majority_holds() {
    let t0 = Instant::now();
    let now = t0 + ms(2000);
    // A (in a stepDown window) has an entry B lacks, and C has not reported.
    let mut a = report(now, 5, "SECONDARY", op(4, 12));
    a.unelectable_until = now + ms(10_000);
    let v = view(&[(A, a.clone()), (B, report(now, 5, "SECONDARY", op(4, 11)))]);
    // Only A and B are frozen: the write at 12 may be on a majority {A, C}, and B lacks it.
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert!(matches!(d.action, Action::NoneElectable { frozen: 2, .. }), "{:?}", d.action);
    // The frozen majority exists, none electable: keep waiting.
    let mut b = report(now, 5, "SECONDARY", op(4, 11));
    b.unelectable_until = now + ms(10_000);
    let v = view(&[(A, a.clone()), (B, b)]);
    let d = decide(&group(5, None), Some(&v), t0, now, &settings());
    assert!(matches!(d.action, Action::NoneElectable { .. }), "{:?}", d.action);
    // Once A's stepDown window ends, A is promoted.
    let later = now + ms(10_000);
    a.last_heartbeat = later;
    let v = view(&[(A, a), (B, report(later, 5, "SECONDARY", op(4, 11)))]);
    let d = decide(&group(5, None), Some(&v), t0, later, &settings());
    assert!(matches!(&d.action, Action::Promote { member, .. } if member == A), "{:?}", d.action);
}

#[test]
fn phases_read_as_status() {
    let a =
        Action::WaitForLease { primary: A.into(), reason: DeposeReason::Silent { for_ms: 1000 }, remaining: ms(42) };
    assert_eq!(a.to_string(), "deposing primary a:1 (silent for 1000 ms): waiting for its lease (42 ms)");
    let a = Action::AwaitFrozen { term: 3, frozen: 1, needed: 2, members: 3 };
    assert_eq!(a.to_string(), "electing in term 3: 1 of 3 members frozen (2 needed)");
}
