//! Shards, databases, collections, zones, settings and replica-group terms.

use shoal_proto::ErrorCode;

use super::*;

fn add(shard: &str, rs: &str, members: Vec<String>) -> Command {
    Command::AddShard { shard: shard.into(), replica_set: rs.into(), members }
}

#[test]
fn add_shard_and_its_refusals() {
    let mut fx = Fx::new();
    assert_eq!(fx.ok(add("s0", "rs0", members("s0"))), Reply::ShardAdded { shard: "s0".into() });
    let s0 = fx.cat.shard("s0").expect("added");
    assert_eq!(s0.host_string(), "rs0/s0-a:27018,s0-b:27018,s0-c:27018");
    assert_eq!((s0.group.term, s0.group.primary.as_deref(), s0.state), (0, None, ShardState::Active));
    // Same again, members in another order: a no-op.
    let mut reordered = members("s0");
    reordered.reverse();
    fx.noop(add("s0", "rs0", reordered));

    let e = fx.err(add("s0", "rs0", vec!["other:1".into()]));
    assert_eq!(e, CatalogError::ShardExists { shard: "s0".into() });
    assert_eq!(e.code(), ErrorCode::IllegalOperation);
    let e = fx.err(add("s1", "rs1", vec!["s0-b:27018".into()]));
    assert_eq!(e, CatalogError::HostInUse { host: "s0-b:27018".into(), shard: "s0".into() });
    for bad in [vec![], vec!["nohost".into()], vec!["h:0".into()], vec!["h:70000".into()], vec!["a/b:1".into()]] {
        assert_eq!(fx.err(add("s1", "rs1", bad)).code(), ErrorCode::BadValue);
    }
    assert_eq!(fx.err(add("s1", "rs1", vec!["h:1".into(), "h:1".into()])).code(), ErrorCode::BadValue);
    let too_many = (0..=50).map(|i| format!("h{i}:1")).collect();
    assert_eq!(fx.err(add("s1", "rs1", too_many)).code(), ErrorCode::BadValue);
    for bad_id in ["", "a/b", "a b", "config"] {
        assert_eq!(fx.err(add(bad_id, "rs1", vec!["h:1".into()])).code(), ErrorCode::BadValue);
    }
    fx.ok(add("s1", "rs1", vec!["[::1]:27019".into()]));
}

#[test]
fn remove_shard_drains_then_completes() {
    let mut fx = Fx::with_collection(3);
    assert_eq!(fx.err(Command::RemoveShard { shard: "nope".into() }).code(), ErrorCode::ShardNotFound);
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    fx.ok(fx.migrate(&k(b"m"), "s1"));

    let Reply::RemoveShard(p) = fx.ok(Command::RemoveShard { shard: "s0".into() }) else { panic!() };
    assert_eq!((p.state, p.remaining_chunks), (RemoveShardState::Started, 1));
    assert_eq!(p.databases_to_move, ["db"]);
    assert!(fx.cat.shard("s0").expect("still there").is_draining());
    // A draining shard takes no new chunks or databases.
    assert_eq!(fx.err(fx.migrate(&k(b"m"), "s0")), CatalogError::ShardDraining { shard: "s0".into() });
    let e = fx.err(Command::CreateDatabase { name: "db2".into(), primary: "s0".into(), uuid: uuid(3) });
    assert_eq!(e, CatalogError::ShardDraining { shard: "s0".into() });

    // Asking again reports progress and changes nothing.
    let Reply::RemoveShard(p) = fx.noop(Command::RemoveShard { shard: "s0".into() }) else { panic!() };
    assert_eq!((p.state, p.remaining_chunks), (RemoveShardState::Ongoing, 1));
    fx.ok(fx.migrate(&ChunkBound::Min, "s2"));
    fx.ok(Command::MovePrimary { name: "db".into(), to: "s1".into() });
    let Reply::RemoveShard(p) = fx.ok(Command::RemoveShard { shard: "s0".into() }) else { panic!() };
    assert_eq!(p.state, RemoveShardState::Completed);
    assert!(fx.cat.shard("s0").is_none());
}

