//! `movePrimary` and `removeShard`: moving a database's primary (its unsharded collections) to
//! another shard, and draining a shard out of the cluster.
//!
//! movePrimary validates against the catalog, then calls the current primary's `MovePrimary`
//! (shard `migration::primary`), which clones, commits in the catalog and drops its copies; the
//! router then forgets its cached database so its next request reads the new primary (other
//! routers learn it from StaleDbVersion). removeShard writes the catalog's `RemoveShard` (the
//! draining state machine) and shapes MongoDB's replies; the balancer moves chunks off a
//! draining shard, and the databases it is primary of are moved with movePrimary.
//!
//! Must not: move data itself (the shards do) or decide which chunks leave a draining shard.

use bson::{Bson, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Command, RemoveShardProgress, RemoveShardState, Reply};
use shoal_proto::config::CatalogPart;
use shoal_proto::shard::MovePrimaryRequest;

use super::{body_of, raw};
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::routing;
use crate::state::{ConnContext, RouterState};

/// MongoDB's note while databases still name the draining shard primary.
pub const DBS_TO_MOVE_NOTE: &str = "you need to drop or movePrimary these databases";

fn string_field<'a>(body: &'a bson::Document, cmd: &str, field: &str) -> Result<Option<&'a str>, CommandError> {
    match body.get(field) {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s)),
        Some(_) => {
            let path = if cmd == field { field.to_owned() } else { format!("{cmd}.{field}") };
            Err(CommandError::type_mismatch(format!("BSON field '{path}' is the wrong type, expected type 'string'")))
        }
    }
}

/// `movePrimary: "<db>", to: "<shard>"`.
pub async fn move_primary(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let name = cmd.name.as_str();
    let db = string_field(&body, name, name)?.unwrap_or_default().to_owned();
    shoal_proto::namespace::validate_db(&db).map_err(|e| {
        CommandError::new(ErrorCode::InvalidNamespace, format!("invalid db name specified: {db} ({e})"))
    })?;
    if matches!(db.as_str(), "admin" | "config" | "local") {
        return Err(CommandError::new(ErrorCode::InvalidOptions, format!("Can't move primary for {db} database")));
    }
    let to = match string_field(&body, name, "to")? {
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'movePrimary.to' is missing but a required field",
            ));
        }
        Some("") => {
            return Err(CommandError::new(ErrorCode::InvalidOptions, "you have to specify where you want to move it"));
        }
        Some(t) => t.to_owned(),
    };
    let catalog = routing::read_view(state, &[CatalogPart::Databases]).await?;
    let database = catalog
        .database(&db)
        .ok_or_else(|| CommandError::new(ErrorCode::NamespaceNotFound, format!("Database {db} not found")))?;
    if catalog.shard(&to).is_none() {
        return Err(CommandError::new(ErrorCode::ShardNotFound, format!("Shard {to} not found")));
    }
    if database.primary == to {
        tracing::info!(%db, %to, "movePrimary: already the primary");
        return raw(&doc! {});
    }
    let donor = catalog.shard(&database.primary).ok_or_else(|| routing::pool::unknown_shard(&database.primary))?;
    let donor = donor.id.clone();
    drop(catalog);
    let request =
        MovePrimaryRequest { request_id: format!("movePrimary-{}", cmd.request_id), db: db.clone(), to_shard: to };
    let result = crate::exec::call::donor::move_primary(state, &donor, request).await;
    // Whatever happened, the next request reads the database's primary again.
    state.routing.forget_database(&db);
    result?;
    raw(&doc! {})
}

/// `removeShard: "<shard>"`: starts draining, reports progress, removes the shard once empty.
pub async fn remove_shard(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let shard = match string_field(&body, &cmd.name, &cmd.name)? {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => return Err(CommandError::type_mismatch("removeShard needs a shard name: {removeShard: \"<shard>\"}")),
    };
    let progress = match state.catalog.write(&Command::RemoveShard { shard: shard.clone() }).await? {
        Reply::RemoveShard(p) => p,
        other => {
            return Err(CommandError::new(ErrorCode::InternalError, format!("unexpected catalog answer {other:?}")));
        }
    };
    if progress.state == RemoveShardState::Completed {
        // Drops the removed shard's channels; later requests cannot name it any more.
        routing::refresh_shards(state).await?;
        tracing::info!(%shard, "shard removed");
    }
    raw(&remove_shard_reply(&shard, &progress))
}

/// MongoDB's removeShard reply for each state of the draining.
pub fn remove_shard_reply(shard: &str, p: &RemoveShardProgress) -> bson::Document {
    let dbs: Vec<Bson> = p.databases_to_move.iter().map(|d| Bson::String(d.clone())).collect();
    match p.state {
        RemoveShardState::Started => doc! {
            "msg": "draining started successfully",
            "state": "started",
            "shard": shard,
            "note": DBS_TO_MOVE_NOTE,
            "dbsToMove": dbs,
        },
        RemoveShardState::Ongoing => doc! {
            "msg": "draining ongoing",
            "state": "ongoing",
            "remaining": {
                "chunks": p.remaining_chunks as i64,
                "dbs": p.databases_to_move.len() as i64,
                "jumboChunks": p.remaining_jumbo_chunks as i64,
            },
            "note": DBS_TO_MOVE_NOTE,
            "dbsToMove": dbs,
        },
        RemoveShardState::Completed => doc! {
            "msg": "removeshard completed successfully",
            "state": "completed",
            "shard": shard,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(state: RemoveShardState, chunks: u64, dbs: &[&str]) -> RemoveShardProgress {
        RemoveShardProgress {
            state,
            remaining_chunks: chunks,
            remaining_jumbo_chunks: 1,
            databases_to_move: dbs.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn replies_follow_mongodb_for_each_state() {
        let started = remove_shard_reply("s1", &progress(RemoveShardState::Started, 3, &["app"]));
        assert_eq!(started.get_str("msg").ok(), Some("draining started successfully"));
        assert_eq!((started.get_str("state").ok(), started.get_str("shard").ok()), (Some("started"), Some("s1")));
        assert_eq!(started.get_array("dbsToMove").ok(), Some(&vec![Bson::String("app".into())]));
        let ongoing = remove_shard_reply("s1", &progress(RemoveShardState::Ongoing, 3, &["app", "b"]));
        assert_eq!(ongoing.get_str("msg").ok(), Some("draining ongoing"));
        let remaining = ongoing.get_document("remaining").expect("remaining");
        assert_eq!(remaining, &doc! { "chunks": 3i64, "dbs": 2i64, "jumboChunks": 1i64 });
        assert_eq!(ongoing.get_str("note").ok(), Some(DBS_TO_MOVE_NOTE));
        let done = remove_shard_reply("s1", &progress(RemoveShardState::Completed, 0, &[]));
        assert_eq!(done, doc! { "msg": "removeshard completed successfully", "state": "completed", "shard": "s1" });
    }
}
