//! Growing and shrinking a shard's replica group through the router with MongoDB's commands
//! (`replSetGetConfig` / `replSetReconfig` with `shard`), under a w:majority writer that checks
//! every acknowledged write: a fourth member joins as `newlyAdded`, initial-syncs, and only then
//! votes; a secondary is removed (and reports REMOVED); then the primary is killed and the group
//! as reconfigured elects a new one. Changes MongoDB refuses are refused with its codes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::Database;
use shoal_tests::replica_cluster::{ReplicaCluster, SHARD};
use shoal_tests::writer::{Writer, check};

const WAIT: Duration = Duration::from_secs(120);
const SEED_DOCS: i64 = 3000;

async fn get_config(admin: &Database) -> Document {
    let reply = admin.run_command(doc! { "replSetGetConfig": 1, "shard": SHARD }).await.expect("replSetGetConfig");
    reply.get_document("config").expect("config").clone()
}

fn hosts(config: &Document) -> Vec<(String, bool)> {
    config
        .get_array("members")
        .expect("members")
        .iter()
        .filter_map(Bson::as_document)
        .map(|m| (m.get_str("host").expect("host").to_owned(), m.get_bool("newlyAdded").unwrap_or(false)))
        .collect()
}

fn code_of(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

/// `replSetReconfig` to exactly `members`, retrying while the previous change is still reaching
/// the primary (ConfigurationInProgress, 109).
async fn reconfig(admin: &Database, members: &[String]) -> Result<Document, mongodb::error::Error> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let members: Vec<Document> =
            members.iter().enumerate().map(|(i, h)| doc! { "_id": i as i32, "host": h }).collect();
        let command = doc! { "replSetReconfig": { "_id": SHARD, "members": members }, "shard": SHARD };
        match admin.run_command(command).await {
            Err(e) if code_of(&e) == Some(109) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            outcome => return outcome,
        }
    }
}

async fn wait_voting(admin: &Database, host: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let config = get_config(admin).await;
        if hosts(&config).iter().any(|(h, newly)| h == host && !newly) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{host} never became a voting member: {config}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_is_added_under_load_and_another_removed_without_losing_a_write() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.unwrap();
    let admin = client.database("admin");
    let seed = client.database("app").collection::<Document>("seed");
    let docs: Vec<Document> = (0..SEED_DOCS).map(|i| doc! { "_id": i, "pad": "x".repeat(200) }).collect();
    seed.insert_many(docs).await.expect("seed");
    let writer = Writer::start(client.clone(), "app", "acked");

    let before = get_config(&admin).await;
    assert_eq!(before.get_i64("version").unwrap(), 1);
    assert_eq!(before.get_str("_id").unwrap(), SHARD);
    let original: Vec<String> = hosts(&before).into_iter().map(|(h, _)| h).collect();
    assert_eq!(original.len(), 3);

    // Add a fourth member: pending (newlyAdded) until it has initial-synced and caught up.
    let added = cluster.start_member().await.expect("new member starts");
    let added_host = cluster.addr(added);
    let mut grown = original.clone();
    grown.push(added_host.clone());
    reconfig(&admin, &grown).await.expect("replSetReconfig adding a member");
    // At least two heartbeats (it learns the configuration, then reports its sync) separate the
    // change from any promotion; the configuration read right after it shows the member pending.
    let config = get_config(&admin).await;
    assert_eq!(config.get_i64("version").unwrap(), 2, "{config}");
    assert!(hosts(&config).contains(&(added_host.clone(), true)), "not newlyAdded: {config}");
    wait_voting(&admin, &added_host).await;
    cluster.wait_caught_up(added, "app", "seed", SEED_DOCS as u64, WAIT).await.expect("the new member has the data");

    // What MongoDB refuses.
    let refused = |r: Result<Document, mongodb::error::Error>| code_of(&r.expect_err("refused"));
    let mut two_more = grown.clone();
    two_more.extend(["127.0.0.1:1".to_owned(), "127.0.0.1:2".to_owned()]);
    assert_eq!(refused(reconfig(&admin, &two_more).await), Some(103));
    assert_eq!(refused(reconfig(&admin, &grown).await), Some(103));
    let stale = doc! { "replSetReconfig": { "_id": SHARD, "version": 1, "members": [{ "_id": 0, "host": &grown[0] }] }, "shard": SHARD };
    assert_eq!(refused(admin.run_command(stale).await), Some(103));
    let hidden = doc! { "replSetReconfig": { "_id": SHARD, "members": [{ "_id": 0, "host": &grown[0], "hidden": true }] }, "shard": SHARD };
    assert_eq!(refused(admin.run_command(hidden).await), Some(93));
    assert_eq!(refused(admin.run_command(doc! { "replSetGetConfig": 1, "shard": "nope" }).await), Some(70));
    assert_eq!(refused(admin.run_command(doc! { "replSetGetConfig": 1 }).await), Some(20));

    // Remove a secondary of the original three; the primary itself cannot be removed.
    let primary = cluster.wait_primary(WAIT).await.expect("primary");
    let without_primary: Vec<String> = grown.iter().filter(|h| **h != cluster.addr(primary)).cloned().collect();
    assert_eq!(refused(reconfig(&admin, &without_primary).await), Some(103));
    let victim = (0..3).find(|i| *i != primary).expect("a secondary");
    let shrunk: Vec<String> = grown.iter().filter(|h| **h != cluster.addr(victim)).cloned().collect();
    reconfig(&admin, &shrunk).await.expect("replSetReconfig removing a secondary");
    shoal_tests::repl::wait_state(&cluster.addr(victim), "REMOVED", WAIT).await.expect("the removed member says so");
    cluster.kill9(victim);

    // The group as reconfigured (two originals and the new member) survives losing its primary.
    let config = get_config(&admin).await;
    assert_eq!(hosts(&config).len(), 3, "{config}");
    cluster.kill9(primary);
    let next = cluster.wait_new_primary(primary, WAIT).await.expect("a new primary among the reconfigured group");
    assert_ne!(next, victim);

    let written = writer.finish().await;
    assert!(written.other_errors.is_empty(), "unexpected errors: {:?}", written.other_errors);
    assert!(!written.acknowledged.is_empty());
    check(&client, "app", "acked", &written).await.expect("every acknowledged write is there, once");
}
