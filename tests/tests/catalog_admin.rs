//! Sharding admin commands and the `config` database through the router, backed by a real
//! 3-node config-server group (separate processes).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Document, doc};
use shoal_tests::catalog_cluster::CatalogCluster;
use shoal_tests::cluster::Cluster;
use shoal_tests::expect::command_error;

/// Three loopback ports that were free a moment ago (config servers need each other's ports
/// before they start, so port 0 cannot be used).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_shard_list_shards_enable_sharding_and_config_reads() {
    let cluster = CatalogCluster::start().await.expect("catalog cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    let shard_host = format!("shard0/{}", cluster.shard.addr());

    let added = admin.run_command(doc! { "addShard": &shard_host }).await.expect("addShard");
    assert_eq!(added.get_str("shardAdded").ok(), Some("shard0"));
    let listed = admin.run_command(doc! { "listShards": 1 }).await.expect("listShards");
    let shards = listed.get_array("shards").expect("shards");
    assert_eq!(shards.len(), 1);
    let shard = shards[0].as_document().expect("doc");
    assert_eq!(shard.get_str("_id").ok(), Some("shard0"));
    assert_eq!(shard.get_str("host").ok(), Some(shard_host.as_str()));
    assert_eq!(shard.get_i32("state").ok(), Some(1));

    admin.run_command(doc! { "enableSharding": "app" }).await.expect("enableSharding");
    // Repeating it is fine, as in MongoDB 6+.
    admin.run_command(doc! { "enableSharding": "app" }).await.expect("enableSharding again");

    let config = client.database("config");
    let dbs: Vec<Document> =
        collect(config.collection::<Document>("databases").find(doc! {}).await.expect("find")).await;
    assert_eq!(dbs.len(), 1);
    assert_eq!(dbs[0].get_str("_id").ok(), Some("app"));
    assert_eq!(dbs[0].get_str("primary").ok(), Some("shard0"));
    assert!(dbs[0].get_document("version").is_ok_and(|v| v.get_i32("lastMod").ok() == Some(1)));

    let shards: Vec<Document> =
        collect(config.collection::<Document>("shards").find(doc! { "_id": "shard0" }).await.expect("find")).await;
    assert_eq!(shards.len(), 1);
    let version =
        config.collection::<Document>("version").find_one(doc! {}).await.expect("find").expect("a version doc");
    let cluster_id = version.get_object_id("clusterId").expect("clusterId");
    let again = config.collection::<Document>("version").find_one(doc! {}).await.expect("find").expect("doc");
    assert_eq!(again.get_object_id("clusterId").ok(), Some(cluster_id), "the cluster id is stable");
    let balancer = config.collection::<Document>("settings").find_one(doc! { "_id": "balancer" }).await.expect("find");
    assert_eq!(balancer.and_then(|b| b.get_str("mode").ok().map(str::to_owned)).as_deref(), Some("full"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_refuse_bad_input() {
    let cluster = CatalogCluster::start().await.expect("catalog cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    command_error(admin.run_command(doc! { "enableSharding": "app" }).await, 70);
    command_error(admin.run_command(doc! { "addShard": "not a host" }).await, 9);
    let host = format!("shard0/{}", cluster.shard.addr());
    admin.run_command(doc! { "addShard": &host }).await.expect("addShard");
    command_error(admin.run_command(doc! { "enableSharding": "app", "primaryShard": "nope" }).await, 70);
    command_error(client.database("test").run_command(doc! { "listShards": 1 }).await, 13);
    command_error(admin.run_command(doc! { "enableSharding": "config" }).await, 72);
    command_error(client.database("config").run_command(doc! { "find": "migrations" }).await, 238);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_without_config_servers_says_so() {
    let cluster = Cluster::start().await.expect("cluster");
    let client = cluster.client().await.expect("client");
    let err = command_error(client.database("admin").run_command(doc! { "listShards": 1 }).await, 94);
    assert!(err.message.contains("--config"), "{}", err.message);
}

async fn collect(mut cursor: mongodb::Cursor<Document>) -> Vec<Document> {
    let mut out = Vec::new();
    while cursor.advance().await.expect("advance") {
        out.push(Document::try_from(cursor.current()).expect("doc"));
    }
    out
}
