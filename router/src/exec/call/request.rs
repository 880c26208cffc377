//! The shard requests a call sends, built from the client's command: its bytes as they are
//! ([`forwarded`]), or a body the router rewrote ([`with_body`]). Versions are attached later,
//! per shard (`routing::versioned`).
//!
//! Must not: send anything, or read the body beyond what it copies.

use bson::Document;
use bytes::Bytes;
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;

use crate::command::Command;
use crate::error::CommandError;

/// The shard request for `cmd`: the body's bytes and at most one kind-1 sequence, uncopied.
pub fn forwarded(cmd: &Command) -> Result<CommandRequest, CommandError> {
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
        client: client(cmd),
        traceparent: shoal_telemetry::otlp::traceparent(),
        ..Default::default()
    })
}

/// A shard request for `cmd` with `body` instead of the client's (no document sequence).
pub fn with_body(cmd: &Command, body: &Document) -> Result<CommandRequest, CommandError> {
    Ok(with_bytes(cmd, Bytes::from(body.to_vec()?)))
}

/// A shard request for `cmd` with the encoded `body` instead of the client's.
pub fn with_bytes(cmd: &Command, body: Bytes) -> CommandRequest {
    CommandRequest {
        request_id: cmd.request_id.to_string(),
        db: cmd.db.clone(),
        body,
        client: client(cmd),
        traceparent: shoal_telemetry::otlp::traceparent(),
        ..Default::default()
    }
}

/// The client `cmd` runs for, as the shard request names it.
pub fn client(cmd: &Command) -> Option<shoal_proto::shard::ClientInfo> {
    cmd.client.as_deref().cloned()
}
