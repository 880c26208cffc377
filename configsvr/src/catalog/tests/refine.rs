//! `RefineShardKey`: bounds gain the MinKey suffix in order, jumbo flags clear, the collection
//! takes a new generation, zone ranges follow, and refusals change nothing.

use shoal_proto::ErrorCode;

use super::*;

/// What the router sends for one new field: the keystring encoding of MinKey.
const MIN_KEY: &[u8] = &[0x0A];

fn refine(fx: &Fx, fields: &[KeyField], new_epoch: Epoch) -> Command {
    Command::RefineShardKey {
        ns: NS.into(),
        epoch: fx.coll().epoch,
        new_epoch,
        key: KeyPattern { fields: fields.to_vec() },
        bound_suffix: MIN_KEY.repeat(fields.len().saturating_sub(fx.coll().key.fields.len())),
    }
}

fn range(name: &str) -> KeyField {
    KeyField { name: name.into(), kind: KeyFieldKind::Range }
}

fn hashed(name: &str) -> KeyField {
    KeyField { name: name.into(), kind: KeyFieldKind::Hashed }
}

fn with_suffix(bytes: &[u8]) -> ChunkBound {
    ChunkBound::Key([bytes, MIN_KEY].concat())
}

/// `db.c` on `{x: 1}` cut at f and p, `[f, p)` on s1 and jumbo, zone range `[f, p)` in "eu".
fn jumbo_fixture() -> Fx {
    let mut fx = Fx::with_collection(2);
    fx.ok(fx.split(&ChunkBound::Min, &[b"f", b"p"]));
    fx.ok(fx.migrate(&k(b"f"), "s1"));
    let c = &fx.coll().chunks[&k(b"f")];
    let (min, expected_version) = (c.min.clone(), c.version);
    fx.ok(Command::SetChunkJumbo {
        ns: NS.into(),
        epoch: fx.coll().epoch,
        min,
        expected_version,
        jumbo: true,
        fencing: None,
    });
    fx.ok(Command::AddShardToZone { shard: "s1".into(), zone: "eu".into() });
    fx.ok(Command::UpdateZoneKeyRange { ns: NS.into(), min: k(b"f"), max: k(b"p"), zone: Some("eu".into()) });
    fx
}

#[test]
fn refine_appends_min_key_keeps_placement_and_clears_jumbo() {
    let mut fx = jumbo_fixture();
    let before = fx.coll().clone();
    let old_epoch = before.epoch;

    let Reply::ShardKeyRefined { version } = fx.ok(refine(&fx, &[range("x"), range("y")], epoch(8))) else {
        panic!("wrong response")
    };
    let after = fx.coll().clone();
    assert_eq!(after.key, KeyPattern::range(&["x", "y"]));
    assert_eq!((after.epoch, version.epoch), (epoch(8), epoch(8)));
    assert!(after.timestamp > before.timestamp, "a new generation is newer");
    assert_eq!((after.version, version.version, after.uuid), (before.version, before.version, before.uuid));

    // Same owners and versions, bounds extended, ends untouched, no jumbo left.
    let bounds: Vec<_> = after.chunks.values().map(|c| (c.min.clone(), c.max.clone())).collect();
    assert_eq!(
        bounds,
        [
            (ChunkBound::Min, with_suffix(b"f")),
            (with_suffix(b"f"), with_suffix(b"p")),
            (with_suffix(b"p"), ChunkBound::Max)
        ]
    );
    let owners = |c: &Collection| c.chunks.values().map(|c| (c.shard.clone(), c.version)).collect::<Vec<_>>();
    assert_eq!(owners(&after), owners(&before));
    assert!(before.chunks.values().any(|c| c.jumbo) && after.chunks.values().all(|c| !c.jumbo));

    // Zone ranges follow; the changelog says what happened.
    let zone = &fx.cat.zone_ranges(NS)[0];
    assert_eq!((&zone.min, &zone.max, zone.zone.as_str()), (&with_suffix(b"f"), &with_suffix(b"p"), "eu"));
    let last = fx.cat.changelog().entries().next_back().expect("logged");
    assert_eq!(last.what, "refineCollectionShardKey.end");
    assert_eq!(last.details.get("jumboCleared"), Some(&Detail::Int(1)));

    // Routers and shards at the old epoch must reload; old-epoch chunk commits are refused.
    assert!(matches!(fx.cat.chunks_since(NS, old_epoch, ChunkVersion::ZERO), ChangedChunks::EpochChanged { .. }));
    let mut stale = fx.split(&with_suffix(b"f"), &[b"g"]);
    if let Command::SplitChunk { epoch, .. } = &mut stale {
        *epoch = old_epoch;
    }
    assert_eq!(fx.err(stale).code(), ErrorCode::StaleEpoch);

    // The formerly single-key range splits inside itself: {x: f, y: <anything above MinKey>}.
    let inside = [b"f".as_slice(), &[0x14]].concat(); // {x: "f", y: null}
    fx.ok(fx.split(&with_suffix(b"f"), &[&inside]));
    assert_eq!(fx.coll().chunks.len(), 4);
}

