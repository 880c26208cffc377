//! The router's table of commands: one [`Spec`] per command, holding its canonical name, its
//! aliases, its handler and the facts the rest of the router asks about it (what it does to data,
//! whether it is a retryable write, whether `maxTimeMS` limits it, which catalog metadata it
//! needs, whether a secondary may answer it, whether it runs only on `admin`, whether legacy
//! OP_QUERY may carry it, whether `explain` takes it, and the privilege it requires).
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

use crate::cmd::{crud, cursor, ddl, explain, handshake, indexes, info, sharding, stats};
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

/// What a privilege names, as MongoDB's resource documents do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// `{cluster: true}`.
    Cluster,
    /// `{db: <the command's database>, collection: ""}`.
    Database,
    /// `{db, collection: <the command's first field>}`.
    Collection,
}

/// The privilege a command requires: MongoDB's action names on a resource. `None` in
/// [`Spec::privilege`] means the command needs no authentication (`hello`, `ping`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privilege {
    pub resource: Resource,
    pub actions: &'static [&'static str],
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
    /// the handshake) plus `getLastError`, the third handshake message of Java driver 3.6.
    /// Everything else over OP_QUERY gets UnsupportedOpQueryCommand (352).
    pub op_query: bool,
    /// `explain` accepts it as the explained command.
    pub explainable: bool,
    pub privilege: Option<Privilege>,
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
            privilege: None,
        }
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
    const fn on(self, resource: Resource, actions: &'static [&'static str]) -> Spec {
        Spec { privilege: Some(Privilege { resource, actions }), ..self }
    }
    /// Whether listCommands reports it as needing an authenticated user.
    pub fn requires_auth(&self) -> bool {
        self.privilege.is_some()
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

use Kind::{Ddl, Info, Read, Sharding, Write};
use Metadata::{Cluster, Collection, Database};
use Resource::{Cluster as OnCluster, Collection as OnCollection, Database as OnDatabase};

/// Every command the router serves.
pub static COMMANDS: &[Spec] = &[
    // The handshake and the router's own state.
    Spec::new("hello", Info, |s, c, m| Box::pin(handshake::hello(s, c, m, false))).op_query(),
    Spec::new("isMaster", Info, |s, c, m| Box::pin(handshake::hello(s, c, m, true))).aliases(&["ismaster"]).op_query(),
    Spec::new("ping", Info, h!(info::ping)),
    Spec::new("buildInfo", Info, h!(info::build_info)).aliases(&["buildinfo"]).op_query(),
    Spec::new("serverStatus", Info, h!(info::server_status)).on(OnCluster, &["serverStatus"]),
    Spec::new("getParameter", Info, h!(info::get_parameter)).admin_only().on(OnCluster, &["getParameter"]),
    Spec::new("getLog", Info, h!(info::get_log)).admin_only().on(OnCluster, &["getLog"]),
    Spec::new("whatsmyuri", Info, h!(info::whats_my_uri)),
    Spec::new("connectionStatus", Info, h!(info::connection_status)),
    Spec::new("endSessions", Info, h!(info::end_sessions)),
    Spec::new("getLastError", Info, h!(info::get_last_error)).aliases(&["getlasterror"]).op_query(),
    Spec::new("hostInfo", Info, h!(info::host_info)).on(OnCluster, &["hostInfo"]),
    Spec::new("getCmdLineOpts", Info, h!(info::get_cmd_line_opts)).admin_only().on(OnCluster, &["getCmdLineOpts"]),
    Spec::new("listCommands", Info, h!(info::list_commands)),
    // Documents.
    Spec::new("insert", Write, h!(crud::insert)).retryable().needs(Collection).on(OnCollection, &["insert"]),
    Spec::new("update", Write, h!(crud::update))
        .retryable()
        .needs(Collection)
        .explainable()
        .on(OnCollection, &["update"]),
    Spec::new("delete", Write, h!(crud::delete))
        .retryable()
        .needs(Collection)
        .explainable()
        .on(OnCollection, &["remove"]),
    Spec::new("findAndModify", Write, h!(crud::find_and_modify))
        .aliases(&["findandmodify"])
        .retryable()
        .needs(Collection)
        .explainable()
        .on(OnCollection, &["find", "update", "remove"]),
    Spec::new("find", Read, h!(crud::find)).needs(Collection).secondary_ok().explainable().on(OnCollection, &["find"]),
    Spec::new("count", Read, h!(crud::count))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &["find"]),
    Spec::new("distinct", Read, h!(crud::distinct))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &["find"]),
    Spec::new("aggregate", Read, h!(crud::aggregate))
        .needs(Collection)
        .secondary_ok()
        .explainable()
        .on(OnCollection, &["find"]),
    Spec::new("explain", Read, h!(explain::explain)).needs(Collection).on(OnCollection, &["find"]),
    Spec::new("getMore", Read, h!(cursor::get_more)).untimed().secondary_ok().on(OnCollection, &["find"]),
    Spec::new("killCursors", Read, h!(cursor::kill_cursors)).secondary_ok().on(OnCollection, &["killCursors"]),
    // Collections, databases and indexes.
    Spec::new("create", Ddl, h!(ddl::create)).needs(Database).on(OnCollection, &["createCollection"]),
    Spec::new("drop", Ddl, h!(ddl::drop)).needs(Collection).on(OnCollection, &["dropCollection"]),
    Spec::new("dropDatabase", Ddl, h!(ddl::drop_database)).needs(Database).on(OnDatabase, &["dropDatabase"]),
    Spec::new("listDatabases", Read, h!(ddl::list_databases)).needs(Cluster).on(OnCluster, &["listDatabases"]),
    Spec::new("listCollections", Read, h!(ddl::list_collections)).needs(Database).on(OnDatabase, &["listCollections"]),
    Spec::new("listIndexes", Read, h!(indexes::list_indexes)).needs(Collection).on(OnCollection, &["listIndexes"]),
    Spec::new("createIndexes", Ddl, h!(indexes::create_indexes)).needs(Collection).on(OnCollection, &["createIndex"]),
    Spec::new("dropIndexes", Ddl, h!(indexes::drop_indexes))
        .aliases(&["deleteIndexes"])
        .needs(Collection)
        .on(OnCollection, &["dropIndex"]),
    Spec::new("dbStats", Read, h!(stats::db_stats)).aliases(&["dbstats"]).needs(Database).on(OnDatabase, &["dbStats"]),
    Spec::new("collStats", Read, h!(stats::coll_stats))
        .aliases(&["collstats"])
        .needs(Collection)
        .on(OnCollection, &["collStats"]),
    // Sharding.
    Spec::new("listShards", Sharding, h!(sharding::list_shards))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["listShards"]),
    Spec::new("replSetGetStatus", Sharding, h!(sharding::repl_status::repl_set_get_status))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["replSetGetStatus"]),
    Spec::new("replSetStepDown", Sharding, h!(sharding::repl_status::repl_set_step_down))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["replSetStateChange"]),
    Spec::new("addShard", Sharding, h!(sharding::add_shard)).needs(Cluster).admin_only().on(OnCluster, &["addShard"]),
    Spec::new("enableSharding", Sharding, h!(sharding::enable_sharding))
        .aliases(&["enablesharding"])
        .needs(Database)
        .admin_only()
        .on(OnDatabase, &["enableSharding"]),
    Spec::new("shardCollection", Sharding, h!(sharding::shard_collection))
        .aliases(&["shardcollection"])
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["enableSharding"]),
    Spec::new("refineCollectionShardKey", Sharding, h!(sharding::refine_collection_shard_key))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["refineCollectionShardKey"]),
    Spec::new("split", Sharding, h!(sharding::split)).needs(Collection).admin_only().on(OnCollection, &["splitChunk"]),
    Spec::new("mergeChunks", Sharding, h!(sharding::merge_chunks))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["splitChunk"]),
    Spec::new("clearJumboFlag", Sharding, h!(sharding::clear_jumbo_flag))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["clearJumboFlag"]),
    Spec::new("moveChunk", Sharding, h!(sharding::move_chunk))
        .aliases(&["movechunk"])
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["moveChunk"]),
    Spec::new("moveRange", Sharding, h!(sharding::move_chunk))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["moveChunk"]),
    Spec::new("movePrimary", Sharding, h!(sharding::move_primary))
        .aliases(&["moveprimary"])
        .needs(Database)
        .admin_only()
        .on(OnDatabase, &["moveChunk"]),
    Spec::new("removeShard", Sharding, h!(sharding::remove_shard))
        .aliases(&["removeshard"])
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["removeShard"]),
    Spec::new("getShardVersion", Sharding, h!(sharding::get_shard_version))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["getShardVersion"]),
    Spec::new("getShardMap", Sharding, h!(sharding::get_shard_map))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["getShardMap"]),
    Spec::new("flushRouterConfig", Sharding, h!(sharding::flush_router_config))
        .aliases(&["flushrouterconfig"])
        .admin_only()
        .on(OnCluster, &["flushRouterConfig"]),
    Spec::new("isdbgrid", Info, h!(sharding::is_db_grid)),
    Spec::new("balancerStart", Sharding, h!(sharding::balancer_start))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["update"]),
    Spec::new("balancerStop", Sharding, h!(sharding::balancer_stop))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["update"]),
    Spec::new("balancerStatus", Sharding, h!(sharding::balancer_status))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["find"]),
    Spec::new("balancerCollectionStatus", Sharding, h!(sharding::balancer_collection_status))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["shardCollection"]),
    Spec::new("configureCollectionBalancing", Sharding, h!(sharding::configure_collection_balancing))
        .needs(Collection)
        .admin_only()
        .on(OnCollection, &["configureCollectionBalancing"]),
    Spec::new("addShardToZone", Sharding, h!(sharding::shard_zone))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["enableSharding"]),
    Spec::new("removeShardFromZone", Sharding, h!(sharding::shard_zone))
        .needs(Cluster)
        .admin_only()
        .on(OnCluster, &["enableSharding"]),
    Spec::new("updateZoneKeyRange", Sharding, h!(sharding::update_zone_key_range))
        .needs(Collection)
        .admin_only()
        .on(OnCluster, &["enableSharding"]),
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
