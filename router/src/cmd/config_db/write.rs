//! Writes to the `config` database through the router: only the ones mongosh's helpers and
//! MongoDB's tutorials make, each turned into the catalog command that means the same.
//!
//! ```text
//!  update config.settings    {_id: "chunksize"}  {$set: {value: MiB}}           -> SetSettings
//!                            {_id: "balancer"}   {$set: {stopped | mode | activeWindow}}
//!                            {_id: "autosplit" | "automerge"} {$set: {enabled}}
//!  update config.collections {_id: ns}           {$set: {noBalance: bool}}      -> ConfigureCollection
//! ```
//! Replacement documents (`{_id, value}` upserts) work like `$set` of their fields. Everything
//! else (inserts, deletes, findAndModify, other collections or fields) is refused with
//! IllegalOperation (20): the catalog is changed by the config servers' commands, not by writes.
//!
//! Must not: write anything but through a catalog command.

use bson::{Bson, Document, RawDocumentBuf, cstr};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ActiveWindow, BalancerMode, Command, SettingsUpdate, WindowChange};

use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::reply;
use crate::state::RouterState;

/// The error for a write the router does not turn into a catalog command.
pub fn refused(command: &str, coll: &str) -> CommandError {
    if coll == crate::cmd::profile::PROFILE_COLLECTION {
        return CommandError::new(
            ErrorCode::IllegalOperation,
            format!("{command} on {coll} is not allowed: the profiler alone writes it"),
        );
    }
    if super::read::SYSTEM_COLLECTIONS.contains(&coll) {
        return CommandError::new(
            ErrorCode::IllegalOperation,
            format!(
                "{command} on admin.{coll} is not allowed: users and roles change only through the user and role management commands (createUser, grantRolesToUser, createRole, ...)"
            ),
        );
    }
    CommandError::new(
        ErrorCode::IllegalOperation,
        format!(
            "{command} on config.{coll} is not allowed through this router: the config database is kept by the \
             config servers. Supported: update of config.settings (chunksize, balancer, autosplit, automerge) \
             and of config.collections {{$set: {{noBalance}}}}; otherwise use the sharding commands"
        ),
    )
}

fn bad(msg: impl Into<String>) -> CommandError {
    CommandError::new(ErrorCode::IllegalOperation, msg)
}

/// `{n, nModified}` of one update statement.
struct Applied {
    matched: i64,
    modified: i64,
}

pub async fn update(state: &RouterState, cmd: &ClientCommand, coll: &str) -> HandlerResult {
    if coll != "settings" && coll != "collections" {
        return Err(refused("update", coll));
    }
    let (mut n, mut modified) = (0i64, 0i64);
    for statement in statements(cmd)? {
        let q = sub_document(&statement, "q")?;
        let u = sub_document(&statement, "u")?;
        let fields = changed_fields(&u)?;
        let applied = match coll {
            "settings" => update_settings(state, &q, &fields).await?,
            _ => update_collection(state, &q, &fields, statement.get_bool("upsert").unwrap_or(false)).await?,
        };
        n += applied.matched;
        modified += applied.modified;
    }
    let mut out = RawDocumentBuf::new();
    reply::append_count(&mut out, cstr!("n"), n);
    reply::append_count(&mut out, cstr!("nModified"), modified);
    Ok(out)
}

/// The update statements, from the body's `updates` array or an OP_MSG document sequence.
fn statements(cmd: &ClientCommand) -> Result<Vec<Document>, CommandError> {
    if let Some(seq) = cmd.sequences.iter().find(|s| s.identifier == "updates") {
        return seq.documents.iter().map(|d| Ok(Document::from_reader(&d[..])?)).collect();
    }
    let body = Document::try_from(cmd.body.as_ref())?;
    match body.get("updates") {
        Some(Bson::Array(items)) => items
            .iter()
            .map(|i| match i {
                Bson::Document(d) => Ok(d.clone()),
                _ => Err(CommandError::type_mismatch("update statements must be objects")),
            })
            .collect(),
        _ => Err(CommandError::new(ErrorCode::FailedToParse, "BSON field 'update.updates' is missing")),
    }
}

fn sub_document(d: &Document, field: &str) -> Result<Document, CommandError> {
    match d.get(field) {
        Some(Bson::Document(v)) => Ok(v.clone()),
        _ => Err(CommandError::type_mismatch(format!("update statement field '{field}' must be an object"))),
    }
}

/// A field the update sets (`Some`) or unsets (`None`).
type FieldChange = (String, Option<Bson>);

/// What `u` changes: `$set`/`$unset` fields, or a replacement document's fields (its `_id` is the
/// one the query names). Other operators and pipelines are refused.
fn changed_fields(u: &Document) -> Result<Vec<FieldChange>, CommandError> {
    if !u.keys().any(|k| k.starts_with('$')) {
        return Ok(u.iter().filter(|(k, _)| k.as_str() != "_id").map(|(k, v)| (k.clone(), Some(v.clone()))).collect());
    }
    let mut out = Vec::new();
    for (op, fields) in u {
        let Bson::Document(fields) = fields else {
            return Err(CommandError::type_mismatch(format!("{op} takes an object")));
        };
        match op.as_str() {
            "$set" => out.extend(fields.iter().map(|(k, v)| (k.clone(), Some(v.clone())))),
            "$unset" => out.extend(fields.keys().map(|k| (k.clone(), None))),
            other => return Err(bad(format!("{other} is not supported on the config database; use $set"))),
        }
    }
    Ok(out)
}

fn query_id(q: &Document) -> Result<&str, CommandError> {
    match q.get("_id") {
        Some(Bson::String(id)) if q.len() == 1 => Ok(id),
        _ => Err(bad("updates of the config database must select one document by its string _id")),
    }
}

