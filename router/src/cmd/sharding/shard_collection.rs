//! `shardCollection: "db.coll", key, unique?, numInitialChunks?, collation?` (what
//! `sh.shardCollection` sends): validates the key as MongoDB does, creates the database if it is
//! missing (MongoDB 6+ needs no `enableSharding` first), makes sure the database's primary shard
//! has an index supporting the key ([`key_index`]), then commits the collection and its first
//! chunks to the catalog, and builds the key's index on the other shards those chunks went to.
//!
//! ```text
//! range key   -> one chunk [MinKey, MaxKey) on the database's primary shard
//! hashed first field -> numInitialChunks (default 2 x shards) chunks, even over the i64 hash space,
//!                dealt round-robin over the shards (another hashed field: one chunk)
//! ```

use bson::{Binary, Bson, Document, doc, spec::BinarySubtype};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Command, Epoch, InitialChunks, KeyFieldKind, KeyPattern, Reply};
use shoal_query::keystring;

use super::key::{hashed_split_points, parse_pattern};
use super::key_index;
use super::{body_of, raw, uuid_v4};
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::routing;
use crate::state::{ConnContext, RouterState};

/// MongoDB's cap: at most this many initial chunks per shard.
const INITIAL_CHUNKS_PER_SHARD_MAX: u32 = 8192;

/// The command's arguments, validated.
#[derive(Debug, PartialEq)]
pub struct ShardCollectionRequest {
    pub db: String,
    pub ns: String,
    pub key: KeyPattern,
    pub unique: bool,
    /// 0: MongoDB's default (2 per shard).
    pub num_initial_chunks: u32,
}

pub fn parse(body: &Document) -> Result<ShardCollectionRequest, CommandError> {
    let ns = match body.get("shardCollection") {
        Some(Bson::String(s)) => s.clone(),
        _ => {
            return Err(CommandError::type_mismatch(
                "BSON field 'shardCollection' is the wrong type, expected type 'string'",
            ));
        }
    };
    let (db, coll) = ns
        .split_once('.')
        .filter(|(d, c)| !d.is_empty() && !c.is_empty())
        .ok_or_else(|| CommandError::new(ErrorCode::InvalidNamespace, format!("Invalid namespace specified '{ns}'")))?;
    shoal_proto::namespace::validate_db(db)
        .map_err(|e| CommandError::new(ErrorCode::InvalidNamespace, e.to_string()))?;
    if matches!(db, "admin" | "local" | "config") || coll.starts_with("system.") {
        return Err(CommandError::new(ErrorCode::IllegalOperation, format!("can't shard {ns}")));
    }
    let key = match body.get("key") {
        Some(Bson::Document(k)) => parse_pattern(k)?,
        None => return Err(CommandError::new(ErrorCode::InvalidOptions, "shardCollection needs a shard key: key")),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'shardCollection.key' is the wrong type, expected type 'object'",
            ));
        }
    };
    let unique = match body.get("unique") {
        None | Some(Bson::Null) => false,
        Some(Bson::Boolean(b)) => *b,
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'shardCollection.unique' is the wrong type, expected type 'bool'",
            ));
        }
    };
    if unique && key.is_hashed() {
        return Err(CommandError::new(ErrorCode::InvalidOptions, "Hashed shard keys cannot be declared unique."));
    }
    let num_initial_chunks = match body.get("numInitialChunks") {
        None | Some(Bson::Null) => 0,
        Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
            let n = match v {
                Bson::Int32(i) => i64::from(*i),
                Bson::Int64(i) => *i,
                Bson::Double(f) if f.fract() == 0.0 => *f as i64,
                _ => -1,
            };
            u32::try_from(n).map_err(|_| {
                CommandError::new(
                    ErrorCode::InvalidOptions,
                    format!("numInitialChunks must be a non-negative integer, got {v}"),
                )
            })?
        }
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'shardCollection.numInitialChunks' is the wrong type, expected type 'int'",
            ));
        }
    };
    if num_initial_chunks > 0 && !key.is_hashed() {
        return Err(CommandError::new(
            ErrorCode::InvalidOptions,
            "numInitialChunks is only supported when the collection is empty and has a hashed field in the shard key \
             pattern",
        ));
    }
    match body.get("collation") {
        None | Some(Bson::Null) => {}
        Some(Bson::Document(c)) if c.get_str("locale").is_ok_and(|l| l == "simple") => {}
        Some(_) => {
            return Err(CommandError::bad_value(
                "The collation for shardCollection must be {locale: 'simple'}, if specified",
            ));
        }
    }
    Ok(ShardCollectionRequest { db: db.to_owned(), ns, key, unique, num_initial_chunks })
}

