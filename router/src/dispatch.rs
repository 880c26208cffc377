//! Routes one client command to its handler and shapes the reply: `ok: 1` appended on success,
//! `{ok: 0, errmsg, code, codeName}` on failure. Unknown commands get CommandNotFound (59).

use bson::RawDocumentBuf;
use shoal_proto::ErrorCode;
use std::sync::atomic::Ordering;
use tracing::Instrument;

use crate::cmd::{crud, cursor, ddl, explain, handshake, indexes, info, retryable, sharding, stats};
use crate::command::Command;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

pub type HandlerResult = Result<RawDocumentBuf, CommandError>;

/// Runs `cmd` and returns the complete reply body.
pub async fn dispatch(state: &RouterState, conn: &ConnContext, cmd: &Command) -> RawDocumentBuf {
    state.counters.commands_total.fetch_add(1, Ordering::Relaxed);
    let span =
        tracing::debug_span!("command", request_id = cmd.request_id, conn = conn.id, name = %cmd.name, db = %cmd.db);
    let result = match retryable::refuse_transactions(cmd).and_then(|()| max_time(cmd)) {
        Ok(None) => route(state, conn, cmd).instrument(span).await,
        // The shards stop their part at the same limit (they read maxTimeMS from the body too).
        Ok(Some(limit)) => match tokio::time::timeout(limit, route(state, conn, cmd).instrument(span)).await {
            Ok(result) => result,
            Err(_) => Err(CommandError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")),
        },
        Err(e) => Err(e),
    };
    let mut reply = match result {
        Ok(mut body) => {
            body.append(bson::cstr!("ok"), 1.0);
            body
        }
        Err(e) => {
            state.counters.commands_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(request_id = cmd.request_id, code = e.code, errmsg = %e.errmsg, "command failed");
            error_reply(&e)
        }
    };
    retryable::label(cmd, &mut reply);
    reply
}

/// The command's `maxTimeMS` (absent or 0: none), validated as MongoDB does. A `getMore`'s
/// `maxTimeMS` is its await time on tailable cursors, not a limit on the command.
fn max_time(cmd: &Command) -> Result<Option<std::time::Duration>, CommandError> {
    if cmd.name == "getMore" {
        return Ok(None);
    }
    let ms = match cmd.body.get("maxTimeMS")? {
        None | Some(bson::RawBsonRef::Null) => return Ok(None),
        Some(bson::RawBsonRef::Int32(n)) => i64::from(n),
        Some(bson::RawBsonRef::Int64(n)) => n,
        Some(bson::RawBsonRef::Double(f)) if f.fract() == 0.0 && f.abs() <= f64::from(i32::MAX) => f as i64,
        Some(_) => return Err(CommandError::bad_value("maxTimeMS must be a non-negative integer")),
    };
    if !(0..=i64::from(i32::MAX)).contains(&ms) {
        return Err(CommandError::bad_value(format!("{ms} value for maxTimeMS is out of range [0, {}]", i32::MAX)));
    }
    Ok((ms > 0).then(|| std::time::Duration::from_millis(ms as u64)))
}

/// `{ok: 0, errmsg, code, codeName}` as raw BSON.
pub fn error_reply(e: &CommandError) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    out.append(bson::cstr!("ok"), 0.0);
    out.append(bson::cstr!("errmsg"), e.errmsg.as_str());
    out.append(bson::cstr!("code"), e.code);
    out.append(bson::cstr!("codeName"), e.code_name.as_str());
    out
}

