//! `$out` and `$merge` at the router: the pipeline's results written into an unsharded target
//! through the router's own write path (so the target's shard, versions and retries are handled
//! as for a client's write).
//!
//! `$out` is not atomic here (Shoal has no `renameCollection` yet): the results are computed and
//! checked (unique `_id`s) first, so a failing pipeline leaves the target untouched, but then the
//! target is emptied and refilled in batches, and a reader may see it empty or partly filled,
//! and a failure between batches leaves it partly filled. Indexes on the target are kept.
//!
//! Must not: write into a sharded target (`$out`: MongoDB's 28769; `$merge`: not supported yet).

use bson::{Bson, Document, RawDocumentBuf, doc, oid::ObjectId};
use shoal_proto::ErrorCode;
use shoal_query::aggregate::output::{MergeWrite, Output};

use crate::cmd::crud;
use crate::command::Command;
use crate::error::CommandError;
use crate::exec::call::WriteKind;
use crate::routing::{self, Placement};
use crate::state::RouterState;

/// Documents or statements per write command the router sends for `$out`/`$merge`.
const WRITE_BATCH_DOCS_MAX: usize = 500;

/// Writes `docs` as `out` says.
pub async fn write(state: &RouterState, cmd: &Command, out: &Output, docs: Vec<Document>) -> Result<(), CommandError> {
    let (db, coll) = out.target();
    let db = db.unwrap_or(&cmd.db).to_owned();
    let placement = routing::placement(state, &db, coll, true).await?;
    if let Placement::Sharded(_) = placement {
        return Err(match out {
            Output::Out { .. } => CommandError::new(ErrorCode::Location28769, format!("{db}.{coll} cannot be sharded")),
            Output::Merge(_) => CommandError::new(
                ErrorCode::NotImplemented,
                format!("$merge into a sharded collection ({db}.{coll}) is not supported yet"),
            ),
        });
    }
    match out {
        Output::Out { .. } => {
            let docs = with_unique_ids(docs)?;
            let deletes = vec![Bson::Document(doc! { "q": {}, "limit": 0 })];
            send(state, cmd, &db, coll, WriteKind::Delete, doc! { "delete": coll, "deletes": deletes }).await?;
            for batch in docs.chunks(WRITE_BATCH_DOCS_MAX) {
                let body = doc! { "insert": coll, "documents": batch.to_vec(), "ordered": true };
                send(state, cmd, &db, coll, WriteKind::Insert, body).await?;
            }
        }
        Output::Merge(spec) => {
            check_unique_on(state, &db, coll, &placement, &spec.on).await?;
            let writes = docs.into_iter().map(|d| spec.write_for(d)).collect::<Result<Vec<_>, _>>()?;
            let mut inserts = Vec::new();
            let mut updates = Vec::new();
            for w in writes {
                match w {
                    MergeWrite::Insert(d) => inserts.push(d),
                    MergeWrite::Update { statement, must_match: true } => {
                        let body = doc! { "update": coll, "updates": [statement], "ordered": true };
                        let reply = send(state, cmd, &db, coll, WriteKind::Update, body).await?;
                        if count(reply.get("n")) == 0 {
                            return Err(CommandError::new(
                                ErrorCode::Location13113,
                                "$merge could not find a document in the target collection that matches the 'on' \
                                 fields (whenNotMatched: fail)",
                            ));
                        }
                    }
                    MergeWrite::Update { statement, must_match: false } => updates.push(statement),
                }
            }
            for batch in inserts.chunks(WRITE_BATCH_DOCS_MAX) {
                let body = doc! { "insert": coll, "documents": batch.to_vec(), "ordered": true };
                send(state, cmd, &db, coll, WriteKind::Insert, body).await?;
            }
            for batch in updates.chunks(WRITE_BATCH_DOCS_MAX) {
                let body = doc! { "update": coll, "updates": batch.to_vec(), "ordered": true };
                send(state, cmd, &db, coll, WriteKind::Update, body).await?;
            }
        }
    }
    Ok(())
}

/// MongoDB's rule: `$merge`'s `on` fields other than `_id` need a unique index on exactly them
/// in the target (51183), or matches could be ambiguous.
async fn check_unique_on(
    state: &RouterState,
    db: &str,
    coll: &str,
    placement: &Placement,
    on: &[String],
) -> Result<(), CommandError> {
    if on.len() == 1 && on[0] == "_id" {
        return Ok(());
    }
    let missing = || {
        CommandError::new(
            ErrorCode::Location51183,
            format!("Cannot find index to verify that join fields will be unique: {on:?} in {db}.{coll}"),
        )
    };
    let Placement::Unsharded { shard, .. } = placement else { return Err(missing()) };
    let Some(specs) = crate::cmd::indexes::shard_index_specs(state, shard, db, coll).await? else {
        return Err(missing());
    };
    let mut wanted: Vec<&str> = on.iter().map(String::as_str).collect();
    wanted.sort_unstable();
    let found = specs.iter().any(|spec| {
        let unique =
            matches!(spec.get("unique"), Some(Bson::Boolean(true))) && !spec.contains_key("partialFilterExpression");
        let mut fields: Vec<&str> =
            spec.get_document("key").map(|k| k.keys().map(String::as_str).collect()).unwrap_or_default();
        fields.sort_unstable();
        unique && fields == wanted
    });
    if found { Ok(()) } else { Err(missing()) }
}

/// `docs` with an `_id` each (a new ObjectId where missing), refused if two share one — before
/// `$out` empties its target.
fn with_unique_ids(docs: Vec<Document>) -> Result<Vec<Document>, CommandError> {
    let mut seen = std::collections::HashSet::new();
    docs.into_iter()
        .map(|mut d| {
            if !d.contains_key("_id") {
                d.insert("_id", ObjectId::new());
            }
            let key = doc! { "_id": d.get("_id").cloned().unwrap_or(Bson::Null) }.to_vec()?;
            if !seen.insert(key) {
                return Err(CommandError::new(
                    ErrorCode::DuplicateKey,
                    format!("$out: two results share _id {}", d.get("_id").unwrap_or(&Bson::Null)),
                ));
            }
            Ok(d)
        })
        .collect()
}

fn count(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        _ => 0,
    }
}

/// One write command through the router's write path; its first write error becomes the error.
async fn send(
    state: &RouterState,
    cmd: &Command,
    db: &str,
    coll: &str,
    kind: WriteKind,
    mut body: Document,
) -> Result<Document, CommandError> {
    body.insert("$db", db);
    // The aggregate's write concern governs its writes, as in MongoDB.
    if let Ok(Some(bson::RawBsonRef::Document(wc))) = cmd.body.get("writeConcern") {
        body.insert("writeConcern", Document::try_from(wc)?);
    }
    let write = Command::internal(RawDocumentBuf::try_from(&body)?, db, cmd.request_id);
    let reply = Document::try_from(crud::routed_write(state, &write, coll, kind).await?.as_ref())?;
    if let Ok(errors) = reply.get_array("writeErrors")
        && let Some(Bson::Document(e)) = errors.first()
    {
        let code = e.get_i32("code").unwrap_or(ErrorCode::InternalError.code());
        let errmsg = e.get_str("errmsg").unwrap_or("write error").to_owned();
        let code_name = ErrorCode::from_code(code).map_or("Location", |c| c.name()).to_owned();
        return Err(CommandError::with_code(code, code_name, format!("$out/$merge write failed: {errmsg}")));
    }
    Ok(reply)
}