#[test]
fn refine_to_the_same_key_is_a_noop() {
    let mut fx = jumbo_fixture();
    let cmd = refine(&fx, &[range("x")], epoch(8));
    fx.noop(cmd);
    assert_eq!(fx.coll().epoch, epoch(7));
}

#[test]
fn hashed_keys_keep_their_hashed_field() {
    let mut fx = Fx::with_shards(2);
    let mut cmd = shard_cmd(NS, InitialChunks::Single);
    if let Command::ShardCollection { key, .. } = &mut cmd {
        *key = KeyPattern::hashed("h");
    }
    fx.ok(cmd);
    assert_eq!(fx.err(refine(&fx, &[range("h"), range("y")], epoch(8))).code(), ErrorCode::InvalidOptions);
    assert_eq!(fx.err(refine(&fx, &[hashed("h"), hashed("y")], epoch(8))).code(), ErrorCode::BadValue);
    fx.ok(refine(&fx, &[hashed("h"), range("y")], epoch(8)));
    assert_eq!(fx.coll().key.fields, [hashed("h"), range("y")]);
}

#[test]
fn refusals_change_nothing() {
    let mut fx = jumbo_fixture();
    // Not a suffix extension of {x: 1}.
    for fields in [vec![range("y"), range("x")], vec![range("y")], vec![hashed("x"), range("y")]] {
        let e = fx.err(refine(&fx, &fields, epoch(8)));
        assert_eq!(e.code(), ErrorCode::InvalidOptions, "{fields:?}: {e}");
    }
    assert_eq!(fx.err(refine(&fx, &[range("x"), range("x")], epoch(8))).code(), ErrorCode::BadValue);

    let mut cmd = refine(&fx, &[range("x"), range("y")], epoch(8));
    if let Command::RefineShardKey { ns, .. } = &mut cmd {
        *ns = "db.other".into();
    }
    assert_eq!(fx.err(cmd).code(), ErrorCode::NamespaceNotSharded);
    let mut cmd = refine(&fx, &[range("x"), range("y")], epoch(8));
    if let Command::RefineShardKey { epoch: e, .. } = &mut cmd {
        *e = epoch(99);
    }
    assert_eq!(fx.err(cmd).code(), ErrorCode::StaleEpoch);
    for new_epoch in [Epoch::ZERO, epoch(7)] {
        assert_eq!(fx.err(refine(&fx, &[range("x"), range("y")], new_epoch)).code(), ErrorCode::BadValue);
    }
    let mut cmd = refine(&fx, &[range("x"), range("y")], epoch(8));
    if let Command::RefineShardKey { bound_suffix, .. } = &mut cmd {
        bound_suffix.clear();
    }
    assert_eq!(fx.err(cmd).code(), ErrorCode::BadValue);
}

#[test]
fn a_suffix_that_would_reorder_bounds_is_refused() {
    // Bounds that are not prefix-free (f is a prefix of f\x05): appending 0x0A reorders them.
    let mut fx = Fx::with_collection(2);
    fx.ok(fx.split(&ChunkBound::Min, &[b"f", b"f\x05"]));
    let e = fx.err(refine(&fx, &[range("x"), range("y")], epoch(8)));
    assert_eq!(e.code(), ErrorCode::BadValue, "{e}");
}
