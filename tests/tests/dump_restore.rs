//! `shoal dump` and `shoal restore` from outside: a two-shard cluster with a collection sharded
//! over both shards, an unsharded one with a unique index, a second database, a user-defined role
//! and a user is dumped (balancer paused) into mongodump's layout, and restored into a cluster of
//! one shard: every document, index and shard key is there, the roles (one inheriting the other)
//! are, the user logs in with its old password (and not with another). `--db` dumps one database
//! (with `--gzip` compressed, and restored from that), `--collection` one collection,
//! `--nsInclude` restores only what matches, and a restore over existing data counts duplicates
//! (users and roles: keeps them) without `--drop` and replaces them with it. Secured
//! (`SHOAL_TEST_SECURITY=keyFile`) everything runs as root, and the user's inherited role is
//! checked to grant what it granted and `_shoalRestoreUser` to need `createUser`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use futures::TryStreamExt;
use shoal_tests::process::shoal_bin;
use shoal_tests::security;
use shoal_tests::sharded_cluster::{ClusterOptions, ShardedCluster};

const RUN_TIMEOUT: Duration = Duration::from_secs(180);
const ORDERS: i64 = 1000;

/// Runs `shoal` (as the harness's root user when the suite runs secured).
async fn shoal(args: &[String]) -> String {
    let mut command = tokio::process::Command::new(shoal_bin().unwrap());
    command.args(args);
    if security::enabled() {
        command.args(["-u", security::ROOT_USER, "-p", security::ROOT_PASSWORD]);
    }
    let run = command.kill_on_drop(true).output();
    let out = tokio::time::timeout(RUN_TIMEOUT, run).await.expect("shoal finishes").expect("shoal runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "shoal {args:?} failed:\n{text}");
    text
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| (*a).to_owned()).collect()
}

async fn count(client: &mongodb::Client, db: &str, coll: &str) -> u64 {
    client.database(db).collection::<Document>(coll).count_documents(doc! {}).await.unwrap()
}

