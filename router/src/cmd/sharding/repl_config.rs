//! A shard's replica-group configuration through the router, in MongoDB's shapes:
//! `replSetGetConfig: 1, shard: "<id>"` and `replSetReconfig: <config>, shard: "<id>"`.
//!
//! ```text
//!  replSetReconfig {members: [{host}, ...], version?} --diff against the catalog's group-->
//!     exactly one member added or removed (else NewReplicaSetConfigurationIncompatible 103)
//!     --GroupStatus--> the primary runs the current version? (else ConfigurationInProgress 109)
//!     --ReconfigReplicaGroup{expected_version}--> catalog (compare-and-set)
//! ```
//!
//! An added member is `newlyAdded` (pending) until the config leader's arbiter finds it caught up
//! with the group's commit point; it then votes and counts toward majorities. Member settings
//! other than `host` (`priority`, `votes`, `hidden`, tags) are not supported and are refused rather
//! than ignored, except the values that describe what Shoal does anyway.
//!
//! Must not: write more than one membership change, or change a group whose primary has not yet
//! learnt the current configuration (two changes in flight could leave majorities that do not
//! overlap).

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Command, MemberChange, Reply};

use super::raw;
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

use super::body_of;
use super::repl_status::shard_named;

async fn group_of(state: &RouterState, shard_id: &str) -> Result<shoal_proto::catalog::Shard, CommandError> {
    state
        .catalog
        .shard(shard_id)
        .await?
        .ok_or_else(|| CommandError::new(ErrorCode::ShardNotFound, format!("shard '{shard_id}' not found")))
}

/// `replSetGetConfig: 1, shard: "<id>"`: `{config: {_id, version, term, members: [{_id, host,
/// votes, priority, newlyAdded?}]}}`.
pub async fn repl_set_get_config(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let shard_id = shard_named(&body, "replSetGetConfig")?;
    let shard = group_of(state, &shard_id).await?;
    let group = &shard.group;
    let mut members = Vec::new();
    for (i, host) in group.members.iter().enumerate() {
        members.push(
            doc! { "_id": i as i32, "host": host, "arbiterOnly": false, "hidden": false, "priority": 1.0, "votes": 1 },
        );
    }
    for (i, host) in group.pending.iter().enumerate() {
        let id = (group.members.len() + i) as i32;
        members.push(doc! {
            "_id": id, "host": host, "arbiterOnly": false, "hidden": false, "priority": 1.0, "votes": 1,
            "newlyAdded": true,
        });
    }
    raw(&doc! {
        "config": {
            "_id": &shard.replica_set,
            "version": group.config_version as i64,
            "term": group.term as i64,
            "members": members,
            "protocolVersion": 1i64,
            "writeConcernMajorityJournalDefault": true,
        }
    })
}

/// The hosts of a `replSetReconfig` configuration document, checked as MongoDB checks them.
fn hosts_of(config: &Document, replica_set: &str) -> Result<Vec<String>, CommandError> {
    if let Some(id) = config.get("_id")
        && id.as_str() != Some(replica_set)
    {
        return Err(CommandError::new(
            ErrorCode::InvalidReplicaSetConfig,
            format!("the configuration's _id {id} is not the shard's replica set name '{replica_set}'"),
        ));
    }
    let Some(Bson::Array(members)) = config.get("members") else {
        return Err(CommandError::new(ErrorCode::InvalidReplicaSetConfig, "the configuration needs a members array"));
    };
    let mut hosts = Vec::with_capacity(members.len());
    for member in members {
        let Bson::Document(member) = member else {
            return Err(CommandError::new(ErrorCode::InvalidReplicaSetConfig, "each member must be a document"));
        };
        let Ok(host) = member.get_str("host") else {
            return Err(CommandError::new(ErrorCode::InvalidReplicaSetConfig, "each member needs a host string"));
        };
        for (field, value) in member {
            let supported = match field.as_str() {
                "_id" | "host" | "newlyAdded" => true,
                "votes" => value.as_i32() == Some(1) || value.as_i64() == Some(1) || value.as_f64() == Some(1.0),
                "priority" => value.as_f64().is_some_and(|p| p > 0.0) || value.as_i32().is_some_and(|p| p > 0),
                "arbiterOnly" | "hidden" => value.as_bool() == Some(false),
                "buildIndexes" => value.as_bool() == Some(true),
                "secondaryDelaySecs" | "slaveDelay" => value.as_i32() == Some(0) || value.as_i64() == Some(0),
                "tags" => value.as_document().is_some_and(Document::is_empty),
                _ => false,
            };
            if !supported {
                return Err(CommandError::new(
                    ErrorCode::InvalidReplicaSetConfig,
                    format!("member {host}: {field}: {value} is not supported (every member votes, with priority > 0)"),
                ));
            }
        }
        if hosts.iter().any(|h| h == host) {
            return Err(CommandError::new(ErrorCode::InvalidReplicaSetConfig, format!("{host} is listed twice")));
        }
        hosts.push(host.to_owned());
    }
    Ok(hosts)
}

