//! `refineCollectionShardKey: "db.coll", key: {<current key>, <suffix>: 1 | "hashed", ...}`:
//! extends a sharded collection's key with suffix fields so a range stuck on one value of the
//! current key (a jumbo chunk) can be split again. Validated as MongoDB validates it, committed to
//! the catalog as one `RefineShardKey`, then this router's cached table is dropped.
//!
//! ```text
//!  router: parse ── read catalog (key K, epoch E) ── new key starts with K? ── suffix = MinKey per
//!          new field ── catalog RefineShardKey{ns, E, new epoch, key, suffix} (CAS on E)
//!          ── forget cached table of ns
//!  other routers / shards: next request meets the newer generation ── StaleConfig / refresh ──
//!          full reload (new key, extended bounds)
//! ```
//!
//! Nothing moves. Every shard holding the collection gets an index supporting the new key before
//! the commit (built where none is: MongoDB requires one to exist and refuses otherwise; see
//! [`super::key_index`]). Documents lacking a suffix field have it as null, which sorts above the
//! MinKey the bounds were extended with, so each stays in its chunk.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Command, Epoch, KeyPattern, Reply};
use shoal_query::keystring;

use super::key::parse_pattern;
use super::{body_of, raw};
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

const CMD: &str = "refineCollectionShardKey";

/// The command's arguments, validated on their own (the catalog checks them against the key).
#[derive(Debug, PartialEq)]
pub struct RefineRequest {
    pub ns: String,
    pub key: KeyPattern,
    /// The `key` document as given, for messages.
    pub key_doc: Document,
}

pub fn parse(body: &Document) -> Result<RefineRequest, CommandError> {
    let ns = match body.get(CMD) {
        Some(Bson::String(s)) => s.clone(),
        _ => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{CMD}' is the wrong type, expected type 'string'"
            )));
        }
    };
    if ns.split_once('.').is_none_or(|(d, c)| d.is_empty() || c.is_empty()) {
        return Err(CommandError::new(ErrorCode::InvalidNamespace, format!("Invalid namespace specified '{ns}'")));
    }
    let key_doc = match body.get("key") {
        Some(Bson::Document(k)) => k.clone(),
        None => {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                format!("BSON field '{CMD}.key' is missing but a required field"),
            ));
        }
        Some(_) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{CMD}.key' is the wrong type, expected type 'object'"
            )));
        }
    };
    let key = parse_pattern(&key_doc)?;
    Ok(RefineRequest { ns, key, key_doc })
}

/// Why `new` cannot replace `current`, if it cannot: it must repeat `current`'s fields in order
/// and kind (a hashed field stays hashed), then add fields.
pub fn extension_problem(current: &KeyPattern, new: &KeyPattern) -> Option<String> {
    let n = current.fields.len();
    if new.fields.len() < n || new.fields[..n] != current.fields[..] {
        return Some(
            "the new key must start with the current shard key's fields, in order and of the same kind".into(),
        );
    }
    None
}

/// The bytes appended to every interior bound: MinKey for each new field. Key encodings are
/// concatenated field by field, so this is the encoding of the suffix values alone.
pub fn bound_suffix(current: &KeyPattern, new: &KeyPattern) -> Vec<u8> {
    let added = new.fields.len().saturating_sub(current.fields.len());
    keystring::encode_compound(&vec![&Bson::MinKey; added], &[])
}

