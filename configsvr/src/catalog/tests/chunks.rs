//! Split, merge, migration commits, the jumbo flag, routing reads and fencing.

use shoal_proto::ErrorCode;

use super::*;

fn v(major: u32, minor: u32) -> ChunkVersion {
    ChunkVersion::new(major, minor)
}

fn with_fencing(mut cmd: Command, f: Fencing) -> Command {
    match &mut cmd {
        Command::SplitChunk { fencing, .. }
        | Command::MergeChunks { fencing, .. }
        | Command::CommitMigration { fencing, .. }
        | Command::SetChunkJumbo { fencing, .. } => *fencing = Some(f),
        _ => panic!("not a chunk command"),
    }
    cmd
}

#[test]
fn split_versions_follow_the_owner_shard_rule() {
    let mut fx = Fx::with_collection(2);
    // s0 holds the collection version 1|0, so the major is bumped too (SERVER-41480).
    let Reply::Chunks { collection_version, changed } = fx.ok(fx.split(&ChunkBound::Min, &[b"m"])) else { panic!() };
    assert_eq!(collection_version.version, v(2, 2));
    assert_eq!(
        changed.iter().map(|c| (c.min.clone(), c.max.clone(), c.version)).collect::<Vec<_>>(),
        [(ChunkBound::Min, k(b"m"), v(2, 1)), (k(b"m"), ChunkBound::Max, v(2, 2))]
    );
    // Move [m, Max) away: s1 gets 3|0, the control chunk on s0 3|1 = collection version.
    fx.ok(fx.migrate(&k(b"m"), "s1"));
    assert_eq!(fx.layout(), [(ChunkBound::Min, v(3, 1), "s0".into()), (k(b"m"), v(3, 0), "s1".into())]);
    // s1's version 3|0 is below the collection version: only minors are added after it.
    fx.ok(fx.split(&k(b"m"), &[b"q", b"t"]));
    let versions: Vec<_> = fx.layout().into_iter().map(|(_, v, _)| v).collect();
    assert_eq!(versions, [v(3, 1), v(3, 2), v(3, 3), v(3, 4)]);
    assert_eq!(fx.coll().version, v(3, 4));
    // Splits keep history and owner; the changelog names multi-splits.
    assert_eq!(fx.coll().chunks[&k(b"t")].history, fx.coll().chunks[&k(b"q")].history);
    assert_eq!(fx.cat.changelog().entries().next_back().map(|e| e.what.as_str()), Some("multi-split"));
}

#[test]
fn split_refusals() {
    let mut fx = Fx::with_collection(2);
    fx.ok(fx.split(&ChunkBound::Min, &[b"f", b"p"]));
    let mid = k(b"f"); // chunk [f, p)
    for points in [&[][..], &[b"f".as_slice()], &[b"p"], &[b"a"], &[b"z"], &[b"k", b"h"], &[b"h", b"h"], &[b"h", b"p"]]
    {
        let e = fx.err(fx.split(&mid, points));
        assert_eq!(e.code(), ErrorCode::CannotSplit, "{points:?}: {e}");
    }
    let too_many: Vec<Vec<u8>> = (0..=8192u32).map(|i| [b"g".as_slice(), &i.to_be_bytes()].concat()).collect();
    let mut cmd = fx.split(&mid, &[]);
    if let Command::SplitChunk { split_points, .. } = &mut cmd {
        *split_points = too_many;
    }
    assert_eq!(fx.err(cmd).code(), ErrorCode::BadValue);

    // Compare-and-set: a split based on an older read is refused.
    let stale = fx.split(&mid, &[b"h"]);
    fx.ok(fx.split(&mid, &[b"k"]));
    let e = fx.err(stale.clone());
    assert!(matches!(e, CatalogError::StaleChunkVersion { .. }), "{e}");
    assert_eq!(e.code(), ErrorCode::ConflictingOperationInProgress);
    // No chunk starts at h.
    let mut not_a_chunk = stale;
    if let Command::SplitChunk { min, .. } = &mut not_a_chunk {
        *min = k(b"h");
    }
    assert_eq!(fx.err(not_a_chunk), CatalogError::ChunkNotFound { ns: NS.into(), min: k(b"h"), max: k(b"k") });
    let mut wrong_epoch = fx.split(&mid, &[b"h"]);
    if let Command::SplitChunk { epoch: e, .. } = &mut wrong_epoch {
        *e = epoch(99);
    }
    assert_eq!(fx.err(wrong_epoch).code(), ErrorCode::StaleEpoch);
    let mut unsharded = fx.split(&mid, &[b"h"]);
    if let Command::SplitChunk { ns, .. } = &mut unsharded {
        *ns = "db.other".into();
    }
    assert_eq!(fx.err(unsharded).code(), ErrorCode::NamespaceNotSharded);
}

