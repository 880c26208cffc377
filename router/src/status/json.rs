//! `/status.json`: what the status page shows, gathered from this router's state and the cluster
//! ([`gather`]: one catalog read, the group status of each shard through the router's own
//! `replSetGetStatus` and `balancerStatus` handlers, each bounded by a timeout) and shaped as JSON
//! by a pure function ([`document`], unit-tested).
//!
//! ```text
//!  { router: {name, uptimeSeconds, routingRefreshes},  generatedAtMs,  errors: [..],
//!    shards: [{id, replicaSet, draining, term, error, members: [{name, state, health, lagSeconds}]}],
//!    collections: [{ns, shardKey, chunks, jumbo, shards: [{shard, chunks, dataBytes}]}],
//!    balancer: {mode, enabled, inRound, rounds, leaseHolder, recentMoves: [{atMs, ns, min, max,
//!               from, to, reason, why, outcome, millis, error}]},
//!    ops: {intervalSeconds, points: [{atMs, opsPerSec, p50Ms, p99Ms}]} }
//! ```
//!
//! Must not: change anything (only reads and read-only commands), or wait on the cluster without
//! a bound. A part that cannot be read is left empty and named in `errors`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bson::{Bson, Document, rawdoc};
use futures::future::join_all;
use serde_json::{Value, json};
use shoal_proto::catalog::{BALANCER_LEASE, ClusterCatalogView, ShardId};
use shoal_proto::config::CatalogPart;

use super::sampler::{Point, SAMPLE_INTERVAL, Samples};
use crate::balancer::metrics::MoveRecord;
use crate::cmd::config_db::docs::key_document;
use crate::cmd::sharding::{balancer_status as balancer_status_handler, repl_status};
use crate::command::Command as ClientCommand;
use crate::state::{ConnContext, RouterState};

/// Bound on the catalog read and on `balancerStatus`.
pub const CATALOG_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on one shard's group status (its members answer within 2 s each, all at once).
pub const GROUP_STATUS_TIMEOUT: Duration = Duration::from_secs(3);

/// Everything [`document`] shapes, as read at one moment.
#[derive(Debug, Default)]
pub struct Inputs {
    pub now_ms: u64,
    /// This router: `host:port` of its client port.
    pub router: String,
    pub uptime_secs: u64,
    pub routing_refreshes: u64,
    /// Shards, collections and leases.
    pub catalog: Option<ClusterCatalogView>,
    /// `replSetGetStatus` of each shard (the router's answer), or why there is none.
    pub groups: BTreeMap<ShardId, Result<Document, String>>,
    /// `balancerStatus`.
    pub balancer: Option<Document>,
    pub moves: Vec<MoveRecord>,
    pub data_bytes: BTreeMap<(String, ShardId), u64>,
    pub points: Vec<Point>,
    /// What could not be read.
    pub errors: Vec<String>,
}

/// Reads what the page shows; never fails (what cannot be read is in `errors`).
pub async fn gather(state: &RouterState, samples: &Samples) -> Inputs {
    let mut inputs = Inputs {
        now_ms: crate::balancer::runtime::now_ms(),
        router: format!("{}:{}", crate::cmd::info::hostname(), state.settings.listen.port()),
        uptime_secs: state.started.elapsed().as_secs(),
        routing_refreshes: state.routing.refreshes().get(),
        moves: state.balancer_metrics.recent_moves(),
        data_bytes: state.balancer_metrics.data_bytes(),
        points: samples.lock().unwrap_or_else(|p| p.into_inner()).points(),
        ..Inputs::default()
    };
    if !state.catalog.is_configured() {
        inputs.errors.push("this router has no config servers (--shard mode): no cluster to show".into());
        return inputs;
    }
    let parts = [CatalogPart::Shards, CatalogPart::Collections, CatalogPart::Leases];
    let catalog = match tokio::time::timeout(CATALOG_TIMEOUT, state.catalog.view(&parts)).await {
        Ok(Ok(view)) => view,
        Ok(Err(e)) => {
            inputs.errors.push(format!("cannot read the catalog: {}", e.errmsg));
            return inputs;
        }
        Err(_) => {
            inputs.errors.push("cannot read the catalog: no answer in time".into());
            return inputs;
        }
    };
    let ids: Vec<ShardId> = catalog.shards().keys().cloned().collect();
    let (groups, balancer) =
        tokio::join!(join_all(ids.iter().map(|id| group_status(state, id))), balancer_status(state));
    inputs.groups = ids.into_iter().zip(groups).collect();
    match balancer {
        Ok(doc) => inputs.balancer = Some(doc),
        Err(e) => inputs.errors.push(format!("cannot read the balancer's status: {e}")),
    }
    inputs.catalog = Some(catalog);
    inputs
}

