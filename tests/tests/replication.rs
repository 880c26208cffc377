//! Replica groups with real processes: a shard of three members behind a router, with primaries
//! killed (-9) and paused (SIGSTOP), members restarted and wiped, and write concerns that cannot
//! be met.
//!
//! What must hold: every write the router acknowledged with `w: "majority"` is on every member
//! once they caught up, exactly once; a paused primary is replaced, and when it wakes it rolls back
//! what no majority had (saved to its rollback file, not silently dropped); a killed member
//! catches up; a wiped member resyncs from scratch.

use std::collections::BTreeSet;
use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::options::{Acknowledgment, CollectionOptions, WriteConcern};
use shoal_tests::replica_cluster::ReplicaCluster;

/// Failover, restart and catch-up waits (generous: a loaded 2-core CI machine).
const WAIT: Duration = Duration::from_secs(60);
/// Writes retried by the test writer while no primary takes them.
const INSERT_ATTEMPTS_MAX: u32 = 200;

/// Inserts `{_id: id}` until it is acknowledged (or found already there: an earlier attempt
/// whose answer was lost went through). Returns whether it was acknowledged.
async fn insert_until_acknowledged(coll: &mongodb::Collection<Document>, id: i64) -> bool {
    for _ in 0..INSERT_ATTEMPTS_MAX {
        match coll.insert_one(doc! { "_id": id }).await {
            Ok(_) => return true,
            Err(e) if e.to_string().contains("E11000") || e.to_string().contains("11000") => return true,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    false
}

fn majority_coll(client: &mongodb::Client, name: &str) -> mongodb::Collection<Document> {
    let wc = WriteConcern::builder().w(Acknowledgment::Majority).build();
    client.database("rs").collection_with_options(name, CollectionOptions::builder().write_concern(wc).build())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_killed_primaries_and_members_catch_up_or_resync() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let coll = majority_coll(&client, "kills");
    let mut acknowledged = BTreeSet::new();
    let mut next = 0i64;
    for round in 0..3 {
        let primary = cluster.wait_primary(WAIT).await.expect("a primary");
        // A writer runs while the primary is killed.
        let writer_coll = coll.clone();
        let start = next;
        let writer = tokio::spawn(async move {
            let mut acked = Vec::new();
            for id in start..start + 150 {
                if insert_until_acknowledged(&writer_coll, id).await {
                    acked.push(id);
                }
            }
            acked
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.kill9(primary);
        let new_primary = cluster.wait_new_primary(primary, WAIT).await.expect("a new primary");
        assert_ne!(new_primary, primary);
        acknowledged.extend(writer.await.expect("writer"));
        next = start + 150;
        // The old primary comes back as a secondary (rolling back whatever no majority had).
        cluster.restart(primary).await.expect("restart the old primary");
        eprintln!("round {round}: primary {primary} killed, {new_primary} took over");
    }
    assert_eq!(acknowledged.len(), 450, "the writer got every insert acknowledged eventually");
    let total = 450;
    for i in 0..cluster.size() {
        cluster
            .wait_caught_up(i, "rs", "kills", total, WAIT)
            .await
            .unwrap_or_else(|e| panic!("member {i}: {e}\n{}", cluster.log_tails(40)));
    }
    let want: Vec<i64> = acknowledged.iter().copied().collect();
    for i in 0..cluster.size() {
        assert_eq!(cluster.ids_on(i, "rs", "kills").await.expect("ids"), want, "member {i}");
    }

    // A wiped secondary copies everything again (initial sync) and follows on.
    let primary = cluster.wait_primary(WAIT).await.expect("a primary");
    let wiped = (primary + 1) % cluster.size();
    cluster.wipe(wiped).await.expect("wipe a secondary");
    for id in 450..500 {
        assert!(insert_until_acknowledged(&coll, id).await);
    }
    cluster.wait_caught_up(wiped, "rs", "kills", 500, WAIT).await.expect("the wiped member resyncs");
    let status = shoal_tests::repl::member_status(&cluster.addr(wiped)).await.expect("status");
    assert_eq!(status.get_str("stateStr").ok(), Some("SECONDARY"), "{status}");
    assert_eq!(cluster.ids_on(wiped, "rs", "kills").await.expect("ids"), (0..500).collect::<Vec<i64>>());

    // The router shows the group as MongoDB does; a killed member is unhealthy.
    let down = (primary + 2) % cluster.size();
    cluster.kill9(down);
    let admin = client.database("admin");
    let status = admin.run_command(doc! { "replSetGetStatus": 1, "shard": "rs0" }).await.expect("replSetGetStatus");
    assert_eq!(status.get_str("set").ok(), Some("rs0"));
    let members = status.get_array("members").expect("members");
    assert_eq!(members.len(), 3);
    for (i, m) in members.iter().enumerate() {
        let m = m.as_document().expect("member");
        assert_eq!(m.get_str("name").ok(), Some(cluster.addr(i).as_str()), "{m}");
        let (want_state, want_health) = match i {
            _ if i == down => ("(not reachable/healthy)", 0.0),
            _ if i == primary => ("PRIMARY", 1.0),
            _ => ("SECONDARY", 1.0),
        };
        assert_eq!(
            (m.get_str("stateStr").ok(), m.get_f64("health").ok()),
            (Some(want_state), Some(want_health)),
            "{m}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_primary_is_replaced_and_rolls_back_what_no_majority_had() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let coll = majority_coll(&client, "pause");
    for id in 0..20 {
        assert!(insert_until_acknowledged(&coll, id).await);
    }
    let old = cluster.wait_primary(WAIT).await.expect("a primary");
    let secondaries: Vec<usize> = (0..cluster.size()).filter(|i| *i != old).collect();
    for i in 0..cluster.size() {
        cluster.wait_caught_up(i, "rs", "pause", 20, WAIT).await.expect("caught up");
    }
    // With both secondaries gone, `w: 1` writes reach the primary only. (Killed, not paused: a
    // paused process still has the primary's batches in its socket buffers when it wakes.)
    for s in &secondaries {
        cluster.kill9(*s);
    }
    let w1 = WriteConcern::builder().w(Acknowledgment::Nodes(1)).build();
    let lonely = client
        .database("rs")
        .collection_with_options::<Document>("pause", CollectionOptions::builder().write_concern(w1).build());
    for id in 1000..1005 {
        lonely.insert_one(doc! { "_id": id, "lonely": true }).await.expect("w:1 insert on the primary alone");
    }
    // Then the primary freezes (SIGSTOP: partitioned, not dead) and the others come back: they
    // must elect one of themselves once its lease has lapsed.
    cluster.pause(old);
    for s in &secondaries {
        cluster.restart(*s).await.expect("restart a secondary");
    }
    let new = cluster.wait_new_primary(old, WAIT).await.expect("a new primary");
    for id in 20..40 {
        assert!(insert_until_acknowledged(&coll, id).await, "insert {id} after the failover");
    }
    // The old primary wakes in an older term: it steps down, rolls back its lonely writes and
    // follows the new primary.
    cluster.resume(old);
    cluster
        .wait_caught_up(old, "rs", "pause", 40, WAIT)
        .await
        .unwrap_or_else(|e| panic!("the old primary: {e}\n{}", cluster.log_tails(40)));
    let want: Vec<i64> = (0..40).collect();
    for i in 0..cluster.size() {
        assert_eq!(cluster.ids_on(i, "rs", "pause").await.expect("ids"), want, "member {i} (new primary {new})");
    }
    let saved: BTreeSet<i64> = cluster
        .rollback_documents(old)
        .expect("rollback files")
        .iter()
        .filter_map(|d| match d.get("_id") {
            Some(Bson::Int32(v)) => Some(i64::from(*v)),
            Some(Bson::Int64(v)) => Some(*v),
            _ => None,
        })
        .collect();
    assert_eq!(saved, (1000..1005).collect(), "the rolled-back writes are in the rollback file");
}

/// The `writeConcernError` of a reply, whether the driver returned it or raised it.
fn write_concern_code(result: Result<Document, mongodb::error::Error>) -> Option<i32> {
    match result {
        Ok(reply) => reply.get_document("writeConcernError").ok().and_then(|e| e.get_i32("code").ok()),
        Err(e) => match *e.kind {
            mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteConcernError(w)) => Some(w.code),
            mongodb::error::ErrorKind::Command(c) => Some(c.code),
            _ => panic!("unexpected error {e}"),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_concerns_wait_for_members_and_report_what_they_could_not_get() {
    let cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let db = client.database("rs");
    // A router has no replica set of its own: the shard must be named.
    let refused = client.database("admin").run_command(doc! { "replSetGetStatus": 1 }).await;
    assert!(matches!(refused.map_err(|e| *e.kind), Err(mongodb::error::ErrorKind::Command(ref c)) if c.code == 20));
    let insert = |id: i64, wc: Document| doc! { "insert": "wc", "documents": [{"_id": id}], "writeConcern": wc };
    // Every member has an acknowledged `w: 3` write the moment it is acknowledged.
    db.run_command(insert(1, doc! {"w": 3})).await.expect("w:3");
    for i in 0..cluster.size() {
        assert_eq!(shoal_tests::repl::count_on_member(&cluster.addr(i), "rs", "wc").await.expect("count"), 1);
    }
    // More members than the group has: UnsatisfiableWriteConcern (100), the write still applied.
    assert_eq!(write_concern_code(db.run_command(insert(2, doc! {"w": 4})).await), Some(100));
    // DDL too: the shard's writeConcernError reaches the client.
    db.run_command(doc! { "create": "wcdrop" }).await.expect("create");
    let drop = db.run_command(doc! { "drop": "wcdrop", "writeConcern": {"w": 4} }).await;
    assert_eq!(write_concern_code(drop), Some(100));
    // No secondary answers: majority times out (64), w:1 does not wait.
    let primary = cluster.wait_primary(WAIT).await.expect("a primary");
    let secondaries: Vec<usize> = (0..cluster.size()).filter(|i| *i != primary).collect();
    for s in &secondaries {
        cluster.pause(*s);
    }
    let timed_out = db.run_command(insert(3, doc! {"w": "majority", "wtimeout": 300})).await;
    assert_eq!(write_concern_code(timed_out), Some(64));
    db.run_command(insert(4, doc! {"w": 1})).await.expect("w:1 needs no secondary");
    for s in &secondaries {
        cluster.resume(*s);
    }
    // Once they are back, the same writes are majority-acknowledged.
    db.run_command(insert(5, doc! {"w": "majority", "wtimeout": 30_000})).await.expect("majority once they are back");
    let reply = db.run_command(doc! { "count": "wc" }).await.expect("count");
    assert_eq!(reply.get_i32("n").ok(), Some(5));

    // A manual step-down through the router: another member takes over, the old one follows it.
    let admin = client.database("admin");
    let old = cluster.wait_primary(WAIT).await.expect("a primary");
    let step_down = doc! { "replSetStepDown": 30, "secondaryCatchUpPeriodSecs": 10, "shard": "rs0" };
    admin.run_command(step_down).await.expect("replSetStepDown");
    let new = cluster.wait_new_primary(old, WAIT).await.expect("a new primary");
    assert_ne!(new, old);
    shoal_tests::repl::wait_state(&cluster.addr(old), "SECONDARY", WAIT).await.expect("the old primary follows");
    db.run_command(insert(6, doc! {"w": "majority", "wtimeout": 30_000})).await.expect("writes go to the new primary");
    let refused = admin.run_command(doc! { "replSetStepDown": 30 }).await;
    assert!(matches!(refused.map_err(|e| *e.kind), Err(mongodb::error::ErrorKind::Command(ref c)) if c.code == 20));
}