#[test]
fn merge_and_its_refusals() {
    let mut fx = Fx::with_collection(2);
    fx.ok(fx.split(&ChunkBound::Min, &[b"c", b"f", b"p", b"t"]));
    fx.ok(fx.migrate(&k(b"t"), "s1"));
    let cv = fx.coll().version;

    let e = fx.err(fx.merge(&k(b"c"), &k(b"f")));
    assert_eq!(e.code(), ErrorCode::IllegalOperation, "a single chunk: {e}");
    assert_eq!(fx.err(fx.merge(&k(b"d"), &k(b"p"))).code(), ErrorCode::IllegalOperation, "min inside a chunk");
    assert_eq!(fx.err(fx.merge(&k(b"c"), &k(b"q"))).code(), ErrorCode::IllegalOperation, "max inside a chunk");
    assert_eq!(fx.err(fx.merge(&k(b"p"), &k(b"c"))).code(), ErrorCode::IllegalOperation, "empty range");
    let e = fx.err(fx.merge(&k(b"f"), &ChunkBound::Max));
    assert!(matches!(&e, CatalogError::CannotMerge { reason, .. } if reason.contains("shards")), "{e}");
    let mut stale = fx.merge(&k(b"c"), &k(b"t"));
    if let Command::MergeChunks { expected_versions, .. } = &mut stale {
        expected_versions[1] = v(1, 0);
    }
    assert_eq!(fx.err(stale.clone()).code(), ErrorCode::ConflictingOperationInProgress);
    if let Command::MergeChunks { expected_versions, .. } = &mut stale {
        expected_versions.truncate(2);
    }
    assert_eq!(fx.err(stale).code(), ErrorCode::ConflictingOperationInProgress);

    let Reply::Chunks { collection_version, changed } = fx.ok(fx.merge(&k(b"c"), &k(b"t"))) else { panic!() };
    assert_eq!(collection_version.version, v(cv.major + 1, 0));
    assert_eq!((changed.len(), &changed[0].min, &changed[0].max), (1, &k(b"c"), &k(b"t")));
    assert_eq!(fx.layout().len(), 3);
}

#[test]
fn migration_versions_control_chunk_and_history() {
    let mut fx = Fx::with_collection(3);
    fx.ok(fx.split(&ChunkBound::Min, &[b"f", b"p"]));
    let cv = fx.coll().version;
    let Reply::Chunks { collection_version, changed } = fx.ok(fx.migrate(&k(b"p"), "s1")) else { panic!() };
    let next = cv.major + 1;
    assert_eq!(collection_version.version, v(next, 1));
    // The control chunk is the donor's lowest remaining one.
    assert_eq!(
        changed.iter().map(|c| (c.min.clone(), c.version, c.shard.as_str())).collect::<Vec<_>>(),
        [(ChunkBound::Min, v(next, 1), "s0"), (k(b"p"), v(next, 0), "s1")]
    );
    let moved = &fx.coll().chunks[&k(b"p")];
    assert_eq!((moved.history.len(), moved.history[0].shard.as_str()), (2, "s1"));
    assert_eq!(moved.on_current_shard_since, moved.history[0].valid_after);
    assert_eq!(fx.cat.shard_version(NS, "s2").map(|p| p.version), Some(ChunkVersion::ZERO));

    // A donor giving away its only chunk has no control chunk.
    let Reply::Chunks { collection_version, changed } = fx.ok(fx.migrate(&k(b"p"), "s2")) else { panic!() };
    assert_eq!((changed.len(), collection_version.version), (1, v(next + 1, 0)));
    assert_eq!(fx.cat.shard_version(NS, "s1").map(|p| p.version), Some(ChunkVersion::ZERO));

    // History stays bounded however often a chunk moves; moving clears jumbo.
    let (epoch, min) = (fx.coll().epoch, k(b"p"));
    fx.ok(Command::SetChunkJumbo {
        ns: NS.into(),
        epoch,
        min: min.clone(),
        expected_version: fx.version_at(&min),
        jumbo: true,
        fencing: None,
    });
    for i in 0..40 {
        fx.ok(fx.migrate(&min, if i % 2 == 0 { "s1" } else { "s2" }));
    }
    let chunk = &fx.coll().chunks[&min];
    assert_eq!((chunk.history.len(), chunk.jumbo), (CHUNK_HISTORY_ENTRIES_MAX, false));
}

