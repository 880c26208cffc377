//! The router's table of commands: one [`Spec`] per command, holding its canonical name, its
//! aliases, its handler and the facts the rest of the router asks about it (what it does to data,
//! whether it is a retryable write, whether `maxTimeMS` limits it, which catalog metadata it
//! needs, whether a secondary may answer it, whether it runs only on `admin`, whether legacy
//! OP_QUERY may carry it, whether `explain` takes it, and who may run it: [`Access`]).
//!
//! A request's name is made canonical once, where it arrives ([`lookup`], from
//! `wire::request`); `dispatch`, `retryable`, `explain`, `listCommands` and the OP_QUERY check
//! ask the table and never match command names themselves.
//!
//! Must not: hold command logic (handlers live in `cmd/`), or be copied: a new fact about
//! commands is a new field here.

use std::collections::HashMap;
use std::sync::LazyLock;

use futures::future::BoxFuture;
use shoal_auth::{Action, ActionSet};

use crate::auth::{sasl, x509};
use crate::cmd::user_admin::{roles, users};
use crate::cmd::{
    crud, cursor, ddl, explain, handshake, indexes, info, javascript, operations, profile, sharding, stats,
};
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::state::{ConnContext, RouterState};

/// Runs one command; every handler has this shape so the table can hold it.
pub type Handler = for<'a> fn(&'a RouterState, &'a ConnContext, &'a Command) -> BoxFuture<'a, HandlerResult>;

/// What a command does to user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads documents or index keys (`find`, `count`, ...).
    Read,
    /// Changes documents (`insert`, `update`, `delete`, `findAndModify`).
    Write,
    /// Creates or drops collections, databases or indexes.
    Ddl,
    /// Changes or reads the cluster's sharding state (`addShard`, `moveChunk`, ...).
    Sharding,
    /// Answers about the router or the session and touches no data (`hello`, `ping`, ...).
    Info,
    /// Creates, changes or shows users and roles.
    UserAdmin,
}

/// Which catalog metadata the router needs before it can run a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metadata {
    /// None: the router answers alone.
    None,
    /// The database's entry (its primary shard).
    Database,
    /// The collection's routing table (its chunks), or its database's primary when unsharded.
    Collection,
    /// The cluster's shard list or the whole catalog.
    Cluster,
}

/// What a command's required actions apply to (MongoDB's resource, derived from the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// `{cluster: true}`.
    Cluster,
    /// The command's database (`$db`).
    Database,
    /// `$db` and the collection its first field names (`{find: "people"}`); `aggregate: 1` and
    /// the like act on the database.
    Collection,
    /// The `db.collection` its first field names (`{shardCollection: "app.people"}` on admin).
    Namespace,
    /// The database its first field names (`{enableSharding: "app"}` on admin).
    NamedDatabase,
    /// One fixed collection (`config.settings` for the balancer's switch).
    Exact(&'static str, &'static str),
}

/// Who may run a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, authenticated or not: the handshake, `ping`, authentication itself.
    Open,
    /// Any authenticated user; the handler checks or filters further (`usersInfo` on oneself,
    /// `listDatabases` showing what the user may see).
    Authenticated,
    /// These actions on this resource (MongoDB's action names, `shoal_auth::Action`).
    Actions(On, ActionSet),
}

/// One command: its name, handler and facts.
#[derive(Clone, Copy)]
pub struct Spec {
    /// The canonical name (`findAndModify`), which `Command::name` is set to.
    pub name: &'static str,
    /// Other spellings MongoDB accepts for the same command (`findandmodify`).
    pub aliases: &'static [&'static str],
    pub handler: Handler,
    pub kind: Kind,
    /// A retryable write when it carries `txnNumber` (labelled `RetryableWriteError`).
    pub retryable: bool,
    /// `maxTimeMS` limits it (a `getMore`'s `maxTimeMS` is an await time instead).
    pub timed: bool,
    pub metadata: Metadata,
    /// A secondary may answer it (read preference is honoured).
    pub secondary_ok: bool,
    /// Runs only against the `admin` database.
    pub admin_only: bool,
    /// Legacy OP_QUERY on `db.$cmd` may carry it: MongoDB's list (`check_allowed_op_query_cmd.cpp`:
    /// the handshake) plus `getLastError`, the third handshake message of Java driver 3.6, and
    /// `getnonce`, which mgo (Go) sends with its first `isMaster`; and the read-only monitoring
    /// commands (`ping`, `serverStatus`, `replSetGetStatus`, `listDatabases`, `dbStats`), which
    /// mgo — it speaks OP_QUERY only — sends for Debian's `prometheus-mongodb-exporter`, as
    /// MongoDB 5.0 still took them. Everything else over OP_QUERY gets UnsupportedOpQueryCommand (352).
    pub op_query: bool,
    /// `explain` accepts it as the explained command.
    pub explainable: bool,
    pub access: Access,
    /// Recorded in the audit log when it runs (user, role and shard membership changes).
    pub audited: bool,
    /// The `serverStatus.opcounters` entry it counts in.
    pub counted_as: OpCounter,
}