pub async fn refine_collection_shard_key(
    state: &RouterState,
    _conn: &ConnContext,
    cmd: &ClientCommand,
) -> HandlerResult {
    let body = body_of(cmd)?;
    let req = parse(&body)?;
    let coll = state.catalog.collection(&req.ns).await?.ok_or_else(|| {
        CommandError::new(ErrorCode::NamespaceNotSharded, format!("{CMD} namespace {} is not sharded", req.ns))
    })?;
    if let Some(reason) = extension_problem(&coll.key, &req.key) {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            format!(
                "{CMD}: the proposed shard key {} does not extend the current shard key {}: {reason}",
                req.key_doc,
                crate::cmd::config_db::docs::key_document(&coll.key)
            ),
        ));
    }
    let (db, name) = req.ns.split_once('.').unwrap_or((req.ns.as_str(), ""));
    for shard in crate::routing::every_shard(state).await? {
        if crate::cmd::indexes::shard_index_specs(state, &shard, db, name).await?.is_some() {
            super::key_index::ensure(state, &shard, db, name, &req.key, false).await?;
        }
    }
    let command = Command::RefineShardKey {
        ns: req.ns.clone(),
        epoch: coll.epoch,
        new_epoch: Epoch(bson::oid::ObjectId::new().bytes()),
        bound_suffix: bound_suffix(&coll.key, &req.key),
        key: req.key,
    };
    match state.catalog.write(&command).await? {
        Reply::ShardKeyRefined { .. } => {}
        other => {
            return Err(CommandError::new(ErrorCode::InternalError, format!("catalog answered {other:?} to {CMD}")));
        }
    }
    // Other routers learn of the new generation from the shards (StaleConfig); this one need not.
    state.routing.forget_collection(&req.ns);
    raw(&doc! {})
}

#[cfg(test)]
mod tests {
    use bson::doc;
    use shoal_proto::catalog::{KeyField, KeyFieldKind};

    use super::*;

    fn code(body: Document) -> i32 {
        parse(&body).expect_err("refused").code
    }

    #[test]
    fn parses_the_mongosh_shape() {
        let r = parse(&doc! {CMD: "d.c", "key": {"k": 1, "sub": 1}}).expect("ok");
        assert_eq!((r.ns.as_str(), r.key.clone()), ("d.c", KeyPattern::range(&["k", "sub"])));
    }

    #[test]
    fn refusals_carry_mongodb_codes() {
        assert_eq!(code(doc! {CMD: 1, "key": {"a": 1}}), ErrorCode::TypeMismatch.code());
        assert_eq!(code(doc! {CMD: "nodot", "key": {"a": 1}}), ErrorCode::InvalidNamespace.code());
        assert_eq!(code(doc! {CMD: "d.c"}), ErrorCode::Location40414.code());
        assert_eq!(code(doc! {CMD: "d.c", "key": 1}), ErrorCode::TypeMismatch.code());
        assert_eq!(code(doc! {CMD: "d.c", "key": {"a": -1}}), ErrorCode::BadValue.code());
        assert_eq!(code(doc! {CMD: "d.c", "key": {"a": "hashed", "b": "hashed"}}), ErrorCode::BadValue.code());
    }

    #[test]
    fn the_new_key_must_extend_the_current_one() {
        let k = KeyPattern::range(&["k"]);
        assert_eq!(extension_problem(&k, &KeyPattern::range(&["k", "s"])), None);
        assert_eq!(extension_problem(&k, &k), None, "the same key is a no-op, not an error");
        assert!(extension_problem(&k, &KeyPattern::range(&["s", "k"])).is_some());
        assert!(extension_problem(&KeyPattern::range(&["k", "s"]), &k).is_some());
        let h = KeyPattern::hashed("k");
        assert!(extension_problem(&h, &KeyPattern::range(&["k", "s"])).is_some(), "hashed stays hashed");
        let hs = KeyPattern {
            fields: vec![
                KeyField { name: "k".into(), kind: KeyFieldKind::Hashed },
                KeyField { name: "s".into(), kind: KeyFieldKind::Range },
            ],
        };
        assert_eq!(extension_problem(&h, &hs), None);
    }

    #[test]
    fn the_suffix_is_min_key_per_new_field() {
        let k = KeyPattern::range(&["k"]);
        let suffix = bound_suffix(&k, &KeyPattern::range(&["k", "s", "t"]));
        assert_eq!(suffix, [keystring::MIN_KEY_ENCODING, keystring::MIN_KEY_ENCODING].concat());
        // An old bound {k: 7} extended is exactly the new bound {k: 7, s: MinKey, t: MinKey}.
        let extended = [keystring::encode(&Bson::Int32(7)), suffix].concat();
        assert_eq!(extended, keystring::encode_compound(&[&Bson::Int32(7), &Bson::MinKey, &Bson::MinKey], &[]));
    }
}