#[test]
fn migration_refusals() {
    let mut fx = Fx::with_collection(3);
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    fx.ok(Command::RemoveShard { shard: "s2".into() });
    let base = fx.migrate(&k(b"m"), "s1");
    let edit = |f: &dyn Fn(&mut Command)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    let set_to = |to: &str| {
        let to = to.to_owned();
        edit(&move |c| {
            if let Command::CommitMigration { to: t, .. } = c {
                *t = to.clone();
            }
        })
    };
    assert_eq!(fx.err(set_to("s0")).code(), ErrorCode::IllegalOperation);
    assert_eq!(fx.err(set_to("s9")).code(), ErrorCode::ShardNotFound);
    assert_eq!(fx.err(set_to("s2")), CatalogError::ShardDraining { shard: "s2".into() });
    let wrong_from = edit(&|c| {
        if let Command::CommitMigration { from, .. } = c {
            *from = "s1".into();
        }
    });
    let e = fx.err(wrong_from);
    assert!(matches!(e, CatalogError::ChunkNotOnShard { .. }), "{e}");
    let wrong_max = edit(&|c| {
        if let Command::CommitMigration { max, .. } = c {
            *max = k(b"z");
        }
    });
    assert!(matches!(fx.err(wrong_max), CatalogError::ChunkNotFound { .. }));
    let wrong_version = edit(&|c| {
        if let Command::CommitMigration { expected_version, .. } = c {
            *expected_version = v(1, 0);
        }
    });
    assert!(matches!(fx.err(wrong_version), CatalogError::StaleChunkVersion { .. }));
}

#[test]
fn two_commits_on_the_same_chunk_version_only_the_first_wins() {
    let mut fx = Fx::with_collection(3);
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    // Two balancers read the same version and both try to move the chunk.
    let (to_s1, to_s2) = (fx.migrate(&k(b"m"), "s1"), fx.migrate(&k(b"m"), "s2"));
    fx.ok(to_s1);
    let e = fx.err(to_s2);
    assert!(matches!(e, CatalogError::StaleChunkVersion { .. }), "{e}");
    // A split and a migration of the same read: the split loses.
    let (split, mv) = (fx.split(&ChunkBound::Min, &[b"c"]), fx.migrate(&ChunkBound::Min, "s2"));
    fx.ok(mv);
    assert_eq!(fx.err(split).code(), ErrorCode::ConflictingOperationInProgress);
}

#[test]
fn jumbo_flag() {
    let mut fx = Fx::with_collection(1);
    let epoch = fx.coll().epoch;
    let jumbo = |jumbo, expected_version| Command::SetChunkJumbo {
        ns: NS.into(),
        epoch,
        min: ChunkBound::Min,
        expected_version,
        jumbo,
        fencing: None,
    };
    let catalog_version = fx.cat.version();
    // The flag travels like any chunk change: a minor bump above the collection version.
    let Reply::Chunks { collection_version, .. } = fx.ok(jumbo(true, v(1, 0))) else { panic!() };
    assert!(fx.coll().chunks[&ChunkBound::Min].jumbo);
    assert_eq!((collection_version.version, fx.version_at(&ChunkBound::Min)), (v(1, 1), v(1, 1)));
    assert_eq!(fx.cat.version(), catalog_version + 1);
    fx.noop(jumbo(true, v(1, 1)));
    assert_eq!(fx.err(jumbo(false, v(1, 0))).code(), ErrorCode::ConflictingOperationInProgress);
    fx.ok(jumbo(false, v(1, 1)));
    // A split clears it on the pieces.
    fx.ok(jumbo(true, v(1, 2)));
    fx.ok(fx.split(&ChunkBound::Min, &[b"m"]));
    assert!(fx.coll().chunks.values().all(|c| !c.jumbo));
}

