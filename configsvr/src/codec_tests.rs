//! The codec's format: exact bytes of a known value, round trips of a catalog that uses every
//! shape the Raft log holds, and values written by the earlier JSON format.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::*;
use crate::catalog::{
    ChunkBound, ClusterCatalog, Command, Detail, Epoch, InitialChunks, KeyField, KeyFieldKind, KeyPattern,
    SettingsUpdate,
};
use crate::raft::types::{RaftReply, RaftRequest};

const T0: u64 = 1_700_000_000_000;

/// A catalog with shards, a database, a pre-split sharded collection, a zone, settings, a lease
/// and changelog entries.
fn busy_catalog() -> ClusterCatalog {
    let mut cat = ClusterCatalog::new();
    let mut apply = |cmd: Command| {
        if let Err(e) = cat.apply(&cmd, T0) {
            panic!("`{cmd}` refused: {e}");
        }
    };
    for s in ["s0", "s1"] {
        apply(Command::AddShard { shard: s.into(), replica_set: format!("rs-{s}"), members: vec![format!("{s}:1")] });
    }
    apply(Command::CreateDatabase { name: "db".into(), primary: "s0".into(), uuid: Uuid::from_bytes([1; 16]) });
    apply(Command::ShardCollection {
        ns: "db.c".into(),
        uuid: Uuid::from_bytes([2; 16]),
        epoch: Epoch([3; 12]),
        key: KeyPattern { fields: vec![KeyField { name: "x".into(), kind: KeyFieldKind::Hashed }] },
        unique: false,
        initial: InitialChunks::Distributed {
            split_points: vec![vec![0x10, 0xff], vec![0x80, 0, 1]],
            shards: vec!["s0".into(), "s1".into()],
        },
    });
    apply(Command::AddShardToZone { shard: "s1".into(), zone: "east".into() });
    apply(Command::UpdateZoneKeyRange {
        ns: "db.c".into(),
        min: ChunkBound::Min,
        max: ChunkBound::Key(vec![0x10, 0xff]),
        zone: Some("east".into()),
    });
    apply(Command::SetSettings(SettingsUpdate {
        chunk_size_mib: Some(64),
        autosplit: Some(false),
        ..Default::default()
    }));
    apply(Command::AcquireLease { name: "balancer".into(), holder: "router-1".into(), ttl_ms: 5_000 });
    apply(Command::LogChange {
        what: "moveChunk.start".into(),
        ns: "db.c".into(),
        details: BTreeMap::from([
            ("min".to_owned(), Detail::Bound(ChunkBound::Min)),
            ("docs".to_owned(), Detail::Int(-3)),
            ("list".to_owned(), Detail::List(vec![Detail::Bool(true), Detail::Str("é".into())])),
        ]),
    });
    cat
}

#[test]
fn a_command_has_these_exact_bytes() {
    let bytes = encode(&Command::DropDatabase { name: "db".into() }).expect("encode");
    let mut expected = vec![TAG, VERSION, 0x81, 0xac];
    expected.extend_from_slice(b"DropDatabase");
    expected.extend_from_slice(&[0x81, 0xa4]);
    expected.extend_from_slice(b"name");
    expected.push(0xa2);
    expected.extend_from_slice(b"db");
    assert_eq!(bytes, expected);
    assert_eq!(decode::<Command>(&bytes).expect("decode"), Command::DropDatabase { name: "db".into() });
}

#[test]
fn a_catalog_round_trips() {
    let cat = busy_catalog();
    let bytes = encode(&cat).expect("encode");
    assert_eq!(&bytes[..2], &[TAG, VERSION]);
    assert_eq!(decode::<ClusterCatalog>(&bytes).expect("decode"), cat);
    // Smaller than the JSON it replaces (chunk bounds were arrays of decimal numbers).
    assert!(bytes.len() < serde_json::to_vec(&cat).expect("json").len());
}

#[test]
fn log_payloads_round_trip() {
    let req = RaftRequest { issued_at_ms: T0, command: Command::MovePrimary { name: "db".into(), to: "s1".into() } };
    let back: RaftRequest = decode(&encode(&req).expect("encode")).expect("decode");
    assert_eq!(back.issued_at_ms, T0);
    assert_eq!(back.command, req.command);

    let mut cat = busy_catalog();
    let refusal = cat.apply(&Command::DropDatabase { name: "nope".into() }, T0).err();
    let reply = RaftReply { catalog_version: 7, outcome: refusal.map(Err) };
    let back: RaftReply = decode(&encode(&reply).expect("encode")).expect("decode");
    assert_eq!(back.catalog_version, 7);
    assert_eq!(format!("{:?}", back.outcome), format!("{:?}", reply.outcome));
}

#[test]
fn values_written_as_json_by_earlier_versions_still_decode() {
    let cat = busy_catalog();
    let json = serde_json::to_vec(&cat).expect("json");
    assert_eq!(decode::<ClusterCatalog>(&json).expect("legacy decode"), cat);
    let cmd: Command = decode(br#"{"DropCollection":{"ns":"db.c"}}"#).expect("legacy command");
    assert_eq!(cmd, Command::DropCollection { ns: "db.c".into() });
}

#[test]
fn an_unknown_version_or_a_truncated_value_is_an_error() {
    assert!(decode::<Command>(&[TAG, VERSION + 1, 0x80]).is_err());
    assert!(decode::<Command>(&[TAG]).is_err());
    let bytes = encode(&busy_catalog()).expect("encode");
    assert!(decode::<ClusterCatalog>(&bytes[..bytes.len() / 2]).is_err());
    assert!(decode::<ClusterCatalog>(&[]).is_err());
}