/// The connection the router's own handlers are run for (nothing of it is read by them).
fn internal_conn() -> ConnContext {
    let nowhere = SocketAddr::from(([127, 0, 0, 1], 0));
    ConnContext::new(0, nowhere, nowhere)
}

/// `replSetGetStatus: 1, shard: id`, as the router answers it (every member asked at once).
async fn group_status(state: &RouterState, id: &str) -> Result<Document, String> {
    let cmd = ClientCommand::internal(rawdoc! { "replSetGetStatus": 1, "shard": id }, "admin", 0);
    let conn = internal_conn();
    let answer = repl_status::repl_set_get_status(state, &conn, &cmd);
    match tokio::time::timeout(GROUP_STATUS_TIMEOUT, answer).await {
        Ok(Ok(raw)) => Document::try_from(raw.as_ref()).map_err(|e| e.to_string()),
        Ok(Err(e)) => Err(e.errmsg),
        Err(_) => Err("no answer in time".into()),
    }
}

async fn balancer_status(state: &RouterState) -> Result<Document, String> {
    let cmd = ClientCommand::internal(rawdoc! { "balancerStatus": 1 }, "admin", 0);
    match tokio::time::timeout(CATALOG_TIMEOUT, balancer_status_handler(state, &internal_conn(), &cmd)).await {
        Ok(Ok(raw)) => Document::try_from(raw.as_ref()).map_err(|e| e.to_string()),
        Ok(Err(e)) => Err(e.errmsg),
        Err(_) => Err("no answer in time".into()),
    }
}

/// The JSON document of `inputs`.
pub fn document(inputs: &Inputs) -> Value {
    let catalog = inputs.catalog.as_ref();
    json!({
        "router": {
            "name": inputs.router,
            "uptimeSeconds": inputs.uptime_secs,
            "routingRefreshes": inputs.routing_refreshes,
        },
        "generatedAtMs": inputs.now_ms,
        "errors": inputs.errors,
        "shards": catalog.map(|c| shards(c, &inputs.groups)).unwrap_or_default(),
        "collections": catalog.map(|c| collections(c, &inputs.data_bytes)).unwrap_or_default(),
        "balancer": balancer_json(inputs),
        "ops": {
            "intervalSeconds": SAMPLE_INTERVAL.as_secs(),
            "points": inputs.points.iter().map(point).collect::<Vec<_>>(),
        },
    })
}

fn shards(catalog: &ClusterCatalogView, groups: &BTreeMap<ShardId, Result<Document, String>>) -> Vec<Value> {
    catalog
        .shards()
        .values()
        .map(|s| {
            let (members, error) = match groups.get(&s.id) {
                Some(Ok(status)) => (members(status), None),
                Some(Err(e)) => (unknown_members(&s.group.members), Some(e.clone())),
                None => (unknown_members(&s.group.members), Some("not asked".to_owned())),
            };
            json!({
                "id": s.id,
                "replicaSet": s.replica_set,
                "draining": s.is_draining(),
                "term": s.group.term,
                "members": members,
                "error": error,
            })
        })
        .collect()
}

