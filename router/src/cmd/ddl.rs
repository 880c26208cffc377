//! Collection and database commands: `create` on the database's primary; `drop`,
//! `dropDatabase`, `collMod` and listings on every shard that may hold the namespace, with
//! the catalog updated for sharded collections and databases; listings merged.

use std::collections::BTreeMap;

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::Command as CatalogCommand;

use crate::cmd::crud::single_reply;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::exec::reply::{self, BatchField};
use crate::routing::{self, Placement, every_shard};
use crate::state::{ConnContext, RouterState};

/// The first success, else the first error (an error from any shard wins when `strict`). A
/// `writeConcernError` of any shard is kept in the answer.
fn one_answer(replies: Vec<Result<Document, CommandError>>, strict: bool) -> HandlerResult {
    let mut first_err = None;
    let mut first_ok: Option<Document> = None;
    for r in replies {
        match r {
            Ok(d) if first_ok.is_none() => first_ok = Some(d),
            Ok(d) => {
                if let (Some(ok), Some(wce)) = (first_ok.as_mut(), d.get("writeConcernError"))
                    && !ok.contains_key("writeConcernError")
                {
                    ok.insert("writeConcernError", wce.clone());
                }
            }
            Err(e) if first_err.is_none() => first_err = Some(e),
            Err(_) => {}
        }
    }
    match (first_ok, first_err) {
        (_, Some(e)) if strict => Err(e),
        (Some(d), _) => Ok(RawDocumentBuf::try_from(&d)?),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(RawDocumentBuf::new()),
    }
}

pub async fn create(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    let placement = routing::placement(state, &cmd.db, coll, true).await?;
    let shards: Vec<String> = placement.all_shards().into_iter().collect();
    one_answer(broadcast(state, cmd, &placement, &shards[..shards.len().min(1)]).await, true)
}

pub async fn drop(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if !state.catalog.is_configured() {
        return single_reply(state, cmd).await;
    }
    let ns = format!("{}.{coll}", cmd.db);
    let placement = routing::placement(state, &cmd.db, coll, false).await?;
    let replies = on_every_holder(state, cmd).await?;
    if matches!(placement, Placement::Sharded(_)) {
        state.catalog.write(&CatalogCommand::DropCollection { ns: ns.clone() }).await?;
    }
    state.routing.forget_collection(&ns);
    one_answer(replies, true)
}

/// `cmd` on every shard, unversioned (it must reach each copy whatever the shard's routing
/// state): the answers of the shards that hold the namespace (NamespaceNotFound left out).
async fn on_every_holder(
    state: &RouterState,
    cmd: &Command,
) -> Result<Vec<Result<Document, CommandError>>, CommandError> {
    let shards = every_shard(state).await?;
    let replies = broadcast(state, cmd, &Placement::NoDatabase, &shards).await;
    Ok(replies.into_iter().filter(|r| !matches!(r, Err(e) if e.is(ErrorCode::NamespaceNotFound))).collect())
}

/// `collMod` (an index's `hidden` / `expireAfterSeconds`): every shard holding the collection
/// changes its copy of the index, so a sharded collection's shards agree; the first answer is
/// the reply. NamespaceNotFound only when no shard has the collection.
pub async fn coll_mod(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    if !state.catalog.is_configured() {
        return single_reply(state, cmd).await;
    }
    let found = on_every_holder(state, cmd).await?;
    if found.is_empty() {
        return Err(CommandError::new(ErrorCode::NamespaceNotFound, format!("ns does not exist: {}.{coll}", cmd.db)));
    }
    one_answer(found, true)
}

pub async fn drop_database(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    if !state.catalog.is_configured() {
        return single_reply(state, cmd).await;
    }
    let shards = every_shard(state).await?;
    let replies = broadcast(state, cmd, &Placement::NoDatabase, &shards).await;
    if state.catalog.database(&cmd.db).await?.is_some() {
        state.catalog.write(&CatalogCommand::DropDatabase { name: cmd.db.clone() }).await?;
    }
    state.routing.forget_database(&cmd.db);
    one_answer(replies, true)
}

pub async fn list_databases(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    if !state.catalog.is_configured() {
        return single_reply(state, cmd).await;
    }
    let shards = every_shard(state).await?;
    let mut dbs: BTreeMap<String, Document> = BTreeMap::new();
    let mut total = 0i64;
    for reply in broadcast(state, cmd, &Placement::NoDatabase, &shards).await {
        let reply = reply?;
        for d in reply.get_array("databases").map(|a| a.as_slice()).unwrap_or_default() {
            let Bson::Document(d) = d else { continue };
            let Ok(name) = d.get_str("name") else { continue };
            let size = num(d.get("sizeOnDisk"));
            total += size;
            let entry = dbs.entry(name.to_owned()).or_insert_with(|| {
                let mut e = d.clone();
                e.insert("sizeOnDisk", 0i64);
                e
            });
            let sum = num(entry.get("sizeOnDisk")) + size;
            entry.insert("sizeOnDisk", sum);
            entry.insert("empty", sum == 0);
        }
    }
    let name_only = matches!(Document::try_from(cmd.body.as_ref())?.get("nameOnly"), Some(Bson::Boolean(true)));
    let list: Vec<Document> = dbs
        .into_values()
        .map(|d| {
            if name_only {
                doc! { "name": d.get_str("name").unwrap_or_default() }
            } else {
                d
            }
        })
        .collect();
    let mut out = doc! { "databases": list };
    if !name_only {
        out.insert("totalSize", total);
    }
    Ok(RawDocumentBuf::try_from(&out)?)
}

pub(crate) fn num(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) => *d as i64,
        _ => 0,
    }
}

pub async fn list_collections(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    if !state.catalog.is_configured() {
        return single_reply(state, cmd).await;
    }
    let shards = every_shard(state).await?;
    let mut seen: BTreeMap<String, Document> = BTreeMap::new();
    for reply in broadcast(state, cmd, &Placement::NoDatabase, &shards).await {
        let reply = reply?;
        let batch = reply.get_document("cursor").and_then(|c| c.get_array("firstBatch")).cloned().unwrap_or_default();
        for c in batch {
            if let Bson::Document(c) = c
                && let Ok(name) = c.get_str("name")
            {
                seen.entry(name.to_owned()).or_insert_with(|| c.clone());
            }
        }
    }
    let mut docs = Vec::new();
    for d in seen.values() {
        let mut buf = Vec::new();
        d.to_writer(&mut buf)?;
        docs.push(bytes::Bytes::from(buf));
    }
    reply::cursor_reply(BatchField::First, &docs, 0, &format!("{}.$cmd.listCollections", cmd.db))
}
