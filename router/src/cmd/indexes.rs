//! Index commands across shards: `createIndexes` and `dropIndexes` go to every shard that may
//! hold the collection (a shard that receives a chunk later gets the donor's indexes with it);
//! `listIndexes` is answered by one of them.
//!
//! One answer: the first shard's counts plus each shard's reply under `raw`; an error from any
//! shard is the command's error, named with its shard (a build that failed on one shard is never
//! hidden behind another's success). Unique indexes of a sharded collection must be prefixed by
//! the shard key (MongoDB's rule: uniqueness is only enforceable per shard).
//!
//! Must not: build or track indexes itself; shards own them.

use bson::{Bson, Document, RawDocumentBuf};
use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::routing::every_shard;
use crate::routing::{self, Placement};
use crate::state::{ConnContext, RouterState};

pub async fn list_indexes(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    let placement = routing::placement(state, &cmd.db, coll, false).await?;
    let shards: Vec<String> = placement.all_shards().into_iter().collect();
    if shards.is_empty() {
        return Err(CommandError::new(ErrorCode::NamespaceNotFound, format!("ns does not exist: {}.{coll}", cmd.db)));
    }
    // Every shard holding the collection has the same indexes; the first answers.
    let reply = broadcast(state, cmd, &placement, &shards[..1]).await.into_iter().next();
    let reply = reply.ok_or_else(|| CommandError::new(ErrorCode::InternalError, "no shard answered"))??;
    Ok(RawDocumentBuf::try_from(&reply)?)
}

/// The index specifications `shard` lists for `db.coll`; `None` when it has no such collection.
pub(crate) async fn shard_index_specs(
    state: &RouterState,
    shard: &str,
    db: &str,
    coll: &str,
) -> Result<Option<Vec<Document>>, CommandError> {
    let request = shoal_proto::shard::CommandRequest {
        db: db.to_owned(),
        body: bson::doc! { "listIndexes": coll }.to_vec()?.into(),
        ..Default::default()
    };
    let listed = match crate::exec::call::command(state, shard, request).await {
        Ok(d) => d,
        Err(e) if e.is(ErrorCode::NamespaceNotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    let batch = listed.get_document("cursor").and_then(|c| c.get_array("firstBatch")).cloned().unwrap_or_default();
    Ok(Some(batch.into_iter().filter_map(|b| b.as_document().cloned()).collect()))
}

/// Whether an index key's fields begin with the shard key's (MongoDB's rule for unique indexes
/// of a sharded collection).
pub(crate) fn prefixed_by_shard_key(key: &Document, shard_key: &[&str]) -> bool {
    let fields: Vec<&str> = key.keys().map(String::as_str).collect();
    fields.len() >= shard_key.len() && fields[..shard_key.len()] == shard_key[..]
}

/// Refuses a unique index a sharded collection cannot enforce.
fn check_unique_prefix(placement: &Placement, body: &Document) -> Result<(), CommandError> {
    let Placement::Sharded(table) = placement else { return Ok(()) };
    let shard_key: Vec<&str> = table.key.fields.iter().map(|f| f.name.as_str()).collect();
    for spec in body.get_array("indexes").map(|a| a.as_slice()).unwrap_or_default() {
        let Bson::Document(spec) = spec else { continue };
        if !matches!(spec.get("unique"), Some(Bson::Boolean(true))) {
            continue;
        }
        let Ok(key) = spec.get_document("key") else { continue };
        if !prefixed_by_shard_key(key, &shard_key) {
            let pattern: Document = table.key.fields.iter().map(|f| (f.name.clone(), Bson::Int32(1))).collect();
            return Err(CommandError::new(
                ErrorCode::CannotCreateIndex,
                format!("cannot create unique index over {key} with shard key pattern {pattern}"),
            ));
        }
    }
    Ok(())
}

/// The first error (named with its shard), else the first reply with every reply under `raw`.
fn merged(shards: &[String], replies: Vec<Result<Document, CommandError>>) -> HandlerResult {
    let mut raw = Document::new();
    let mut first: Option<Document> = None;
    for (shard, reply) in shards.iter().zip(replies) {
        match reply {
            Ok(d) => {
                raw.insert(shard.clone(), d.clone());
                first.get_or_insert(d);
            }
            Err(e) => {
                return Err(CommandError { errmsg: format!("{} (on shard {shard})", e.errmsg), ..e });
            }
        }
    }
    let mut out = first.unwrap_or_default();
    out.insert("raw", raw);
    Ok(RawDocumentBuf::try_from(&out)?)
}

pub async fn create_indexes(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    let placement = routing::placement(state, &cmd.db, coll, true).await?;
    let body = Document::try_from(cmd.body.as_ref())?;
    check_unique_prefix(&placement, &body)?;
    let shards: Vec<String> = placement.all_shards().into_iter().collect();
    let replies = broadcast(state, cmd, &placement, &shards).await;
    merged(&shards, replies)
}

pub async fn drop_indexes(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let coll = cmd.collection()?;
    let placement = routing::placement(state, &cmd.db, coll, false).await?;
    // Every shard: one that gave its chunks away may still hold the collection and its indexes.
    let shards = if state.catalog.is_configured() {
        every_shard(state).await?
    } else {
        placement.all_shards().into_iter().collect()
    };
    let replies = broadcast(state, cmd, &Placement::NoDatabase, &shards).await;
    let (mut kept_shards, mut kept) = (Vec::new(), Vec::new());
    let mut not_found = None;
    for (shard, reply) in shards.into_iter().zip(replies) {
        match reply {
            Err(e) if e.is(ErrorCode::NamespaceNotFound) => not_found = Some(e),
            // A shard without the index, where others had it: it may have missed a build that
            // failed there; the drop's goal holds on it.
            Err(e) if e.is(ErrorCode::IndexNotFound) && placement.all_shards().len() > 1 => {
                not_found.get_or_insert(e);
            }
            r => {
                kept_shards.push(shard);
                kept.push(r);
            }
        }
    }
    if kept.is_empty() {
        return Err(not_found.unwrap_or_else(|| {
            CommandError::new(ErrorCode::NamespaceNotFound, format!("ns not found {}.{coll}", cmd.db))
        }));
    }
    merged(&kept_shards, kept)
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn merged_names_the_failing_shard_and_keeps_raw_replies() {
        let shards = vec!["s1".to_owned(), "s2".to_owned()];
        let ok = merged(&shards, vec![Ok(doc! {"numIndexesAfter": 2}), Ok(doc! {"numIndexesAfter": 2})]).expect("ok");
        let d = Document::try_from(ok.as_ref()).expect("doc");
        assert_eq!(d.get_document("raw").expect("raw").len(), 2);
        let err =
            merged(&shards, vec![Ok(doc! {}), Err(CommandError::new(ErrorCode::DuplicateKey, "E11000 duplicate key"))])
                .expect_err("s2 failed");
        assert_eq!(err.code, 11000);
        assert!(err.errmsg.contains("on shard s2"));
    }
}