/// The members the catalog lists, when the group could not be asked.
fn unknown_members(names: &[String]) -> Vec<Value> {
    names.iter().map(|n| json!({ "name": n, "state": "UNKNOWN", "health": null, "lagSeconds": null })).collect()
}

/// The seconds of a member's `optime.ts` (0: it has applied nothing the reporter heard of).
fn optime_secs(member: &Document) -> Option<u32> {
    member.get_document("optime").ok()?.get_timestamp("ts").ok().map(|ts| ts.time)
}

/// Each member of a `replSetGetStatus` answer with its state and seconds behind the primary
/// (`null` for the primary itself, without a primary, or for an optime not heard yet), as
/// `rs.printSecondaryReplicationInfo()` and `shoal status` compute it.
pub fn members(status: &Document) -> Vec<Value> {
    let all: Vec<&Document> =
        status.get_array("members").map(|a| a.iter().filter_map(Bson::as_document).collect()).unwrap_or_default();
    let is_primary = |m: &Document| m.get_str("stateStr").is_ok_and(|s| s == "PRIMARY");
    let primary_secs = all.iter().find(|m| is_primary(m)).and_then(|m| optime_secs(m));
    all.iter()
        .map(|m| {
            let lag = match (primary_secs, optime_secs(m)) {
                _ if is_primary(m) => None,
                (Some(p), Some(own)) if own > 0 => Some(p.saturating_sub(own)),
                _ => None,
            };
            let health = match m.get("health") {
                Some(Bson::Double(h)) => Some(*h),
                Some(Bson::Int32(h)) => Some(f64::from(*h)),
                _ => None,
            };
            json!({
                "name": m.get_str("name").unwrap_or("?"),
                "state": m.get_str("stateStr").unwrap_or("UNKNOWN"),
                "health": health,
                "lagSeconds": lag,
                "newlyAdded": m.get_bool("newlyAdded").unwrap_or(false),
                "message": m.get_str("lastHeartbeatMessage").ok(),
            })
        })
        .collect()
}

/// Every sharded collection with its chunks per shard (every shard listed, owning chunks or not)
/// and, where the last balancer round on this router reported them, its bytes per shard.
pub fn collections(catalog: &ClusterCatalogView, data_bytes: &BTreeMap<(String, ShardId), u64>) -> Vec<Value> {
    catalog
        .collections()
        .values()
        .map(|c| {
            let mut per_shard: BTreeMap<&str, u64> = catalog.shards().keys().map(|id| (id.as_str(), 0)).collect();
            for chunk in c.chunks.values() {
                *per_shard.entry(chunk.shard.as_str()).or_insert(0) += 1;
            }
            let shards: Vec<Value> = per_shard
                .into_iter()
                .map(|(shard, chunks)| {
                    let bytes = data_bytes.get(&(c.ns.clone(), shard.to_owned()));
                    json!({ "shard": shard, "chunks": chunks, "dataBytes": bytes })
                })
                .collect();
            json!({
                "ns": c.ns,
                "shardKey": key_document(&c.key).to_string(),
                "chunks": c.chunks.len(),
                "jumbo": c.chunks.values().filter(|ch| ch.jumbo).count(),
                "shards": shards,
            })
        })
        .collect()
}

fn balancer_json(inputs: &Inputs) -> Value {
    let status = inputs.balancer.as_ref();
    let mode = status.and_then(|s| s.get_str("mode").ok());
    let holder = inputs
        .catalog
        .as_ref()
        .and_then(|c| c.lease(BALANCER_LEASE).filter(|l| l.is_live(c.now_ms())).map(|l| l.holder.clone()));
    let rounds = status.and_then(|s| match s.get("numBalancerRounds") {
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        _ => None,
    });
    json!({
        "mode": mode,
        "enabled": mode.map(|m| m == "full"),
        "inRound": status.and_then(|s| s.get_bool("inBalancerRound").ok()),
        "rounds": rounds,
        "leaseHolder": holder,
        "recentMoves": inputs.moves.iter().map(move_json).collect::<Vec<_>>(),
    })
}

