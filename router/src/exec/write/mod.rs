//! Writes, the call step: the client's bytes to the one shard of an unsharded namespace
//! ([`call`]), or, on a sharded collection, inserts split per shard by each document's shard
//! key ([`insert`]) and update and delete statements targeted one by one from their filters
//! ([`update_or_delete`], with the write without shard key in [`without_key`]), replies merged
//! with the client's indexes. StaleConfig from a shard on a sharded collection refreshes the
//! routing and re-targets only what that shard did not apply (shards refuse a stale request
//! before changing anything); on an unsharded one the caller's `with_placement` retries.
//!
//! Must not: shape the client's reply (`exec::reply::write_reply` does).

pub mod without_key;

use std::collections::BTreeMap;

use bson::{Bson, Document, RawDocumentBuf, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::{CommandRequest, WriteError, WriteReply};
use shoal_query::shard_key::{self, Missing};

use crate::command::Command;
use crate::error::CommandError;
use crate::exec::call::request::forwarded;
use crate::exec::call::{self, WriteKind};
use crate::exec::target::{self, WriteRoute};
use crate::retryable;
use crate::routing::{self, Placement, STALE_ATTEMPTS_MAX};
use crate::state::RouterState;
use without_key::{matching_nothing, one_match, probe_template};

/// Calls the shards for the write `kind` as `route` says under `placement`.
pub async fn call(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    kind: WriteKind,
    placement: Placement,
    route: WriteRoute,
) -> Result<WriteReply, CommandError> {
    match (route, kind) {
        (WriteRoute::One(shard), _) => {
            state.targeting.record([&shard]);
            let req = routing::versioned(forwarded(cmd)?, &placement, &shard);
            call::write(state, &shard, kind, req).await
        }
        (WriteRoute::ByShardKey, WriteKind::Insert) => insert(state, cmd, coll, placement).await,
        (WriteRoute::ByShardKey, _) => update_or_delete(state, cmd, coll, kind, placement).await,
    }
}

/// The documents of the command's array field `field` (`documents`, `updates`, `deletes`), from
/// its kind-1 sequence or its body, and the body without that field.
/// The field is required, and must be an array of documents (MongoDB's 40414 and TypeMismatch,
/// as the shard answers an unsharded write).
pub fn split_items(cmd: &Command, field: &str) -> Result<(RawDocumentBuf, Vec<Bytes>), CommandError> {
    let mut template = RawDocumentBuf::new();
    let mut items = Vec::new();
    let mut present = false;
    for el in cmd.body.iter() {
        let (k, v) = el?;
        if k == field {
            present = true;
            let bson::raw::RawBsonRef::Array(a) = v else {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field '{}.{field}' is the wrong type '{}', expected type 'array'",
                    cmd.name,
                    shoal_query::display::type_name(&bson::Bson::try_from(v)?)
                )));
            };
            for item in a {
                match item? {
                    bson::raw::RawBsonRef::Document(d) => items.push(Bytes::copy_from_slice(d.as_bytes())),
                    _ => return Err(CommandError::type_mismatch(format!("{field} must contain documents"))),
                }
            }
            continue;
        }
        template.append(k, v);
    }
    for s in &cmd.sequences {
        if s.identifier == field {
            present = true;
            items.extend(s.documents.iter().cloned());
        }
    }
    if !present {
        return Err(CommandError::new(
            ErrorCode::Location40414,
            format!("BSON field '{}.{field}' is missing but a required field", cmd.name),
        ));
    }
    Ok((template, items))
}

fn ordered(cmd: &Command) -> bool {
    !matches!(cmd.body.get("ordered"), Ok(Some(bson::raw::RawBsonRef::Boolean(false))))
}