async fn route(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    match cmd.name.as_str() {
        "hello" => handshake::hello(state, conn, cmd, false).await,
        "isMaster" | "ismaster" => handshake::hello(state, conn, cmd, true).await,

        "ping" => info::ping(state, conn, cmd).await,
        "buildInfo" | "buildinfo" => info::build_info(state, conn, cmd).await,
        "serverStatus" => info::server_status(state, conn, cmd).await,
        "getParameter" => info::get_parameter(state, conn, cmd).await,
        "getLog" => info::get_log(state, conn, cmd).await,
        "whatsmyuri" => info::whats_my_uri(state, conn, cmd).await,
        "connectionStatus" => info::connection_status(state, conn, cmd).await,
        "endSessions" => info::end_sessions(state, conn, cmd).await,
        "getLastError" | "getlasterror" => info::get_last_error(state, conn, cmd).await,
        "hostInfo" => info::host_info(state, conn, cmd).await,
        "getCmdLineOpts" => info::get_cmd_line_opts(state, conn, cmd).await,
        "listCommands" => info::list_commands(state, conn, cmd).await,

        "insert" => crud::insert(state, conn, cmd).await,
        "update" => crud::update(state, conn, cmd).await,
        "delete" => crud::delete(state, conn, cmd).await,
        "find" => crud::find(state, conn, cmd).await,
        "findAndModify" | "findandmodify" => crud::find_and_modify(state, conn, cmd).await,
        "count" => crud::count(state, conn, cmd).await,
        "distinct" => crud::distinct(state, conn, cmd).await,
        "aggregate" => crud::aggregate(state, conn, cmd).await,
        "explain" => explain::explain(state, conn, cmd).await,

        "getMore" => cursor::get_more(state, conn, cmd).await,
        "killCursors" => cursor::kill_cursors(state, conn, cmd).await,

        "create" => ddl::create(state, conn, cmd).await,
        "drop" => ddl::drop(state, conn, cmd).await,
        "dropDatabase" => ddl::drop_database(state, conn, cmd).await,
        "listDatabases" => ddl::list_databases(state, conn, cmd).await,
        "dbStats" | "dbstats" => stats::db_stats(state, conn, cmd).await,
        "collStats" | "collstats" => stats::coll_stats(state, conn, cmd).await,
        "listCollections" => ddl::list_collections(state, conn, cmd).await,
        "listIndexes" => indexes::list_indexes(state, conn, cmd).await,

        "listShards" => sharding::list_shards(state, conn, cmd).await,
        "replSetGetStatus" => sharding::repl_status::repl_set_get_status(state, conn, cmd).await,
        "replSetStepDown" => sharding::repl_status::repl_set_step_down(state, conn, cmd).await,
        "addShard" => sharding::add_shard(state, conn, cmd).await,
        "enableSharding" | "enablesharding" => sharding::enable_sharding(state, conn, cmd).await,
        "shardCollection" | "shardcollection" => sharding::shard_collection(state, conn, cmd).await,
        "refineCollectionShardKey" => sharding::refine_collection_shard_key(state, conn, cmd).await,
        "split" => sharding::split(state, conn, cmd).await,
        "mergeChunks" => sharding::merge_chunks(state, conn, cmd).await,
        "clearJumboFlag" => sharding::clear_jumbo_flag(state, conn, cmd).await,
        "moveChunk" | "movechunk" | "moveRange" => sharding::move_chunk(state, conn, cmd).await,
        "movePrimary" | "moveprimary" => sharding::move_primary(state, conn, cmd).await,
        "removeShard" | "removeshard" => sharding::remove_shard(state, conn, cmd).await,
        "getShardVersion" => sharding::get_shard_version(state, conn, cmd).await,
        "getShardMap" => sharding::get_shard_map(state, conn, cmd).await,
        "flushRouterConfig" | "flushrouterconfig" => sharding::flush_router_config(state, conn, cmd).await,
        "isdbgrid" => sharding::is_db_grid(state, conn, cmd).await,
        "balancerStart" => sharding::balancer_start(state, conn, cmd).await,
        "balancerStop" => sharding::balancer_stop(state, conn, cmd).await,
        "balancerStatus" => sharding::balancer_status(state, conn, cmd).await,
        "balancerCollectionStatus" => sharding::balancer_collection_status(state, conn, cmd).await,
        "configureCollectionBalancing" => sharding::configure_collection_balancing(state, conn, cmd).await,
        "addShardToZone" | "removeShardFromZone" => sharding::shard_zone(state, conn, cmd).await,
        "updateZoneKeyRange" => sharding::update_zone_key_range(state, conn, cmd).await,
        "createIndexes" => indexes::create_indexes(state, conn, cmd).await,
        "dropIndexes" | "deleteIndexes" => indexes::drop_indexes(state, conn, cmd).await,

        other => Err(CommandError::new(ErrorCode::CommandNotFound, format!("no such command: '{other}'"))),
    }
}

/// Every command name [`dispatch`] knows, for `listCommands`.
pub const COMMAND_NAMES: &[&str] = &[
    "addShard",
    "enableSharding",
    "listShards",
    "replSetGetStatus",
    "replSetStepDown",
    "shardCollection",
    "refineCollectionShardKey",
    "split",
    "mergeChunks",
    "clearJumboFlag",
    "moveChunk",
    "moveRange",
    "movePrimary",
    "removeShard",
    "getShardVersion",
    "getShardMap",
    "flushRouterConfig",
    "isdbgrid",
    "balancerStart",
    "balancerStop",
    "balancerStatus",
    "balancerCollectionStatus",
    "configureCollectionBalancing",
    "addShardToZone",
    "removeShardFromZone",
    "updateZoneKeyRange",
    "aggregate",
    "buildInfo",
    "connectionStatus",
    "count",
    "create",
    "delete",
    "distinct",
    "drop",
    "dropDatabase",
    "endSessions",
    "explain",
    "find",
    "findAndModify",
    "getCmdLineOpts",
    "getLastError",
    "getLog",
    "getMore",
    "getParameter",
    "hello",
    "hostInfo",
    "insert",
    "isMaster",
    "killCursors",
    "listCollections",
    "listIndexes",
    "createIndexes",
    "dropIndexes",
    "listCommands",
    "dbStats",
    "collStats",
    "listDatabases",
    "ping",
    "serverStatus",
    "update",
    "whatsmyuri",
];
