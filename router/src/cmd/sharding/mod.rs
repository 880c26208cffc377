//! Sharding admin commands answered from the catalog. All run on `admin` only, as on a mongos.
//! This file holds the shard and database commands (`listShards`, `addShard`, `enableSharding`);
//! collections and chunks are in the submodules, `movePrimary` and `removeShard` in `primary`.

mod balancer;
mod chunks;
mod info;
mod key;
mod key_index;
mod median;
mod primary;
mod refine;
pub mod repl_config;
pub mod repl_status;
mod shard_collection;
mod zones;

pub use balancer::{
    balancer_collection_status, balancer_start, balancer_status, balancer_stop, configure_collection_balancing,
};
pub(crate) use chunks::wire_bound;
pub use chunks::{clear_jumbo_flag, merge_chunks, move_chunk, split};
pub use info::{flush_router_config, get_shard_map, get_shard_version, is_db_grid};
pub(crate) use key::bound_of_key;
pub(crate) use median::size_split_points;
pub use primary::{move_primary, remove_shard};
pub use refine::refine_collection_shard_key;
pub use shard_collection::shard_collection;
pub use zones::{shard_zone, update_zone_key_range};

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Command, Reply, Shard};

use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::routing;
use crate::state::{ConnContext, RouterState};

/// The command's body as a document (dispatch has already checked these run on `admin`).
pub(super) fn body_of(cmd: &ClientCommand) -> Result<Document, CommandError> {
    Ok(Document::try_from(cmd.body.as_ref())?)
}

pub(super) fn raw(doc: &Document) -> HandlerResult {
    RawDocumentBuf::try_from(doc).map_err(CommandError::from)
}

/// A shard as `config.shards` and `listShards` show it.
pub fn shard_document(shard: &Shard) -> Document {
    let mut d = doc! {
        "_id": &shard.id,
        "host": shard.host_string(),
        "state": 1,
        "topologyTime": bson::Timestamp { time: shard.topology_time.secs, increment: shard.topology_time.inc },
    };
    if shard.is_draining() {
        d.insert("draining", true);
    }
    if !shard.zones.is_empty() {
        d.insert("tags", shard.zones.iter().cloned().collect::<Vec<_>>());
    }
    d
}

pub async fn list_shards(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let filter = match body.get("filter") {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(f)) => f.clone(),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'listShards.filter' is the wrong type, expected type 'object'",
            ));
        }
    };
    let filter = shoal_query::filter::Filter::parse(&filter)?;
    let shards = state.catalog.shards().await?;
    let shards: Vec<Document> = shards.iter().map(shard_document).filter(|d| filter.matches(d)).collect();
    raw(&doc! { "shards": shards })
}

/// `addShard: "rs/h1:p,h2:p"` (or `"h:p"`), optional `name`; the shard's name defaults to the
/// replica-set name, as in MongoDB.
pub async fn add_shard(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let conn_str = match body.get("addShard") {
        Some(Bson::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        _ => {
            return Err(CommandError::new(
                ErrorCode::BadValue,
                "addShard needs a connection string: \"<replicaSet>/<host:port>,...\"",
            ));
        }
    };
    let (replica_set, hosts) = match conn_str.split_once('/') {
        Some((rs, hosts)) => (Some(rs.to_owned()), hosts),
        None => (None, conn_str.as_str()),
    };
    let members: Vec<String> = hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).collect();
    if members.is_empty() || members.iter().any(|m| !valid_host_port(m)) {
        return Err(CommandError::new(
            ErrorCode::FailedToParse,
            format!("invalid shard connection string '{conn_str}': expected host:port members"),
        ));
    }
    let name = match body.get("name") {
        Some(Bson::String(n)) if !n.is_empty() => n.clone(),
        Some(Bson::String(_)) => return Err(CommandError::bad_value("shard name cannot be empty")),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'addShard.name' is the wrong type, expected type 'string'",
            ));
        }
        None => match &replica_set {
            Some(rs) => rs.clone(),
            None => {
                return Err(CommandError::bad_value(
                    "a shard that is not given as \"<replicaSet>/<hosts>\" needs a name",
                ));
            }
        },
    };
    let replica_set = replica_set.unwrap_or_else(|| name.clone());
    let response = state.catalog.write(&Command::AddShard { shard: name.clone(), replica_set, members }).await?;
    let added = match response {
        Reply::ShardAdded { shard } => shard,
        _ => name,
    };
    raw(&doc! { "shardAdded": added })
}

fn valid_host_port(member: &str) -> bool {
    match member.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

/// `enableSharding: db` (optional `primaryShard`): registers the database in the catalog with a
/// primary shard; a database that is already there keeps its primary.
pub async fn enable_sharding(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let db = match body.get("enableSharding") {
        Some(Bson::String(s)) => s.clone(),
        _ => {
            return Err(CommandError::type_mismatch(
                "BSON field 'enableSharding' is the wrong type, expected type 'string'",
            ));
        }
    };
    shoal_proto::namespace::validate_db(&db)
        .map_err(|e| CommandError::new(ErrorCode::InvalidNamespace, e.to_string()))?;
    if matches!(db.as_str(), "admin" | "local" | "config") {
        return Err(CommandError::new(ErrorCode::InvalidOptions, format!("can't shard {db} database")));
    }
    let (shards, databases) = state.catalog.shards_and_databases().await?;
    let primary = match body.get("primaryShard") {
        Some(Bson::String(p)) => {
            if !shards.iter().any(|s| &s.id == p) {
                return Err(CommandError::new(ErrorCode::ShardNotFound, format!("Shard {p} not found")));
            }
            p.clone()
        }
        None => routing::least_loaded_shard(&shards, &databases)?,
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'enableSharding.primaryShard' is the wrong type, expected type 'string'",
            ));
        }
    };
    if !databases.iter().any(|d| d.name == db) {
        state.catalog.write(&Command::CreateDatabase { name: db, primary, uuid: uuid_v4() }).await?;
    }
    Ok(RawDocumentBuf::new())
}

pub(super) fn uuid_v4() -> uuid::Uuid {
    uuid::Uuid::new_v4()
}
