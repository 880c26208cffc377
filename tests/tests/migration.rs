//! Chunk migration between two real shards: data moves, the donor's copy is deleted, and a
//! kill -9 (failpoint abort) of the donor or the recipient at each phase ends with exactly one
//! owner in the catalog and exactly the written documents on it.
//!
//! The router forwards data commands to shard0 only (routing by chunk comes with branch
//! `route`), so documents are written to the owning shard and read back over the shards' gRPC
//! service directly, unversioned (orphans included).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use shoal_proto::catalog::Parts;
use std::collections::BTreeSet;
use std::time::Duration;

use bson::{Bson, Document, doc};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{ChunkBound, RoutingTable};
use shoal_proto::shard::CommandRequest;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_tests::sharded_cluster::ShardedCluster;

const NS: &str = "app.items";
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long recovery and range deletion may take to settle after a restart.
const SETTLE_MAX: Duration = Duration::from_secs(90);
const DOCS: i32 = 300;
const SPLIT: i32 = 100;

fn request(body: Document) -> CommandRequest {
    CommandRequest {
        request_id: "migration-test".into(),
        db: "app".into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: true,
        client: None,
        traceparent: String::new(),
    }
}

async fn shard(addr: &str) -> ShardClient<tonic::transport::Channel> {
    shoal_tests::grpc::shard(addr).await.expect("connect to shard").max_decoding_message_size(usize::MAX)
}

/// `k` of every document on the shard (unversioned: orphans included), sorted, with duplicates kept.
async fn keys_on(addr: &str) -> Vec<i32> {
    let mut c = shard(addr).await;
    let req = request(doc! { "find": "items", "filter": {}, "batchSize": 100_000, "singleBatch": true });
    let reply = tokio::time::timeout(RPC_TIMEOUT, c.find(req)).await.expect("in time").expect("rpc").into_inner();
    assert!(reply.error.is_none(), "find failed: {:?}", reply.error);
    let mut keys: Vec<i32> = reply
        .documents
        .iter()
        .map(|b| Document::from_reader(&mut &b[..]).expect("doc").get_i32("k").expect("k"))
        .collect();
    keys.sort_unstable();
    keys
}

async fn insert_on(addr: &str, docs: Vec<Document>) {
    let mut c = shard(addr).await;
    let req = request(doc! { "insert": "items", "documents": docs });
    let reply = tokio::time::timeout(RPC_TIMEOUT, c.insert(req)).await.expect("in time").expect("rpc").into_inner();
    assert!(reply.error.is_none() && reply.write_errors.is_empty(), "insert failed: {reply:?}");
}

async fn table(catalog: &ConfigClient) -> RoutingTable {
    match catalog.routing_table(NS, None, true).await.expect("routing table").0 {
        RoutingAnswer::Full(Some(t)) => t,
        other => panic!("expected a routing table, got {other:?}"),
    }
}

/// The owner of each key 0..DOCS per the catalog.
fn owners(t: &RoutingTable, probe: &dyn Fn(i32) -> ChunkBound) -> Vec<String> {
    (0..DOCS)
        .map(|k| {
            let key = probe(k);
            t.chunks.iter().find(|c| c.min <= key && key < c.max).expect("covering chunk").shard.clone()
        })
        .collect()
}

fn bound(k: i32) -> ChunkBound {
    let fields = [shoal_query::shard_key::KeyField { name: "k".into(), hashed: false }];
    ChunkBound::Key(
        shoal_query::shard_key::of_document(&fields, &doc! {"k": k}, shoal_query::shard_key::Missing::AsNull)
            .expect("key"),
    )
}

/// Exactly one copy of every key, on the shard the catalog names, and nothing anywhere else.
async fn settled(cluster: &ShardedCluster, catalog: &ConfigClient) -> Result<(), String> {
    let t = table(catalog).await;
    let owners = owners(&t, &bound);
    let mut seen = BTreeSet::new();
    for i in 0..2 {
        let name = ShardedCluster::shard_name(i);
        let keys = keys_on(&cluster.shard_addr(i)).await;
        for k in keys {
            if owners[k as usize] != name {
                return Err(format!("{name} still holds k={k} owned by {}", owners[k as usize]));
            }
            if !seen.insert(k) {
                return Err(format!("k={k} twice on {name}"));
            }
        }
    }
    let missing: Vec<i32> = (0..DOCS).filter(|k| !seen.contains(k)).collect();
    if !missing.is_empty() {
        return Err(format!("lost {} documents, e.g. k={:?}", missing.len(), &missing[..missing.len().min(5)]));
    }
    Ok(())
}

