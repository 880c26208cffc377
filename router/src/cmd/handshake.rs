//! `hello` / `isMaster` / `ismaster`: how a driver learns it is talking to a mongos.
//!
//! Owns: the hello reply (field order of MongoDB's `mongos_hello_response.cpp`) and the checks on
//! the request (client metadata size, the awaitable-hello field pair).
//!
//! ```text
//!  driver ── OP_QUERY {isMaster:1, helloOk:true, client:{...}} ──► router   (first message)
//!         ◄─ OP_REPLY {ismaster:true, msg:"isdbgrid", helloOk:true, limits, wire versions, ok:1}
//!  driver ── OP_MSG {hello:1, $db:"admin"} every heartbeatFrequencyMS ──► router   (monitoring)
//!         ◄─ OP_MSG {isWritablePrimary:true, msg:"isdbgrid", ...}
//! ```
//!
//! Invariants: `msg: "isdbgrid"` is always present (it is what makes drivers and mongosh treat us
//! as a mongos); no `setName`/`hosts` (that would make drivers treat us as a replica-set member);
//! no `topologyVersion` (we do not implement awaitable hello, and drivers poll when it is absent);
//! no `compression` (we do not implement OP_COMPRESSED). `saslSupportedMechs` and
//! `speculativeAuthenticate` are answered by `auth::sasl` when the request asks.
//! `ok` is appended by the dispatcher.

use bson::raw::RawBsonRef;
use bson::{RawBson, RawDocument, RawDocumentBuf, cstr};
use shoal_proto::ErrorCode;
use shoal_proto::limits::{MAX_BSON_OBJECT_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE};

use crate::cmd::info::truthy;
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// MongoDB 7.0's wire version. Every driver we target accepts it (pymongo >= 4.14 needs >= 8,
/// node 6.17-7.5 needs >= 8, Java 3.6 only checks our minWireVersion). We stay below 22 on
/// purpose: 22 makes pymongo use exhaust getMore against a mongos, and 25 makes pymongo/node
/// send the 8.0 `bulkWrite` command; we implement neither.
pub const MAX_WIRE_VERSION: i32 = 21;
/// MongoDB's mongos accepts clients of any age (`RELEASE_2_4_AND_BEFORE`).
pub const MIN_WIRE_VERSION: i32 = 0;
/// `localLogicalSessionTimeoutMinutes` default. Without it drivers disable sessions and
/// retryable writes entirely.
pub const LOGICAL_SESSION_TIMEOUT_MINUTES: i32 = 30;
/// A mongos accepts at most 512 bytes of client metadata (`client_metadata.cpp`).
pub const CLIENT_METADATA_MAX_BYTES: usize = 512;
pub const APP_NAME_MAX_BYTES: usize = 128;

pub async fn hello(state: &RouterState, conn: &ConnContext, cmd: &Command, legacy: bool) -> HandlerResult {
    let request = HelloRequest::parse(&cmd.body)?;
    if let Some(name) = &request.app_name {
        // The first hello's metadata is the connection's (MongoDB ignores it on later ones).
        let _ = conn.app_name.set(name.clone());
    }
    let mut reply = hello_reply(conn.id, legacy, &request, bson::DateTime::now());
    if let Some(RawBsonRef::String(user)) = cmd.body.get("saslSupportedMechs")?
        && let Some(mechanisms) = crate::auth::sasl::supported_mechanisms(state, user).await
    {
        reply.append(cstr!("saslSupportedMechs"), mechanisms.into_iter().collect::<bson::RawArrayBuf>());
    }
    if let Some(RawBsonRef::Document(spec)) = cmd.body.get("speculativeAuthenticate")?
        && let Some(first_step) = crate::auth::sasl::speculative(state, conn, spec).await
    {
        reply.append(cstr!("speculativeAuthenticate"), first_step);
    }
    Ok(reply)
}