/// Which `serverStatus.opcounters` entry a command counts in, as in MongoDB: inserts, updates and
/// deletes per statement, `find` as a query, `getMore`; every other command (unknown ones too) as
/// a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCounter {
    Insert,
    Query,
    Update,
    Delete,
    GetMore,
    Command,
}

impl Spec {
    const fn new(name: &'static str, kind: Kind, handler: Handler) -> Spec {
        Spec {
            name,
            aliases: &[],
            handler,
            kind,
            retryable: false,
            timed: true,
            metadata: Metadata::None,
            secondary_ok: matches!(kind, Kind::Info),
            admin_only: false,
            op_query: false,
            explainable: false,
            access: Access::Open,
            audited: false,
            counted_as: OpCounter::Command,
        }
    }
    const fn counted_as(self, counted_as: OpCounter) -> Spec {
        Spec { counted_as, ..self }
    }
    const fn aliases(self, aliases: &'static [&'static str]) -> Spec {
        Spec { aliases, ..self }
    }
    const fn retryable(self) -> Spec {
        Spec { retryable: true, ..self }
    }
    const fn untimed(self) -> Spec {
        Spec { timed: false, ..self }
    }
    const fn needs(self, metadata: Metadata) -> Spec {
        Spec { metadata, ..self }
    }
    const fn secondary_ok(self) -> Spec {
        Spec { secondary_ok: true, ..self }
    }
    const fn admin_only(self) -> Spec {
        Spec { admin_only: true, ..self }
    }
    const fn op_query(self) -> Spec {
        Spec { op_query: true, ..self }
    }
    const fn explainable(self) -> Spec {
        Spec { explainable: true, ..self }
    }
    const fn on(self, on: On, actions: &'static [Action]) -> Spec {
        Spec { access: Access::Actions(on, ActionSet::of(actions)), ..self }
    }
    const fn audited(self) -> Spec {
        Spec { audited: true, ..self }
    }
    const fn authenticated(self) -> Spec {
        Spec { access: Access::Authenticated, ..self }
    }
    /// Whether listCommands reports it as needing an authenticated user.
    pub fn requires_auth(&self) -> bool {
        !matches!(self.access, Access::Open)
    }
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec").field("name", &self.name).field("kind", &self.kind).finish_non_exhaustive()
    }
}

/// Wraps an `async fn(state, conn, cmd)` as a [`Handler`].
macro_rules! h {
    ($f:path) => {
        |s, c, m| Box::pin($f(s, c, m))
    };
}

use Kind::{Ddl, Info, Read, Sharding, UserAdmin, Write};
use Metadata::{Cluster, Collection, Database};
use On::{
    Cluster as OnCluster, Collection as OnCollection, Database as OnDatabase, Exact as OnExact,
    NamedDatabase as OnNamedDatabase, Namespace as OnNamespace,
};
use shoal_auth::Action as A;