/// A shard request for the client's statements `indexes` (`items`, in that order); a retryable
/// write names each by its client index (`stmtIds`).
fn request(
    cmd: &Command,
    template: &RawDocumentBuf,
    field: &str,
    indexes: &[usize],
    items: Vec<Bytes>,
) -> CommandRequest {
    let body = match retryable::stmt_ids(template, indexes) {
        Some(ids) => {
            let mut body = template.clone();
            body.append(bson::cstr!("stmtIds"), ids);
            Bytes::from(body.into_bytes())
        }
        None => Bytes::copy_from_slice(template.as_bytes()),
    };
    CommandRequest {
        request_id: cmd.request_id.to_string(),
        db: cmd.db.clone(),
        body,
        sequence_id: field.to_owned(),
        sequence: items,
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: crate::exec::call::request::client(cmd),
        traceparent: shoal_telemetry::otlp::traceparent(),
    }
}

fn item_error(index: usize, e: &CommandError) -> WriteError {
    WriteError {
        index: index as i32,
        code: e.code,
        code_name: e.code_name.clone(),
        errmsg: e.errmsg.clone(),
        err_info: Bytes::new(),
    }
}

/// Folds a shard's reply for items `indexes` (client indexes, in the order sent) into `out`.
fn fold(out: &mut WriteReply, reply: WriteReply, indexes: &[usize]) {
    let remap = |i: i32| usize::try_from(i).ok().and_then(|i| indexes.get(i)).map_or(i, |c| *c as i32);
    out.n += reply.n;
    out.n_modified += reply.n_modified;
    out.upserted.extend(reply.upserted.into_iter().map(|mut u| {
        u.index = remap(u.index);
        u
    }));
    out.write_errors.extend(reply.write_errors.into_iter().map(|mut e| {
        e.index = remap(e.index);
        e
    }));
    if out.write_concern_error.is_none() {
        out.write_concern_error = reply.write_concern_error;
    }
}

/// Where document `doc` goes under `placement`.
fn shard_of(placement: &Placement, doc: &[u8]) -> Result<String, CommandError> {
    match placement {
        Placement::Sharded(t) => {
            let d = Document::from_reader(&mut &doc[..])?;
            let key = shard_key::of_document(&shoal_query::shard_key::KeyField::of(&t.key), &d, Missing::Refuse)?;
            target::chunk_of(&t.chunks, &key)
                .map(|c| c.shard.clone())
                .ok_or_else(|| CommandError::new(ErrorCode::InternalError, "routing table does not cover the key"))
        }
        Placement::Unsharded { shard, .. } => Ok(shard.clone()),
        Placement::NoDatabase => Err(CommandError::new(ErrorCode::NamespaceNotFound, "database does not exist")),
    }
}