/// What the reply depends on from the request.
#[derive(Debug, Default, PartialEq)]
pub struct HelloRequest {
    pub hello_ok: bool,
    /// The client asked for an awaitable (streaming) hello. We answer at once anyway: the spec
    /// lets a server reply before `maxAwaitTimeMS`, and a conforming driver only sends a
    /// `topologyVersion` it got from us, which we never send, so this can only come from a
    /// client that then finds no `topologyVersion` in our reply and falls back to polling.
    pub awaitable: bool,
    /// `client.application.name` of the first hello, for `currentOp` and the profiler.
    pub app_name: Option<String>,
}

impl HelloRequest {
    pub fn parse(body: &RawDocument) -> Result<HelloRequest, CommandError> {
        let mut request = HelloRequest::default();
        let (mut topology_version, mut max_await) = (false, false);
        for element in body.iter() {
            let (key, value) = element?;
            match key.as_str() {
                "helloOk" => request.hello_ok = truthy(value),
                "client" => request.app_name = check_client_metadata(value)?,
                "topologyVersion" => topology_version = true,
                "maxAwaitTimeMS" => max_await = true,
                _ => {}
            }
        }
        match (topology_version, max_await) {
            (true, false) => Err(location51760("A request with a 'topologyVersion' must include 'maxAwaitTimeMS'")),
            (false, true) => Err(location51760("A request with 'maxAwaitTimeMS' must include a 'topologyVersion'")),
            (awaitable, _) => {
                request.awaitable = awaitable;
                Ok(request)
            }
        }
    }
}

/// The mongos hello reply, without `ok`.
pub fn hello_reply(connection_id: i64, legacy: bool, request: &HelloRequest, now: bson::DateTime) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    if legacy {
        out.append(cstr!("ismaster"), true);
    } else {
        out.append(cstr!("isWritablePrimary"), true);
    }
    out.append(cstr!("msg"), "isdbgrid");
    if request.hello_ok {
        out.append(cstr!("helloOk"), true);
    }
    out.append(cstr!("maxBsonObjectSize"), MAX_BSON_OBJECT_SIZE_BYTES as i32);
    out.append(cstr!("maxMessageSizeBytes"), MAX_MESSAGE_SIZE_BYTES as i32);
    out.append(cstr!("maxWriteBatchSize"), MAX_WRITE_BATCH_SIZE as i32);
    out.append(cstr!("localTime"), now);
    out.append(cstr!("logicalSessionTimeoutMinutes"), LOGICAL_SESSION_TIMEOUT_MINUTES);
    out.append(cstr!("connectionId"), connection_id_value(connection_id));
    out.append(cstr!("maxWireVersion"), MAX_WIRE_VERSION);
    out.append(cstr!("minWireVersion"), MIN_WIRE_VERSION);
    out
}

/// `connectionId` as an int32 while it fits, like MongoDB's `appendNumber`: some older Java
/// drivers cast it to `BsonInt32` and would fail on an int64.
pub(crate) fn connection_id_value(connection_id: i64) -> RawBson {
    match i32::try_from(connection_id) {
        Ok(id) => RawBson::Int32(id),
        Err(_) => RawBson::Int64(connection_id),
    }
}

/// MongoDB's rules for the `client` document a driver sends on its first hello; its
/// `application.name`, if any.
fn check_client_metadata(value: RawBsonRef<'_>) -> Result<Option<String>, CommandError> {
    let RawBsonRef::Document(client) = value else {
        return Err(CommandError::type_mismatch("The client metadata document must be a document"));
    };
    if client.as_bytes().len() > CLIENT_METADATA_MAX_BYTES {
        return Err(CommandError::new(
            ErrorCode::ClientMetadataDocumentTooLarge,
            format!("The client metadata document must be less then or equal to {CLIENT_METADATA_MAX_BYTES} bytes"),
        ));
    }
    if let Some(RawBsonRef::Document(app)) = client.get("application")? {
        match app.get("name")? {
            Some(RawBsonRef::String(name)) if name.len() > APP_NAME_MAX_BYTES => {
                return Err(CommandError::new(
                    ErrorCode::ClientMetadataAppNameTooLarge,
                    format!(
                        "The 'application.name' field must be less then or equal to {APP_NAME_MAX_BYTES} bytes in the client metadata document"
                    ),
                ));
            }
            Some(RawBsonRef::String(name)) => return Ok(Some(name.to_owned())),
            None => {}
            Some(_) => {
                return Err(CommandError::type_mismatch(
                    "The 'application.name' field must be a string in the client metadata document",
                ));
            }
        }
    }
    Ok(None)
}

