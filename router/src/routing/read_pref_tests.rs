use std::time::Duration;

use bson::rawdoc;

use super::*;

const SEL: Selection = Selection { silent_after: Duration::from_secs(2), heartbeat: Duration::from_millis(200) };

fn member(addr: &str, role: Role, last_write_secs: u32, age_ms: Option<u64>) -> MemberInfo {
    MemberInfo {
        addr: addr.into(),
        role,
        last_write_secs,
        heartbeat_age: age_ms.map(Duration::from_millis),
        heartbeat_interval: Duration::from_millis(200),
    }
}

fn pref(mode: Mode) -> ReadPreference {
    ReadPreference { mode, ..ReadPreference::default() }
}

fn group() -> Vec<MemberInfo> {
    vec![
        member("p:1", Role::Primary, 1000, Some(100)),
        member("s:1", Role::Secondary, 1000, Some(100)),
        member("s:2", Role::Secondary, 1000, Some(100)),
    ]
}

fn choose_first(p: &ReadPreference, primary: Option<&str>, members: &[MemberInfo]) -> Choice {
    choose(p, primary, members, &SEL, &mut |_| 0)
}

#[test]
fn parses_modes_and_refuses_what_mongodb_refuses() {
    let p = ReadPreference::parse(&rawdoc! { "mode": "secondary", "maxStalenessSeconds": 120 }).expect("valid");
    assert_eq!((p.mode, p.max_staleness), (Mode::Secondary, Some(Duration::from_secs(120))));
    let p = ReadPreference::from_body(&rawdoc! { "find": "c" }).expect("absent");
    assert_eq!((p.mode, p.max_time), (Mode::Primary, None));
    let p =
        ReadPreference::from_body(&rawdoc! { "find": "c", "$readPreference": { "mode": "nearest" }, "maxTimeMS": 250 })
            .expect("valid");
    assert_eq!((p.mode, p.max_time), (Mode::Nearest, Some(Duration::from_millis(250))));
    let code = |d: bson::RawDocumentBuf| ReadPreference::parse(&d).expect_err("invalid").code;
    assert_eq!(code(rawdoc! { "mode": "secondary", "maxStalenessSeconds": 89 }), 160);
    assert_eq!(code(rawdoc! { "mode": "primary", "maxStalenessSeconds": 90 }), 2);
    assert_eq!(code(rawdoc! { "mode": "sideways" }), 2);
    assert_eq!(code(rawdoc! { "mode": 1 }), 14);
    assert_eq!(code(rawdoc! {}), 4);
    assert_eq!(code(rawdoc! { "mode": "secondary", "maxStalenessSeconds": -5 }), 2);
    assert_eq!(code(rawdoc! { "mode": "primary", "hedge": { "enabled": true } }), 72);
    assert_eq!(code(rawdoc! { "mode": "primary", "tags": [{ "dc": "ny" }] }), 2);
    assert!(ReadPreference::parse(&rawdoc! { "mode": "nearest", "maxStalenessSeconds": -1 }).is_ok());
    assert!(ReadPreference::parse(&rawdoc! { "mode": "primary", "tags": [{}] }).is_ok());
}

#[test]
fn primary_mode_always_goes_to_the_primary() {
    assert_eq!(choose_first(&pref(Mode::Primary), Some("p:1"), &[]), Choice::Primary);
    assert_eq!(choose_first(&pref(Mode::Primary), None, &group()), Choice::Primary);
}

#[test]
fn secondary_picks_a_live_secondary_or_none() {
    let g = group();
    assert_eq!(choose_first(&pref(Mode::Secondary), Some("p:1"), &g), Choice::Member("s:1".into()));
    assert_eq!(choose(&pref(Mode::Secondary), Some("p:1"), &g, &SEL, &mut |n| n - 1), Choice::Member("s:2".into()));
    // Silent (paused, killed) secondaries and unreadable states are not chosen.
    let silent = vec![
        member("p:1", Role::Primary, 1000, Some(100)),
        member("s:1", Role::Secondary, 1000, Some(5000)),
        member("s:2", Role::Other, 1000, Some(100)),
        member("s:3", Role::Secondary, 1000, None),
    ];
    assert_eq!(choose_first(&pref(Mode::Secondary), Some("p:1"), &silent), Choice::NoneEligible);
    assert_eq!(choose_first(&pref(Mode::SecondaryPreferred), Some("p:1"), &silent), Choice::Primary);
    // A member the catalog still names primary is never taken for a secondary.
    let stale_role = vec![member("p:1", Role::Secondary, 1000, Some(100))];
    assert_eq!(choose_first(&pref(Mode::Secondary), Some("p:1"), &stale_role), Choice::NoneEligible);
}