pub async fn shard_collection(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let req = parse(&body)?;
    let (shards, databases) = state.catalog.shards_and_databases().await?;
    let primary = if let Some(db) = databases.iter().find(|d| d.name == req.db) {
        check_unique_indexes(state, &db.primary, &req).await?;
        db.primary.clone()
    } else {
        let primary = routing::least_loaded_shard(&shards, &databases)?;
        state
            .catalog
            .write(&Command::CreateDatabase { name: req.db.clone(), primary: primary.clone(), uuid: uuid_v4() })
            .await?;
        primary
    };
    let coll = req.ns.split_once('.').map_or("", |(_, c)| c).to_owned();
    key_index::ensure(state, &primary, &req.db, &coll, &req.key, req.unique).await?;
    // Pre-splitting cuts the first key field's range; only a hashed first field spreads evenly
    // (MongoDB also starts a key whose hashed field is not first with one chunk).
    let hashed_prefix = req.key.fields.first().is_some_and(|f| f.kind == KeyFieldKind::Hashed);
    let initial = if hashed_prefix {
        let shards: Vec<String> = shards.iter().filter(|s| !s.is_draining()).map(|s| s.id.clone()).collect();
        if shards.is_empty() {
            return Err(CommandError::new(ErrorCode::ShardNotFound, "no shards in the cluster: run addShard first"));
        }
        let shard_count = u32::try_from(shards.len()).unwrap_or(u32::MAX);
        let n = if req.num_initial_chunks == 0 { 2 * shard_count } else { req.num_initial_chunks };
        if n > INITIAL_CHUNKS_PER_SHARD_MAX.saturating_mul(shard_count) {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!("numInitialChunks cannot be more than {INITIAL_CHUNKS_PER_SHARD_MAX} chunks per shard"),
            ));
        }
        let split_points = hashed_split_points(n).into_iter().map(|p| keystring::encode(&Bson::Int64(p))).collect();
        InitialChunks::Distributed { split_points, shards }
    } else {
        InitialChunks::Single
    };
    // Shards other than the primary that get chunks now: each needs the key's index too.
    let others: Vec<String> = match &initial {
        InitialChunks::Distributed { shards, .. } => shards.iter().filter(|s| **s != primary).cloned().collect(),
        InitialChunks::Single => Vec::new(),
    };
    let command = Command::ShardCollection {
        ns: req.ns.clone(),
        uuid: uuid_v4(),
        epoch: Epoch(bson::oid::ObjectId::new().bytes()),
        key: req.key.clone(),
        unique: req.unique,
        initial,
    };
    let uuid = match state.catalog.write(&command).await? {
        Reply::CollectionSharded { uuid, .. } => uuid,
        other => {
            return Err(CommandError::new(
                ErrorCode::InternalError,
                format!("catalog answered {other:?} to shardCollection"),
            ));
        }
    };
    for shard in &others {
        key_index::ensure(state, shard, &req.db, &coll, &req.key, req.unique).await?;
    }
    let uuid = Binary { subtype: BinarySubtype::Uuid, bytes: uuid.as_bytes().to_vec() };
    raw(&doc! { "collectionsharded": &req.ns, "collectionUUID": uuid })
}

/// MongoDB refuses to shard a collection with a unique index its shard key does not prefix:
/// uniqueness could no longer be enforced per shard.
async fn check_unique_indexes(
    state: &RouterState,
    primary: &str,
    req: &ShardCollectionRequest,
) -> Result<(), CommandError> {
    let Some((_, coll)) = req.ns.split_once('.') else { return Ok(()) };
    let Some(specs) = crate::cmd::indexes::shard_index_specs(state, primary, &req.db, coll).await? else {
        return Ok(());
    };
    let shard_key: Vec<&str> = req.key.fields.iter().map(|f| f.name.as_str()).collect();
    for spec in &specs {
        if !matches!(spec.get("unique"), Some(Bson::Boolean(true))) {
            continue;
        }
        let Ok(key) = spec.get_document("key") else { continue };
        if !crate::cmd::indexes::prefixed_by_shard_key(key, &shard_key) {
            return Err(CommandError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "can't shard collection '{}' with unique index on {key} and proposed shard key {:?}. Uniqueness \
                     can't be maintained unless shard key is a prefix",
                    req.ns, shard_key
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn code(body: Document) -> i32 {
        parse(&body).expect_err("refused").code
    }

    #[test]
    fn accepts_mongosh_shapes() {
        let r = parse(&doc! {"shardCollection": "d.c", "key": {"a": 1, "b": 1}, "unique": true}).expect("ok");
        assert_eq!((r.db.as_str(), r.ns.as_str(), r.unique), ("d", "d.c", true));
        let r = parse(&doc! {"shardCollection": "d.c", "key": {"a": "hashed"}, "numInitialChunks": 8,
        "collation": {"locale": "simple"}})
        .expect("ok");
        assert_eq!(r.num_initial_chunks, 8);
    }

    #[test]
    fn refusals_carry_mongodb_codes() {
        assert_eq!(code(doc! {"shardCollection": 1, "key": {"a": 1}}), ErrorCode::TypeMismatch.code());
        assert_eq!(code(doc! {"shardCollection": "nodot", "key": {"a": 1}}), ErrorCode::InvalidNamespace.code());
        assert_eq!(code(doc! {"shardCollection": "d.c"}), ErrorCode::InvalidOptions.code());
        assert_eq!(code(doc! {"shardCollection": "d.c", "key": {"a": 2}}), ErrorCode::BadValue.code());
        assert_eq!(
            code(doc! {"shardCollection": "d.c", "key": {"a": "hashed"}, "unique": true}),
            ErrorCode::InvalidOptions.code()
        );
        assert_eq!(
            code(doc! {"shardCollection": "d.c", "key": {"a": 1}, "numInitialChunks": 4}),
            ErrorCode::InvalidOptions.code()
        );
        assert_eq!(
            code(doc! {"shardCollection": "d.c", "key": {"a": "hashed"}, "numInitialChunks": -1}),
            ErrorCode::InvalidOptions.code()
        );
        assert_eq!(
            code(doc! {"shardCollection": "d.c", "key": {"a": 1}, "collation": {"locale": "fr"}}),
            ErrorCode::BadValue.code()
        );
        assert_eq!(code(doc! {"shardCollection": "admin.c", "key": {"a": 1}}), ErrorCode::IllegalOperation.code());
    }
}
