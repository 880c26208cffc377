//! `getMore` and `killCursors` on router cursors.

use bson::{Bson, Document, RawDocumentBuf, cstr};
use shoal_proto::ErrorCode;
use shoal_proto::shard::{GetMoreRequest, KillCursorsRequest};

use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::reply::{self, BatchField};
use crate::state::{ConnContext, RouterState};
use shoal_query::display::type_name;

pub async fn get_more(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let id = match body.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                type_name(other)
            )));
        }
        None => {
            return Err(CommandError::new(ErrorCode::FailedToParse, "getMore requires a cursor id"));
        }
    };
    let coll = match body.get("collection") {
        Some(Bson::String(c)) => c.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getMore.collection' is the wrong type '{}', expected type 'string'",
                type_name(other)
            )));
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'getMore.collection' is missing but a required field",
            ));
        }
    };
    let batch_size = match body.get("batchSize") {
        None | Some(Bson::Null) => 0,
        Some(Bson::Int32(n)) if *n >= 0 => *n,
        Some(Bson::Int64(n)) if *n >= 0 => i32::try_from(*n).unwrap_or(i32::MAX),
        Some(Bson::Double(d)) if *d >= 0.0 => *d as i32,
        Some(other) => {
            return Err(CommandError::new(
                ErrorCode::BadValue,
                format!("Batch size for getMore must be positive, but received: {other}"),
            ));
        }
    };
    let ns = format!("{}.{}", cmd.db, coll);
    if let Some((cursor_ns, cursor)) = state.cursors.merging(id) {
        if cursor_ns != ns {
            return Err(wrong_namespace(&ns, &cursor_ns));
        }
        let mut cursor = cursor.lock().await;
        let batch = match cursor.next_batch(state, usize::try_from(batch_size).unwrap_or(0)).await {
            Ok(b) => b,
            Err(e) => {
                cursor.kill(state).await;
                state.cursors.remove_merging(id);
                return Err(e);
            }
        };
        let more = cursor.has_more();
        if !more {
            cursor.kill(state).await;
            state.cursors.remove_merging(id);
        }
        let docs = crate::exec::reply::encode_all(&batch)?;
        return reply::cursor_reply(BatchField::Next, &docs, if more { id } else { 0 }, &ns);
    }
    if let Some(cursor_ns) = state.cursors.buffered_ns(id) {
        if cursor_ns != ns {
            return Err(wrong_namespace(&ns, &cursor_ns));
        }
        let batch_size = usize::try_from(batch_size).unwrap_or(0);
        let Some(batch) = state.cursors.next_buffered(id, batch_size) else {
            return Err(CommandError::new(ErrorCode::CursorNotFound, format!("cursor id {id} not found")));
        };
        return reply::cursor_reply(BatchField::Next, &batch.documents, if batch.more { id } else { 0 }, &ns);
    }
    let Some(cursor) = state.cursors.touch(id) else {
        return Err(CommandError::new(ErrorCode::CursorNotFound, format!("cursor id {id} not found")));
    };
    if cursor.ns != ns {
        return Err(wrong_namespace(&ns, &cursor.ns));
    }
    let req = GetMoreRequest {
        request_id: cmd.request_id.to_string(),
        cursor_id: cursor.shard_cursor_id,
        batch_size,
        ns: ns.clone(),
        client: crate::exec::call::request::client(cmd),
    };
    let pool = match crate::exec::call::member::cursor_pool(state, &cursor.shard, cursor.member.as_deref()).await {
        Ok(p) => p,
        Err(e) => {
            state.cursors.remove(id);
            return Err(e);
        }
    };
    let reply = match pool.client().get_more(req).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            state.cursors.remove(id);
            return Err(pool.status_error(&status));
        }
    };
    if let Some(e) = reply.error {
        state.cursors.remove(id);
        return Err(e.into());
    }
    let out_id = if reply.cursor_id == 0 {
        state.cursors.remove(id);
        0
    } else {
        id
    };
    reply::cursor_reply(BatchField::Next, &reply.documents, out_id, &ns)
}

pub async fn kill_cursors(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    cmd.collection()?;
    let body = Document::try_from(cmd.body.as_ref())?;
    let ids = match body.get("cursors") {
        Some(Bson::Array(a)) => a
            .iter()
            .map(|v| match v {
                Bson::Int64(id) => Ok(*id),
                Bson::Int32(id) => Ok(*id as i64),
                other => Err(CommandError::type_mismatch(format!(
                    "BSON field 'killCursors.cursors' contains an element of type '{}', expected 'long'",
                    type_name(other)
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'killCursors.cursors' is the wrong type '{}', expected type 'array'",
                type_name(other)
            )));
        }
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                "BSON field 'killCursors.cursors' is missing but a required field",
            ));
        }
    };
    let (mut killed, mut not_found) = (Vec::new(), Vec::new());
    let mut by_member: std::collections::BTreeMap<(String, Option<String>), Vec<i64>> =
        std::collections::BTreeMap::new();
    for id in ids {
        match state.cursors.remove(id) {
            Some(c) => {
                killed.push(id);
                by_member.entry((c.shard, c.member)).or_default().push(c.shard_cursor_id);
            }
            None if state.cursors.remove_buffered(id) => killed.push(id),
            None if let Some(cursor) = state.cursors.remove_merging(id) => {
                cursor.lock().await.kill(state).await;
                killed.push(id);
            }
            None => not_found.push(id),
        }
    }
    for ((shard, member), cursor_ids) in by_member {
        let pool = match &member {
            Some(addr) => state.members.pool(addr).ok(),
            None => state.shards.get(&shard),
        };
        let Some(pool) = pool else { continue };
        let req = KillCursorsRequest { request_id: cmd.request_id.to_string(), cursor_ids };
        // The router's cursors are gone either way; a shard cursor we fail to kill is reaped idle.
        if let Err(status) = pool.client().kill_cursors(req).await {
            pool.status_error(&status);
        }
    }
    let mut out = RawDocumentBuf::new();
    out.append(cstr!("cursorsKilled"), ids_array(&killed));
    out.append(cstr!("cursorsNotFound"), ids_array(&not_found));
    out.append(cstr!("cursorsAlive"), ids_array(&[]));
    out.append(cstr!("cursorsUnknown"), ids_array(&[]));
    Ok(out)
}

fn wrong_namespace(ns: &str, cursor_ns: &str) -> CommandError {
    CommandError::new(
        ErrorCode::Unauthorized,
        format!("Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {cursor_ns}"),
    )
}

fn ids_array(ids: &[i64]) -> bson::RawArrayBuf {
    let mut arr = bson::RawArrayBuf::new();
    for id in ids {
        arr.push(*id);
    }
    arr
}
