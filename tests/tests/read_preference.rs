//! Read preferences and read concerns through the router on a shard of three members (real
//! processes, the official driver).
//!
//! What must hold: a read with read preference `secondary` answers from a secondary with what the
//! primary acknowledged to all members (shown by pausing the primary first: only a secondary can
//! answer), cursors continue on the member that opened them, `secondaryPreferred` falls back to
//! the primary when every secondary is paused, and `secondary` then fails with
//! FailedToSatisfyReadPreference; bad read preferences get MongoDB's codes; a `majority` read
//! never returns a write that is not majority committed — the write acknowledged with `w: 1` by a
//! primary whose secondaries are down, which rolls back once that primary is partitioned and
//! replaced — while a `local` read on that primary sees it; a secondary asked with a shard version
//! loads the collection's metadata itself, hides orphans and answers StaleConfig like a primary.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::options::{
    Acknowledgment, CollectionOptions, ReadConcern, ReadPreference, ReadPreferenceOptions, SelectionCriteria,
    WriteConcern,
};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{ChunkBound, Command, RoutingTable};
use shoal_proto::shard::{CommandRequest, ShardVersion};
use shoal_tests::replica_cluster::{ReplicaCluster, SHARD};
use shoal_tests::wire::WireConn;

/// Failover, catch-up and rollback waits (generous: a loaded 2-core CI machine).
const WAIT: Duration = Duration::from_secs(60);
/// One read attempt from the test; a read sent to a member the router did not yet see paused
/// hangs, so the test gives up on it and tries again.
const ATTEMPT: Duration = Duration::from_secs(8);
/// Documents written before reading.
const DOCS: i64 = 100;

fn coll_with(
    client: &mongodb::Client,
    name: &str,
    pref: Option<ReadPreference>,
    rc: Option<ReadConcern>,
    w: Acknowledgment,
) -> Collection<Document> {
    let options = CollectionOptions::builder()
        .selection_criteria(pref.map(SelectionCriteria::ReadPreference))
        .read_concern(rc)
        .write_concern(WriteConcern::builder().w(w).build())
        .build();
    client.database("rs").collection_with_options(name, options)
}

fn secondary() -> ReadPreference {
    ReadPreference::Secondary { options: None }
}

