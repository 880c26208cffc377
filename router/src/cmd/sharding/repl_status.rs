//! `replSetGetStatus: 1, shard: "<id>"` through the router: the status of one shard's replica
//! group in MongoDB's shape, asked of every member directly (a member that does not answer is
//! `health: 0`, `stateStr: "(not reachable/healthy)"`, as MongoDB shows it). A mongos has no
//! replica set of its own, so without `shard` the command is refused the way mongos refuses it.

use std::time::Duration;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::shard::CommandRequest;
use shoal_proto::shard::shard_client::ShardClient;

use super::{body_of, raw};
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// One member's answer, at most.
pub const MEMBER_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

async fn member_status(addr: &str) -> Result<Document, String> {
    let call = async {
        let channel = shoal_cluster::net::connect_lazy(addr, MEMBER_STATUS_TIMEOUT).map_err(|e| e.to_string())?;
        let mut client = ShardClient::new(channel);
        let req = CommandRequest {
            request_id: "replSetGetStatus".into(),
            db: "admin".into(),
            body: doc! { "replSetGetStatus": 1 }.to_vec().map_err(|e| e.to_string())?.into(),
            secondary_ok: true,
            ..Default::default()
        };
        let reply = client.command(req).await.map_err(|s| s.message().to_owned())?.into_inner();
        if let Some(e) = reply.error {
            return Err(e.errmsg);
        }
        Document::from_reader(&mut reply.body.as_ref()).map_err(|e| e.to_string())
    };
    tokio::time::timeout(MEMBER_STATUS_TIMEOUT, call).await.map_err(|_| "no answer".to_owned())?
}

/// The `shard` a replica-set command names: a router has no replica set of its own, so without
/// one the command is refused as mongos refuses it.
pub(super) fn shard_named(body: &Document, command: &str) -> Result<String, CommandError> {
    match body.get("shard") {
        Some(Bson::String(s)) => Ok(s.clone()),
        None => Err(CommandError::new(
            ErrorCode::IllegalOperation,
            format!("{command} is not supported through mongos without {{shard: \"<id>\"}}"),
        )),
        Some(_) => Err(CommandError::type_mismatch(format!("{command}.shard must be a string"))),
    }
}

pub async fn repl_set_get_status(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let shard_id = shard_named(&body, "replSetGetStatus")?;
    let shard = state
        .catalog
        .shard(&shard_id)
        .await?
        .ok_or_else(|| CommandError::new(ErrorCode::ShardNotFound, format!("shard '{shard_id}' not found")))?;
    // Voting members, then members being added (MongoDB shows those with `newlyAdded`).
    let group = &shard.group;
    let names: Vec<&String> = group.members.iter().chain(&group.pending).collect();
    let answers = futures::future::join_all(names.iter().map(|m| member_status(m))).await;
    let mut members = Vec::new();
    for (i, (name, answer)) in names.into_iter().zip(answers).enumerate() {
        let mut m = doc! { "_id": i as i32, "name": name };
        if group.pending.contains(name) {
            m.insert("newlyAdded", true);
        }
        match answer {
            Ok(s) => {
                let state_str = s.get_str("stateStr").unwrap_or("UNKNOWN").to_owned();
                m.insert("health", 1.0);
                m.insert("state", s.get_i32("state").unwrap_or(0));
                m.insert("stateStr", &state_str);
                m.insert("optime", s.get("optime").cloned().unwrap_or(Bson::Null));
                m.insert("optimeDurable", s.get("durableOpTime").cloned().unwrap_or(Bson::Null));
                m.insert(
                    "syncSourceHost",
                    if state_str == "PRIMARY" { "" } else { s.get_str("primary").unwrap_or("") },
                );
                m.insert("infoMessage", s.get_str("progress").unwrap_or(""));
                m.insert("term", s.get("term").cloned().unwrap_or(Bson::Int64(0)));
            }
            Err(e) => {
                m.insert("health", 0.0);
                m.insert("state", 8);
                m.insert("stateStr", "(not reachable/healthy)");
                m.insert("lastHeartbeatMessage", e);
            }
        }
        members.push(m);
    }
    raw(&doc! {
        "set": &shard.replica_set,
        "date": bson::DateTime::now(),
        "term": shard.group.term as i64,
        "members": members,
    })
}

/// `replSetStepDown: <secs>, shard: "<id>"` (with `secondaryCatchUpPeriodSecs`, `force`): asks
/// the shard's primary to step down; it answers once the config service opened the next term.
pub async fn repl_set_step_down(state: &RouterState, _conn: &ConnContext, cmd: &ClientCommand) -> HandlerResult {
    let body = body_of(cmd)?;
    let shard_id = shard_named(&body, "replSetStepDown")?;
    if !crate::routing::refresh_shards(state).await?.iter().any(|s| s.id == shard_id) {
        return Err(CommandError::new(ErrorCode::ShardNotFound, format!("shard '{shard_id}' not found")));
    }
    let req = CommandRequest {
        request_id: cmd.request_id.to_string(),
        db: "admin".into(),
        body: body.to_vec()?.into(),
        ..Default::default()
    };
    let reply = crate::exec::call::step_down(state, &shard_id, req).await?;
    raw(&reply)
}
