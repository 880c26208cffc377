//! Read-only sharding commands a mongos answers about itself and the catalog: `getShardVersion`,
//! `getShardMap`, `flushRouterConfig`, `isdbgrid`.

use std::collections::BTreeMap;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkVersion, Epoch, Timestamp};

use super::{body_of, raw};
use crate::cmd::info::hostname;
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

pub(super) fn bson_version(v: ChunkVersion) -> bson::Timestamp {
    bson::Timestamp { time: v.major, increment: v.minor }
}

pub(super) fn bson_ts(t: Timestamp) -> bson::Timestamp {
    bson::Timestamp { time: t.secs, increment: t.inc }
}

pub(super) fn object_id(e: Epoch) -> bson::oid::ObjectId {
    bson::oid::ObjectId::from_bytes(e.0)
}

/// `getShardVersion: "db.coll"` → the collection version; `getShardVersion: "db"` → the
/// database's primary and version. `fullMetadata` is accepted; chunk bounds are not listed
/// because their stored form (keystring bytes) does not decode back to values.
pub async fn get_shard_version(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let ns = match body.get("getShardVersion") {
        Some(Bson::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err(CommandError::type_mismatch(
                "BSON field 'getShardVersion' is the wrong type, expected type 'string'",
            ));
        }
    };
    if !ns.contains('.') {
        let db = state
            .catalog
            .database(&ns)
            .await?
            .ok_or_else(|| CommandError::new(ErrorCode::NamespaceNotFound, format!("database {ns} not found")))?;
        let uuid =
            bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: db.version.uuid.as_bytes().to_vec() };
        return raw(&doc! {
            "primaryShard": &db.primary,
            "version": { "uuid": uuid, "timestamp": bson_ts(db.version.timestamp), "lastMod": i64::from(db.version.last_mod) },
        });
    }
    let coll =
        state.catalog.collection(&ns).await?.ok_or_else(|| {
            CommandError::new(ErrorCode::NamespaceNotSharded, format!("Collection {ns} is not sharded."))
        })?;
    raw(&doc! {
        "version": bson_version(coll.version),
        "versionEpoch": object_id(coll.epoch),
        "versionTimestamp": bson_ts(coll.timestamp),
    })
}

/// `getShardMap` → `{map: {shard: connStr, config: ...}, hosts: {host: shard}, connStrings:
/// {connStr: shard}}`.
pub async fn get_shard_map(state: &RouterState, _conn: &ConnContext, _cmd: &ClientCommand) -> HandlerResult {
    let mut map = Document::new();
    let mut hosts = BTreeMap::new();
    let mut conn_strings = Document::new();
    for shard in &state.catalog.shards().await? {
        let conn = shard.host_string();
        map.insert(shard.id.clone(), conn.clone());
        conn_strings.insert(conn, shard.id.clone());
        for member in &shard.group.members {
            hosts.insert(member.clone(), Bson::String(shard.id.clone()));
        }
    }
    let config = state.settings.config_servers.join(",");
    if !config.is_empty() {
        map.insert("config", config.clone());
        conn_strings.insert(config.clone(), "config");
        for member in &state.settings.config_servers {
            hosts.insert(member.clone(), Bson::String("config".into()));
        }
    }
    raw(&doc! { "map": map, "hosts": hosts.into_iter().collect::<Document>(), "connStrings": conn_strings })
}

/// `flushRouterConfig: 1 | "db" | "db.coll"`: drops the cached routing of everything, a
/// database or a collection; the next request reloads it from the catalog.
pub async fn flush_router_config(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    match body.get("flushRouterConfig") {
        Some(Bson::String(ns)) if ns.contains('.') => state.routing.forget_collection(ns),
        Some(Bson::String(db)) if !db.is_empty() => state.routing.forget_database(db),
        _ => state.routing.clear(),
    }
    raw(&doc! { "flushed": true })
}

pub async fn is_db_grid(_state: &RouterState, _conn: &ConnContext, _cmd: &ClientCommand) -> HandlerResult {
    raw(&doc! { "isdbgrid": 1, "hostname": hostname() })
}