#[test]
fn preferred_modes_fall_back() {
    let g = group();
    assert_eq!(choose_first(&pref(Mode::PrimaryPreferred), Some("p:1"), &g), Choice::Primary);
    let mut down = g.clone();
    down[0].heartbeat_age = Some(Duration::from_secs(10));
    assert_eq!(choose_first(&pref(Mode::PrimaryPreferred), Some("p:1"), &down), Choice::Member("s:1".into()));
    assert_eq!(choose_first(&pref(Mode::PrimaryPreferred), None, &g), Choice::Member("s:1".into()));
    assert_eq!(choose_first(&pref(Mode::SecondaryPreferred), Some("p:1"), &g), Choice::Member("s:1".into()));
    assert_eq!(choose_first(&pref(Mode::SecondaryPreferred), Some("p:1"), &g[..1]), Choice::Primary);
    // Nothing known of the members: the primary the catalog names.
    assert_eq!(choose_first(&pref(Mode::PrimaryPreferred), Some("p:1"), &[]), Choice::Primary);
}

#[test]
fn nearest_takes_any_eligible_member() {
    let g = group();
    let all: Vec<Choice> = (0..3).map(|i| choose(&pref(Mode::Nearest), Some("p:1"), &g, &SEL, &mut |_| i)).collect();
    assert_eq!(all, vec![Choice::Member("s:1".into()), Choice::Member("s:2".into()), Choice::Primary]);
    assert_eq!(choose_first(&pref(Mode::Nearest), None, &[]), Choice::NoneEligible);
}

#[test]
fn staleness_excludes_lagging_secondaries() {
    let p = ReadPreference { max_staleness: Some(Duration::from_secs(90)), ..pref(Mode::Secondary) };
    let g = vec![
        member("p:1", Role::Primary, 1000, Some(100)),
        member("s:1", Role::Secondary, 800, Some(100)),
        member("s:2", Role::Secondary, 950, Some(100)),
    ];
    assert_eq!(choose_first(&p, Some("p:1"), &g), Choice::Member("s:2".into()));
    // Without a primary, against the newest secondary.
    let headless = vec![member("s:1", Role::Secondary, 800, Some(100)), member("s:2", Role::Secondary, 950, Some(100))];
    assert_eq!(choose_first(&p, None, &headless), Choice::Member("s:2".into()));
    let all_stale = vec![member("p:1", Role::Primary, 1000, Some(100)), member("s:1", Role::Secondary, 800, Some(100))];
    assert_eq!(choose_first(&p, Some("p:1"), &all_stale), Choice::NoneEligible);
    let sp = ReadPreference { mode: Mode::SecondaryPreferred, ..p };
    assert_eq!(choose_first(&sp, Some("p:1"), &all_stale), Choice::Primary);
}

#[test]
fn tag_sets_match_only_the_wildcard() {
    let tagged = ReadPreference { tag_sets: vec![bson::doc! { "dc": "ny" }], ..pref(Mode::Secondary) };
    assert_eq!(choose_first(&tagged, Some("p:1"), &group()), Choice::NoneEligible);
    let fallback = ReadPreference { tag_sets: vec![bson::doc! { "dc": "ny" }, bson::doc! {}], ..pref(Mode::Secondary) };
    assert_eq!(choose_first(&fallback, Some("p:1"), &group()), Choice::Member("s:1".into()));
}

#[test]
fn selection_follows_the_slowest_reported_heartbeat() {
    let min = Duration::from_millis(1500);
    let mut a = member("a:1", Role::Primary, 10, Some(0));
    let mut b = member("b:1", Role::Secondary, 10, Some(0));
    assert_eq!(
        Selection::for_members(&[a.clone(), b.clone()], min),
        Selection { silent_after: min, heartbeat: Duration::from_millis(200) }
    );
    b.heartbeat_interval = Duration::from_secs(1);
    let slow = Selection::for_members(&[a.clone(), b.clone()], min);
    assert_eq!(slow, Selection { silent_after: Duration::from_secs(5), heartbeat: Duration::from_secs(1) });
    a.heartbeat_interval = Duration::from_millis(50);
    assert_eq!(Selection::for_members(&[a], min).silent_after, min, "never sooner than the minimum");
    assert_eq!(Selection::for_members(&[], min).heartbeat, shoal_proto::heartbeat::INTERVAL_DEFAULT);
}