fn location51760(errmsg: &str) -> CommandError {
    CommandError::new(ErrorCode::Location51760, errmsg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn keys(doc: &RawDocument) -> Vec<String> {
        doc.iter().map(|e| e.expect("valid").0.as_str().to_owned()).collect()
    }

    #[test]
    fn legacy_reply_is_a_mongos() {
        let req = HelloRequest::parse(&rawdoc! { "isMaster": 1, "helloOk": true, "$db": "admin" }).expect("ok");
        let reply = hello_reply(7, true, &req, bson::DateTime::from_millis(0));
        assert_eq!(
            keys(&reply),
            [
                "ismaster",
                "msg",
                "helloOk",
                "maxBsonObjectSize",
                "maxMessageSizeBytes",
                "maxWriteBatchSize",
                "localTime",
                "logicalSessionTimeoutMinutes",
                "connectionId",
                "maxWireVersion",
                "minWireVersion",
            ]
        );
        assert_eq!(reply.get_str("msg").expect("msg"), "isdbgrid");
        assert!(reply.get_bool("ismaster").expect("ismaster"));
        assert_eq!(reply.get_i32("maxBsonObjectSize").expect("limit"), 16_777_216);
        assert_eq!(reply.get_i32("maxMessageSizeBytes").expect("limit"), 48_000_000);
        assert_eq!(reply.get_i32("connectionId").expect("id"), 7);
        assert_eq!(reply.get_i32("minWireVersion").expect("min"), 0);
        assert_eq!(reply.get_i32("maxWireVersion").expect("max"), 21);
    }

    #[test]
    fn hello_reply_uses_the_new_name_and_no_hello_ok_unless_asked() {
        let req = HelloRequest::parse(&rawdoc! { "hello": 1 }).expect("ok");
        let reply = hello_reply(1, false, &req, bson::DateTime::now());
        assert!(reply.get_bool("isWritablePrimary").expect("field"));
        assert!(reply.get("ismaster").expect("valid").is_none());
        assert!(reply.get("helloOk").expect("valid").is_none());
        assert!(reply.get("topologyVersion").expect("valid").is_none());
    }

    #[test]
    fn client_metadata_limits() {
        let ok =
            rawdoc! { "hello": 1, "client": { "driver": { "name": "d", "version": "1" }, "os": { "type": "Linux" } } };
        assert!(HelloRequest::parse(&ok).is_ok());
        let big = rawdoc! { "hello": 1, "client": { "driver": { "name": "x".repeat(600) } } };
        assert_eq!(HelloRequest::parse(&big).expect_err("too large").code, 185);
        let app = rawdoc! { "hello": 1, "client": { "application": { "name": "a".repeat(129) } } };
        assert_eq!(HelloRequest::parse(&app).expect_err("app name").code, 184);
        assert_eq!(HelloRequest::parse(&rawdoc! { "hello": 1, "client": 5 }).expect_err("type").code, 14);
    }

    #[test]
    fn awaitable_hello_is_answered_at_once_but_needs_both_fields() {
        let tv = rawdoc! { "processId": bson::oid::ObjectId::new(), "counter": 0i64 };
        let both = rawdoc! { "hello": 1, "topologyVersion": tv.clone(), "maxAwaitTimeMS": 10_000 };
        assert!(HelloRequest::parse(&both).expect("ok").awaitable);
        let one = rawdoc! { "hello": 1, "topologyVersion": tv };
        assert_eq!(HelloRequest::parse(&one).expect_err("half").code, 51760);
        let other = rawdoc! { "hello": 1, "maxAwaitTimeMS": 10_000 };
        assert_eq!(HelloRequest::parse(&other).expect_err("half").code, 51760);
    }
}
