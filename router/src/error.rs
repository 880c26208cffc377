//! Every failure the router reports, mapped once to MongoDB's `{ok: 0, errmsg, code, codeName}`.

use bson::{Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkVersion, Epoch, PlacementVersion, Timestamp};
use shoal_proto::stale_config::{CollectionVersion, StaleConfig};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {errmsg}")]
pub struct CommandError {
    pub code: i32,
    pub code_name: String,
    pub errmsg: String,
    /// A shard's StaleConfig versions: what the routing refresh is decided from, and the extra
    /// fields of the client's error document if the error gets that far.
    pub stale_config: Option<Box<StaleConfig>>,
    /// Further fields of the error document a shard attached (a duplicate key's `keyPattern`
    /// and `keyValue`), appended after `codeName`.
    pub info: Option<Box<Document>>,
}

impl CommandError {
    /// Whether this error carries `code` (router code branches on codes through this, never on
    /// bare numbers).
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.code()
    }

    pub fn new(code: ErrorCode, errmsg: impl Into<String>) -> Self {
        Self::with_code(code.code(), code.name(), errmsg)
    }

    /// An error with a code this router has no [`ErrorCode`] for (passed through from elsewhere).
    pub fn with_code(code: i32, code_name: impl Into<String>, errmsg: impl Into<String>) -> Self {
        Self { code, code_name: code_name.into(), errmsg: errmsg.into(), stale_config: None, info: None }
    }

    pub fn bad_value(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadValue, errmsg)
    }

    pub fn type_mismatch(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeMismatch, errmsg)
    }

    /// Back to the shard-reply form (a shard's `writeConcernError` passed on).
    pub fn to_wire(&self) -> shoal_proto::shard::CommandError {
        shoal_proto::shard::CommandError {
            code: self.code,
            code_name: self.code_name.clone(),
            errmsg: self.errmsg.clone(),
            stale_config: self.stale_config.as_deref().map(StaleConfig::to_wire),
            info: self.info.as_deref().and_then(|d| d.to_vec().ok()).map(Into::into).unwrap_or_default(),
        }
    }

    /// The reply document a driver sees.
    pub fn to_reply(&self) -> Document {
        let mut reply = doc! { "ok": 0.0, "errmsg": &self.errmsg, "code": self.code, "codeName": &self.code_name };
        if let Some(stale) = &self.stale_config {
            reply.extend(stale_config_fields(stale));
        }
        if let Some(info) = &self.info {
            reply.extend(info.as_ref().clone());
        }
        reply
    }
}

/// MongoDB's StaleConfigInfo fields of an error document: `ns`, `vReceived`, `vWanted` (when the
/// shard knows its version) and `shardId`.
pub fn stale_config_fields(stale: &StaleConfig) -> Document {
    let mut fields = doc! { "ns": &stale.ns, "vReceived": shard_version_doc(&stale.received) };
    if let Some(wanted) = &stale.wanted {
        fields.insert("vWanted", shard_version_doc(wanted));
    }
    fields.insert("shardId", &stale.shard);
    fields
}

/// A shard version as MongoDB serializes one: `{e: epoch, t: timestamp, v: Timestamp(major,
/// minor)}`, all zeros for UNSHARDED.
fn shard_version_doc(v: &CollectionVersion) -> Document {
    let p = v.placement().copied().unwrap_or(PlacementVersion {
        epoch: Epoch::ZERO,
        timestamp: Timestamp::default(),
        version: ChunkVersion::ZERO,
    });
    doc! {
        "e": bson::oid::ObjectId::from_bytes(p.epoch.0),
        "t": bson::Timestamp { time: p.timestamp.secs, increment: p.timestamp.inc },
        "v": bson::Timestamp { time: p.version.major, increment: p.version.minor },
    }
}

impl From<shoal_proto::shard::CommandError> for CommandError {
    fn from(e: shoal_proto::shard::CommandError) -> Self {
        // A malformed StaleConfig info only costs the hint: the router falls back to refreshing
        // from the version it sent.
        let stale_config = e.stale_config.as_ref().and_then(|info| match StaleConfig::from_wire(info) {
            Ok(stale) => Some(Box::new(stale)),
            Err(err) => {
                tracing::warn!(error = %err, code = e.code, "a shard sent malformed StaleConfig info");
                None
            }
        });
        // Extra fields that do not decode are dropped; the code and message still reach the client.
        let info = (!e.info.is_empty()).then(|| Document::from_reader(&mut e.info.as_ref()).ok()).flatten();
        Self { stale_config, info: info.map(Box::new), ..Self::with_code(e.code, e.code_name, e.errmsg) }
    }
}

impl From<shoal_query::QueryError> for CommandError {
    fn from(e: shoal_query::QueryError) -> Self {
        Self::new(e.code, e.message)
    }
}

impl From<bson::error::Error> for CommandError {
    fn from(e: bson::error::Error) -> Self {
        Self::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stale(wanted: Option<CollectionVersion>) -> StaleConfig {
        let v = PlacementVersion {
            epoch: Epoch([7; 12]),
            timestamp: Timestamp { secs: 5, inc: 1 },
            version: ChunkVersion::new(2, 1),
        };
        StaleConfig { ns: "db.c".into(), received: CollectionVersion::Sharded(v), wanted, shard: "s1".into() }
    }

    #[test]
    fn a_shards_stale_config_reaches_the_client_in_mongodbs_shape() {
        let e: CommandError =
            shoal_proto::shard::CommandError::stale_config(&stale(Some(CollectionVersion::Unsharded))).into();
        assert_eq!(e.stale_config.as_deref(), Some(&stale(Some(CollectionVersion::Unsharded))));
        let reply = e.to_reply();
        assert_eq!((reply.get_i32("code").ok(), reply.get_str("codeName").ok()), (Some(13388), Some("StaleConfig")));
        assert_eq!((reply.get_str("ns").ok(), reply.get_str("shardId").ok()), (Some("db.c"), Some("s1")));
        let received = reply.get_document("vReceived").expect("vReceived");
        assert_eq!(received.get_object_id("e").ok(), Some(bson::oid::ObjectId::from_bytes([7; 12])));
        assert_eq!(received.get_timestamp("t").ok(), Some(bson::Timestamp { time: 5, increment: 1 }));
        assert_eq!(received.get_timestamp("v").ok(), Some(bson::Timestamp { time: 2, increment: 1 }));
        let wanted = reply.get_document("vWanted").expect("vWanted");
        assert_eq!(wanted.get_object_id("e").ok(), Some(bson::oid::ObjectId::from_bytes([0; 12])));
        assert_eq!(wanted.get_timestamp("v").ok(), Some(bson::Timestamp { time: 0, increment: 0 }));
    }

    #[test]
    fn an_unknown_wanted_version_is_left_out_and_other_errors_have_no_extra_fields() {
        let e: CommandError = shoal_proto::shard::CommandError::stale_config(&stale(None)).into();
        assert!(!e.to_reply().contains_key("vWanted") && e.to_reply().contains_key("vReceived"));
        let plain = CommandError::new(ErrorCode::StaleConfig, "no chunk");
        assert_eq!(plain.to_reply().keys().count(), 4);
    }

    #[test]
    fn malformed_stale_config_info_is_dropped_not_fatal() {
        let mut wire = shoal_proto::shard::CommandError::stale_config(&stale(None));
        if let Some(info) = wire.stale_config.as_mut() {
            info.v_received = None;
        }
        let e: CommandError = wire.into();
        assert!(e.is(ErrorCode::StaleConfig) && e.stale_config.is_none());
    }
}
