//! The command table's facts, entry by entry, and the rules that hold across it.

use super::*;

/// (name, kind, retryable, timed, secondary_ok, admin_only, op_query, explainable, needs auth)
type Facts = (&'static str, Kind, bool, bool, bool, bool, bool, bool, bool);

#[rustfmt::skip]
const EXPECTED: &[Facts] = &[
    ("hello",                        Info,     false, true,  true,  false, true,  false, false),
    ("isMaster",                     Info,     false, true,  true,  false, true,  false, false),
    ("ping",                         Info,     false, true,  true,  false, true,  false, false),
    ("buildInfo",                    Info,     false, true,  true,  false, true,  false, false),
    ("serverStatus",                 Info,     false, true,  true,  false, true,  false, true),
    ("getParameter",                 Info,     false, true,  true,  true,  false, false, true),
    ("getLog",                       Info,     false, true,  true,  true,  false, false, true),
    ("whatsmyuri",                   Info,     false, true,  true,  false, false, false, false),
    ("connectionStatus",             Info,     false, true,  true,  false, false, false, false),
    ("endSessions",                  Info,     false, true,  true,  false, false, false, false),
    ("getLastError",                 Info,     false, true,  true,  false, true,  false, false),
    ("getnonce",                     Info,     false, true,  true,  false, true,  false, false),
    ("hostInfo",                     Info,     false, true,  true,  false, false, false, true),
    ("getCmdLineOpts",               Info,     false, true,  true,  true,  false, false, true),
    ("listCommands",                 Info,     false, true,  true,  false, false, false, false),
    ("currentOp",                    Info,     false, true,  true,  true,  false, false, true),
    ("killOp",                       Info,     false, true,  true,  true,  false, false, true),
    ("killSessions",                 Info,     false, true,  true,  false, false, false, true),
    ("killAllSessions",              Info,     false, true,  true,  false, false, false, true),
    ("top",                          Info,     false, true,  true,  true,  false, false, true),
    ("profile",                      Info,     false, true,  true,  false, false, false, true),
    ("saslStart",                    Info,     false, true,  true,  false, true,  false, false),
    ("saslContinue",                 Info,     false, true,  true,  false, true,  false, false),
    ("logout",                       Info,     false, true,  true,  false, false, false, false),
    ("authenticate",                 Info,     false, true,  true,  false, true,  false, false),
    ("createUser",                   UserAdmin, false, true, false, false, false, false, true),
    ("_shoalRestoreUser",            UserAdmin, false, true, false, false, false, false, true),
    ("updateUser",                   UserAdmin, false, true, false, false, false, false, true),
    ("dropUser",                     UserAdmin, false, true, false, false, false, false, true),
    ("dropAllUsersFromDatabase",     UserAdmin, false, true, false, false, false, false, true),
    ("grantRolesToUser",             UserAdmin, false, true, false, false, false, false, true),
    ("revokeRolesFromUser",          UserAdmin, false, true, false, false, false, false, true),
    ("usersInfo",                    UserAdmin, false, true, false, false, false, false, true),
    ("createRole",                   UserAdmin, false, true, false, false, false, false, true),
    ("updateRole",                   UserAdmin, false, true, false, false, false, false, true),
    ("dropRole",                     UserAdmin, false, true, false, false, false, false, true),
    ("dropAllRolesFromDatabase",     UserAdmin, false, true, false, false, false, false, true),
    ("grantPrivilegesToRole",        UserAdmin, false, true, false, false, false, false, true),
    ("revokePrivilegesFromRole",     UserAdmin, false, true, false, false, false, false, true),
    ("grantRolesToRole",             UserAdmin, false, true, false, false, false, false, true),
    ("revokeRolesFromRole",          UserAdmin, false, true, false, false, false, false, true),
    ("rolesInfo",                    UserAdmin, false, true, false, false, false, false, true),
    ("insert",                       Write,    true,  true,  false, false, false, false, true),
    ("update",                       Write,    true,  true,  false, false, false, true,  true),
    ("delete",                       Write,    true,  true,  false, false, false, true,  true),
    ("findAndModify",                Write,    true,  true,  false, false, false, true,  true),
    ("find",                         Read,     false, true,  true,  false, false, true,  true),
    ("count",                        Read,     false, true,  true,  false, false, true,  true),
    ("distinct",                     Read,     false, true,  true,  false, false, true,  true),
    ("aggregate",                    Read,     false, true,  true,  false, false, true,  true),
    ("explain",                      Read,     false, true,  false, false, false, false, true),
    ("getMore",                      Read,     false, false, true,  false, false, false, true),
    ("killCursors",                  Read,     false, true,  true,  false, false, false, true),
    ("create",                       Ddl,      false, true,  false, false, false, false, true),
    ("collMod",                      Ddl,      false, true,  false, false, false, false, true),
    ("mapReduce",                    Read,     false, true,  false, false, false, false, true),
    ("drop",                         Ddl,      false, true,  false, false, false, false, true),
    ("dropDatabase",                 Ddl,      false, true,  false, false, false, false, true),
    ("listDatabases",                Read,     false, true,  false, false, true,  false, true),
    ("listCollections",              Read,     false, true,  false, false, false, false, true),
    ("listIndexes",                  Read,     false, true,  false, false, false, false, true),
    ("createIndexes",                Ddl,      false, true,  false, false, false, false, true),
    ("dropIndexes",                  Ddl,      false, true,  false, false, false, false, true),
    ("dbStats",                      Read,     false, true,  false, false, true,  false, true),
    ("collStats",                    Read,     false, true,  false, false, false, false, true),
    ("listShards",                   Sharding, false, true,  false, true,  false, false, true),
    ("replSetGetStatus",             Sharding, false, true,  false, true,  true,  false, true),
    ("replSetGetConfig",             Sharding, false, true,  false, true,  false, false, true),
    ("replSetReconfig",              Sharding, false, true,  false, true,  false, false, true),
    ("replSetStepDown",              Sharding, false, true,  false, true,  false, false, true),
    ("addShard",                     Sharding, false, true,  false, true,  false, false, true),
    ("enableSharding",               Sharding, false, true,  false, true,  false, false, true),
    ("shardCollection",              Sharding, false, true,  false, true,  false, false, true),
    ("refineCollectionShardKey",     Sharding, false, true,  false, true,  false, false, true),
    ("split",                        Sharding, false, true,  false, true,  false, false, true),
    ("mergeChunks",                  Sharding, false, true,  false, true,  false, false, true),
    ("clearJumboFlag",               Sharding, false, true,  false, true,  false, false, true),
    ("moveChunk",                    Sharding, false, true,  false, true,  false, false, true),
    ("moveRange",                    Sharding, false, true,  false, true,  false, false, true),
    ("movePrimary",                  Sharding, false, true,  false, true,  false, false, true),
    ("removeShard",                  Sharding, false, true,  false, true,  false, false, true),
    ("getShardVersion",              Sharding, false, true,  false, true,  false, false, true),
    ("getShardMap",                  Sharding, false, true,  false, true,  false, false, true),
    ("flushRouterConfig",            Sharding, false, true,  false, true,  false, false, true),
    ("isdbgrid",                     Info,     false, true,  true,  false, false, false, false),
    ("balancerStart",                Sharding, false, true,  false, true,  false, false, true),
    ("balancerStop",                 Sharding, false, true,  false, true,  false, false, true),
    ("balancerStatus",               Sharding, false, true,  false, true,  false, false, true),
    ("balancerCollectionStatus",     Sharding, false, true,  false, true,  false, false, true),
    ("configureCollectionBalancing", Sharding, false, true,  false, true,  false, false, true),
    ("addShardToZone",               Sharding, false, true,  false, true,  false, false, true),
    ("removeShardFromZone",          Sharding, false, true,  false, true,  false, false, true),
    ("updateZoneKeyRange",           Sharding, false, true,  false, true,  false, false, true),
];

#[test]
fn each_entry_has_its_facts() {
    assert_eq!(COMMANDS.len(), EXPECTED.len(), "a command was added or removed: update EXPECTED");
    for &(name, kind, retryable, timed, secondary_ok, admin_only, op_query, explainable, auth) in EXPECTED {
        let spec = lookup(name).unwrap_or_else(|| panic!("{name} is not in the table"));
        assert_eq!(spec.name, name, "{name} is canonical");
        let got = (
            spec.kind,
            spec.retryable,
            spec.timed,
            spec.secondary_ok,
            spec.admin_only,
            spec.op_query,
            spec.explainable,
            spec.requires_auth(),
        );
        assert_eq!(got, (kind, retryable, timed, secondary_ok, admin_only, op_query, explainable, auth), "{name}");
    }
}

#[test]
fn every_alias_leads_to_its_canonical_entry() {
    let pairs = [
        ("ismaster", "isMaster"),
        ("buildinfo", "buildInfo"),
        ("getlasterror", "getLastError"),
        ("findandmodify", "findAndModify"),
        ("collstats", "collStats"),
        ("dbstats", "dbStats"),
        ("deleteIndexes", "dropIndexes"),
        ("enablesharding", "enableSharding"),
        ("shardcollection", "shardCollection"),
        ("movechunk", "moveChunk"),
        ("moveprimary", "movePrimary"),
        ("removeshard", "removeShard"),
        ("flushrouterconfig", "flushRouterConfig"),
    ];
    let aliases: usize = COMMANDS.iter().map(|s| s.aliases.len()).sum();
    assert_eq!(aliases, pairs.len(), "an alias was added or removed: update this test");
    for (alias, canonical) in pairs {
        let spec = lookup(alias).unwrap_or_else(|| panic!("{alias} is not in the table"));
        assert_eq!(spec.name, canonical);
        assert!(std::ptr::eq(spec, lookup(canonical).expect("canonical")), "{alias}");
    }
    assert!(lookup("FIND").is_none() && lookup("").is_none(), "names are case-sensitive");
}

#[test]
fn names_are_unique_and_rules_hold_across_the_table() {
    let mut seen = std::collections::HashSet::new();
    for spec in COMMANDS {
        for name in std::iter::once(&spec.name).chain(spec.aliases) {
            assert!(seen.insert(*name), "{name} appears twice");
        }
        assert!(!spec.retryable || spec.kind == Kind::Write, "{}: only writes are retryable", spec.name);
        assert!(!spec.secondary_ok || matches!(spec.kind, Kind::Read | Kind::Info), "{}", spec.name);
        if let Access::Actions(_, actions) = spec.access {
            assert!(!actions.is_empty(), "{}: a privilege names its actions", spec.name);
        }
        // Only the handshake, authentication and session bookkeeping are open to anyone.
        assert!(
            !matches!(spec.access, Access::Open) || matches!(spec.kind, Kind::Info),
            "{}: reads, writes and admin commands need authentication",
            spec.name
        );
        assert!(spec.kind != Kind::Sharding || spec.admin_only, "{}: sharding commands run on admin", spec.name);
    }
}
