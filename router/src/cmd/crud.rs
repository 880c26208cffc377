//! CRUD commands: routed by the catalog (`routing`) and forwarded to shards over gRPC, replies
//! shaped as MongoDB's. A request that targets one shard is passed through without re-encoding;
//! several shards go through `routed_read`/`routed_write`. A shard's StaleConfig refreshes the
//! routing and retries (bounded). The `config` database is answered from the catalog instead
//! (`config_db.rs`, `config_write.rs`).

use std::collections::BTreeSet;

use bson::{Document, RawDocumentBuf};

use crate::cmd::forward::{self, BatchField};
use crate::cmd::shard_call::{self, WriteKind};
use crate::cmd::shard_read;
use crate::cmd::{config_db, config_write, routed_read, routed_write};
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::routing::{self, Placement, STALE_ATTEMPTS_MAX};
use crate::state::{ConnContext, RouterState};

/// The database the router answers from the catalog.
const CONFIG_DB: &str = "config";

/// A write, passed through to the one shard of an unsharded namespace or split by shard key.
pub(crate) async fn routed_write(state: &RouterState, cmd: &Command, coll: &str, kind: WriteKind) -> HandlerResult {
    let with_modified = matches!(kind, WriteKind::Update);
    let mut attempt = 0;
    loop {
        let placement = routing::placement(state, &cmd.db, coll, true).await?;
        let shard = match &placement {
            Placement::Unsharded { shard, .. } => shard.clone(),
            Placement::Sharded(_) => {
                let reply = match kind {
                    WriteKind::Insert => routed_write::insert(state, cmd, coll, placement).await?,
                    _ => routed_write::update_or_delete(state, cmd, coll, kind, placement).await?,
                };
                return forward::write_reply(reply, with_modified);
            }
            Placement::NoDatabase => {
                return Err(CommandError::new(shoal_proto::ErrorCode::NamespaceNotFound, "database not found"));
            }
        };
        state.targeting.record([&shard]);
        let req = routing::versioned(forward::request(cmd)?, &placement, &shard);
        match shard_call::write(state, &shard, kind, req).await {
            Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => {
                routing::on_stale(state, &cmd.db, coll, &placement, &e, attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
            Ok(reply) => return forward::write_reply(reply, with_modified),
        }
    }
}

pub async fn insert(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return Err(config_write::refused(&cmd.name, coll));
    }
    routed_write(state, cmd, coll, WriteKind::Insert).await
}

pub async fn update(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_write::update(state, cmd, coll).await;
    }
    routed_write(state, cmd, coll, WriteKind::Update).await
}

pub async fn delete(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return Err(config_write::refused(&cmd.name, coll));
    }
    routed_write(state, cmd, coll, WriteKind::Delete).await
}

/// How a read is served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadKind {
    Find,
    Aggregate,
    Count,
    Distinct,
    FindAndModify,
}

/// The filter a read or findAndModify targets by.
fn read_filter(kind: ReadKind, body: &Document) -> Document {
    let field = match kind {
        ReadKind::Find => "filter",
        ReadKind::Count | ReadKind::Distinct | ReadKind::FindAndModify => "query",
        ReadKind::Aggregate => {
            return match body.get_array("pipeline").ok().and_then(|p| p.first()) {
                Some(bson::Bson::Document(d)) => d.get_document("$match").cloned().unwrap_or_default(),
                _ => Document::new(),
            };
        }
    };
    body.get_document(field).cloned().unwrap_or_default()
}

/// Whether an `aggregate` has a top-level stage only the router runs (read from the raw body).
fn has_router_stage(cmd: &Command) -> bool {
    let Ok(Some(bson::RawBsonRef::Array(stages))) = cmd.body.get("pipeline") else { return false };
    stages.into_iter().any(|s| {
        matches!(s, Ok(bson::RawBsonRef::Document(d))
            if crate::cmd::lookup::ROUTER_STAGES.iter().any(|n| d.get(n).ok().flatten().is_some()))
    })
}

