//! MongoDB's built-in roles, with MongoDB's privileges, so a user granted `readWrite` or
//! `clusterMonitor` here may do exactly what the same grant allows on MongoDB.
//!
//! Database roles (`read`, `readWrite`, `dbAdmin`, `dbOwner`, `userAdmin`, `enableSharding`) exist
//! on every database and apply to it; the others exist only on `admin` and apply cluster-wide.
//!
//! Must not: change a role's meaning from MongoDB's (tools and operators depend on it); internal
//! roles (`__system`) are not grantable here.

use shoal_proto::catalog::{Resource, RoleName};

use crate::action::{Action as A, ActionSet};
use crate::resource::namespace;

/// What a built-in privilege applies to, relative to the role's database.
#[derive(Debug, Clone, Copy)]
enum On {
    /// The role's own database (`{db: <role db>, collection: ""}`).
    OwnDatabase,
    /// A collection of the role's own database.
    OwnCollection(&'static str),
    Database(&'static str),
    Collection(&'static str),
    Exact(&'static str, &'static str),
    AnyNormal,
    Any,
    Cluster,
    AnySystemBuckets,
}

/// A role MongoDB defines.
struct Builtin {
    name: &'static str,
    admin_only: bool,
    /// Inherited roles: `(role, Some(db))`, or `None` for the role's own database.
    roles: &'static [(&'static str, Option<&'static str>)],
    privileges: &'static [(On, ActionSet)],
}

const READ: ActionSet = ActionSet::of(&[
    A::ChangeStream,
    A::CollStats,
    A::DbHash,
    A::DbStats,
    A::Find,
    A::KillCursors,
    A::ListCollections,
    A::ListIndexes,
    A::ListSearchIndexes,
    A::PlanCacheRead,
]);

const READ_WRITE: ActionSet = READ.union(ActionSet::of(&[
    A::CleanupStructuredEncryptionData,
    A::CompactStructuredEncryptionData,
    A::ConvertToCapped,
    A::CreateCollection,
    A::CreateIndex,
    A::CreateSearchIndexes,
    A::DropCollection,
    A::DropIndex,
    A::DropSearchIndex,
    A::Insert,
    A::Remove,
    A::RenameCollectionSameDb,
    A::Update,
    A::UpdateSearchIndex,
]));

const USER_ADMIN: ActionSet = ActionSet::of(&[
    A::ChangeCustomData,
    A::ChangePassword,
    A::CreateUser,
    A::CreateRole,
    A::DropUser,
    A::DropRole,
    A::GrantRole,
    A::RevokeRole,
    A::SetAuthenticationRestriction,
    A::ViewUser,
    A::ViewRole,
]);

const DB_ADMIN: ActionSet = ActionSet::of(&[
    A::Analyze,
    A::BypassDocumentValidation,
    A::CollMod,
    A::CollStats,
    A::Compact,
    A::ConvertToCapped,
    A::CreateCollection,
    A::DbStats,
    A::DropCollection,
    A::DropDatabase,
    A::DropIndex,
    A::DropSearchIndex,
    A::CreateIndex,
    A::CreateSearchIndexes,
    A::EnableProfiler,
    A::ListCollections,
    A::ListIndexes,
    A::ListSearchIndexes,
    A::UpdateSearchIndex,
    A::PlanCacheIndexFilter,
    A::PlanCacheRead,
    A::PlanCacheWrite,
    A::ReIndex,
    A::RenameCollectionSameDb,
    A::StorageDetails,
    A::Validate,
    A::ConfigureQueryAnalyzer,
]);

const PROFILE_ADMIN: ActionSet =
    READ.union(ActionSet::of(&[A::ConvertToCapped, A::CreateCollection, A::DropCollection]));

const READ_AND_INDEX: ActionSet =
    READ.union(ActionSet::of(&[A::CreateIndex, A::CreateSearchIndexes, A::DropIndex, A::DropSearchIndex]));

const CLUSTER_MONITOR_CLUSTER: ActionSet = ActionSet::of(&[
    A::ConnPoolStats,
    A::GetCmdLineOpts,
    A::GetDefaultRwConcern,
    A::GetLog,
    A::GetParameter,
    A::GetShardMap,
    A::HostInfo,
    A::ListDatabases,
    A::ListSampledQueries,
    A::ListSessions,
    A::ListShards,
    A::Netstat,
    A::OperationMetrics,
    A::ReplSetGetConfig,
    A::ReplSetGetStatus,
    A::ServerStatus,
    A::Top,
    A::UseUuid,
    A::Inprog,
    A::ShardingState,
    A::AllCollectionStats,
    A::ShardedDataDistribution,
]);

const CLUSTER_MONITOR_DB: ActionSet =
    ActionSet::of(&[A::CollStats, A::DbStats, A::GetDatabaseVersion, A::GetShardVersion, A::IndexStats]);

const HOST_MANAGER_CLUSTER: ActionSet = ActionSet::of(&[
    A::ApplicationMessage,
    A::AuditConfigure,
    A::ConnPoolSync,
    A::DropConnections,
    A::LogRotate,
    A::OidReset,
    A::SetParameter,
    A::Shutdown,
    A::Touch,
    A::Unlock,
    A::FlushRouterConfig,
    A::Fsync,
    A::InvalidateUserCache,
    A::KillAnyCursor,
    A::KillAnySession,
    A::Killop,
    A::ReplSetResizeOplog,
    A::Resync,
    A::TrafficRecord,
    A::RotateCertificates,
    A::OidcListKeys,
    A::OidcRefreshKeys,
]);

const CLUSTER_MANAGER_CLUSTER: ActionSet = ActionSet::of(&[
    A::AppendOplogNote,
    A::ApplicationMessage,
    A::ReplSetConfigure,
    A::ReplSetGetConfig,
    A::ReplSetGetStatus,
    A::ReplSetStateChange,
    A::Resync,
    A::AddShard,
    A::RemoveShard,
    A::ListSessions,
    A::ListShards,
    A::FlushRouterConfig,
    A::CleanupOrphaned,
    A::GetDefaultRwConcern,
    A::RunTenantMigration,
    A::SetDefaultRwConcern,
    A::SetFeatureCompatibilityVersion,
    A::SetClusterParameter,
    A::GetClusterParameter,
    A::SetChangeStreamState,
    A::GetChangeStreamState,
    A::QuerySettings,
    A::QueryStatsRead,
    A::QueryStatsReadTransformed,
    A::CheckMetadataConsistency,
    A::TransitionFromDedicatedConfigServer,
    A::TransitionToDedicatedConfigServer,
]);

const CLUSTER_MANAGER_DB: ActionSet = ActionSet::of(&[
    A::AnalyzeShardKey,
    A::ConfigureQueryAnalyzer,
    A::ClearJumboFlag,
    A::SplitChunk,
    A::MoveChunk,
    A::MoveCollection,
    A::EnableSharding,
    A::SplitVector,
    A::RefineCollectionShardKey,
    A::ReshardCollection,
]);

const WRITES: ActionSet = ActionSet::of(&[A::Insert, A::Update, A::Remove]);

const RESTORE_WRITE: ActionSet = ActionSet::of(&[
    A::BypassDocumentValidation,
    A::CollMod,
    A::ConvertToCapped,
    A::CreateCollection,
    A::CreateIndex,
    A::CreateSearchIndexes,
    A::DropCollection,
    A::Insert,
    A::UpdateSearchIndex,
]);

const FIND: ActionSet = ActionSet::of(&[A::Find]);

static BUILTINS: &[Builtin] = &[
    Builtin {
        name: "read",
        admin_only: false,
        roles: &[],
        privileges: &[(On::OwnDatabase, READ), (On::OwnCollection("system.js"), READ)],
    },
    Builtin {
        name: "readWrite",
        admin_only: false,
        roles: &[],
        privileges: &[(On::OwnDatabase, READ_WRITE), (On::OwnCollection("system.js"), READ_WRITE)],
    },
    Builtin { name: "userAdmin", admin_only: false, roles: &[], privileges: &[(On::OwnDatabase, USER_ADMIN)] },
    Builtin {
        name: "dbAdmin",
        admin_only: false,
        roles: &[],
        privileges: &[(On::OwnDatabase, DB_ADMIN), (On::OwnCollection("system.profile"), PROFILE_ADMIN)],
    },
    Builtin {
        name: "dbOwner",
        admin_only: false,
        roles: &[("readWrite", None), ("dbAdmin", None), ("userAdmin", None)],
        privileges: &[],
    },
    Builtin {
        name: "enableSharding",
        admin_only: false,
        roles: &[],
        privileges: &[(
            On::AnyNormal,
            ActionSet::of(&[
                A::AnalyzeShardKey,
                A::EnableSharding,
                A::MoveCollection,
                A::RefineCollectionShardKey,
                A::ReshardCollection,
            ]),
        )],
    },
    Builtin {
        name: "readAnyDatabase",
        admin_only: true,
        roles: &[],
        privileges: &[
            (On::AnyNormal, READ),
            (On::Cluster, ActionSet::of(&[A::ListDatabases])),
            (On::Collection("system.js"), READ),
            (On::AnySystemBuckets, READ),
        ],
    },
    Builtin {
        name: "readWriteAnyDatabase",
        admin_only: true,
        roles: &[("readAnyDatabase", Some("admin"))],
        privileges: &[
            (On::AnyNormal, READ_WRITE),
            (On::Collection("system.js"), READ_WRITE),
            (On::AnySystemBuckets, READ_WRITE),
        ],
    },
    Builtin {
        name: "userAdminAnyDatabase",
        admin_only: true,
        roles: &[],
        privileges: &[
            (On::AnyNormal, USER_ADMIN.with(A::ListCachedAndActiveUsers)),
            (On::Database("local"), USER_ADMIN),
            (On::Database("config"), USER_ADMIN),
            (
                On::Cluster,
                ActionSet::of(&[A::ListDatabases, A::AuthSchemaUpgrade, A::InvalidateUserCache, A::ViewUser]),
            ),
            (On::Exact("admin", "system.users"), READ_AND_INDEX),
            (On::Exact("admin", "system.roles"), READ_AND_INDEX),
            (On::Collection("system.users"), READ),
            (On::Exact("admin", "system.version"), READ),
            (On::Exact("admin", "system.backup_users"), READ),
        ],
    },
    Builtin {
        name: "dbAdminAnyDatabase",
        admin_only: true,
        roles: &[],
        privileges: &[
            (On::Cluster, ActionSet::of(&[A::ListDatabases, A::ApplyOps])),
            (On::AnyNormal, DB_ADMIN),
            (On::Collection("system.profile"), PROFILE_ADMIN),
            (On::AnySystemBuckets, DB_ADMIN),
        ],
    },
    Builtin {
        name: "clusterMonitor",
        admin_only: true,
        roles: &[("read", Some("config")), ("read", Some("local"))],
        privileges: &[
            (On::Cluster, CLUSTER_MONITOR_CLUSTER),
            (On::AnyNormal, CLUSTER_MONITOR_DB),
            (On::Database("config"), CLUSTER_MONITOR_DB),
            (On::Exact("config", "system.sessions"), CLUSTER_MONITOR_DB),
            (On::Database("local"), CLUSTER_MONITOR_DB),
            (On::Exact("local", "system.replset"), FIND),
            (On::Exact("local", "replset.election"), FIND),
            (On::Exact("local", "replset.minvalid"), FIND),
            (On::Collection("system.profile"), FIND),
        ],
    },
    Builtin {
        name: "hostManager",
        admin_only: true,
        roles: &[],
        privileges: &[(On::Cluster, HOST_MANAGER_CLUSTER), (On::AnyNormal, ActionSet::of(&[A::KillCursors]))],
    },
    Builtin {
        name: "clusterManager",
        admin_only: true,
        roles: &[("read", Some("config"))],
        privileges: &[
            (On::Cluster, CLUSTER_MANAGER_CLUSTER),
            (On::AnyNormal, CLUSTER_MANAGER_DB),
            (On::AnySystemBuckets, CLUSTER_MANAGER_DB),
            (On::Database("config"), CLUSTER_MANAGER_DB.union(WRITES)),
            (On::Database("local"), CLUSTER_MANAGER_DB.union(WRITES)),
            (On::Exact("local", "system.replset"), READ),
            (On::Any, ActionSet::of(&[A::DbCheck])),
            (On::Exact("local", "system.healthlog"), READ),
            (On::Exact("local", "replset.election"), WRITES),
            (On::Exact("local", "replset.minvalid"), WRITES),
        ],
    },
    Builtin {
        name: "clusterAdmin",
        admin_only: true,
        roles: &[("clusterMonitor", Some("admin")), ("hostManager", Some("admin")), ("clusterManager", Some("admin"))],
        privileges: &[
            (On::AnyNormal, ActionSet::of(&[A::DropDatabase])),
            (On::Any, ActionSet::of(&[A::ImportCollection, A::ExportCollection])),
        ],
    },
    Builtin {
        name: "__queryableBackup",
        admin_only: true,
        roles: &[],
        privileges: &[
            (On::Any, ActionSet::of(&[A::CollStats, A::ListCollections, A::ListIndexes, A::ListSearchIndexes])),
            (On::AnyNormal, FIND),
            (On::AnySystemBuckets, FIND),
            (On::Cluster, ActionSet::of(&[A::GetParameter, A::ListDatabases, A::UseUuid])),
            (On::Database("config"), FIND),
            (On::Database("local"), FIND),
            (On::Exact("local", "replset.election"), FIND),
            (On::Exact("local", "replset.minvalid"), FIND),
            (On::Collection("system.js"), FIND),
            (On::Collection("system.users"), FIND),
            (On::Collection("system.profile"), FIND),
            (On::Exact("admin", "system.backup_users"), FIND),
            (On::Exact("admin", "system.roles"), FIND),
            (On::Exact("admin", "system.version"), FIND),
            (On::Exact("config", "settings"), FIND),
        ],
    },
    Builtin {
        name: "backup",
        admin_only: true,
        roles: &[("__queryableBackup", Some("admin"))],
        privileges: &[
            (On::Cluster, ActionSet::of(&[A::AppendOplogNote, A::ServerStatus, A::SetUserWriteBlockMode])),
            (On::Exact("config", "settings"), ActionSet::of(&[A::Insert, A::Update])),
        ],
    },
    Builtin {
        name: "restore",
        admin_only: true,
        roles: &[],
        privileges: &[
            (
                On::Cluster,
                ActionSet::of(&[
                    A::GetParameter,
                    A::ForceUuid,
                    A::UseUuid,
                    A::BypassWriteBlockingMode,
                    A::SetUserWriteBlockMode,
                    A::ApplyOps,
                ]),
            ),
            (On::Database("local"), RESTORE_WRITE),
            (On::Database("config"), RESTORE_WRITE),
            (On::AnySystemBuckets, RESTORE_WRITE),
            (On::Exact("local", "system.replset"), RESTORE_WRITE),
            (On::Exact("local", "replset.election"), RESTORE_WRITE),
            (On::Exact("local", "replset.minvalid"), RESTORE_WRITE),
            (On::Any, ActionSet::of(&[A::ListCollections])),
            (On::AnyNormal, RESTORE_WRITE.union(USER_ADMIN)),
            (On::Collection("system.js"), RESTORE_WRITE),
            (On::Exact("admin", "tempusers"), FIND),
            (On::Exact("admin", "temproles"), FIND),
            (On::Exact("admin", "system.backup_users"), RESTORE_WRITE),
            (On::Exact("admin", "system.version"), RESTORE_WRITE.with(A::Find)),
            (On::Collection("system.users"), RESTORE_WRITE.union(ActionSet::of(&[A::Find, A::Update, A::Remove]))),
            (On::Exact("admin", "system.roles"), ActionSet::of(&[A::CreateIndex])),
        ],
    },
    Builtin {
        name: "directShardOperations",
        admin_only: true,
        roles: &[],
        privileges: &[(On::Cluster, ActionSet::of(&[A::IssueDirectShardOperations]))],
    },
    Builtin {
        name: "root",
        admin_only: true,
        roles: &[
            ("clusterAdmin", Some("admin")),
            ("userAdminAnyDatabase", Some("admin")),
            ("dbAdminAnyDatabase", Some("admin")),
            ("readWriteAnyDatabase", Some("admin")),
            ("backup", Some("admin")),
            ("restore", Some("admin")),
            ("directShardOperations", Some("admin")),
        ],
        privileges: &[
            (On::Any, ActionSet::of(&[A::Validate])),
            (On::Cluster, ActionSet::of(&[A::UseTenant])),
            (On::Exact("config", "system.preimages"), ActionSet::of(&[A::Find, A::Remove])),
            (
                On::Exact("config", "system.change_collection"),
                ActionSet::of(&[A::Find, A::Insert, A::Remove, A::Update]),
            ),
        ],
    },
];

fn find(name: &RoleName) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name.role && (!b.admin_only || name.db == "admin"))
}

/// Whether `name` is a built-in role (`read@anydb`, `root@admin`; `root@app` is not one).
pub fn is_builtin(name: &RoleName) -> bool {
    find(name).is_some()
}

/// Whether `role` is the name of a built-in role on some database (a user-defined role may not
/// take it).
pub fn is_builtin_name(role: &str) -> bool {
    BUILTINS.iter().any(|b| b.name == role)
}

/// The roles a built-in role inherits directly.
pub fn subroles(name: &RoleName) -> Vec<RoleName> {
    find(name).map_or_else(Vec::new, |b| {
        b.roles.iter().map(|(role, db)| RoleName::new(*role, db.unwrap_or(&name.db))).collect()
    })
}

/// A built-in role's own privileges (not its inherited roles'), on concrete resources.
pub fn privileges(name: &RoleName) -> Vec<(Resource, ActionSet)> {
    let Some(b) = find(name) else { return Vec::new() };
    b.privileges
        .iter()
        .map(|(on, actions)| {
            let resource = match *on {
                On::OwnDatabase => namespace(&name.db, ""),
                On::OwnCollection(c) => namespace(&name.db, c),
                On::Database(db) => namespace(db, ""),
                On::Collection(c) => namespace("", c),
                On::Exact(db, c) => namespace(db, c),
                On::AnyNormal => namespace("", ""),
                On::Any => Resource::AnyResource,
                On::Cluster => Resource::Cluster,
                On::AnySystemBuckets => Resource::SystemBuckets { db: String::new() },
            };
            (resource, *actions)
        })
        .collect()
}

/// Every built-in role defined on `db` (`rolesInfo` with `showBuiltinRoles`).
pub fn roles_on(db: &str) -> Vec<RoleName> {
    BUILTINS
        .iter()
        .filter(|b| !b.name.starts_with("__") && (!b.admin_only || db == "admin"))
        .map(|b| RoleName::new(b.name, db))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_roles_exist_everywhere_admin_roles_only_on_admin() {
        assert!(is_builtin(&RoleName::new("read", "app")));
        assert!(is_builtin(&RoleName::new("dbOwner", "admin")));
        assert!(is_builtin(&RoleName::new("root", "admin")));
        assert!(!is_builtin(&RoleName::new("root", "app")));
        assert!(!is_builtin(&RoleName::new("reader", "app")));
        assert!(is_builtin_name("clusterAdmin"));
    }

    #[test]
    fn inherited_roles_name_their_database() {
        assert_eq!(
            subroles(&RoleName::new("dbOwner", "app")),
            [RoleName::new("readWrite", "app"), RoleName::new("dbAdmin", "app"), RoleName::new("userAdmin", "app")]
        );
        assert!(subroles(&RoleName::new("clusterMonitor", "admin")).contains(&RoleName::new("read", "config")));
        // Every inherited role is itself built in.
        for b in BUILTINS {
            let db = if b.admin_only { "admin" } else { "app" };
            for sub in subroles(&RoleName::new(b.name, db)) {
                assert!(is_builtin(&sub), "{} inherits unknown {sub}", b.name);
            }
        }
    }

    #[test]
    fn read_grants_find_on_its_database() {
        let p = privileges(&RoleName::new("read", "app"));
        assert_eq!(p[0].0, namespace("app", ""));
        assert!(p[0].1.contains(A::Find));
        assert!(!p[0].1.contains(A::Insert));
    }

    #[test]
    fn roles_on_lists_what_rolesinfo_shows() {
        let on_app: Vec<_> = roles_on("app").into_iter().map(|r| r.role).collect();
        assert!(on_app.contains(&"read".to_owned()) && !on_app.contains(&"root".to_owned()));
        assert!(roles_on("admin").iter().any(|r| r.role == "root"));
        assert!(!roles_on("admin").iter().any(|r| r.role.starts_with("__")));
    }
}
