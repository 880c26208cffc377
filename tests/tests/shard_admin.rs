//! Sharding collections and their chunks through the router (`shardCollection`, `split`,
//! `mergeChunks`, `moveChunk`/`moveRange`, `getShardVersion`, `getShardMap`, `flushRouterConfig`,
//! `isdbgrid`), against a real 3-node config-server group, one shard and one router. Chunks are
//! checked through `getShardVersion` and by reading the catalog with the config-server client.
//! One cluster serves every check, to keep the file's wall time low.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::{ChunkBound, ClusterCatalogView, KeyPattern, Parts};
use shoal_tests::catalog_cluster::CatalogCluster;
use shoal_tests::expect::command_error;

/// The catalog as the config servers hold it now (linearizable read).
async fn read_catalog(cluster: &CatalogCluster) -> ClusterCatalogView {
    let client = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    client.view(Parts::ALL, true).await.expect("catalog read").0
}

fn version(reply: &Document) -> (u32, u32) {
    let ts = reply.get_timestamp("version").expect("version is a Timestamp");
    (ts.time, ts.increment)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_split_merge_and_inspect_collections() {
    let cluster = CatalogCluster::start().await.expect("catalog cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "addShard": format!("shard0/{}", cluster.shard.addr()) }).await.expect("addShard");

    // Range key, without enableSharding first (MongoDB 6+).
    let reply = admin.run_command(doc! { "shardCollection": "app.users", "key": {"a": 1} }).await.expect("shard");
    assert_eq!(reply.get_str("collectionsharded").ok(), Some("app.users"));
    assert!(matches!(reply.get("collectionUUID"), Some(Bson::Binary(b)) if b.bytes.len() == 16), "{reply}");
    admin.run_command(doc! { "shardCollection": "app.users", "key": {"a": 1} }).await.expect("same key again");
    command_error(admin.run_command(doc! { "shardCollection": "app.users", "key": {"b": 1} }).await, 23);

    let v0 = admin.run_command(doc! { "getShardVersion": "app.users" }).await.expect("getShardVersion");
    assert!(v0.get_object_id("versionEpoch").is_ok(), "{v0}");
    assert!(v0.get_timestamp("versionTimestamp").is_ok(), "{v0}");
    let catalog = read_catalog(&cluster).await;
    assert_eq!(catalog.database("app").map(|d| d.primary.as_str()), Some("shard0"));
    let users = catalog.collection("app.users").expect("sharded in the catalog");
    assert_eq!(users.key, KeyPattern::range(&["a"]));
    assert_eq!(users.chunks.len(), 1);

    // Splits move the version forward and add chunks; a boundary cannot be split again.
    admin.run_command(doc! { "split": "app.users", "middle": {"a": 10} }).await.expect("split middle");
    let v1 = admin.run_command(doc! { "getShardVersion": "app.users" }).await.expect("getShardVersion");
    assert!(version(&v1) > version(&v0), "{v0} -> {v1}");
    command_error(admin.run_command(doc! { "split": "app.users", "middle": {"a": 10} }).await, 87);
    // `find` and `bounds` split at the chunk's median, which the owning shard computes.
    let users_coll = client.database("app").collection::<bson::Document>("users");
    command_error(admin.run_command(doc! { "split": "app.users", "find": {"a": 20} }).await, 87);
    users_coll.insert_many((0..40).map(|a| doc! { "a": a })).await.expect("seed users");
    admin.run_command(doc! { "split": "app.users", "find": {"a": 20, "other": 1} }).await.expect("split find");
    let lower = vec![Bson::Document(doc! {"a": Bson::MinKey}), Bson::Document(doc! {"a": 10})];
    admin.run_command(doc! { "split": "app.users", "bounds": lower }).await.expect("split bounds");
    let users = read_catalog(&cluster).await.collection("app.users").expect("users").clone();
    let mins: Vec<ChunkBound> = users.chunks.keys().cloned().collect();
    let key = |a: i32| ChunkBound::Key(shoal_query::shard_key::of_values(&[&Bson::Int32(a)]));
    assert_eq!(mins, vec![ChunkBound::Min, key(5), key(10), key(25)], "medians of [MinKey, 10) and [10, MaxKey)");
    command_error(admin.run_command(doc! { "split": "app.users", "middle": {"b": 1} }).await, 72);
    command_error(admin.run_command(doc! { "split": "app.nope", "middle": {"a": 1} }).await, 118);

    // Merge the three back into one.
    let bounds = vec![Bson::Document(doc! {"a": Bson::MinKey}), Bson::Document(doc! {"a": Bson::MaxKey})];
    admin.run_command(doc! { "mergeChunks": "app.users", "bounds": bounds.clone() }).await.expect("merge");
    let users = read_catalog(&cluster).await.collection("app.users").expect("users").clone();
    assert_eq!(users.chunks.len(), 1);
    assert!(users.chunks.contains_key(&ChunkBound::Min));

    // Moving to the current shard is a no-op; elsewhere needs migrations; unknown shards are 70.
    let moved = admin
        .run_command(doc! { "moveChunk": "app.users", "find": {"a": 5}, "to": "shard0" })
        .await
        .expect("moveChunk to its own shard");
    assert!(moved.get("millis").is_some(), "{moved}");
    admin
        .run_command(doc! { "moveRange": "app.users", "min": {"a": Bson::MinKey}, "toShard": "shard0" })
        .await
        .expect("moveRange to its own shard");
    command_error(admin.run_command(doc! { "moveChunk": "app.users", "bounds": bounds, "to": "nope" }).await, 70);

    // Compound and hashed keys.
    admin.run_command(doc! { "shardCollection": "app.pairs", "key": {"a": 1, "b": 1} }).await.expect("compound");
    admin.run_command(doc! { "split": "app.pairs", "middle": {"a": 1, "b": "x"} }).await.expect("split compound");
    admin.run_command(doc! { "shardCollection": "app.h", "key": {"h": "hashed"} }).await.expect("hashed");
    admin
        .run_command(doc! { "shardCollection": "app.h8", "key": {"h": "hashed"}, "numInitialChunks": 8 })
        .await
        .expect("hashed, 8 chunks");
    admin
        .run_command(doc! { "shardCollection": "app.ah", "key": {"a": 1, "h": "hashed"} })
        .await
        .expect("compound, hashed second");
    let catalog = read_catalog(&cluster).await;
    assert_eq!(catalog.collection("app.ah").map(|c| c.chunks.len()), Some(1));
    assert_eq!(catalog.collection("app.pairs").map(|c| c.chunks.len()), Some(2));
    assert_eq!(catalog.collection("app.h").map(|c| c.chunks.len()), Some(2), "2 x 1 shard by default");
    assert_eq!(catalog.collection("app.h8").map(|c| c.chunks.len()), Some(8));
    // Hashed split points are in hash space: a NumberLong; a plain value is refused.
    admin.run_command(doc! { "split": "app.h", "middle": {"h": Bson::Int64(1 << 40)} }).await.expect("split hashed");
    command_error(admin.run_command(doc! { "split": "app.h", "middle": {"h": "x"} }).await, 72);

    // Invalid shard keys and options.
    command_error(admin.run_command(doc! { "shardCollection": "app.x", "key": {"a": -1} }).await, 2);
    command_error(
        admin.run_command(doc! { "shardCollection": "app.x", "key": {"a": "hashed", "b": "hashed"} }).await,
        2,
    );
    command_error(
        admin.run_command(doc! { "shardCollection": "app.x", "key": {"a": "hashed"}, "unique": true }).await,
        72,
    );
    command_error(admin.run_command(doc! { "shardCollection": "nodot", "key": {"a": 1} }).await, 73);
    command_error(client.database("app").run_command(doc! { "shardCollection": "app.x", "key": {"a": 1} }).await, 13);
    command_error(admin.run_command(doc! { "getShardVersion": "app.unsharded" }).await, 118);

    // Router-level answers.
    let grid = admin.run_command(doc! { "isdbgrid": 1 }).await.expect("isdbgrid");
    assert_eq!(grid.get_i32("isdbgrid").ok(), Some(1));
    assert!(grid.get_str("hostname").is_ok());
    let flushed = admin.run_command(doc! { "flushRouterConfig": 1 }).await.expect("flushRouterConfig");
    assert_eq!(flushed.get_bool("flushed").ok(), Some(true));
    let map = admin.run_command(doc! { "getShardMap": 1 }).await.expect("getShardMap");
    let shard_conn = format!("shard0/{}", cluster.shard.addr());
    assert_eq!(map.get_document("map").ok().and_then(|m| m.get_str("shard0").ok()), Some(shard_conn.as_str()));
    assert!(map.get_document("map").is_ok_and(|m| m.contains_key("config")), "{map}");
}