#[test]
fn the_last_active_shard_cannot_be_removed() {
    let mut fx = Fx::with_shards(2);
    fx.ok(Command::RemoveShard { shard: "s0".into() });
    assert_eq!(fx.err(Command::RemoveShard { shard: "s1".into() }), CatalogError::LastShard { shard: "s1".into() });
    let mut single = Fx::with_shards(1);
    assert_eq!(single.err(Command::RemoveShard { shard: "s0".into() }).code(), ErrorCode::IllegalOperation);
}

#[test]
fn remove_shard_keeps_the_last_holder_of_a_used_zone() {
    let mut fx = Fx::with_shards(2);
    fx.ok(Command::MovePrimary { name: "db".into(), to: "s1".into() });
    fx.ok(Command::AddShardToZone { shard: "s0".into(), zone: "eu".into() });
    fx.ok(Command::UpdateZoneKeyRange { ns: NS.into(), min: k(b"a"), max: k(b"c"), zone: Some("eu".into()) });
    fx.ok(Command::RemoveShard { shard: "s0".into() });
    let e = fx.err(Command::RemoveShard { shard: "s0".into() });
    assert_eq!(e, CatalogError::ZoneStillInUse { zone: "eu".into(), ns: NS.into() });
    fx.ok(Command::UpdateZoneKeyRange { ns: NS.into(), min: k(b"a"), max: k(b"c"), zone: None });
    fx.ok(Command::RemoveShard { shard: "s0".into() });
}

#[test]
fn databases() {
    let mut fx = Fx::with_shards(2);
    let create = |name: &str, primary: &str| Command::CreateDatabase {
        name: name.into(),
        primary: primary.into(),
        uuid: uuid(4),
    };
    let Reply::Database(db) = fx.noop(create("db", "s0")) else { panic!() };
    assert_eq!((db.primary.as_str(), db.version.last_mod), ("s0", 1));
    assert_eq!(fx.err(create("db", "s1")), CatalogError::DatabaseExists { db: "db".into(), primary: "s0".into() });
    assert_eq!(fx.err(create("x", "s9")).code(), ErrorCode::ShardNotFound);
    assert_eq!(fx.err(create("a.b", "s0")).code(), ErrorCode::InvalidNamespace);
    assert_eq!(fx.err(create("", "s0")).code(), ErrorCode::InvalidNamespace);
    for reserved in ["admin", "config", "local"] {
        assert_eq!(fx.err(create(reserved, "s0")), CatalogError::ReservedDatabase { db: reserved.into() });
    }

    let Reply::Database(moved) = fx.ok(Command::MovePrimary { name: "db".into(), to: "s1".into() }) else { panic!() };
    assert_eq!((moved.primary.as_str(), moved.version.last_mod, moved.version.uuid), ("s1", 2, db.version.uuid));
    fx.noop(Command::MovePrimary { name: "db".into(), to: "s1".into() });
    assert_eq!(
        fx.err(Command::MovePrimary { name: "nope".into(), to: "s1".into() }).code(),
        ErrorCode::NamespaceNotFound
    );
    assert_eq!(fx.err(Command::MovePrimary { name: "db".into(), to: "s9".into() }).code(), ErrorCode::ShardNotFound);

    // Dropping a database drops its sharded collections and their zone ranges.
    fx.ok(shard_cmd("db.c", InitialChunks::Single));
    fx.ok(create("dbx", "s0"));
    fx.ok(shard_cmd("dbx.c", InitialChunks::Single));
    fx.ok(Command::AddShardToZone { shard: "s0".into(), zone: "eu".into() });
    fx.ok(Command::UpdateZoneKeyRange { ns: "db.c".into(), min: k(b"a"), max: k(b"b"), zone: Some("eu".into()) });
    assert_eq!(fx.ok(Command::DropDatabase { name: "db".into() }), Reply::Dropped { existed: true });
    assert!(fx.cat.collection("db.c").is_none() && fx.cat.zone_ranges("db.c").is_empty());
    assert!(fx.cat.collection("dbx.c").is_some(), "a database whose name extends 'db' is untouched");
    assert_eq!(fx.noop(Command::DropDatabase { name: "db".into() }), Reply::Dropped { existed: false });
}

