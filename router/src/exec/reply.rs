//! Reply, the last step: the client's reply in MongoDB's shape, from a read's [`Merged`] result
//! ([`read`]: router cursors registered for what is left) or a shard's write reply
//! ([`write_reply`]), and the shapes other handlers share (cursor replies, counts,
//! `writeConcernError`).
//!
//! Must not: call shards (a merge cursor kept for `getMore`s is registered, not read).

use std::collections::VecDeque;

use bson::raw::{RawArrayBuf, RawDocument};
use bson::{Document, RawDocumentBuf, cstr, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::WriteReply;

use crate::error::CommandError;
use crate::exec::merge::Merged;
use crate::exec::parse::{Read, ReadKind};
use crate::state::RouterState;

/// The reply to `read` from its merged result.
pub fn read(state: &RouterState, read: &Read<'_>, merged: Merged) -> Result<RawDocumentBuf, CommandError> {
    match merged {
        Merged::Nothing => empty(read.kind, &read.ns),
        Merged::ShardCursor { shard, reply, served } => {
            let id = if reply.cursor_id == 0 {
                0
            } else {
                state.cursors.register(reply.ns.clone(), shard, served, reply.cursor_id)
            };
            cursor_reply(BatchField::First, &reply.documents, id, &reply.ns)
        }
        Merged::Document(doc, wce) => document(&doc, wce),
        Merged::Merging { first, rest } => {
            let id = rest.map_or(0, |cursor| state.cursors.register_merging(read.ns.clone(), cursor));
            cursor_reply(BatchField::First, &encode_all(&first)?, id, &read.ns)
        }
        Merged::Buffered { docs, batch } => buffered(state, &read.ns, docs, batch),
        Merged::Count(n) => {
            let mut out = RawDocumentBuf::new();
            append_count(&mut out, cstr!("n"), n);
            Ok(out)
        }
        Merged::Values(values) => Ok(RawDocumentBuf::try_from(&doc! { "values": values })?),
        Merged::Reply(reply) => Ok(reply),
    }
}

/// The answer of a read no shard was asked for (an unknown database, no matching chunk).
fn empty(kind: ReadKind, ns: &str) -> Result<RawDocumentBuf, CommandError> {
    match kind {
        ReadKind::Find | ReadKind::Aggregate => cursor_reply(BatchField::First, &[], 0, ns),
        ReadKind::Count => Ok(RawDocumentBuf::try_from(&doc! { "n": 0 })?),
        ReadKind::Distinct => Ok(RawDocumentBuf::try_from(&doc! { "values": [] })?),
        ReadKind::FindAndModify => {
            Ok(RawDocumentBuf::try_from(&doc! { "lastErrorObject": { "n": 0 }, "value": bson::Bson::Null })?)
        }
    }
}

/// One shard's one-document reply, with its `writeConcernError` as MongoDB reports it.
pub fn document(doc: &Document, wce: Option<CommandError>) -> Result<RawDocumentBuf, CommandError> {
    let mut out = RawDocumentBuf::try_from(doc).map_err(CommandError::from)?;
    if let Some(e) = wce {
        let wire = e.to_wire();
        out.append(cstr!("writeConcernError"), write_concern_error(&wire));
    }
    Ok(out)
}

/// The client's first batch of `docs`; the rest stays in a buffered router cursor.
pub fn buffered(
    state: &RouterState,
    ns: &str,
    docs: Vec<Document>,
    batch: usize,
) -> Result<RawDocumentBuf, CommandError> {
    let mut encoded: VecDeque<Bytes> = encode_all(&docs)?.into();
    let first: Vec<Bytes> = encoded.drain(..batch.min(encoded.len())).collect();
    if encoded.is_empty() {
        return cursor_reply(BatchField::First, &first, 0, ns);
    }
    match state.cursors.register_buffered(ns.to_owned(), encoded) {
        Ok(id) => cursor_reply(BatchField::First, &first, id, ns),
        Err(rest) => {
            let all: Vec<Bytes> = first.into_iter().chain(rest).collect();
            cursor_reply(BatchField::First, &all, 0, ns)
        }
    }
}

/// Documents as the BSON bytes a cursor reply carries.
pub fn encode_all(docs: &[Document]) -> Result<Vec<Bytes>, CommandError> {
    docs.iter().map(|d| Ok(Bytes::from(d.to_vec()?))).collect()
}

/// `{n, [nModified], [upserted], [writeErrors]}` as MongoDB replies to a write command.
pub fn write_reply(reply: WriteReply, with_modified: bool) -> Result<RawDocumentBuf, CommandError> {
    if let Some(e) = reply.error {
        return Err(e.into());
    }
    let mut out = RawDocumentBuf::new();
    append_count(&mut out, cstr!("n"), reply.n);
    if with_modified {
        append_count(&mut out, cstr!("nModified"), reply.n_modified);
    }
    if !reply.upserted.is_empty() {
        let mut arr = RawArrayBuf::new();
        for u in &reply.upserted {
            let mut entry = RawDocumentBuf::new();
            entry.append(cstr!("index"), u.index);
            let id_doc = RawDocument::from_bytes(&u.id)?;
            if let Some(id) = id_doc.get("_id")? {
                entry.append(cstr!("_id"), id);
            }
            arr.push(entry);
        }
        out.append(cstr!("upserted"), arr);
    }
    if !reply.write_errors.is_empty() {
        let mut arr = RawArrayBuf::new();
        for e in &reply.write_errors {
            let mut entry = RawDocumentBuf::new();
            entry.append(cstr!("index"), e.index);
            entry.append(cstr!("code"), e.code);
            if !e.err_info.is_empty() {
                // Extra fields the shard attached (keyPattern/keyValue of a duplicate key).
                for el in RawDocument::from_bytes(&e.err_info)?.iter() {
                    let (k, v) = el?;
                    entry.append(bson::raw::CString::try_from(k.to_string()).map_err(CommandError::from)?, v);
                }
            }
            entry.append(cstr!("errmsg"), e.errmsg.as_str());
            arr.push(entry);
        }
        out.append(cstr!("writeErrors"), arr);
    }
    if let Some(wce) = &reply.write_concern_error {
        out.append(cstr!("writeConcernError"), write_concern_error(wce));
    }
    Ok(out)
}

/// `writeConcernError` as MongoDB reports it: `{code, codeName, errmsg, errInfo}`, with
/// `errInfo.wtimeout: true` for a timed-out wait (64).
pub fn write_concern_error(e: &shoal_proto::shard::CommandError) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    out.append(cstr!("code"), e.code);
    out.append(cstr!("codeName"), e.code_name.as_str());
    out.append(cstr!("errmsg"), e.errmsg.as_str());
    let mut info = RawDocumentBuf::new();
    if e.is(ErrorCode::WriteConcernFailed) {
        info.append(cstr!("wtimeout"), true);
    }
    out.append(cstr!("errInfo"), info);
    out
}

#[derive(Debug, Clone, Copy)]
pub enum BatchField {
    First,
    Next,
}

/// `{cursor: {firstBatch|nextBatch: [...], id, ns}}`.
pub fn cursor_reply(field: BatchField, documents: &[Bytes], id: i64, ns: &str) -> Result<RawDocumentBuf, CommandError> {
    let mut arr = RawArrayBuf::new();
    for d in documents {
        arr.push(RawDocument::from_bytes(d)?);
    }
    let mut cursor = RawDocumentBuf::new();
    let key = match field {
        BatchField::First => cstr!("firstBatch"),
        BatchField::Next => cstr!("nextBatch"),
    };
    cursor.append(key, arr);
    cursor.append(cstr!("id"), id);
    cursor.append(cstr!("ns"), ns);
    let mut out = RawDocumentBuf::new();
    out.append(cstr!("cursor"), cursor);
    Ok(out)
}

/// Counts are int32 when they fit, as MongoDB sends them.
pub fn append_count(out: &mut RawDocumentBuf, key: &bson::raw::CStr, n: i64) {
    match i32::try_from(n) {
        Ok(small) => out.append(key, small),
        Err(_) => out.append(key, n),
    }
}
