//! Building shard requests from client commands and client replies from shard replies.

use bson::raw::{RawArrayBuf, RawDocument};
use bson::{RawDocumentBuf, cstr};
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::{CommandRequest, WriteReply};

use crate::command::Command;
use crate::error::CommandError;

/// The shard request for `cmd`: the body's bytes and at most one kind-1 sequence, uncopied.
pub fn request(cmd: &Command) -> Result<CommandRequest, CommandError> {
    let (sequence_id, sequence) = match cmd.sequences.as_slice() {
        [] => (String::new(), Vec::new()),
        [one] => (one.identifier.clone(), one.documents.clone()),
        _ => {
            return Err(CommandError::new(
                ErrorCode::BadValue,
                format!("{} accepts at most one document sequence", cmd.name),
            ));
        }
    };
    Ok(CommandRequest {
        request_id: cmd.request_id.to_string(),
        db: cmd.db.clone(),
        body: Bytes::copy_from_slice(cmd.body.as_bytes()),
        sequence_id,
        sequence,
        shard_version: None,
        database_version: None,
        secondary_ok: false,
    })
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
