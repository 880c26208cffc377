//! Shard versioning against a real catalog: 3 config servers, one shard, one router. The
//! collection is sharded and split through the router; a migration of one chunk to a second
//! (process-less) shard is committed directly in the catalog, which leaves that chunk's documents
//! as orphans on the real shard. The test then calls the shard's gRPC service itself, as a router
//! would, with stale, current and missing shard versions.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{ChunkBound, Command, PlacementVersion, RoutingTable};
use shoal_proto::shard::shard_client::ShardClient;
use shoal_proto::shard::{CommandRequest, ShardVersion};
use shoal_proto::stale_config::{CollectionVersion, StaleConfig};
use shoal_tests::catalog_cluster::CatalogCluster;
use tonic::transport::Channel;

const NS: &str = "app.users";
const RPC_TIMEOUT: Duration = Duration::from_secs(20);

async fn table(catalog: &ConfigClient) -> RoutingTable {
    match catalog.routing_table(NS, None, true).await.expect("routing table").0 {
        RoutingAnswer::Full(Some(t)) => t,
        other => panic!("expected a routing table, got {other:?}"),
    }
}

fn wire(v: &PlacementVersion) -> ShardVersion {
    ShardVersion {
        epoch: v.epoch.0.to_vec().into(),
        timestamp_secs: v.timestamp.secs,
        timestamp_inc: v.timestamp.inc,
        major: v.version.major,
        minor: v.version.minor,
    }
}

fn shard_version(t: &RoutingTable, shard: &str) -> PlacementVersion {
    PlacementVersion { epoch: t.epoch, timestamp: t.timestamp, version: t.shard_version(shard) }
}

fn request(body: Document, version: Option<ShardVersion>) -> CommandRequest {
    CommandRequest {
        request_id: "shard-versioning-test".into(),
        db: "app".into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: version,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    }
}