#[test]
fn routing_reads_and_incremental_refresh() {
    let mut fx = Fx::with_collection(2);
    assert!(fx.cat.routing_table("db.nope").is_none() && fx.cat.collection_version("db.nope").is_none());
    fx.ok(fx.split(&ChunkBound::Min, &[b"f", b"p"]));
    let mut cached = fx.cat.routing_table(NS).expect("sharded");
    let since = cached.version;
    assert_eq!(cached.chunk_for(&k(b"g")).map(|c| &c.min), Some(&k(b"f")));
    assert_eq!(cached.chunk_for(&ChunkBound::Min).map(|c| &c.min), Some(&ChunkBound::Min));
    assert!(cached.chunk_for(&ChunkBound::Max).is_none());

    fx.ok(fx.migrate(&k(b"f"), "s1"));
    fx.ok(fx.split(&k(b"p"), &[b"t"]));
    fx.ok(fx.merge(&k(b"p"), &ChunkBound::Max));
    let current = cached.epoch;
    let ChangedChunks::Changed { collection_version, chunks } = fx.cat.chunks_since(NS, current, since) else {
        panic!()
    };
    assert!(chunks.iter().all(|c| c.version > since));
    cached.merge_changes(collection_version.version, &chunks);
    assert_eq!(Some(cached.clone()), fx.cat.routing_table(NS));
    assert_eq!(cached.collection_version(), fx.cat.collection_version(NS).expect("sharded"));
    assert_eq!(cached.shard_version("s1"), fx.cat.shard_version(NS, "s1").expect("sharded").version);
    let ChangedChunks::Changed { chunks, .. } = fx.cat.chunks_since(NS, current, cached.version) else { panic!() };
    assert!(chunks.is_empty());
    assert!(matches!(fx.cat.chunks_since(NS, epoch(3), since), ChangedChunks::EpochChanged { .. }));
}

#[test]
fn fencing_tokens_guard_chunk_commits() {
    let mut fx = Fx::with_collection(2);
    let Reply::Lease { token: t1, .. } =
        fx.ok(Command::AcquireLease { name: BALANCER_LEASE.into(), holder: "router-1".into(), ttl_ms: 10_000 })
    else {
        panic!()
    };
    let f1 = Fencing { lease: BALANCER_LEASE.into(), token: t1 };
    fx.ok(with_fencing(fx.split(&ChunkBound::Min, &[b"m"]), f1.clone()));
    let wrong_name = Fencing { lease: "other".into(), token: t1 };
    assert_eq!(fx.err(with_fencing(fx.migrate(&k(b"m"), "s1"), wrong_name)).code(), ErrorCode::LockBusy);

    // router-1 stalls past its lease; router-2 takes over with a newer token.
    fx.now += 10_000;
    let e = fx.err(with_fencing(fx.migrate(&k(b"m"), "s1"), f1.clone()));
    assert_eq!(e, CatalogError::StaleFencingToken { lease: BALANCER_LEASE.into(), presented: t1, current: None });
    let Reply::Lease { token: t2, .. } =
        fx.ok(Command::AcquireLease { name: BALANCER_LEASE.into(), holder: "router-2".into(), ttl_ms: 10_000 })
    else {
        panic!()
    };
    assert!(t2 > t1);
    let e = fx.err(with_fencing(fx.migrate(&k(b"m"), "s1"), f1));
    assert_eq!(e, CatalogError::StaleFencingToken { lease: BALANCER_LEASE.into(), presented: t1, current: Some(t2) });
    let f2 = Fencing { lease: BALANCER_LEASE.into(), token: t2 };
    fx.ok(with_fencing(fx.migrate(&k(b"m"), "s1"), f2.clone()));
    // Releasing the lease retires its token.
    fx.ok(Command::ReleaseLease { name: BALANCER_LEASE.into(), holder: "router-2".into(), token: t2 });
    assert_eq!(fx.err(with_fencing(fx.split(&k(b"m"), &[b"q"]), f2)).code(), ErrorCode::LockBusy);
}