#[test]
fn shard_collection_single_and_distributed() {
    let mut fx = Fx::with_shards(3);
    let Reply::CollectionSharded { version, .. } = fx.ok(shard_cmd(NS, InitialChunks::Single)) else { panic!() };
    assert_eq!((version.epoch, version.version), (epoch(7), ChunkVersion::new(1, 0)));
    assert_eq!(fx.layout(), vec![(ChunkBound::Min, ChunkVersion::new(1, 0), "s0".into())]);
    // Sharding again the same way is a no-op; another key is refused.
    fx.noop(shard_cmd(NS, InitialChunks::Single));
    let other_key = Command::ShardCollection {
        ns: NS.into(),
        uuid: uuid(3),
        epoch: epoch(8),
        key: KeyPattern::range(&["y"]),
        unique: false,
        initial: InitialChunks::Single,
    };
    assert_eq!(fx.err(other_key), CatalogError::AlreadySharded { ns: NS.into() });

    let points = vec![b"g".to_vec(), b"n".to_vec(), b"t".to_vec()];
    let shards = vec!["s1".to_string(), "s2".to_string()];
    let hashed = Command::ShardCollection {
        ns: "db.h".into(),
        uuid: uuid(5),
        epoch: epoch(9),
        key: KeyPattern::hashed("_id"),
        unique: false,
        initial: InitialChunks::Distributed { split_points: points, shards },
    };
    let Reply::CollectionSharded { version, .. } = fx.ok(hashed) else { panic!() };
    assert_eq!(version.version, ChunkVersion::new(1, 3));
    let got: Vec<_> = fx
        .cat
        .collection("db.h")
        .expect("sharded")
        .chunks
        .values()
        .map(|c| (c.min.clone(), c.version.minor, c.shard.clone()))
        .collect();
    let want = vec![(ChunkBound::Min, 0, "s1"), (k(b"g"), 1, "s2"), (k(b"n"), 2, "s1"), (k(b"t"), 3, "s2")];
    assert_eq!(got, want.into_iter().map(|(m, v, s)| (m, v, s.to_string())).collect::<Vec<_>>());
}