/// `a` of every document a find returns (first batch, big enough for all), or the error code.
async fn find(shard: &mut ShardClient<Channel>, version: Option<ShardVersion>) -> Result<Vec<i32>, i32> {
    let req = request(doc! { "find": "users", "sort": {"a": 1}, "batchSize": 1000 }, version);
    let reply = tokio::time::timeout(RPC_TIMEOUT, shard.find(req)).await.expect("in time").expect("rpc").into_inner();
    if let Some(e) = reply.error {
        return Err(e.code);
    }
    Ok(reply
        .documents
        .iter()
        .map(|b| Document::from_reader(&mut &b[..]).expect("doc").get_i32("a").expect("a"))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_check_versions_and_hide_orphans() {
    let cluster = CatalogCluster::start().await.expect("catalog cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "addShard": format!("shard0/{}", cluster.shard.addr()) }).await.expect("addShard");
    admin.run_command(doc! { "shardCollection": NS, "key": {"a": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": NS, "middle": {"a": 10} }).await.expect("split");
    let docs: Vec<Document> = (0..20).map(|i| doc! {"_id": i, "a": i}).collect();
    client.database("app").collection::<Document>("users").insert_many(docs).await.expect("insert");

    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let before = table(&catalog).await;
    let old = shard_version(&before, "shard0");
    let mut shard = shoal_tests::grpc::shard(cluster.shard.addr()).await.expect("connect");

    // Current version: everything is owned; unversioned requests are untouched.
    assert_eq!(find(&mut shard, Some(wire(&old))).await, Ok((0..20).collect()));
    assert_eq!(find(&mut shard, None).await.map(|v| v.len()), Ok(20));
    // The router thinks the collection is unsharded: stale.
    assert_eq!(find(&mut shard, Some(ShardVersion::default())).await, Err(13388));

    // Migrate [10, MaxKey) to a shard that has no process: its documents become orphans here.
    let command =
        Command::AddShard { shard: "shard1".into(), replica_set: "shard1".into(), members: vec!["127.0.0.1:9".into()] };
    catalog.write(&command).await.expect("addShard").outcome.expect("shard1 added");
    let moving = before.chunks.iter().find(|c| c.max == ChunkBound::Max).expect("upper chunk");
    let command = Command::CommitMigration {
        ns: NS.into(),
        epoch: before.epoch,
        min: moving.min.clone(),
        max: ChunkBound::Max,
        from: "shard0".into(),
        to: "shard1".into(),
        expected_version: moving.version,
        fencing: None,
    };
    catalog.write(&command).await.expect("commit").outcome.expect("migration committed");
    let after = table(&catalog).await;
    let new = shard_version(&after, "shard0");
    assert!(new.version.major > old.version.major, "{old:?} -> {new:?}");

    // A router at the new version makes the shard refresh, and orphans are hidden from it.
    assert_eq!(find(&mut shard, Some(wire(&new))).await, Ok((0..10).collect()));
    // A router still at the old version is told it is stale, before anything runs.
    assert_eq!(find(&mut shard, Some(wire(&old))).await, Err(13388));
    let update = doc! { "update": "users", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "multi": true}] };
    let reply = shard.update(request(update.clone(), Some(wire(&old)))).await.expect("rpc").into_inner();
    let error = reply.error.expect("a stale router's update fails");
    assert_eq!(error.code, 13388);
    // The error names both versions for the router to refresh from, in MongoDB's shape.
    let info = error.stale_config.as_ref().expect("StaleConfig carries its versions");
    let stale = StaleConfig::from_wire(info).expect("well-formed StaleConfig info");
    assert_eq!((stale.ns.as_str(), stale.shard.as_str()), (NS, "shard0"));
    assert_eq!(stale.received, CollectionVersion::Sharded(old));
    assert_eq!(stale.wanted, Some(CollectionVersion::Sharded(new)));
    assert!(reply.write_errors.is_empty());
    // Asked of the shard itself: the router now routes by chunk, and shard1 has no process.
    let changed = doc! { "count": "users", "query": {"x": 1} };
    let changed = shard.command(request(changed, None)).await.expect("rpc").into_inner();
    let changed = Document::from_reader(&mut &changed.body[..]).expect("reply");
    assert_eq!(changed.get_i32("n").ok(), Some(0), "the stale update changed nothing: {changed}");
    // At the current version the update skips the orphans.
    let reply = shard.update(request(update, Some(wire(&new)))).await.expect("rpc").into_inner();
    assert!(reply.error.is_none(), "{:?}", reply.error);
    assert_eq!(reply.n, 10);
    let count = shard.command(request(doc! { "count": "users" }, Some(wire(&new)))).await.expect("rpc").into_inner();
    assert!(count.error.is_none(), "{:?}", count.error);
    assert_eq!(Document::from_reader(&mut &count.body[..]).expect("reply").get_i32("n").ok(), Some(10));
    // A version from the future (a router ahead of the catalog cannot exist): stale after refresh.
    let mut future = new;
    future.version.major += 5;
    assert_eq!(find(&mut shard, Some(wire(&future))).await, Err(13388));
    // Unversioned, the orphans are still there (the range deleter is the migration's job).
    assert_eq!(find(&mut shard, None).await.map(|v| v.len()), Ok(20));

    let state = request(doc! { "shardingState": 1 }, None);
    let state = shard.command(state).await.expect("rpc").into_inner();
    let state = Document::from_reader(&mut &state.body[..]).expect("reply");
    assert_eq!(state.get_bool("enabled").ok(), Some(true), "{state}");
    assert_eq!(state.get_str("shardName").ok(), Some("shard0"), "{state}");
    let v = state.get_document("versions").expect("versions").get_timestamp(NS).expect("version of the collection");
    assert_eq!((v.time, v.increment), (new.version.major, new.version.minor));
    assert_eq!(state.get_i64("rangeDeletionsPending").ok(), Some(0));
}