fn move_json(m: &MoveRecord) -> Value {
    json!({
        "atMs": m.at_ms,
        "ns": m.ns,
        "min": m.min,
        "max": m.max,
        "from": m.from,
        "to": m.to,
        "reason": m.reason,
        "why": m.why,
        "outcome": m.outcome.as_str(),
        "millis": m.millis,
        "error": m.error,
    })
}

fn point(p: &Point) -> Value {
    let ms = |s: Option<f64>| s.map(|s| s * 1000.0);
    json!({ "atMs": p.at_ms, "opsPerSec": p.ops_per_sec, "p50Ms": ms(p.p50_seconds), "p99Ms": ms(p.p99_seconds) })
}

#[cfg(test)]
mod tests {
    use bson::{Timestamp, doc};
    use shoal_proto::catalog::{
        Chunk, ChunkBound, ChunkVersion, Collection, Epoch, KeyPattern, Lease, ReplicaGroup, Shard, ShardState,
    };

    use super::*;
    use crate::balancer::metrics::Outcome;

    fn member(name: &str, state: &str, time: u32) -> Document {
        doc! { "name": name, "stateStr": state, "health": 1.0, "optime": { "ts": Timestamp { time, increment: 1 }, "t": 2_i64 } }
    }

    fn shard(id: &str, members: &[&str]) -> Shard {
        Shard {
            id: id.into(),
            replica_set: id.into(),
            group: ReplicaGroup {
                members: members.iter().map(|m| (*m).to_owned()).collect(),
                term: 3,
                primary: None,
                pending: Vec::new(),
                config_version: 1,
            },
            state: ShardState::Active,
            zones: Default::default(),
            topology_time: Default::default(),
        }
    }

    fn catalog() -> ClusterCatalogView {
        let v = ChunkVersion::new(1, 0);
        let mid = ChunkBound::Key(shoal_query::keystring::encode(&Bson::Int32(0)));
        let mut jumbo = Chunk::new(mid.clone(), ChunkBound::Max, "s0", v);
        jumbo.jumbo = true;
        let chunks =
            BTreeMap::from([(ChunkBound::Min, Chunk::new(ChunkBound::Min, mid.clone(), "s0", v)), (mid, jumbo)]);
        let coll = Collection {
            ns: "app.<b>people</b>".into(),
            uuid: uuid::Uuid::nil(),
            epoch: Epoch([1; 12]),
            timestamp: Default::default(),
            key: KeyPattern::range(&["k"]),
            unique: false,
            no_balance: false,
            no_auto_merge: false,
            max_chunk_size_bytes: None,
            version: v,
            chunks,
        };
        let lease = Lease { holder: "h:27017:1".into(), expires_at_ms: u64::MAX, token: 1, acquired_at_ms: 0 };
        ClusterCatalogView::default()
            .with_shards(BTreeMap::from([
                ("s0".into(), shard("s0", &["a:1", "a:2"])),
                ("s1".into(), shard("s1", &["b:1"])),
            ]))
            .with_collections(BTreeMap::from([(coll.ns.clone(), coll)]))
            .with_leases(BTreeMap::from([(BALANCER_LEASE.to_owned(), lease)]))
    }

    #[test]
    fn members_lag_behind_the_primary_in_seconds() {
        let status = doc! { "members": [
            member("a:1", "PRIMARY", 100),
            member("a:2", "SECONDARY", 97),
            member("a:3", "SECONDARY", 0),
            { "name": "a:4", "health": 0.0, "stateStr": "(not reachable/healthy)", "lastHeartbeatMessage": "no answer" },
        ] };
        let m = members(&status);
        let field = |i: usize, f: &str| m[i][f].clone();
        assert_eq!((field(0, "state"), field(0, "lagSeconds")), (json!("PRIMARY"), Value::Null));
        assert_eq!((field(1, "state"), field(1, "lagSeconds")), (json!("SECONDARY"), json!(3)));
        assert_eq!(field(2, "lagSeconds"), Value::Null, "an optime not heard yet has no lag");
        assert_eq!((field(3, "health"), field(3, "message")), (json!(0.0), json!("no answer")));
        let no_primary = doc! { "members": [member("a:2", "SECONDARY", 97)] };
        assert_eq!(members(&no_primary)[0]["lagSeconds"], Value::Null);
    }