fn as_bool(field: &str, v: &Bson) -> Result<bool, CommandError> {
    match v {
        Bson::Boolean(b) => Ok(*b),
        _ => Err(CommandError::type_mismatch(format!("'{field}' must be a boolean"))),
    }
}

async fn update_settings(state: &RouterState, q: &Document, fields: &[FieldChange]) -> Result<Applied, CommandError> {
    let id = query_id(q)?;
    let mut update = SettingsUpdate::default();
    for (field, value) in fields {
        let unsupported =
            || bad(format!("config.settings '{id}' field '{field}' cannot be changed through this router"));
        match (id, field.as_str(), value) {
            ("chunksize", "value", Some(v)) => {
                let mib = match v {
                    Bson::Int32(i) => i64::from(*i),
                    Bson::Int64(i) => *i,
                    Bson::Double(d) if d.fract() == 0.0 => *d as i64,
                    _ => {
                        return Err(CommandError::new(
                            ErrorCode::BadValue,
                            "chunksize value must be a whole number of MiB",
                        ));
                    }
                };
                let mib = u32::try_from(mib).map_err(|_| {
                    CommandError::new(ErrorCode::BadValue, format!("chunk size {mib} MiB is out of range"))
                })?;
                update.chunk_size_mib = Some(mib);
            }
            ("balancer", "stopped", Some(v)) => {
                update.balancer_mode = Some(if as_bool(field, v)? { BalancerMode::Off } else { BalancerMode::Full });
            }
            ("balancer", "mode", Some(Bson::String(m))) => {
                update.balancer_mode = Some(match m.as_str() {
                    "full" => BalancerMode::Full,
                    "off" => BalancerMode::Off,
                    _ => {
                        return Err(CommandError::new(
                            ErrorCode::BadValue,
                            format!("balancer mode '{m}': use full or off"),
                        ));
                    }
                });
            }
            ("balancer", "activeWindow", None) => update.active_window = Some(WindowChange::Clear),
            ("balancer", "activeWindow", Some(Bson::Document(w))) => {
                let (Ok(start), Ok(stop)) = (w.get_str("start"), w.get_str("stop")) else {
                    return Err(CommandError::new(ErrorCode::BadValue, "activeWindow needs start and stop \"HH:MM\""));
                };
                update.active_window = Some(WindowChange::Set(ActiveWindow { start: start.into(), stop: stop.into() }));
            }
            ("autosplit", "enabled", Some(v)) => update.autosplit = Some(as_bool(field, v)?),
            ("automerge", "enabled", Some(v)) => update.automerge = Some(as_bool(field, v)?),
            _ => return Err(unsupported()),
        }
    }
    let before = state.catalog.settings().await?;
    if update != SettingsUpdate::default() {
        state.catalog.write(&Command::SetSettings(update)).await?;
    }
    let after = state.catalog.settings().await?;
    // Every settings document exists (the catalog holds defaults), so the update always matches.
    Ok(Applied { matched: 1, modified: i64::from(before != after) })
}

async fn update_collection(
    state: &RouterState,
    q: &Document,
    fields: &[FieldChange],
    upsert: bool,
) -> Result<Applied, CommandError> {
    let ns = query_id(q)?;
    let (mut no_balance, mut enable_auto_merge) = (None, None);
    for (field, value) in fields {
        match (field.as_str(), value) {
            ("noBalance", Some(v)) => no_balance = Some(as_bool(field, v)?),
            ("noBalance", None) => no_balance = Some(false),
            ("enableAutoMerge", Some(v)) => enable_auto_merge = Some(as_bool(field, v)?),
            ("enableAutoMerge", None) => enable_auto_merge = Some(true),
            _ => return Err(bad(format!("config.collections field '{field}' cannot be changed through this router"))),
        }
    }
    let Some(before) = state.catalog.collection(ns).await?.map(|c| (c.no_balance, !c.no_auto_merge)) else {
        if upsert {
            return Err(bad(format!("{ns} is not sharded: config.collections entries are made by shardCollection")));
        }
        return Ok(Applied { matched: 0, modified: 0 });
    };
    let no_balance = no_balance.filter(|b| *b != before.0);
    let enable_auto_merge = enable_auto_merge.filter(|b| *b != before.1);
    if no_balance.is_none() && enable_auto_merge.is_none() {
        return Ok(Applied { matched: 1, modified: 0 });
    }
    let configure =
        Command::ConfigureCollection { ns: ns.to_owned(), no_balance, chunk_size_mib: None, enable_auto_merge };
    state.catalog.write(&configure).await?;
    Ok(Applied { matched: 1, modified: 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn set_unset_and_replacement_fields() {
        let set = changed_fields(&doc! { "$set": { "stopped": true }, "$unset": { "activeWindow": "" } });
        assert_eq!(
            set.ok(),
            Some(vec![("stopped".to_owned(), Some(Bson::Boolean(true))), ("activeWindow".to_owned(), None)])
        );
        let replace = changed_fields(&doc! { "_id": "chunksize", "value": 64 });
        assert_eq!(replace.ok(), Some(vec![("value".to_owned(), Some(Bson::Int32(64)))]));
        assert!(changed_fields(&doc! { "$inc": { "value": 1 } }).is_err());
    }

    #[test]
    fn the_query_names_one_document() {
        assert_eq!(query_id(&doc! { "_id": "balancer" }).ok(), Some("balancer"));
        assert!(query_id(&doc! { "_id": "balancer", "x": 1 }).is_err());
        assert!(query_id(&doc! {}).is_err());
    }
}