#[test]
fn shard_collection_refusals() {
    let mut fx = Fx::with_shards(2);
    let with = |ns: &str, key: KeyPattern, unique: bool, initial: InitialChunks, ep: Epoch| Command::ShardCollection {
        ns: ns.into(),
        uuid: uuid(6),
        epoch: ep,
        key,
        unique,
        initial,
    };
    let range = || KeyPattern::range(&["x"]);
    let dist = |points: &[&[u8]], shards: &[&str]| InitialChunks::Distributed {
        split_points: points.iter().map(|p| p.to_vec()).collect(),
        shards: shards.iter().map(|s| s.to_string()).collect(),
    };
    assert_eq!(
        fx.err(with("nodot", range(), false, InitialChunks::Single, epoch(1))).code(),
        ErrorCode::InvalidNamespace
    );
    assert_eq!(
        fx.err(with("other.c", range(), false, InitialChunks::Single, epoch(1))).code(),
        ErrorCode::NamespaceNotFound
    );
    assert_eq!(
        fx.err(with(NS, KeyPattern { fields: vec![] }, false, InitialChunks::Single, epoch(1))).code(),
        ErrorCode::BadValue
    );
    assert_eq!(
        fx.err(with(NS, KeyPattern::range(&["x", "x"]), false, InitialChunks::Single, epoch(1))).code(),
        ErrorCode::BadValue
    );
    assert_eq!(
        fx.err(with(NS, KeyPattern::range(&["$x"]), false, InitialChunks::Single, epoch(1))).code(),
        ErrorCode::BadValue
    );
    let two_hashed = KeyPattern {
        fields: vec![KeyPattern::hashed("a").fields[0].clone(), KeyPattern::hashed("b").fields[0].clone()],
    };
    assert_eq!(fx.err(with(NS, two_hashed, false, InitialChunks::Single, epoch(1))).code(), ErrorCode::BadValue);
    assert_eq!(
        fx.err(with(NS, KeyPattern::hashed("x"), true, InitialChunks::Single, epoch(1))).code(),
        ErrorCode::BadValue
    );
    assert_eq!(fx.err(with(NS, range(), false, InitialChunks::Single, Epoch::ZERO)).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(with(NS, range(), false, dist(&[b"b", b"a"], &["s0"]), epoch(1))).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(with(NS, range(), false, dist(&[b"a", b"a"], &["s0"]), epoch(1))).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(with(NS, range(), false, dist(&[b"a"], &[]), epoch(1))).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(with(NS, range(), false, dist(&[b"a"], &["s0", "s0"]), epoch(1))).code(), ErrorCode::BadValue);
    assert_eq!(
        fx.err(with(NS, range(), false, dist(&[b"a"], &["s0", "s9"]), epoch(1))).code(),
        ErrorCode::ShardNotFound
    );
    let many: Vec<Vec<u8>> = (0..8192u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let too_many = InitialChunks::Distributed { split_points: many, shards: vec!["s0".into()] };
    assert_eq!(fx.err(with(NS, range(), false, too_many, epoch(1))).code(), ErrorCode::BadValue);
}

#[test]
fn drop_and_reshard_changes_the_epoch() {
    let mut fx = Fx::with_collection(2);
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    let old = fx.coll().epoch;
    assert_eq!(fx.ok(Command::DropCollection { ns: NS.into() }), Reply::Dropped { existed: true });
    assert_eq!(fx.noop(Command::DropCollection { ns: NS.into() }), Reply::Dropped { existed: false });
    assert_eq!(fx.cat.chunks_since(NS, old, ChunkVersion::ZERO), ChangedChunks::NotSharded);
    let mut again = shard_cmd(NS, InitialChunks::Single);
    if let Command::ShardCollection { epoch: e, .. } = &mut again {
        *e = epoch(42);
    }
    fx.ok(again);
    assert!(matches!(fx.cat.chunks_since(NS, old, ChunkVersion::ZERO), ChangedChunks::EpochChanged { .. }));
    // A split based on the old generation is refused.
    let mut stale = fx.split(&ChunkBound::Min, &[b"q"]);
    if let Command::SplitChunk { epoch: e, .. } = &mut stale {
        *e = old;
    }
    assert_eq!(fx.err(stale).code(), ErrorCode::StaleEpoch);
}

#[test]
fn configure_collection() {
    let mut fx = Fx::with_collection(1);
    let cfg = |no_balance, chunk_size_mib| Command::ConfigureCollection {
        ns: NS.into(),
        no_balance,
        chunk_size_mib,
        enable_auto_merge: None,
    };
    fx.ok(cfg(Some(true), Some(64)));
    assert_eq!((fx.coll().no_balance, fx.coll().max_chunk_size_bytes), (true, Some(64 << 20)));
    fx.noop(cfg(Some(true), None));
    fx.ok(cfg(None, Some(0)));
    assert_eq!(fx.coll().max_chunk_size_bytes, None);
    assert_eq!(fx.err(cfg(None, Some(2048))).code(), ErrorCode::BadValue);
    let e = fx.err(Command::ConfigureCollection {
        ns: "db.nope".into(),
        no_balance: Some(true),
        chunk_size_mib: None,
        enable_auto_merge: None,
    });
    assert_eq!(e.code(), ErrorCode::NamespaceNotSharded);

    let merge = |on| Command::ConfigureCollection {
        ns: NS.into(),
        no_balance: None,
        chunk_size_mib: None,
        enable_auto_merge: Some(on),
    };
    fx.ok(merge(false));
    assert!(fx.coll().no_auto_merge);
    assert!(fx.coll().no_balance, "other settings are left as they were");
    fx.noop(merge(false));
    fx.ok(merge(true));
    assert!(!fx.coll().no_auto_merge);
}

#[test]
fn zones_and_ranges() {
    let mut fx = Fx::with_shards(2);
    let zone_range = |min: ChunkBound, max: ChunkBound, zone: Option<&str>| Command::UpdateZoneKeyRange {
        ns: NS.into(),
        min,
        max,
        zone: zone.map(str::to_owned),
    };
    assert_eq!(fx.err(zone_range(k(b"a"), k(b"c"), Some("eu"))), CatalogError::ZoneNotFound { zone: "eu".into() });
    assert_eq!(
        fx.err(Command::AddShardToZone { shard: "s9".into(), zone: "eu".into() }).code(),
        ErrorCode::ShardNotFound
    );
    assert_eq!(fx.err(Command::AddShardToZone { shard: "s0".into(), zone: "".into() }).code(), ErrorCode::BadValue);
    fx.ok(Command::AddShardToZone { shard: "s0".into(), zone: "eu".into() });
    fx.noop(Command::AddShardToZone { shard: "s0".into(), zone: "eu".into() });
    fx.ok(Command::AddShardToZone { shard: "s1".into(), zone: "us".into() });

    fx.ok(zone_range(k(b"c"), k(b"f"), Some("eu")));
    fx.ok(zone_range(ChunkBound::Min, k(b"a"), Some("us")));
    fx.noop(zone_range(k(b"c"), k(b"f"), Some("eu")));
    let ranges: Vec<_> = fx.cat.zone_ranges(NS).iter().map(|r| r.zone.as_str()).collect();
    assert_eq!(ranges, ["us", "eu"]);
    for (min, max) in [(k(b"b"), k(b"d")), (k(b"e"), ChunkBound::Max), (k(b"c"), k(b"f"))] {
        let e = fx.err(zone_range(min, max, Some("us")));
        assert_eq!(e.code(), ErrorCode::RangeOverlapConflict);
    }
    assert_eq!(fx.err(zone_range(k(b"x"), k(b"x"), Some("eu"))).code(), ErrorCode::BadValue);
    assert_eq!(
        fx.err(clone_with_ns(zone_range(k(b"x"), k(b"y"), Some("eu")), "bad")).code(),
        ErrorCode::InvalidNamespace
    );
    // Adjacent ranges do not overlap.
    fx.ok(zone_range(k(b"f"), k(b"g"), Some("eu")));

    // A zone's last shard stays while ranges use it; another shard in the zone frees it.
    let e = fx.err(Command::RemoveShardFromZone { shard: "s0".into(), zone: "eu".into() });
    assert_eq!(e, CatalogError::ZoneStillInUse { zone: "eu".into(), ns: NS.into() });
    fx.ok(Command::AddShardToZone { shard: "s1".into(), zone: "eu".into() });
    fx.ok(Command::RemoveShardFromZone { shard: "s0".into(), zone: "eu".into() });
    fx.noop(Command::RemoveShardFromZone { shard: "s0".into(), zone: "eu".into() });
    assert_eq!(
        fx.err(Command::RemoveShardFromZone { shard: "s0".into(), zone: "nope".into() }).code(),
        ErrorCode::ZoneNotFound
    );
    assert_eq!(fx.cat.zones()["eu"].iter().collect::<Vec<_>>(), ["s1"]);

    // Removal matches exactly.
    fx.noop(zone_range(k(b"c"), k(b"e"), None));
    fx.ok(zone_range(k(b"c"), k(b"f"), None));
    assert_eq!(fx.cat.zone_ranges(NS).len(), 2);
}

fn clone_with_ns(command: Command, new_ns: &str) -> Command {
    let mut c = command;
    if let Command::UpdateZoneKeyRange { ns, .. } = &mut c {
        *ns = new_ns.into();
    }
    c
}

#[test]
fn settings() {
    let mut fx = Fx::new();
    assert_eq!(fx.cat.settings(), &Settings::default());
    let window = ActiveWindow { start: "23:00".into(), stop: "6:00".into() };
    fx.ok(Command::SetSettings(SettingsUpdate {
        balancer_mode: Some(BalancerMode::Off),
        active_window: Some(WindowChange::Set(window.clone())),
        chunk_size_mib: Some(64),
        ..Default::default()
    }));
    let s = fx.cat.settings().clone();
    assert_eq!((s.balancer_enabled(), s.active_window.clone(), s.chunk_size_bytes()), (false, Some(window), 64 << 20));
    fx.noop(Command::SetSettings(SettingsUpdate { chunk_size_mib: Some(64), ..Default::default() }));
    fx.ok(Command::SetSettings(SettingsUpdate {
        active_window: Some(WindowChange::Clear),
        automerge: Some(false),
        ..Default::default()
    }));
    assert_eq!((fx.cat.settings().active_window.clone(), fx.cat.settings().automerge), (None, false));
    for bad in [
        SettingsUpdate { chunk_size_mib: Some(0), ..Default::default() },
        SettingsUpdate { chunk_size_mib: Some(1025), ..Default::default() },
        SettingsUpdate {
            active_window: Some(WindowChange::Set(ActiveWindow { start: "25:00".into(), stop: "01:00".into() })),
            balancer_mode: Some(BalancerMode::Full),
            ..Default::default()
        },
    ] {
        assert_eq!(fx.err(Command::SetSettings(bad)).code(), ErrorCode::BadValue);
    }
}

#[test]
fn replica_group_terms_are_compare_and_set() {
    let mut fx = Fx::with_shards(1);
    let term = |expected_term, new_term, primary: Option<&str>| Command::SetReplicaGroupTerm {
        shard: "s0".into(),
        expected_term,
        new_term,
        primary: primary.map(str::to_owned),
    };
    // Failover: open term 1 with no primary, then promote within it.
    assert_eq!(fx.ok(term(0, 1, None)), Reply::ReplicaGroup { term: 1, primary: None });
    fx.ok(term(1, 1, Some("s0-b:27018")));
    // The term already has a primary: a second promotion in it is refused.
    assert_eq!(fx.err(term(1, 1, Some("s0-c:27018"))).code(), ErrorCode::BadValue);
    // Two arbiters racing from the same term: only the first wins.
    fx.ok(term(1, 2, Some("s0-c:27018")));
    assert_eq!(
        fx.err(term(1, 2, Some("s0-a:27018"))),
        CatalogError::StaleTerm { shard: "s0".into(), expected: 1, current: 2 }
    );
    assert_eq!(fx.err(term(1, 2, None)).code(), ErrorCode::StaleTerm);
    assert_eq!(fx.err(term(2, 1, None)).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(term(2, 3, Some("stranger:1"))).code(), ErrorCode::BadValue);
    assert_eq!(
        fx.err(Command::SetReplicaGroupTerm { shard: "s9".into(), expected_term: 0, new_term: 1, primary: None })
            .code(),
        ErrorCode::ShardNotFound
    );
    let g = &fx.cat.shard("s0").expect("exists").group;
    assert_eq!((g.term, g.primary.as_deref()), (2, Some("s0-c:27018")));
}

#[test]
fn a_replica_group_changes_one_member_per_configuration_version() {
    use shoal_proto::catalog::MemberChange;
    let mut fx = Fx::with_shards(1);
    let reconfig =
        |expected_version, change| Command::ReconfigReplicaGroup { shard: "s0".into(), expected_version, change };
    let members = fx.cat.shard("s0").expect("exists").group.members.clone();
    // An added member is pending: it votes only once the arbiter promotes it.
    let added = fx.ok(reconfig(1, MemberChange::Add("s0-d:27018".into())));
    assert_eq!(
        added,
        Reply::ReplicaGroupMembers { members: members.clone(), pending: vec!["s0-d:27018".into()], config_version: 2 }
    );
    // Computed from an older version: refused (compare-and-set).
    let stale = fx.err(reconfig(1, MemberChange::Add("s0-e:27018".into())));
    assert_eq!(stale.code(), ErrorCode::NewReplicaSetConfigurationIncompatible);
    assert_eq!(
        fx.err(reconfig(2, MemberChange::Add("s0-d:27018".into()))).code(),
        ErrorCode::NewReplicaSetConfigurationIncompatible
    );
    assert_eq!(
        fx.err(reconfig(2, MemberChange::Remove("stranger:1".into()))).code(),
        ErrorCode::NewReplicaSetConfigurationIncompatible
    );
    assert_eq!(fx.err(reconfig(2, MemberChange::Add("bad host".into()))).code(), ErrorCode::BadValue);
    // A pending member may not be made primary.
    let pending_primary = Command::SetReplicaGroupTerm {
        shard: "s0".into(),
        expected_term: 0,
        new_term: 1,
        primary: Some("s0-d:27018".into()),
    };
    assert_eq!(fx.err(pending_primary).code(), ErrorCode::BadValue);
    let promoted = fx.ok(Command::PromoteMember { shard: "s0".into(), member: "s0-d:27018".into() });
    let mut grown = members.clone();
    grown.push("s0-d:27018".into());
    assert_eq!(promoted, Reply::ReplicaGroupMembers { members: grown.clone(), pending: vec![], config_version: 3 });
    // Promoting again changes nothing; promoting a stranger is refused.
    fx.ok(Command::PromoteMember { shard: "s0".into(), member: "s0-d:27018".into() });
    assert_eq!(fx.cat.shard("s0").expect("exists").group.config_version, 3);
    assert_eq!(fx.err(Command::PromoteMember { shard: "s0".into(), member: "x:1".into() }).code(), ErrorCode::BadValue);
    // The primary cannot be removed; a secondary can.
    fx.ok(Command::SetReplicaGroupTerm {
        shard: "s0".into(),
        expected_term: 0,
        new_term: 1,
        primary: Some(members[0].clone()),
    });
    assert_eq!(
        fx.err(reconfig(3, MemberChange::Remove(members[0].clone()))).code(),
        ErrorCode::NewReplicaSetConfigurationIncompatible
    );
    fx.ok(reconfig(3, MemberChange::Remove(members[1].clone())));
    let group = &fx.cat.shard("s0").expect("exists").group;
    assert!(!group.members.contains(&members[1]) && group.config_version == 4);
    // Another shard's member cannot be added.
    let mut two = Fx::with_shards(2);
    let other = two.cat.shard("s1").expect("exists").group.members[0].clone();
    assert_eq!(
        two.err(Command::ReconfigReplicaGroup {
            shard: "s0".into(),
            expected_version: 1,
            change: MemberChange::Add(other)
        })
        .code(),
        ErrorCode::IllegalOperation
    );
}

#[test]
fn cluster_id_is_set_once() {
    let mut c = ClusterCatalog::new();
    assert_eq!(c.cluster_id(), None);
    let first = Epoch([1; 12]);
    c.apply(&Command::InitCluster { cluster_id: first }, 1).expect("init");
    let version = c.version();
    c.apply(&Command::InitCluster { cluster_id: Epoch([2; 12]) }, 2).expect("repeat");
    assert_eq!(c.cluster_id(), Some(first), "the first identity wins");
    assert_eq!(c.version(), version, "a repeat changes nothing");
}