    #[test]
    fn the_document_lists_shards_collections_balancer_and_ops() {
        let mut groups = BTreeMap::new();
        groups.insert(
            "s0".to_owned(),
            Ok(doc! { "members": [member("a:1", "PRIMARY", 5), member("a:2", "SECONDARY", 5)] }),
        );
        groups.insert("s1".to_owned(), Err("no answer in time".to_owned()));
        let inputs = Inputs {
            now_ms: 42,
            router: "h:27017".into(),
            catalog: Some(catalog()),
            groups,
            balancer: Some(doc! { "mode": "full", "inBalancerRound": false, "numBalancerRounds": 7_i64 }),
            moves: vec![MoveRecord {
                at_ms: 40,
                ns: "app.<b>people</b>".into(),
                min: "{ \"k\": MinKey }".into(),
                max: "{ \"k\": 0 }".into(),
                from: "s0".into(),
                to: "s1".into(),
                reason: "DataImbalance".into(),
                why: "s0 has more".into(),
                outcome: Outcome::Ok,
                millis: 12,
                error: None,
            }],
            data_bytes: BTreeMap::from([(("app.<b>people</b>".to_owned(), "s0".to_owned()), 4096)]),
            points: vec![Point { at_ms: 41, ops_per_sec: 2.5, p50_seconds: Some(0.001), p99_seconds: None }],
            ..Inputs::default()
        };
        let d = document(&inputs);
        assert_eq!(d["router"]["name"], "h:27017");
        assert_eq!(d["shards"][0]["members"][1]["state"], "SECONDARY");
        assert_eq!(d["shards"][0]["members"][1]["lagSeconds"], 0);
        assert_eq!(d["shards"][1]["error"], "no answer in time");
        assert_eq!(
            d["shards"][1]["members"][0],
            json!({"name": "b:1", "state": "UNKNOWN", "health": null, "lagSeconds": null})
        );
        let coll = &d["collections"][0];
        assert_eq!(
            (coll["ns"].clone(), coll["chunks"].clone(), coll["jumbo"].clone()),
            (json!("app.<b>people</b>"), json!(2), json!(1))
        );
        assert_eq!(coll["shardKey"], r#"{ "k": 1 }"#);
        assert_eq!(
            coll["shards"],
            json!([
                {"shard": "s0", "chunks": 2, "dataBytes": 4096},
                {"shard": "s1", "chunks": 0, "dataBytes": null},
            ])
        );
        assert_eq!(d["balancer"]["enabled"], true);
        assert_eq!(d["balancer"]["rounds"], 7);
        assert_eq!(d["balancer"]["leaseHolder"], "h:27017:1");
        assert_eq!(d["balancer"]["recentMoves"][0]["reason"], "DataImbalance");
        assert_eq!(d["balancer"]["recentMoves"][0]["outcome"], "ok");
        assert_eq!(d["ops"]["intervalSeconds"], 5);
        assert_eq!(d["ops"]["points"][0], json!({"atMs": 41, "opsPerSec": 2.5, "p50Ms": 1.0, "p99Ms": null}));
    }

    #[test]
    fn without_a_catalog_the_document_is_empty_and_says_why() {
        let inputs = Inputs { errors: vec!["cannot read the catalog: down".into()], ..Inputs::default() };
        let d = document(&inputs);
        assert_eq!(d["shards"], json!([]));
        assert_eq!(d["collections"], json!([]));
        assert_eq!(d["balancer"]["mode"], Value::Null);
        assert_eq!(d["errors"][0], "cannot read the catalog: down");
    }
}
