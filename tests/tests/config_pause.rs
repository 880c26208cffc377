//! A paused config leader (SIGSTOP: the grey failure a kill does not show) must not stall the
//! cluster (grey-failures item 1): its clients give up on it within the config channels' keepalive
//! and move to the new leader, so writes go on while it sleeps. How long writes stall is measured
//! by bench/config_pause.py (docs/benchmarks.md), not asserted here.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_tests::catalog_cluster::CatalogCluster;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_and_catalog_changes_go_on_while_the_config_leader_is_paused() {
    let cluster = CatalogCluster::start().await.expect("cluster");
    let client = cluster.client().await.unwrap();
    let shard = format!("shard0/{}", cluster.shard.addr());
    client.database("admin").run_command(doc! { "addShard": shard }).await.expect("addShard");
    let coll = client.database("app").collection::<Document>("events");
    coll.insert_one(doc! { "_id": 0 }).await.expect("first insert");

    let config = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let mut leader = None;
    for (i, addr) in cluster.config_addrs.iter().enumerate() {
        if config.metrics(addr).await.is_ok_and(|m| m.state == "Leader") {
            leader = Some(i);
        }
    }
    let leader = leader.expect("a config leader");
    cluster.config[leader].pause();
    // Writes through the router, and a catalog change, while the leader sleeps.
    let during = async {
        for i in 1..=20 {
            coll.insert_one(doc! { "_id": i }).await.expect("insert while the leader is paused");
        }
        client
            .database("admin")
            .run_command(doc! { "enableSharding": "paused" })
            .await
            .expect("a catalog write while the old leader is paused");
    };
    let finished = tokio::time::timeout(WAIT, during).await;
    cluster.config[leader].resume();
    finished.expect("the cluster went on without its paused leader");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 21);
}
