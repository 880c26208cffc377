//! Growing and shrinking the config servers' Raft group with `shoal reconfig` while the cluster
//! serves: two new servers join (caught up as learners, then voters), two of the original three —
//! the leader possibly among them — are removed and killed, and the router and shard, whose
//! `--config` lists still name the old servers, keep serving reads, writes and catalog changes
//! through the one original server left and its leader hints.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use shoal_tests::catalog_cluster::CatalogCluster;
use shoal_tests::ports::free_ports;
use shoal_tests::process::{Process, ProcessSpec, shoal_bin};

const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// `shoal reconfig` through `config`, with the suite's cluster key when it runs secured (the
/// harness writes it into the cluster's dir).
async fn reconfig(cluster: &CatalogCluster, config: &[String], change: &[&str]) -> (bool, String) {
    let mut command = tokio::process::Command::new(shoal_bin().unwrap());
    command.args(["reconfig", "--config", &config.join(",")]).args(change);
    if shoal_tests::security::enabled() {
        command.arg("--keyFile").arg(cluster.dir().join("cluster.key"));
    }
    let run = command.kill_on_drop(true).output();
    let out = tokio::time::timeout(RUN_TIMEOUT, run).await.expect("shoal reconfig finishes").expect("runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn config_servers_are_replaced_one_voter_at_a_time_while_the_cluster_serves() {
    let cluster = CatalogCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.unwrap();
    let shard = format!("shard0/{}", cluster.shard.addr());
    client.database("admin").run_command(doc! { "addShard": shard }).await.expect("addShard");
    let events = client.database("app").collection::<Document>("events");
    events.insert_one(doc! { "_id": 0 }).await.expect("insert before any change");
    let original = cluster.config_addrs.clone();

    let mut added = Vec::new();
    for (id, port) in [4u64, 5].into_iter().zip(free_ports(2).unwrap()) {
        let addr = format!("127.0.0.1:{port}");
        let args = vec![
            "configsvr".to_owned(),
            "--id".to_owned(),
            id.to_string(),
            "--listen".to_owned(),
            addr.clone(),
            "--data-dir".to_owned(),
            cluster.dir().join(format!("cfg{id}")).display().to_string(),
        ];
        let log_path = cluster.dir().join(format!("cfg{id}.log"));
        let spec = ProcessSpec { name: format!("cfg{id}"), role: "configsvr".into(), args, log_path };
        added.push(Process::start(spec).await.expect("new config server starts"));
        let (ok, out) = reconfig(&cluster, &original, &["--add-config-server", &format!("{id}={addr}")]).await;
        assert!(ok, "adding {id}: {out}");
        assert!(out.contains(&format!("{id}  {addr}")) && out.contains("voter"), "{out}");
    }
    let (ok, out) = reconfig(&cluster, &original, &["--add-config-server", &format!("3={}", original[2])]).await;
    assert!(!ok && out.contains("already in the group"), "{out}");

    // Remove the leader and one more of the original three; keep the third.
    let (ok, out) = reconfig(&cluster, &original, &[]).await;
    assert!(ok, "{out}");
    let leader: usize = out
        .split("(leader ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no leader in {out}"));
    let kept = if leader == 3 { 2 } else { 3 };
    // The leader first when it is one of the original three (it almost always is).
    let mut removed: Vec<usize> = if leader <= 3 && leader != kept { vec![leader] } else { Vec::new() };
    for id in 1..=3 {
        if id != kept && !removed.contains(&id) && removed.len() < 2 {
            removed.push(id);
        }
    }
    assert_eq!(removed.len(), 2, "{removed:?}");
    for id in &removed {
        let (ok, out) = reconfig(&cluster, &original, &["--remove-config-server", &id.to_string()]).await;
        assert!(ok, "removing {id}: {out}");
        cluster.config[id - 1].kill9();
    }
    let (ok, out) = reconfig(&cluster, &original, &["--remove-config-server", &removed[0].to_string()]).await;
    assert!(!ok && out.contains("not a voter"), "{out}");
    let (ok, out) = reconfig(&cluster, &original[kept - 1..kept], &[]).await;
    assert!(ok, "{out}");
    let voters: Vec<&str> = out.lines().filter(|l| l.contains("voter")).collect();
    assert_eq!(voters.len(), 3, "{out}");
    for id in [kept.to_string(), "4".to_owned(), "5".to_owned()] {
        assert!(voters.iter().any(|l| l.trim_start().starts_with(&id)), "{id} not a voter: {out}");
    }

    // Catalog writes (a new database and a sharded collection) and data both still work.
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "grown" }).await.expect("enableSharding after the change");
    admin
        .run_command(doc! { "shardCollection": "grown.items", "key": { "k": 1 } })
        .await
        .expect("shardCollection after the change");
    let items = client.database("grown").collection::<Document>("items");
    items.insert_one(doc! { "k": 7, "v": "after" }).await.expect("insert into the new collection");
    assert_eq!(items.find_one(doc! { "k": 7 }).await.unwrap().expect("read back").get_str("v").unwrap(), "after");
    events.insert_one(doc! { "_id": 1 }).await.expect("insert after the change");
    assert_eq!(events.count_documents(doc! {}).await.unwrap(), 2);
    drop(added);
}