/// An insert on a (probably) sharded collection.
pub async fn insert(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    first: Placement,
) -> Result<WriteReply, CommandError> {
    let field = WriteKind::Insert.items_field();
    let (template, docs) = split_items(cmd, field)?;
    let ordered = ordered(cmd);
    let mut out = WriteReply::default();
    let mut placement = first;
    let mut attempt = 0;
    let mut pending: Vec<usize> = (0..docs.len()).collect();
    while !pending.is_empty() {
        // Group the pending documents by shard; ordered inserts send one run of same-shard documents at a time.
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut stop_at = None;
        let mut run_shard: Option<String> = None;
        let mut key_failed = false;
        for (pos, &i) in pending.iter().enumerate() {
            match shard_of(&placement, &docs[i]) {
                Ok(s) => {
                    if ordered && run_shard.as_ref().is_some_and(|r| *r != s) {
                        stop_at = Some(pos);
                        break;
                    }
                    run_shard = Some(s.clone());
                    groups.entry(s).or_default().push(i);
                }
                Err(e) if ordered => {
                    // Everything before it goes first; the error is reported once it leads the pending list.
                    if pos == 0 {
                        out.write_errors.push(item_error(i, &e));
                        key_failed = true;
                        stop_at = Some(pending.len());
                    } else {
                        stop_at = Some(pos);
                    }
                    break;
                }
                Err(e) => out.write_errors.push(item_error(i, &e)),
            }
        }
        state.targeting.record(groups.keys());
        let calls = groups.iter().map(|(shard, idx)| {
            let items = idx.iter().map(|i| docs[*i].clone()).collect();
            let req = routing::versioned(request(cmd, &template, field, idx, items), &placement, shard);
            call::write(state, shard, WriteKind::Insert, req)
        });
        let replies = futures::future::join_all(calls).await;
        let mut retry: Vec<usize> = Vec::new();
        let mut stale = None;
        let mut failed = false;
        for ((_, idx), reply) in groups.iter().zip(replies) {
            match reply {
                Ok(r) => {
                    failed |= !r.write_errors.is_empty();
                    fold(&mut out, r, idx);
                }
                Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => {
                    retry.extend(idx);
                    stale = Some(e);
                }
                Err(e) => {
                    failed = true;
                    out.write_errors.extend(idx.iter().map(|i| item_error(*i, &e)));
                    if ordered {
                        break;
                    }
                }
            }
        }
        if ordered && (failed || key_failed) {
            break;
        }
        let rest: Vec<usize> = match stop_at {
            Some(pos) if pos < pending.len() => pending[pos..].to_vec(),
            _ => Vec::new(),
        };
        if let Some(e) = &stale {
            routing::on_stale(state, &cmd.db, coll, &placement, e, attempt).await;
            attempt += 1;
            placement = routing::placement(state, &cmd.db, coll, true).await?;
        }
        retry.sort_unstable();
        retry.extend(rest);
        pending = retry;
    }
    out.write_errors.sort_by_key(|e| e.index);
    Ok(out)
}

fn statement_filter(stmt: &Document) -> Document {
    stmt.get_document("q").cloned().unwrap_or_default()
}

/// Whether a statement writes every match (`multi: true` / `limit: 0`).
fn is_multi(kind: WriteKind, stmt: &Document) -> bool {
    match kind {
        WriteKind::Update => stmt.get_bool("multi").unwrap_or(false),
        _ => match stmt.get("limit") {
            Some(Bson::Int32(n)) => *n == 0,
            Some(Bson::Int64(n)) => *n == 0,
            Some(Bson::Double(n)) => *n == 0.0,
            _ => false,
        },
    }
}

