//! `collMod` on one shard: an index's `hidden` flag and `expireAfterSeconds`, named by `name`
//! or `keyPattern`, changed durably and logged so every member applies it. The collection-level
//! options MongoDB's collMod also takes (validators, views, capped sizes, pre-images) are refused
//! with NotImplemented until those features exist; an unknown field is MongoDB's 40415.
//!
//! Must not: change anything but the named index's two settings.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::exec::{Node, Request, args};

/// collMod's own fields in MongoDB 8.0; all but `index` are refused for now.
const FIELDS: &[&str] = &[
    "index",
    "validator",
    "validationLevel",
    "validationAction",
    "viewOn",
    "pipeline",
    "expireAfterSeconds",
    "changeStreamPreAndPostImages",
    "cappedSize",
    "cappedMax",
    "timeseries",
    "recordIdsReplicated",
    "dryRun",
];

pub fn coll_mod(node: &Node, req: &Request<'_>) -> ExecResult<(Document, u64)> {
    let name = args::collection_name(&req.body, "collMod")?;
    let ns = args::namespace(req.db, &name)?;
    args::check_known_fields(&req.body, "collMod", FIELDS)?;
    if let Some(option) = req.body.keys().skip(1).find(|k| FIELDS.contains(&k.as_str()) && *k != "index") {
        return Err(ExecError::new(
            ErrorCode::NotImplemented,
            format!("collMod option '{option}' is not supported yet (only index: {{hidden, expireAfterSeconds}})"),
        ));
    }
    let Some(coll) = node.store.collection(&ns.to_string()) else {
        return Err(ExecError::new(ErrorCode::NamespaceNotFound, format!("ns does not exist: {ns}")));
    };
    let Some(index) = req.body.get("index") else {
        // Nothing to change: MongoDB answers ok.
        return Ok((Document::new(), 0));
    };
    let Bson::Document(index) = index else {
        return Err(args::wrong_type("collMod", "index", index, "object"));
    };
    for k in index.keys() {
        if !matches!(k.as_str(), "name" | "keyPattern" | "hidden" | "expireAfterSeconds" | "unique" | "prepareUnique") {
            return Err(ExecError::new(
                ErrorCode::Location40415,
                format!("BSON field 'collMod.index.{k}' is an unknown field."),
            ));
        }
        if matches!(k.as_str(), "unique" | "prepareUnique") {
            return Err(ExecError::new(
                ErrorCode::NotImplemented,
                format!("collMod index option '{k}' is not supported yet"),
            ));
        }
    }
    let spec = match (index.get("name"), index.get("keyPattern")) {
        (Some(Bson::String(n)), None) => coll.index(n).cloned(),
        (None, Some(Bson::Document(k))) => coll.indexes.iter().find(|s| &s.key == k).cloned(),
        (Some(_), Some(_)) => {
            return Err(ExecError::new(ErrorCode::InvalidOptions, "Cannot specify both key pattern and name."));
        }
        (None, None) => {
            return Err(ExecError::new(ErrorCode::InvalidOptions, "Must specify either index name or key pattern."));
        }
        (Some(other), None) | (None, Some(other)) => {
            return Err(args::wrong_type("collMod", "index", other, "string or object"));
        }
    };
    let is_id = matches!(index.get("name"), Some(Bson::String(n)) if n == "_id_")
        || matches!(index.get("keyPattern"), Some(Bson::Document(k)) if k == &doc! { "_id": 1 });
    let hidden = match index.get("hidden") {
        None => None,
        Some(Bson::Boolean(b)) => Some(*b),
        Some(other) => return Err(args::wrong_type("collMod", "index.hidden", other, "bool")),
    };
    let expire = match index.get("expireAfterSeconds") {
        None => None,
        Some(v) => match args::as_f64(v) {
            Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= f64::from(i32::MAX) => Some(n as i64),
            _ => {
                return Err(ExecError::new(
                    ErrorCode::InvalidOptions,
                    "TTL index 'expireAfterSeconds' option must be a non-negative integer",
                ));
            }
        },
    };
    if hidden.is_none() && expire.is_none() {
        return Err(ExecError::new(ErrorCode::InvalidOptions, "no expireAfterSeconds or hidden field"));
    }
    if is_id && hidden.is_some() {
        return Err(ExecError::bad_value("can't hide _id index"));
    }
    let Some(spec) = spec else {
        let which = index.get("name").or(index.get("keyPattern")).map(ToString::to_string).unwrap_or_default();
        return Err(ExecError::new(ErrorCode::IndexNotFound, format!("cannot find index {which} for ns {ns}")));
    };
    if expire.is_some() && (spec.pattern.fields.len() != 1 || spec.is_hashed()) {
        return Err(ExecError::new(
            ErrorCode::InvalidOptions,
            "TTL indexes are single-field indexes, compound indexes do not support TTL",
        ));
    }
    let (changed, seq) = node.store.write(|txn| txn.modify_index(&coll, &spec.name, hidden, expire))?;
    let Some((before, after)) = changed else {
        return Err(ExecError::new(ErrorCode::IndexNotFound, format!("cannot find index {} for ns {ns}", spec.name)));
    };
    let mut reply = Document::new();
    if hidden.is_some() {
        reply.insert("hidden_old", before.hidden);
        reply.insert("hidden_new", after.hidden);
    }
    if expire.is_some() {
        if let Some(old) = before.expire_after_secs {
            reply.insert("expireAfterSeconds_old", old);
        }
        if let Some(new) = after.expire_after_secs {
            reply.insert("expireAfterSeconds_new", new);
        }
    }
    Ok((reply, seq))
}