/// Every document of `db.coll`, in `_id` order.
async fn documents(client: &mongodb::Client, db: &str, coll: &str) -> Vec<Document> {
    let collection = client.database(db).collection::<Document>(coll);
    collection.find(doc! {}).sort(doc! { "_id": 1 }).await.unwrap().try_collect().await.unwrap()
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
    // Dumped (in name order) before the role it inherits: restore creates that one first.
    admin.run_command(doc! { "createRole": "auditor", "privileges": [], "roles": ["notesReader"] }).await.unwrap();
    admin
        .run_command(doc! { "createUser": "analyst", "pwd": "old-password", "roles": ["auditor", { "role": "read", "db": "crm" }] })
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

    // One database only (gzip-compressed); one collection only.
    let crm_only = dir.path().join("crm-only");
    let crm_arg = crm_only.display().to_string();
    shoal(&args(&["dump", "--router", &router, "--db", "crm", "--gzip", "--out", &crm_arg])).await;
    assert!(
        crm_only.join("crm/leads.bson.gz").is_file()
            && crm_only.join("crm/leads.metadata.json.gz").is_file()
            && !crm_only.join("shop").exists()
            && !crm_only.join("admin").exists()
    );
    let one = dir.path().join("one");
    let one_arg = one.display().to_string();
    shoal(&args(&["dump", "--router", &router, "--db", "shop", "--collection", "customers", "--out", &one_arg])).await;
    assert!(one.join("shop/customers.bson").is_file() && !one.join("shop/orders.bson").exists());

    // Into a cluster of one shard.
    let target = ShardedCluster::start_with(ClusterOptions { shards: 1, ..ClusterOptions::default() })
        .await
        .expect("target cluster");
    let restored_client = target.client().await.unwrap();
    let target_router = target.router.addr().to_string();
    let restored = shoal(&args(&["restore", "--router", &target_router, &out.display().to_string()])).await;
    // Secured, root is in the dump and already in the target.
    assert!(restored.contains("roles: 2, users: 1"), "{restored}");
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64);
    assert_eq!(count(&restored_client, "shop", "customers").await, 2);
    assert_eq!(count(&restored_client, "crm", "leads").await, 1);
    for (db, coll) in [("shop", "orders"), ("shop", "customers"), ("crm", "leads")] {
        let (before, after) = (documents(&client, db, coll).await, documents(&restored_client, db, coll).await);
        assert!(before == after, "{db}.{coll}: the restored documents differ from the dumped ones");
    }
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

    // The user logs in with its old password, and not with another; its roles came along.
    let logs_in = |pwd: &'static str| {
        let uri = format!("mongodb://analyst:{pwd}@{target_router}/?authSource=admin&serverSelectionTimeoutMS=5000");
        async move {
            let analyst = mongodb::Client::with_uri_str(uri).await.unwrap();
            analyst.database("crm").run_command(doc! { "ping": 1 }).await.is_ok()
        }
    };
    assert!(logs_in("old-password").await, "the restored user does not log in");
    assert!(!logs_in("not-it").await);
    let roles = restored_client.database("admin").run_command(doc! { "rolesInfo": "auditor" }).await.unwrap();
    let auditor = roles.get_array("roles").unwrap()[0].as_document().unwrap().clone();
    assert_eq!(auditor.get_array("roles").unwrap().len(), 1, "auditor inherits notesReader: {auditor}");
    if security::enabled() {
        let uri =
            format!("mongodb://analyst:old-password@{target_router}/?authSource=admin&serverSelectionTimeoutMS=5000");
        let analyst = mongodb::Client::with_uri_str(uri).await.unwrap();
        let mine = analyst.database("shop").collection::<Document>("customers");
        assert_eq!(mine.count_documents(doc! {}).await.expect("find through the inherited role"), 2);
        assert!(mine.insert_one(doc! { "_id": 9 }).await.is_err(), "notesReader only reads");
        let restore_self = doc! { "_shoalRestoreUser": "mallory", "roles": ["root"], "credentials": {} };
        let refused = analyst.database("admin").run_command(restore_self).await.expect_err("needs createUser");
        assert_eq!(shoal_tests::expect::server_code(&refused), Some(13), "{refused}");
    }

    // Users and roles again: without --drop they stay as they are, with it they are the dumped ones.
    let admin_target = restored_client.database("admin");
    admin_target.run_command(doc! { "updateUser": "analyst", "pwd": "changed" }).await.unwrap();
    let kept =
        shoal(&args(&["restore", "--router", &target_router, "--db", "admin", &out.display().to_string()])).await;
    assert!(kept.contains("users: 0 (") && kept.contains("already there"), "{kept}");
    assert!(logs_in("changed").await && !logs_in("old-password").await);
    let dropped =
        shoal(&args(&["restore", "--router", &target_router, "--db", "admin", "--drop", &out.display().to_string()]))
            .await;
    assert!(dropped.contains("roles: 2, users: "), "{dropped}");
    assert!(logs_in("old-password").await && !logs_in("changed").await, "--drop gave back the dumped password");

    // Again over the restored data: duplicates without --drop, a clean copy with it.
    let again =
        shoal(&args(&["restore", "--router", &target_router, "--db", "shop", &out.display().to_string()])).await;
    assert!(again.contains("already there"), "{again}");
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64);
    restored_client.database("shop").collection::<Document>("orders").insert_one(doc! { "k": 5000 }).await.unwrap();
    shoal(&args(&["restore", "--router", &target_router, "--db", "shop", "--drop", &out.display().to_string()])).await;
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64);

    // The gzip-compressed dump of crm over a changed crm.leads.
    restored_client.database("crm").collection::<Document>("leads").insert_one(doc! { "_id": "l2" }).await.unwrap();
    let gzipped = shoal(&args(&["restore", "--router", &target_router, "--drop", &crm_arg])).await;
    assert!(gzipped.contains("crm.leads: 1 document(s) restored"), "{gzipped}");
    assert_eq!(count(&restored_client, "crm", "leads").await, 1);

    // --nsInclude: only the matching collection is dropped and restored.
    for coll in ["orders", "customers"] {
        restored_client.database("shop").collection::<Document>(coll).insert_one(doc! { "k": 6000 }).await.unwrap();
    }
    let only = shoal(&args(&[
        "restore",
        "--router",
        &target_router,
        "--nsInclude",
        "shop.cust*",
        "--drop",
        &out.display().to_string(),
    ]))
    .await;
    assert!(!only.contains("shop.orders") && !only.contains("users:"), "{only}");
    assert_eq!(count(&restored_client, "shop", "customers").await, 2);
    assert_eq!(count(&restored_client, "shop", "orders").await, ORDERS as u64 + 1);
}