/// Every `_id` the read returns, sorted, read in batches of 7 (so getMores follow the cursor).
async fn ids(coll: &Collection<Document>) -> mongodb::error::Result<Vec<i64>> {
    let docs: Vec<Document> = coll.find(doc! {}).batch_size(7).await?.try_collect().await?;
    let mut ids: Vec<i64> = docs.iter().filter_map(|d| d.get_i64("_id").ok()).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Retries `ids` until it answers (each attempt bounded by [`ATTEMPT`]), for up to [`WAIT`].
async fn ids_eventually(coll: &Collection<Document>) -> Vec<i64> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout(ATTEMPT, ids(coll)).await {
            Ok(Ok(ids)) => return ids,
            Ok(Err(e)) if tokio::time::Instant::now() < deadline => eprintln!("read failed, retrying: {e}"),
            Err(_) if tokio::time::Instant::now() < deadline => eprintln!("read hung, retrying"),
            other => panic!("no answer within {WAIT:?}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls a majority read until it returns `want`; no answer on the way may hold `never`.
async fn majority_ids_until(cluster: &ReplicaCluster, coll: &Collection<Document>, want: &[i64], never: i64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = ids_eventually(coll).await;
        if got.contains(&never) {
            for i in 0..cluster.size() {
                let status = shoal_tests::repl::member_status(&cluster.addr(i)).await;
                eprintln!("member {i}: {:?} {status:?}", cluster.ids_on(i, "rs", "majority").await);
            }
            panic!("a majority read returned {never}, a write that rolled back: {got:?}\n{}", cluster.log_tails(60));
        }
        if got == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "majority reads still answer {got:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn code_of(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secondary_reads_see_what_the_primary_has_and_preferences_fall_back() {
    let cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");

    // Bad read preferences are refused with MongoDB's codes before anything is read.
    let mut wire = WireConn::connect_client(cluster.router.addr()).await.expect("wire");
    for (pref, code) in [
        (doc! { "mode": "secondary", "maxStalenessSeconds": 30 }, 160),
        (doc! { "mode": "primary", "maxStalenessSeconds": 120 }, 2),
        (doc! { "mode": "sideways" }, 2),
    ] {
        let reply =
            wire.command(&doc! { "find": "reads", "$db": "rs", "$readPreference": pref.clone() }).await.expect("reply");
        assert_eq!(reply.get_i32("code").ok(), Some(code), "{pref} answered {reply}");
    }

    let all = coll_with(&client, "reads", None, None, Acknowledgment::Nodes(3));
    let docs: Vec<Document> = (0..DOCS).map(|i| doc! { "_id": i, "v": i * 2 }).collect();
    all.insert_many(docs).await.expect("insert acknowledged by every member");
    let expected: Vec<i64> = (0..DOCS).collect();

    // Only a secondary can answer while the primary is paused.
    let primary = cluster.wait_primary(WAIT).await.expect("a primary");
    cluster.pause(primary);
    let from_secondary = coll_with(&client, "reads", Some(secondary()), None, Acknowledgment::Nodes(1));
    assert_eq!(ids_eventually(&from_secondary).await, expected);
    let n = tokio::time::timeout(WAIT, from_secondary.count_documents(doc! { "v": { "$gte": 100 } }))
        .await
        .expect("count answers")
        .expect("count");
    assert_eq!(n, 50);
    let fresh = ReadPreference::Nearest {
        options: Some(ReadPreferenceOptions::builder().max_staleness(Duration::from_secs(90)).build()),
    };
    let nearest = coll_with(&client, "reads", Some(fresh), None, Acknowledgment::Nodes(1));
    assert_eq!(ids_eventually(&nearest).await, expected);
    cluster.resume(primary);
    for i in 0..cluster.size() {
        cluster.wait_settled(i, WAIT).await.expect("settled");
    }
    // The resumed member may still call itself PRIMARY for a moment after a failover it slept
    // through: wait until every member reports the same term and exactly one is PRIMARY in it, so
    // the members paused next are really the secondaries.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (mut primaries, mut terms) = (0, std::collections::BTreeSet::new());
        for i in 0..cluster.size() {
            let status = shoal_tests::repl::member_status(&cluster.addr(i)).await.expect("member status");
            primaries += usize::from(status.get_str("stateStr").is_ok_and(|s| s == "PRIMARY"));
            terms.insert(status.get_i64("term").unwrap_or(-1));
        }
        if primaries == 1 && terms.len() == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{primaries} PRIMARY members, terms {terms:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every secondary paused: secondaryPreferred falls back to the primary, secondary fails.
    let primary = cluster.wait_primary(WAIT).await.expect("a primary");
    let secondaries: Vec<usize> = (0..cluster.size()).filter(|i| *i != primary).collect();
    for s in &secondaries {
        cluster.pause(*s);
    }
    let preferred = coll_with(
        &client,
        "reads",
        Some(ReadPreference::SecondaryPreferred { options: None }),
        None,
        Acknowledgment::Nodes(1),
    );
    assert_eq!(ids_eventually(&preferred).await, expected);
    // maxTimeMS bounds the router's wait for a secondary that fits.
    let refused = tokio::time::timeout(WAIT, from_secondary.find(doc! {}).max_time(Duration::from_secs(2)))
        .await
        .expect("answers within the wait");
    let e = refused.map(|_| ()).expect_err("no secondary can serve");
    assert_eq!(code_of(&e), Some(133), "{e}");
    for s in &secondaries {
        cluster.resume(*s);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn majority_reads_never_return_a_write_that_rolls_back() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let majority_w = coll_with(&client, "majority", None, None, Acknowledgment::Majority);
    majority_w.insert_one(doc! { "_id": 1i64 }).await.expect("majority insert");
    let majority_read = |rc: ReadConcern| coll_with(&client, "majority", None, Some(rc), Acknowledgment::Nodes(1));

    // Linearizable reads run on the primary, and only with read preference primary.
    assert_eq!(ids(&majority_read(ReadConcern::linearizable())).await.expect("linearizable"), vec![1]);
    let off_primary =
        coll_with(&client, "majority", Some(secondary()), Some(ReadConcern::linearizable()), Acknowledgment::Nodes(1));
    let e = ids(&off_primary).await.expect_err("linearizable needs primary");
    assert_eq!(code_of(&e), Some(2), "{e}");

    // A write only the primary has: local reads see it, majority reads do not answer with it. The
    // secondaries are killed, not paused: a paused process still receives the stream into its
    // socket buffer and would apply the write when resumed.
    let old = cluster.wait_primary(WAIT).await.expect("a primary");
    let secondaries: Vec<usize> = (0..cluster.size()).filter(|i| *i != old).collect();
    for s in &secondaries {
        cluster.kill9(*s);
    }
    let w1 = coll_with(&client, "majority", None, None, Acknowledgment::Nodes(1));
    w1.insert_one(doc! { "_id": 2i64 }).await.expect("w:1 insert on the primary alone");
    assert_eq!(ids(&majority_read(ReadConcern::local())).await.expect("local read"), vec![1, 2]);
    let bounded = CollectionOptions::builder().read_concern(ReadConcern::majority()).build();
    let majority = client.database("rs").collection_with_options::<Document>("majority", bounded);
    let e = majority
        .find(doc! {})
        .max_time(Duration::from_millis(1500))
        .await
        .map(|_| ())
        .expect_err("a majority read must not return the uncommitted write");
    assert_eq!(code_of(&e), Some(50), "{e}");
    let e = majority
        .count_documents(doc! {})
        .max_time(Duration::from_millis(1500))
        .await
        .expect_err("a majority count must not count the uncommitted write");
    assert_eq!(code_of(&e), Some(50), "{e}");

    // The primary is partitioned and replaced; the write rolls back when it returns.
    cluster.pause(old);
    for s in &secondaries {
        cluster.restart(*s).await.expect("secondary restarts");
    }
    let new = cluster.wait_new_primary(old, WAIT).await.expect("a new primary");
    assert_ne!(new, old);
    majority_ids_until(&cluster, &majority_read(ReadConcern::majority()), &[1], 2).await;
    cluster.resume(old);
    cluster.wait_caught_up(old, "rs", "majority", 1, WAIT).await.expect("the old primary rolls back and catches up");
    let rolled_back: Vec<i64> =
        cluster.rollback_documents(old).expect("rollback files").iter().filter_map(|d| d.get_i64("_id").ok()).collect();
    assert_eq!(rolled_back, vec![2], "the w:1 write was rolled back and saved");
    majority_w.insert_one(doc! { "_id": 3i64 }).await.expect("majority insert after failover");
    majority_ids_until(&cluster, &majority_read(ReadConcern::majority()), &[1, 3], 2).await;
    let from_secondary =
        coll_with(&client, "majority", Some(secondary()), Some(ReadConcern::majority()), Acknowledgment::Nodes(1));
    majority_ids_until(&cluster, &from_secondary, &[1, 3], 2).await;
}

/// `a` of every document a versioned find on the member at `addr` returns (secondary ok), or the
/// error code.
async fn versioned_find_on(addr: &str, version: &ShardVersion) -> Result<Vec<i32>, i32> {
    let body = doc! { "find": "users", "sort": {"a": 1}, "batchSize": 1000 };
    let req = CommandRequest {
        request_id: "read-preference-test".into(),
        db: "app".into(),
        body: body.to_vec().expect("encode").into(),
        shard_version: Some(version.clone()),
        secondary_ok: true,
        ..Default::default()
    };
    let mut client = shoal_tests::grpc::shard(addr).await.expect("connect");
    let reply = tokio::time::timeout(ATTEMPT, client.find(req)).await.expect("in time").expect("rpc").into_inner();
    if let Some(e) = reply.error {
        return Err(e.code);
    }
    Ok(reply
        .documents
        .iter()
        .map(|b| Document::from_reader(&mut &b[..]).expect("doc").get_i32("a").expect("a"))
        .collect())
}

async fn routing_table(catalog: &ConfigClient, ns: &str) -> RoutingTable {
    match catalog.routing_table(ns, None, true).await.expect("routing table").0 {
        RoutingAnswer::Full(Some(t)) => t,
        other => panic!("expected a routing table, got {other:?}"),
    }
}

fn wire_version(t: &RoutingTable, shard: &str) -> ShardVersion {
    let v = t.shard_version(shard);
    ShardVersion {
        epoch: t.epoch.0.to_vec().into(),
        timestamp_secs: t.timestamp.secs,
        timestamp_inc: t.timestamp.inc,
        major: v.major,
        minor: v.minor,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secondaries_hide_orphans_and_answer_stale_config_like_the_primary() {
    let cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "shardCollection": "app.users", "key": {"a": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": "app.users", "middle": {"a": 10} }).await.expect("split");
    let all = WriteConcern::builder().w(Acknowledgment::Nodes(3)).build();
    let users = client
        .database("app")
        .collection_with_options::<Document>("users", CollectionOptions::builder().write_concern(all).build());
    let docs: Vec<Document> = (0..20).map(|i| doc! { "_id": i, "a": i }).collect();
    users.insert_many(docs).await.expect("insert on every member");

    // [10, MaxKey) moves to a shard with no process (committed in the catalog directly): its
    // documents stay on every member of rs0 as orphans.
    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let before = routing_table(&catalog, "app.users").await;
    let old = wire_version(&before, SHARD);
    let command =
        Command::AddShard { shard: "shard1".into(), replica_set: "shard1".into(), members: vec!["127.0.0.1:9".into()] };
    catalog.write(&command).await.expect("addShard").outcome.expect("shard1 added");
    let moving = before.chunks.iter().find(|c| c.max == ChunkBound::Max).expect("upper chunk");
    let command = Command::CommitMigration {
        ns: "app.users".into(),
        epoch: before.epoch,
        min: moving.min.clone(),
        max: ChunkBound::Max,
        from: SHARD.into(),
        to: "shard1".into(),
        expected_version: moving.version,
        fencing: None,
    };
    catalog.write(&command).await.expect("commit").outcome.expect("migration committed");
    let new = wire_version(&routing_table(&catalog, "app.users").await, SHARD);

    let primary = cluster.wait_primary(WAIT).await.expect("a primary");
    for i in (0..cluster.size()).filter(|i| *i != primary) {
        let addr = cluster.addr(i);
        // The secondary loads the new metadata from the config service and hides the orphans.
        assert_eq!(versioned_find_on(&addr, &new).await, Ok((0..10).collect()), "member {i}");
        // A router at the old version is told it is stale, as by the primary.
        assert_eq!(versioned_find_on(&addr, &old).await, Err(13388), "member {i}");
    }
}
