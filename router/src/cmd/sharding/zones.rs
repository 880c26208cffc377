//! Zone commands: `addShardToZone`, `removeShardFromZone`, `updateZoneKeyRange` (mongosh's
//! `sh.addShardToZone`/`addShardTag`, `sh.updateZoneKeyRange`/`addTagRange`,
//! `sh.removeRangeFromZone`/`removeTagRange`). Input is checked here; the catalog decides the rest
//! and its refusals carry MongoDB's codes (ShardNotFound, ZoneNotFound, ZoneStillInUse,
//! RangeOverlapConflict).

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::Command;

use super::key::bound_of_key;
use super::{body_of, raw};
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

fn string(body: &Document, cmd: &str, field: &str) -> Result<String, CommandError> {
    match body.get(field) {
        Some(Bson::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Bson::String(_)) => Err(CommandError::bad_value(format!("{cmd}: {field} must not be empty"))),
        None => Err(CommandError::new(ErrorCode::NoSuchKey, format!("{cmd}: missing field '{field}'"))),
        Some(_) => Err(CommandError::type_mismatch(format!(
            "BSON field '{cmd}.{field}' is the wrong type, expected type 'string'"
        ))),
    }
}

/// `{addShardToZone: shard, zone}` and `{removeShardFromZone: shard, zone}`.
pub async fn shard_zone(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let name = cmd.name.as_str();
    let shard = string(&body, name, name)?;
    let zone = string(&body, name, "zone")?;
    let command = if name == "addShardToZone" {
        Command::AddShardToZone { shard, zone }
    } else {
        Command::RemoveShardFromZone { shard, zone }
    };
    state.catalog.write(&command).await?;
    raw(&doc! {})
}

/// `{updateZoneKeyRange: ns, min, max, zone: <name> | null}`: assign the range, or remove exactly it.
pub async fn update_zone_key_range(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let (ns, min, max, zone) = parse_update(&body)?;
    let coll = state
        .catalog
        .collection(&ns)
        .await?
        .ok_or_else(|| CommandError::new(ErrorCode::NamespaceNotSharded, format!("{ns} is not sharded")))?;
    let min = bound_of_key(&coll.key, &min, "min")?;
    let max = bound_of_key(&coll.key, &max, "max")?;
    if min >= max {
        return Err(CommandError::bad_value(format!("updateZoneKeyRange: min {min} must be less than max {max}")));
    }
    state.catalog.write(&Command::UpdateZoneKeyRange { ns, min, max, zone }).await?;
    raw(&doc! {})
}

type UpdateArgs = (String, Document, Document, Option<String>);

fn parse_update(body: &Document) -> Result<UpdateArgs, CommandError> {
    const CMD: &str = "updateZoneKeyRange";
    let ns = string(body, CMD, CMD)?;
    if !ns.split_once('.').is_some_and(|(d, c)| !d.is_empty() && !c.is_empty()) {
        return Err(CommandError::new(ErrorCode::InvalidNamespace, format!("Invalid namespace specified '{ns}'")));
    }
    let key = |field: &str| match body.get(field) {
        Some(Bson::Document(d)) if !d.is_empty() => Ok(d.clone()),
        Some(Bson::Document(_)) => Err(CommandError::bad_value(format!("{CMD}: {field} must not be empty"))),
        None => Err(CommandError::new(ErrorCode::NoSuchKey, format!("{CMD}: missing field '{field}'"))),
        Some(_) => Err(CommandError::type_mismatch(format!(
            "BSON field '{CMD}.{field}' is the wrong type, expected type 'object'"
        ))),
    };
    let zone = match body.get("zone") {
        Some(Bson::Null) => None,
        Some(Bson::String(z)) if !z.is_empty() => Some(z.clone()),
        Some(Bson::String(_)) => return Err(CommandError::bad_value(format!("{CMD}: zone must not be empty"))),
        None => return Err(CommandError::new(ErrorCode::NoSuchKey, format!("{CMD}: missing field 'zone'"))),
        Some(_) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{CMD}.zone' is the wrong type, expected type 'string' or null"
            )));
        }
    };
    Ok((ns, key("min")?, key("max")?, zone))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_zone_key_range_input() {
        let ok = doc! { "updateZoneKeyRange": "db.c", "min": { "k": 1 }, "max": { "k": 5 }, "zone": "A" };
        assert_eq!(parse_update(&ok).ok().and_then(|u| u.3).as_deref(), Some("A"));
        let remove = doc! { "updateZoneKeyRange": "db.c", "min": { "k": 1 }, "max": { "k": 5 }, "zone": Bson::Null };
        assert!(parse_update(&remove).is_ok_and(|u| u.3.is_none()));
        for bad in [
            doc! { "updateZoneKeyRange": "db", "min": { "k": 1 }, "max": { "k": 5 }, "zone": "A" },
            doc! { "updateZoneKeyRange": "db.c", "min": 1, "max": { "k": 5 }, "zone": "A" },
            doc! { "updateZoneKeyRange": "db.c", "min": { "k": 1 }, "max": { "k": 5 } },
            doc! { "updateZoneKeyRange": "db.c", "min": { "k": 1 }, "max": { "k": 5 }, "zone": 3 },
            doc! { "updateZoneKeyRange": "db.c", "max": { "k": 5 }, "zone": "A" },
        ] {
            assert!(parse_update(&bad).is_err(), "{bad}");
        }
    }
}
