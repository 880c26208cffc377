//! `shoal dump` and `shoal restore` from outside: a two-shard cluster with a collection sharded
//! over both shards, an unsharded one with a unique index, a second database, a user-defined role
//! and a user is dumped (balancer paused) into mongodump's layout, and restored into a cluster of
//! one shard: every document, index and shard key is there, the user logs in with its old
//! password (and not with another), `--db` dumps one database, and a restore over existing data
//! counts duplicates without `--drop` and replaces them with it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::path::Path;
use std::time::Duration;

use bson::{Document, doc};
use futures::TryStreamExt;
use shoal_tests::process::shoal_bin;
use shoal_tests::sharded_cluster::{ClusterOptions, ShardedCluster};

const RUN_TIMEOUT: Duration = Duration::from_secs(180);
const ORDERS: i64 = 1000;

async fn shoal(args: &[String]) -> String {
    let run = tokio::process::Command::new(shoal_bin().unwrap()).args(args).kill_on_drop(true).output();
    let out = tokio::time::timeout(RUN_TIMEOUT, run).await.expect("shoal finishes").expect("shoal runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "shoal {args:?} failed:\n{text}");
    text
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| (*a).to_owned()).collect()
}

/// A spec naming `cluster`'s config servers and router (what `restore` writes users through).
fn spec_of(cluster: &ShardedCluster, dir: &Path) -> String {
    let port = |addr: &str| addr.rsplit_once(':').expect("host:port").1.to_owned();
    let config: Vec<String> = cluster
        .config_addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  - {{ name: c{i}, port: {} }}", port(a)))
        .collect();
    let router = cluster.router.addr().port();
    let text = format!(
        "name: target\nconfig_servers:\n{}\nrouters: [{{ name: r0, port: {router} }}]\nshards: [{{ name: s0, members: [{{ port: 1 }}] }}]\n",
        config.join("\n")
    );
    let path = dir.join("target.yaml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

async fn count(client: &mongodb::Client, db: &str, coll: &str) -> u64 {
    client.database(db).collection::<Document>(coll).count_documents(doc! {}).await.unwrap()
}

async fn index_names(client: &mongodb::Client, db: &str, coll: &str) -> Vec<String> {
    let mut names = client.database(db).collection::<Document>(coll).list_index_names().await.unwrap();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_two_shard_cluster_is_dumped_and_restored_into_one_shard() {
    let source = ShardedCluster::start().await.expect("source cluster");
    source.shard_in_two("shop", "orders", ORDERS / 2).await.expect("orders over both shards");
    let client = source.client().await.unwrap();
    let orders = client.database("shop").collection::<Document>("orders");
    let docs: Vec<Document> =
        (0..ORDERS).map(|k| doc! { "k": k, "sku": format!("sku-{}", k % 37), "qty": k * 2 }).collect();
    orders.insert_many(docs).await.expect("orders");
    orders.create_index(mongodb::IndexModel::builder().keys(doc! { "sku": 1 }).build()).await.expect("sku index");
    let customers = client.database("shop").collection::<Document>("customers");
    customers
        .create_index(
            mongodb::IndexModel::builder()
                .keys(doc! { "email": 1 })
                .options(mongodb::options::IndexOptions::builder().unique(true).build())
                .build(),
        )
        .await
        .expect("unique email index");
    customers
        .insert_many([doc! { "_id": 1, "email": "a@example.net" }, doc! { "_id": 2, "email": "b@example.net" }])
        .await
        .unwrap();
    client
        .database("crm")
        .collection::<Document>("leads")
        .insert_one(doc! { "_id": "l1", "score": 0.5 })
        .await
        .unwrap();
    let admin = client.database("admin");
    admin
        .run_command(doc! {
            "createRole": "notesReader",
            "privileges": [{ "resource": { "db": "shop", "collection": "customers" }, "actions": ["find"] }],
            "roles": [],
        })
        .await
        .expect("createRole");
    admin
        .run_command(doc! { "createUser": "analyst", "pwd": "old-password", "roles": ["notesReader", { "role": "read", "db": "crm" }] })
        .await
        .expect("createUser");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump");
    let router = source.router.addr().to_string();
    let dumped = shoal(&args(&["dump", "--router", &router, "--out", &out.display().to_string()])).await;
    assert!(dumped.contains("shop.orders: 1000 document(s)"), "{dumped}");
    for file in [
        "shop/orders.bson",
        "shop/orders.metadata.json",
        "shop/customers.bson",
        "crm/leads.bson",
        "admin/system.users.bson",
        "admin/system.roles.bson",
    ] {
        assert!(out.join(file).is_file(), "{file} missing: {dumped}");
    }
    let metadata = std::fs::read_to_string(out.join("shop/orders.metadata.json")).unwrap();
    assert!(metadata.contains(r#""shardKey":{"k":{"$numberInt":"1"}}"#), "{metadata}");
    let status = admin.run_command(doc! { "balancerStatus": 1 }).await.unwrap();
    assert_eq!(status.get_str("mode").unwrap(), "full", "the dump left the balancer stopped: {status}");

    // One database only.
    let crm_only = dir.path().join("crm-only");
    shoal(&args(&["dump", "--router", &router, "--db", "crm", "--out", &crm_only.display().to_string()])).await;
    assert!(
        crm_only.join("crm/leads.bson").is_file()
            && !crm_only.join("shop").exists()
            && !crm_only.join("admin").exists()
    );

    // Into a cluster of one shard.
    let target = ShardedCluster::start_with(ClusterOptions { shards: 1, ..ClusterOptions::default() })
        .await
        .expect("target cluster");
    let spec = spec_of(&target, dir.path());
    let restored = shoal(&args(&["restore", "-f", &spec, &out.display().to_string()])).await;
    assert!(restored.contains("users: 1"), "{restored}");
    let restored_client = target.client().await.unwrap();
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64);
    assert_eq!(count(&restored_client, "shop", "customers").await, 2);
    assert_eq!(count(&restored_client, "crm", "leads").await, 1);
    let sum: Vec<Document> = restored_client
        .database("shop")
        .collection::<Document>("orders")
        .aggregate([doc! { "$group": { "_id": null, "qty": { "$sum": "$qty" } } }])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(sum[0].get_i64("qty").unwrap(), (0..ORDERS).map(|k| k * 2).sum::<i64>());
    assert_eq!(index_names(&restored_client, "shop", "orders").await, index_names(&client, "shop", "orders").await);
    assert!(index_names(&restored_client, "shop", "orders").await.contains(&"sku_1".to_owned()));
    assert_eq!(index_names(&restored_client, "shop", "customers").await, ["_id_", "email_1"]);
    let unique = restored_client
        .database("shop")
        .collection::<Document>("customers")
        .insert_one(doc! { "_id": 3, "email": "a@example.net" })
        .await;
    assert!(unique.is_err(), "the unique index was not restored as unique");
    let sharded = restored_client
        .database("config")
        .collection::<Document>("collections")
        .find_one(doc! { "_id": "shop.orders" })
        .await
        .unwrap()
        .expect("shop.orders is sharded in the target");
    assert_eq!(sharded.get_document("key").unwrap(), &doc! { "k": 1 });

    // The user logs in with its old password, and not with another.
    let target_router = target.router.addr();
    let login =
        |pwd: &str| format!("mongodb://analyst:{pwd}@{target_router}/?authSource=admin&serverSelectionTimeoutMS=5000");
    let analyst = mongodb::Client::with_uri_str(login("old-password")).await.unwrap();
    analyst.database("crm").run_command(doc! { "ping": 1 }).await.expect("the restored user logs in");
    let wrong = mongodb::Client::with_uri_str(login("not-it")).await.unwrap();
    assert!(wrong.database("crm").run_command(doc! { "ping": 1 }).await.is_err());
    let roles = restored_client.database("admin").run_command(doc! { "rolesInfo": "notesReader" }).await.unwrap();
    assert_eq!(roles.get_array("roles").unwrap().len(), 1, "{roles}");

    // Again over the restored data: duplicates without --drop, a clean copy with it.
    let again =
        shoal(&args(&["restore", "--router", &target_router.to_string(), "--db", "shop", &out.display().to_string()]))
            .await;
    assert!(again.contains("already there"), "{again}");
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64);
    restored_client.database("shop").collection::<Document>("orders").insert_one(doc! { "k": 5000 }).await.unwrap();
    shoal(&args(&[
        "restore",
        "--router",
        &target_router.to_string(),
        "--db",
        "shop",
        "--drop",
        &out.display().to_string(),
    ]))
    .await;
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64);
}