/// An empty answer for a database the catalog does not know.
fn empty_reply(kind: ReadKind, ns: &str) -> HandlerResult {
    match kind {
        ReadKind::Find | ReadKind::Aggregate => forward::cursor_reply(BatchField::First, &[], 0, ns),
        ReadKind::Count => Ok(RawDocumentBuf::try_from(&bson::doc! { "n": 0 })?),
        ReadKind::Distinct => Ok(RawDocumentBuf::try_from(&bson::doc! { "values": [] })?),
        ReadKind::FindAndModify => {
            Ok(RawDocumentBuf::try_from(&bson::doc! { "lastErrorObject": { "n": 0 }, "value": bson::Bson::Null })?)
        }
    }
}

async fn routed_read(state: &RouterState, cmd: &Command, coll: &str, kind: ReadKind) -> HandlerResult {
    // A bad `$readPreference` fails the command wherever the data is (even nowhere).
    if kind != ReadKind::FindAndModify {
        routing::read_pref::ReadPreference::from_body(&cmd.body)?;
    }
    // Decoded only for sharded collections: the single-shard path forwards the bytes untouched.
    let mut filter: Option<Document> = None;
    let mut attempt = 0;
    loop {
        let placement = routing::placement(state, &cmd.db, coll, kind == ReadKind::FindAndModify).await?;
        let targets: BTreeSet<String> = match &placement {
            Placement::Sharded(_) => {
                if filter.is_none() {
                    let body = Document::try_from(cmd.body.as_ref())?;
                    // Shard key ranges order strings in binary: under another collation an
                    // equality or range on a string key may match documents in any chunk.
                    let simple = shoal_query::collation::Collation::from_command(&body, &cmd.name)?.is_simple();
                    filter = Some(if simple { read_filter(kind, &body) } else { Document::new() });
                }
                placement.targets(filter.as_ref().unwrap_or(&Document::new()))
            }
            other => other.all_shards(),
        };
        let result = match (&placement, targets.len()) {
            (Placement::NoDatabase, _) | (_, 0) => return empty_reply(kind, &format!("{}.{coll}", cmd.db)),
            // `$lookup`, `$out` and `$merge` touch other collections: the router runs them, even
            // over one shard.
            (_, 1) if !(kind == ReadKind::Aggregate && has_router_stage(cmd)) => {
                single(state, cmd, kind, &placement, targets.iter().next().map_or("", |s| s.as_str())).await
            }
            (_, _) => match kind {
                ReadKind::Find => routed_read::find(state, cmd, coll, &placement, &targets).await,
                ReadKind::Aggregate => routed_read::aggregate(state, cmd, coll, &placement, &targets).await,
                ReadKind::Count => routed_read::count(state, cmd, &placement, &targets).await,
                ReadKind::Distinct => routed_read::distinct(state, cmd, &placement, &targets).await,
                ReadKind::FindAndModify => {
                    let targets: Vec<String> = targets.iter().cloned().collect();
                    routed_write::find_and_modify_without_key(state, cmd, coll, &placement, &targets).await
                }
            },
        };
        match result {
            Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => {
                routing::on_stale(state, &cmd.db, coll, &placement, &e, attempt).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The single-shard path: the client's bytes forwarded as they are.
async fn single(
    state: &RouterState,
    cmd: &Command,
    kind: ReadKind,
    placement: &Placement,
    shard: &str,
) -> HandlerResult {
    state.targeting.record([&shard.to_owned()]);
    let req = routing::versioned(forward::request(cmd)?, placement, shard);
    match kind {
        ReadKind::Find | ReadKind::Aggregate => {
            let (reply, served) = shard_read::read_cursor(state, shard, req, kind == ReadKind::Aggregate).await?;
            let id = if reply.cursor_id == 0 {
                0
            } else {
                state.cursors.register(reply.ns.clone(), shard.to_owned(), served, reply.cursor_id)
            };
            forward::cursor_reply(BatchField::First, &reply.documents, id, &reply.ns)
        }
        _ => {
            let read = kind != ReadKind::FindAndModify;
            let (doc, wce) = if read {
                shard_read::command_with_wc(state, shard, req).await?
            } else {
                shard_call::command_with_wc(state, shard, req, read).await?
            };
            let mut out = RawDocumentBuf::try_from(&doc).map_err(CommandError::from)?;
            if let Some(e) = wce {
                let wire = e.to_wire();
                out.append(bson::cstr!("writeConcernError"), forward::write_concern_error(&wire));
            }
            Ok(out)
        }
    }
}

pub async fn find(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_db::find(state, conn, cmd, coll).await;
    }
    routed_read(state, cmd, coll, ReadKind::Find).await
}

pub async fn aggregate(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    if cmd.db == CONFIG_DB
        && let Ok(coll) = cmd.collection()
    {
        return config_db::aggregate(state, conn, cmd, coll).await;
    }
    if let Ok(coll) = cmd.collection()
        && let Ok(Some(bson::RawBsonRef::Array(stages))) = cmd.body.get("pipeline")
        && let Some(Ok(bson::RawBsonRef::Document(first))) = stages.into_iter().next()
        && let Ok(Some(bson::RawBsonRef::Document(spec))) = first.get("$collStats")
    {
        let spec = Document::try_from(spec)?;
        let all: Vec<bson::Bson> =
            Document::try_from(cmd.body.as_ref())?.get_array("pipeline").cloned().unwrap_or_default();
        return crate::cmd::stats::coll_stats_stage(state, cmd, coll, &spec, &all[1..]).await;
    }
    if let Ok(Some(bson::RawBsonRef::Array(stages))) = cmd.body.get("pipeline")
        && let Some(Ok(bson::RawBsonRef::Document(first))) = stages.into_iter().next()
        && let Ok(Some(_)) = first.get(crate::cmd::data_distribution::STAGE)
    {
        let all: Vec<bson::Bson> =
            Document::try_from(cmd.body.as_ref())?.get_array("pipeline").cloned().unwrap_or_default();
        let spec = match all.first() {
            Some(bson::Bson::Document(d)) => d.get(crate::cmd::data_distribution::STAGE).cloned(),
            _ => None,
        };
        let spec = spec.unwrap_or(bson::Bson::Null);
        return crate::cmd::data_distribution::run(state, cmd, &spec, &all[1..]).await;
    }
    match cmd.collection() {
        Ok(coll) => routed_read(state, cmd, coll, ReadKind::Aggregate).await,
        // `aggregate: 1` (database-level): the database's primary.
        Err(_) => single_reply(state, cmd).await,
    }
}

/// Commands whose reply is one document computed by one shard: the database's primary (created
/// if missing) or, without config servers, the legacy shard.
pub async fn single_reply(state: &RouterState, cmd: &Command) -> HandlerResult {
    let mut attempt = 0;
    loop {
        let placement = routing::placement(state, &cmd.db, "", false).await?;
        let shard = match &placement {
            Placement::Unsharded { shard, .. } => shard.clone(),
            _ => return Err(CommandError::new(shoal_proto::ErrorCode::NamespaceNotFound, "database not found")),
        };
        match single(state, cmd, ReadKind::Count, &placement, &shard).await {
            // The primary moved (StaleDbVersion): ask the new one.
            Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => {
                routing::on_stale(state, &cmd.db, "", &placement, &e, attempt).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

pub async fn find_and_modify(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return Err(config_write::refused(&cmd.name, coll));
    }
    routed_read(state, cmd, coll, ReadKind::FindAndModify).await
}

pub async fn count(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_db::count(state, conn, cmd, coll).await;
    }
    routed_read(state, cmd, coll, ReadKind::Count).await
}

pub async fn distinct(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if cmd.db == CONFIG_DB {
        return config_db::distinct(state, conn, cmd, coll).await;
    }
    routed_read(state, cmd, coll, ReadKind::Distinct).await
}