/// Waits (bounded) until [`settled`]; panics with the last reason and the logs otherwise.
async fn wait_settled(cluster: &ShardedCluster, catalog: &ConfigClient, what: &str) {
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        let state = settled(cluster, catalog).await;
        match state {
            Ok(()) => return,
            Err(why) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not settled: {why}\n{}", cluster.log_tails(40))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A sharded, split collection with DOCS documents on the shard owning both chunks.
async fn setup() -> (ShardedCluster, ConfigClient, mongodb::Client) {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "shardCollection": NS, "key": {"k": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": NS, "middle": {"k": SPLIT} }).await.expect("split");
    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let t = table(&catalog).await;
    let owner = &t.chunks[0].shard;
    assert!(t.chunks.iter().all(|c| &c.shard == owner), "both chunks start on one shard");
    let i = if owner == "shard0" { 0 } else { 1 };
    let docs = (0..DOCS).map(|k| doc! {"_id": k, "k": k, "pad": "x".repeat(100)}).collect();
    insert_on(&cluster.shard_addr(i), docs).await;
    (cluster, catalog, client)
}

/// The current owner of the upper chunk and the other shard, as indexes.
async fn upper_owner(catalog: &ConfigClient) -> (usize, usize) {
    let t = table(catalog).await;
    let upper = t.chunks.iter().find(|c| c.max == ChunkBound::Max).expect("upper chunk");
    if upper.shard == "shard0" { (0, 1) } else { (1, 0) }
}

async fn move_upper(client: &mongodb::Client, to: usize, wait_for_delete: bool) -> mongodb::error::Result<Document> {
    let to = ShardedCluster::shard_name(to);
    client
        .database("admin")
        .run_command(doc! { "moveChunk": NS, "find": {"k": SPLIT + 1}, "to": to, "_waitForDelete": wait_for_delete })
        .await
}

/// [`move_upper`], retried (bounded) while a shard answers ConflictingOperationInProgress (117):
/// it is still settling a migration an earlier crash interrupted.
async fn move_retrying(client: &mongodb::Client, to: usize) -> mongodb::error::Result<Document> {
    let mut attempts = 0;
    loop {
        let outcome = move_upper(client, to, false).await;
        let busy =
            matches!(&outcome, Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 117));
        attempts += 1;
        if !busy || attempts >= 300 {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_chunk_lands_whole_on_the_recipient_and_leaves_the_donor() {
    let (cluster, catalog, client) = setup().await;
    let (donor, recipient) = upper_owner(&catalog).await;

    let reply = move_upper(&client, recipient, true).await.expect("moveChunk");
    assert_eq!(reply.get_f64("ok").ok().or(reply.get_i32("ok").ok().map(f64::from)), Some(1.0), "{reply}");
    let t = table(&catalog).await;
    let upper = t.chunks.iter().find(|c| c.max == ChunkBound::Max).expect("upper chunk");
    assert_eq!(upper.shard, ShardedCluster::shard_name(recipient), "the catalog names the recipient");
    // With _waitForDelete the donor's copy is gone when the command answers.
    assert_eq!(keys_on(&cluster.shard_addr(recipient)).await, (SPLIT..DOCS).collect::<Vec<_>>());
    assert_eq!(keys_on(&cluster.shard_addr(donor)).await, (0..SPLIT).collect::<Vec<_>>());

    // The phases are in the changelog.
    let (cat, _) = catalog.view(Parts::ALL, true).await.expect("catalog");
    let whats: Vec<&str> = cat.changelog().iter().filter(|e| e.ns == NS).map(|e| e.what.as_str()).collect();
    for what in ["moveChunk.start", "moveChunk.commit", "moveChunk.from"] {
        assert!(whats.contains(&what), "{what} missing from {whats:?}");
    }
    let from = cat.changelog().iter().rev().find(|e| e.what == "moveChunk.from").expect("moveChunk.from");
    assert!(from.details.contains_key("criticalSectionMillis"), "{from:?}");

    // And back, without waiting for the deletion: it happens in the background.
    let reply = client
        .database("admin")
        .run_command(doc! { "moveRange": NS, "min": {"k": SPLIT}, "toShard": ShardedCluster::shard_name(donor) })
        .await
        .expect("moveRange back");
    assert!(reply.get("ok").is_some(), "{reply}");
    wait_settled(&cluster, &catalog, "after moving back").await;
    assert_eq!(keys_on(&cluster.shard_addr(donor)).await, (0..DOCS).collect::<Vec<_>>());

    // Same shard: a no-op; unknown shard: ShardNotFound.
    move_upper(&client, donor, false).await.expect("move to its own shard");
    let err = client
        .database("admin")
        .run_command(doc! { "moveChunk": NS, "find": {"k": 1}, "to": "nope" })
        .await
        .expect_err("unknown shard");
    assert!(matches!(*err.kind, mongodb::error::ErrorKind::Command(ref e) if e.code == 70), "{err}");
}

/// Crashes `victim` (donor or recipient) at `failpoint` during a move of the upper chunk,
/// restarts it on its data, and checks ownership and data settle consistently.
async fn crash_at(
    cluster: &mut ShardedCluster,
    catalog: &ConfigClient,
    client: &mongodb::Client,
    failpoint: &str,
    donor_side: bool,
) {
    let (donor, recipient) = upper_owner(catalog).await;
    let victim = if donor_side { donor } else { recipient };
    cluster.kill9_shard(victim);
    cluster.start_shard(victim, &format!("{failpoint}=exit")).await.expect("restart with the failpoint");
    // The answer depends on the phase (an error, or ok if the commit got through); the state
    // afterwards is what counts.
    let outcome = move_retrying(client, recipient).await;
    assert!(
        cluster.wait_shard_exit(victim, Duration::from_secs(60)).await,
        "{failpoint}: the failpoint was never reached (outcome {outcome:?})\n{}",
        cluster.log_tails(40)
    );
    cluster.start_shard(victim, "").await.expect("restart on the same data");
    wait_settled(cluster, catalog, failpoint).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_donor_crash_at_any_phase_leaves_one_owner_and_every_document() {
    let (mut cluster, catalog, client) = setup().await;
    for failpoint in [
        "migration.after_start",
        "migration.after_clone",
        "migration.in_catch_up",
        "migration.in_critical_section",
        "migration.after_commit",
    ] {
        crash_at(&mut cluster, &catalog, &client, failpoint, true).await;
    }
    // The shards still migrate afterwards.
    let (_, recipient) = upper_owner(&catalog).await;
    move_retrying(&client, recipient).await.expect("a clean move after the crashes");
    wait_settled(&cluster, &catalog, "clean move").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipient_crash_at_any_phase_leaves_one_owner_and_every_document() {
    let (mut cluster, catalog, client) = setup().await;
    for failpoint in
        ["migration.recipient_after_start", "migration.recipient_after_batch", "migration.recipient_before_commit"]
    {
        crash_at(&mut cluster, &catalog, &client, failpoint, false).await;
    }
    let (_, recipient) = upper_owner(&catalog).await;
    move_retrying(&client, recipient).await.expect("a clean move after the crashes");
    wait_settled(&cluster, &catalog, "clean move").await;
    let _ = Bson::Null;
}

/// Occurrences of `needle` in shard `i`'s log.
fn log_count(cluster: &ShardedCluster, i: usize, needle: &str) -> usize {
    let path = cluster.shard(i).expect("shard running").log_path().to_path_buf();
    std::fs::read_to_string(path).unwrap_or_default().matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_killed_mid_migration_does_not_stop_it() {
    const PAUSED: &str = "failpoint reached: pausing";
    let (mut cluster, catalog, _client) = setup().await;
    for phase in
        ["migration.after_start", "migration.after_clone", "migration.in_catch_up", "migration.in_critical_section"]
    {
        let (donor, recipient) = upper_owner(&catalog).await;
        // The donor pauses at `phase` so the router that asked for the move dies mid-phase.
        cluster.kill9_shard(donor);
        cluster.start_shard(donor, &format!("{phase}=delay:1500")).await.expect("restart the donor with a pause");
        let before = log_count(&cluster, donor, PAUSED);
        let router = cluster.start_router("router-doomed").await.expect("second router");
        let doomed = shoal_tests::sharded_cluster::client_of(&router).await.expect("client of the doomed router");
        let mover = tokio::spawn(async move { move_retrying(&doomed, recipient).await });
        let deadline = tokio::time::Instant::now() + SETTLE_MAX;
        while log_count(&cluster, donor, PAUSED) == before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{phase}: the donor never paused\n{}",
                cluster.log_tails(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        router.kill9();
        let _ = mover.await;
        // The donor carries the migration through alone: the recipient ends up the owner.
        let deadline = tokio::time::Instant::now() + SETTLE_MAX;
        while upper_owner(&catalog).await.0 != recipient {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{phase}: the move stopped with its router\n{}",
                cluster.log_tails(40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        wait_settled(&cluster, &catalog, phase).await;
    }
}