/// Update or delete statements on a sharded collection, targeted one by one.
pub async fn update_or_delete(
    state: &RouterState,
    cmd: &Command,
    coll: &str,
    kind: WriteKind,
    first: Placement,
) -> Result<WriteReply, CommandError> {
    let field = kind.items_field();
    let (template, stmts) = split_items(cmd, field)?;
    let ordered = ordered(cmd);
    let mut out = WriteReply::default();
    let mut placement = first;
    for (i, raw) in stmts.iter().enumerate() {
        let stmt = Document::from_reader(&mut raw.as_ref())?;
        let filter = statement_filter(&stmt);
        // Under a non-simple collation the shard key's (binary) ranges cannot narrow the targets.
        // A bad collation is the statement's error, reported by the shards.
        let simple = shoal_query::collation::Collation::from_command(&stmt, field).map_or(true, |c| c.is_simple());
        let target_filter = if simple { filter.clone() } else { Document::new() };
        let multi = is_multi(kind, &stmt);
        let mut done: Vec<String> = Vec::new();
        let mut attempt = 0;
        let mut failed = false;
        loop {
            let targets: Vec<String> =
                target::shards(&placement, &target_filter).into_iter().filter(|s| !done.contains(s)).collect();
            if let Placement::Sharded(t) = &placement {
                let exact = target::is_exact_key(t, &filter);
                if matches!(kind, WriteKind::Update) && stmt.get_bool("upsert").unwrap_or(false) && !exact {
                    let e = CommandError::new(
                        ErrorCode::ShardKeyNotFound,
                        "Failed to target upsert by query :: could not extract exact shard key",
                    );
                    out.write_errors.push(item_error(i, &e));
                    failed = true;
                    break;
                }
            }
            // A single-document write that the filter does not pin to one shard: MongoDB 7's
            // write without shard key — find one matching `_id` on the targets, then write that
            // document on its shard with `{$and: [filter, {_id: id}]}`.
            let mut targets = targets;
            let mut statement = raw.clone();
            // A missing or malformed filter is the statement's own error: one shard reports it
            // as it would on an unsharded collection (no stand-in filter may pick a document).
            let malformed = !matches!(stmt.get("q"), Some(Bson::Document(_)));
            if malformed {
                targets.truncate(1);
            }
            if !malformed && !multi && targets.len() > 1 && retryable::has_txn_number(&template) {
                // A resend must not pick a second document: first ask whether it ran somewhere.
                let probe = probe_template(&template);
                let mut ran = None;
                for shard in &targets {
                    let req =
                        routing::versioned(request(cmd, &probe, field, &[i], vec![raw.clone()]), &placement, shard);
                    match call::write(state, shard, kind, req).await {
                        Ok(r) => {
                            ran = Some(r);
                            break;
                        }
                        Err(e) if e.is(ErrorCode::NoSuchTransaction) => {}
                        Err(e) => {
                            ran = Some(WriteReply { write_errors: vec![item_error(0, &e)], ..Default::default() });
                            break;
                        }
                    }
                }
                if let Some(r) = ran {
                    failed |= !r.write_errors.is_empty();
                    fold(&mut out, r, &[i]);
                    break;
                }
            }
            if !malformed && !multi && targets.len() > 1 {
                match one_match(state, cmd, Some(&stmt), coll, &placement, &targets, &filter).await {
                    Ok(Some((shard, id))) => {
                        let mut pinned = stmt.clone();
                        pinned.insert("q", doc! { "$and": [filter.clone(), { "_id": id }] });
                        statement = Bytes::from(pinned.to_vec()?);
                        targets = vec![shard];
                    }
                    Ok(None) => {
                        // Nothing matches: the statement still runs on one shard, matching
                        // nothing, so the shard checks the rest of it (`u`, `limit`, options) as
                        // on an unsharded collection and answers n: 0.
                        let mut pinned = stmt.clone();
                        pinned.insert("q", matching_nothing(&filter));
                        statement = Bytes::from(pinned.to_vec()?);
                        targets.truncate(1);
                    }
                    Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => {
                        routing::on_stale(state, &cmd.db, coll, &placement, &e, attempt).await;
                        attempt += 1;
                        placement = routing::placement(state, &cmd.db, coll, true).await?;
                        continue;
                    }
                    Err(e) => {
                        out.write_errors.push(item_error(i, &e));
                        failed = true;
                        break;
                    }
                }
            }
            state.targeting.record(targets.iter());
            let calls = targets.iter().map(|shard| {
                let req = routing::versioned(
                    request(cmd, &template, field, &[i], vec![statement.clone()]),
                    &placement,
                    shard,
                );
                call::write(state, shard, kind, req)
            });
            let replies = futures::future::join_all(calls).await;
            let mut stale = None;
            for (shard, reply) in targets.iter().zip(replies) {
                match reply {
                    Ok(r) => {
                        failed |= !r.write_errors.is_empty();
                        fold(&mut out, r, &[i]);
                        done.push(shard.clone());
                    }
                    Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => stale = Some(e),
                    Err(e) => {
                        failed = true;
                        out.write_errors.push(item_error(i, &e));
                    }
                }
            }
            let Some(e) = stale.filter(|_| !failed) else { break };
            routing::on_stale(state, &cmd.db, coll, &placement, &e, attempt).await;
            attempt += 1;
            placement = routing::placement(state, &cmd.db, coll, true).await?;
        }
        if failed && ordered {
            break;
        }
    }
    Ok(out)
}