/// Every command the router serves.
pub static COMMANDS: &[Spec] = &[
    // The handshake and the router's own state.
    Spec::new("hello", Info, |s, c, m| Box::pin(handshake::hello(s, c, m, false))).op_query(),
    Spec::new("isMaster", Info, |s, c, m| Box::pin(handshake::hello(s, c, m, true))).aliases(&["ismaster"]).op_query(),
    Spec::new("ping", Info, h!(info::ping)).op_query(),
    Spec::new("buildInfo", Info, h!(info::build_info)).aliases(&["buildinfo"]).op_query(),
    Spec::new("serverStatus", Info, h!(info::server_status)).on(OnCluster, &[A::ServerStatus]).op_query(),
    Spec::new("getParameter", Info, h!(info::get_parameter)).admin_only().on(OnCluster, &[A::GetParameter]),
    Spec::new("getLog", Info, h!(info::get_log)).admin_only().on(OnCluster, &[A::GetLog]),
    Spec::new("whatsmyuri", Info, h!(info::whats_my_uri)),
    Spec::new("connectionStatus", Info, h!(info::connection_status)),
    Spec::new("endSessions", Info, h!(info::end_sessions)),
    Spec::new("getLastError", Info, h!(info::get_last_error)).aliases(&["getlasterror"]).op_query(),
    Spec::new("getnonce", Info, h!(info::get_nonce)).op_query(),
    Spec::new("hostInfo", Info, h!(info::host_info)).on(OnCluster, &[A::HostInfo]),
    Spec::new("getCmdLineOpts", Info, h!(info::get_cmd_line_opts)).admin_only().on(OnCluster, &[A::GetCmdLineOpts]),
    Spec::new("listCommands", Info, h!(info::list_commands)),
    // Running operations and the profiler, on every shard.
    Spec::new("currentOp", Info, h!(operations::current_op)).admin_only().on(OnCluster, &[A::Inprog]),
    Spec::new("killOp", Info, h!(operations::kill_op)).admin_only().on(OnCluster, &[A::Killop]),
    Spec::new("killSessions", Info, h!(operations::kill_sessions)).authenticated(),
    Spec::new("killAllSessions", Info, h!(operations::kill_sessions)).on(OnCluster, &[A::KillAnySession]),
    Spec::new("top", Info, h!(operations::top)).admin_only().on(OnCluster, &[A::Top]),
    Spec::new("profile", Info, h!(profile::profile)).on(OnDatabase, &[A::EnableProfiler]),
    // Authentication (open to anyone: it is how a client stops being anonymous).
    Spec::new("saslStart", Info, h!(sasl::sasl_start)).op_query(),
    Spec::new("saslContinue", Info, h!(sasl::sasl_continue)).op_query(),
    Spec::new("logout", Info, h!(sasl::logout)),
    Spec::new("authenticate", Info, h!(x509::authenticate)).op_query(),
    // Users and roles.
    Spec::new("createUser", UserAdmin, h!(users::create_user)).on(OnDatabase, &[A::CreateUser]).audited(),
    Spec::new("_shoalRestoreUser", UserAdmin, h!(users::restore_user)).on(OnDatabase, &[A::CreateUser]).audited(),
    Spec::new("updateUser", UserAdmin, h!(users::update_user)).authenticated().audited(),
    Spec::new("dropUser", UserAdmin, h!(users::drop_user)).on(OnDatabase, &[A::DropUser]).audited(),
    Spec::new("dropAllUsersFromDatabase", UserAdmin, h!(users::drop_all_users_from_database))
        .on(OnDatabase, &[A::DropUser])
        .audited(),
    Spec::new("grantRolesToUser", UserAdmin, h!(users::grant_roles_to_user)).authenticated().audited(),
    Spec::new("revokeRolesFromUser", UserAdmin, h!(users::revoke_roles_from_user)).authenticated().audited(),
    Spec::new("usersInfo", UserAdmin, h!(users::users_info)).authenticated(),
    Spec::new("createRole", UserAdmin, h!(roles::create_role)).on(OnDatabase, &[A::CreateRole]).audited(),
    Spec::new("updateRole", UserAdmin, h!(roles::update_role)).on(OnDatabase, &[A::CreateRole, A::DropRole]).audited(),
    Spec::new("dropRole", UserAdmin, h!(roles::drop_role)).on(OnDatabase, &[A::DropRole]).audited(),
    Spec::new("dropAllRolesFromDatabase", UserAdmin, h!(roles::drop_all_roles_from_database))
        .on(OnDatabase, &[A::DropRole])
        .audited(),
    Spec::new("grantPrivilegesToRole", UserAdmin, h!(roles::grant_privileges_to_role))
        .on(OnDatabase, &[A::GrantRole])
        .audited(),
    Spec::new("revokePrivilegesFromRole", UserAdmin, h!(roles::revoke_privileges_from_role))
        .on(OnDatabase, &[A::RevokeRole])
        .audited(),
    Spec::new("grantRolesToRole", UserAdmin, h!(roles::grant_roles_to_role)).authenticated().audited(),
    Spec::new("revokeRolesFromRole", UserAdmin, h!(roles::revoke_roles_from_role)).authenticated().audited(),
    Spec::new("rolesInfo", UserAdmin, h!(roles::roles_info)).authenticated(),
    // Documents.
    Spec::new("insert", Write, h!(crud::insert))
        .retryable()
        .needs(Collection)
        .on(OnCollection, &[A::Insert])
        .counted_as(OpCounter::Insert),
    Spec::new("update", Write, h!(crud::update))
        .retryable()
        .needs(Collection)
        .explainable()
        .on(OnCollection, &[A::Update])
        .counted_as(OpCounter::Update),
    Spec::new("delete", Write, h!(crud::delete))
        .retryable()
        .needs(Collection)
        .explainable()
        .on(OnCollection, &[A::Remove])
        .counted_as(OpCounter::Delete),
    Spec::new("findAndModify", Write, h!(crud::find_and_modify))
        .aliases(&["findandmodify"])
        .retryable()
        .needs(Collection)
        .explainable()
        .on(OnCollection, &[A::Find, A::Update, A::Remove]),
    Spec::new("find", Read, h!(crud::find))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &[A::Find])
        .counted_as(OpCounter::Query),
    Spec::new("count", Read, h!(crud::count))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &[A::Find]),
    Spec::new("distinct", Read, h!(crud::distinct))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &[A::Find]),
    Spec::new("aggregate", Read, h!(crud::aggregate))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &[A::Find]),
    Spec::new("explain", Read, h!(explain::explain)).needs(Collection).on(OnCollection, &[A::Find]),
    Spec::new("getMore", Read, h!(cursor::get_more))
        .untimed()
        .secondary_ok()
        .on(OnCollection, &[A::Find])
        .counted_as(OpCounter::GetMore),
    Spec::new("killCursors", Read, h!(cursor::kill_cursors)).secondary_ok().on(OnCollection, &[A::KillCursors]),
    // Collections, databases and indexes.
    Spec::new("create", Ddl, h!(ddl::create)).needs(Database).on(OnCollection, &[A::CreateCollection]),
    Spec::new("collMod", Ddl, h!(ddl::coll_mod)).needs(Collection).on(OnCollection, &[A::CollMod]),
    Spec::new("mapReduce", Read, h!(javascript::map_reduce)).needs(Collection).on(OnCollection, &[A::Find]),
    Spec::new("drop", Ddl, h!(ddl::drop)).needs(Collection).on(OnCollection, &[A::DropCollection]),
    Spec::new("dropDatabase", Ddl, h!(ddl::drop_database)).needs(Database).on(OnDatabase, &[A::DropDatabase]),
    Spec::new("listDatabases", Read, h!(ddl::list_databases))
        .needs(Cluster)
        .on(OnCluster, &[A::ListDatabases])
        .op_query(),
    Spec::new("listCollections", Read, h!(ddl::list_collections)).needs(Database).on(OnDatabase, &[A::ListCollections]),
    Spec::new("listIndexes", Read, h!(indexes::list_indexes)).needs(Collection).on(OnCollection, &[A::ListIndexes]),
    Spec::new("createIndexes", Ddl, h!(indexes::create_indexes)).needs(Collection).on(OnCollection, &[A::CreateIndex]),
    Spec::new("dropIndexes", Ddl, h!(indexes::drop_indexes))
        .aliases(&["deleteIndexes"])
        .needs(Collection)
        .on(OnCollection, &[A::DropIndex]),
    Spec::new("dbStats", Read, h!(stats::db_stats))
        .aliases(&["dbstats"])
        .needs(Database)
        .on(OnDatabase, &[A::DbStats])
        .op_query(),
    Spec::new("collStats", Read, h!(stats::coll_stats))
        .aliases(&["collstats"])
        .needs(Collection)
        .on(OnCollection, &[A::CollStats]),
    // Sharding.
    Spec::new("listShards", Sharding, h!(sharding::list_shards))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::ListShards]),
    Spec::new("replSetGetStatus", Sharding, h!(sharding::repl_status::repl_set_get_status))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::ReplSetGetStatus])
        .op_query(),
    Spec::new("replSetGetConfig", Sharding, h!(sharding::repl_config::repl_set_get_config))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::ReplSetGetConfig]),
    Spec::new("replSetReconfig", Sharding, h!(sharding::repl_config::repl_set_reconfig))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::ReplSetConfigure])
        .audited(),
    Spec::new("replSetStepDown", Sharding, h!(sharding::repl_status::repl_set_step_down))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::ReplSetStateChange]),
    Spec::new("addShard", Sharding, h!(sharding::add_shard))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::AddShard])
        .audited(),
    Spec::new("enableSharding", Sharding, h!(sharding::enable_sharding))
        .aliases(&["enablesharding"])
        .needs(Database)
        .admin_only()
        .on(OnNamedDatabase, &[A::EnableSharding]),
    Spec::new("shardCollection", Sharding, h!(sharding::shard_collection))
        .aliases(&["shardcollection"])
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::EnableSharding]),
    Spec::new("refineCollectionShardKey", Sharding, h!(sharding::refine_collection_shard_key))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::RefineCollectionShardKey]),
    Spec::new("split", Sharding, h!(sharding::split)).needs(Collection).admin_only().on(OnNamespace, &[A::SplitChunk]),
    Spec::new("mergeChunks", Sharding, h!(sharding::merge_chunks))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::SplitChunk]),
    Spec::new("clearJumboFlag", Sharding, h!(sharding::clear_jumbo_flag))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::ClearJumboFlag]),
    Spec::new("moveChunk", Sharding, h!(sharding::move_chunk))
        .aliases(&["movechunk"])
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::MoveChunk]),
    Spec::new("moveRange", Sharding, h!(sharding::move_chunk))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::MoveChunk]),
    Spec::new("movePrimary", Sharding, h!(sharding::move_primary))
        .aliases(&["moveprimary"])
        .needs(Database)
        .admin_only()
        .on(OnNamedDatabase, &[A::MoveChunk]),
    Spec::new("removeShard", Sharding, h!(sharding::remove_shard))
        .aliases(&["removeshard"])
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::RemoveShard])
        .audited(),
    Spec::new("getShardVersion", Sharding, h!(sharding::get_shard_version))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::GetShardVersion]),
    Spec::new("getShardMap", Sharding, h!(sharding::get_shard_map))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &[A::GetShardMap]),
    Spec::new("flushRouterConfig", Sharding, h!(sharding::flush_router_config))
        .aliases(&["flushrouterconfig"])
        .admin_only()
        .on(OnCluster, &[A::FlushRouterConfig]),
    Spec::new("isdbgrid", Info, h!(sharding::is_db_grid)),
    Spec::new("balancerStart", Sharding, h!(sharding::balancer_start))
        .needs(Cluster)
        .admin_only()
        .on(OnExact("config", "settings"), &[A::Update]),
    Spec::new("balancerStop", Sharding, h!(sharding::balancer_stop))
        .needs(Cluster)
        .admin_only()
        .on(OnExact("config", "settings"), &[A::Update]),
    Spec::new("balancerStatus", Sharding, h!(sharding::balancer_status))
        .needs(Cluster)
        .admin_only()
        .on(OnExact("config", "settings"), &[A::Find]),
    Spec::new("balancerCollectionStatus", Sharding, h!(sharding::balancer_collection_status))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::EnableSharding]),
    Spec::new("configureCollectionBalancing", Sharding, h!(sharding::configure_collection_balancing))
        .needs(Collection)
        .admin_only()
        .on(OnNamespace, &[A::EnableSharding]),
    Spec::new("addShardToZone", Sharding, h!(sharding::shard_zone))
        .needs(Cluster)
        .admin_only()
        .on(OnExact("config", "shards"), &[A::Update]),
    Spec::new("removeShardFromZone", Sharding, h!(sharding::shard_zone))
        .needs(Cluster)
        .admin_only()
        .on(OnExact("config", "shards"), &[A::Update]),
    Spec::new("updateZoneKeyRange", Sharding, h!(sharding::update_zone_key_range))
        .needs(Collection)
        .admin_only()
        .on(OnExact("config", "tags"), &[A::Update]),
];

/// Every canonical name and alias, to its entry.
static BY_NAME: LazyLock<HashMap<&'static str, &'static Spec>> = LazyLock::new(|| {
    let mut by_name = HashMap::new();
    for spec in COMMANDS {
        for name in std::iter::once(&spec.name).chain(spec.aliases) {
            by_name.insert(*name, spec);
        }
    }
    by_name
});

/// The entry for a command name as sent (canonical or an alias); `None` for unknown commands.
pub fn lookup(name: &str) -> Option<&'static Spec> {
    BY_NAME.get(name).copied()
}

#[cfg(test)]
#[path = "commands_tests.rs"]
mod tests;