/// The one change from `current` (voting and pending members) to `wanted`.
fn change_between(current: &[String], wanted: &[String]) -> Result<MemberChange, CommandError> {
    let added: Vec<&String> = wanted.iter().filter(|h| !current.contains(h)).collect();
    let removed: Vec<&String> = current.iter().filter(|h| !wanted.contains(h)).collect();
    match (added.as_slice(), removed.as_slice()) {
        ([one], []) => Ok(MemberChange::Add((*one).clone())),
        ([], [one]) => Ok(MemberChange::Remove((*one).clone())),
        ([], []) => Err(CommandError::new(
            ErrorCode::NewReplicaSetConfigurationIncompatible,
            "the configuration names the same members as the current one: nothing to change",
        )),
        _ => Err(CommandError::new(
            ErrorCode::NewReplicaSetConfigurationIncompatible,
            format!(
                "only one member may be added or removed at a time ({} added, {} removed)",
                added.len(),
                removed.len()
            ),
        )),
    }
}

/// `replSetReconfig: <config>, shard: "<id>"`: adds or removes one member of the shard's group.
pub async fn repl_set_reconfig(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let shard_id = shard_named(&body, "replSetReconfig")?;
    let Some(Bson::Document(config)) = body.get("replSetReconfig") else {
        return Err(CommandError::type_mismatch("replSetReconfig must be a configuration document"));
    };
    let shard = group_of(state, &shard_id).await?;
    let group = &shard.group;
    let version = config.get("version").and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)));
    if let Some(version) = version
        && version <= group.config_version as i64
    {
        return Err(CommandError::new(
            ErrorCode::NewReplicaSetConfigurationIncompatible,
            format!(
                "version field value of {version} is not greater than the current version {}",
                group.config_version
            ),
        ));
    }
    let wanted = hosts_of(config, &shard.replica_set)?;
    let current: Vec<String> = group.members.iter().chain(&group.pending).cloned().collect();
    let change = change_between(&current, &wanted)?;
    // The primary must run the current configuration before the next change (MongoDB waits for
    // the previous configuration to be installed on a majority the same way).
    let status = state.catalog.group_status(&shard_id).await?;
    let primary_version =
        status.members.iter().find(|m| m.member == status.primary).map(|m| m.config_version).unwrap_or_default();
    if status.primary.is_empty() || primary_version != group.config_version {
        return Err(CommandError::new(
            ErrorCode::ConfigurationInProgress,
            format!(
                "the primary has not installed configuration version {} yet (it runs {primary_version}); retry",
                group.config_version
            ),
        ));
    }
    let command =
        Command::ReconfigReplicaGroup { shard: shard_id.clone(), expected_version: group.config_version, change };
    match state.catalog.write(&command).await? {
        Reply::ReplicaGroupMembers { config_version, .. } => raw(&doc! { "version": config_version as i64 }),
        _ => raw(&doc! {}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[&str]) -> Vec<String> {
        list.iter().map(|h| (*h).to_owned()).collect()
    }

    #[test]
    fn exactly_one_member_changes() {
        let current = hosts(&["a:1", "b:1", "c:1"]);
        assert_eq!(
            change_between(&current, &hosts(&["a:1", "b:1", "c:1", "d:1"])).ok(),
            Some(MemberChange::Add("d:1".into()))
        );
        assert_eq!(change_between(&current, &hosts(&["a:1", "c:1"])).ok(), Some(MemberChange::Remove("b:1".into())));
        let code = |r: Result<MemberChange, CommandError>| r.err().map(|e| e.code);
        assert_eq!(
            code(change_between(&current, &hosts(&["a:1", "d:1", "e:1", "b:1", "c:1"]))),
            Some(ErrorCode::NewReplicaSetConfigurationIncompatible.code())
        );
        assert_eq!(
            code(change_between(&current, &hosts(&["a:1", "b:1", "d:1"]))),
            Some(ErrorCode::NewReplicaSetConfigurationIncompatible.code())
        );
        assert_eq!(
            code(change_between(&current, &current)),
            Some(ErrorCode::NewReplicaSetConfigurationIncompatible.code())
        );
    }

    #[test]
    fn member_settings_shoal_cannot_honour_are_refused() {
        let config = doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "priority": 1, "votes": 1 }] };
        assert_eq!(hosts_of(&config, "rs0").ok(), Some(hosts(&["a:1"])));
        let hidden = doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "hidden": true }] };
        assert!(hosts_of(&hidden, "rs0").is_err());
        let arbiter = doc! { "members": [{ "host": "a:1", "arbiterOnly": true }] };
        assert!(hosts_of(&arbiter, "rs0").is_err());
        let wrong_set = doc! { "_id": "other", "members": [{ "host": "a:1" }] };
        assert_eq!(hosts_of(&wrong_set, "rs0").err().map(|e| e.code), Some(ErrorCode::InvalidReplicaSetConfig.code()));
    }
}
