//! Migrations and range deletions across a failover of the donor shard's primary: shard `rs0`
//! (three members) donates a chunk to shard `other` (one member), and its primary dies.
//!
//! What must hold: the migration and range-deletion records reached the secondaries through the
//! oplog, so the member promoted next settles the migration (here: committed, so it deletes the
//! donated range) and finishes a range deletion its predecessor had pending. In the end every
//! document is on exactly one shard, the one the catalog names, on every member.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Document, doc};
use shoal_tests::process::{Process, ProcessSpec};
use shoal_tests::repl::{PRIMARY_WAIT, wait_state};
use shoal_tests::replica_cluster::{ReplicaCluster, SHARD};

const DB: &str = "app";
const COLL: &str = "items";
const DOCS: i64 = 300;
const SPLIT: i64 = 100;
const WAIT: Duration = Duration::from_secs(60);
/// How long recovery and range deletion may take to settle after the failover.
const SETTLE_MAX: Duration = Duration::from_secs(90);
const OTHER: &str = "other";

struct Fixture {
    cluster: ReplicaCluster,
    other: Process,
    _other_dir: tempfile::TempDir,
    client: mongodb::Client,
}

/// `rs0` (three members, `member_flags` each) holding `app.items` (DOCS documents, sharded on
/// `k`, split at SPLIT), and an empty one-member shard `other`.
async fn setup(member_flags: &[&str]) -> Fixture {
    let cluster = ReplicaCluster::start_with(3, member_flags).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let coll = client.database(DB).collection::<Document>(COLL);
    coll.insert_many((0..DOCS).map(|k| doc! { "_id": k, "k": k, "pad": "x".repeat(100) })).await.expect("insert");
    let other_dir = tempfile::tempdir().expect("tempdir");
    let other = Process::start(ProcessSpec {
        name: OTHER.into(),
        role: "shard".into(),
        args: vec![
            "shard".into(),
            "--name".into(),
            OTHER.into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            other_dir.path().join("data").display().to_string(),
            "--config".into(),
            cluster.config_addrs.join(","),
        ],
        log_path: other_dir.path().join("other.log"),
    })
    .await
    .expect("shard other starts");
    let admin = client.database("admin");
    let addr = other.addr().to_string();
    admin.run_command(doc! { "addShard": format!("{OTHER}/{addr}"), "name": OTHER }).await.expect("addShard other");
    wait_state(&addr, "PRIMARY", PRIMARY_WAIT).await.expect("other is primary");
    let ns = format!("{DB}.{COLL}");
    admin.run_command(doc! { "enableSharding": DB }).await.expect("enableSharding");
    admin.run_command(doc! { "shardCollection": &ns, "key": {"k": 1} }).await.expect("shardCollection");
    admin.run_command(doc! { "split": &ns, "middle": {"k": SPLIT} }).await.expect("split");
    Fixture { cluster, other, _other_dir: other_dir, client }
}

async fn move_upper_to_other(client: &mongodb::Client) -> mongodb::error::Result<Document> {
    move_upper(client, OTHER).await
}

async fn move_upper(client: &mongodb::Client, to: &str) -> mongodb::error::Result<Document> {
    let ns = format!("{DB}.{COLL}");
    client.database("admin").run_command(doc! { "moveChunk": ns, "find": {"k": SPLIT + 1}, "to": to }).await
}

/// Waits (bounded) until member `i`'s process is gone (a failpoint aborted it), then reaps it.
async fn wait_exit(f: &mut Fixture, i: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while f.cluster.member(i).is_some_and(|p| p.is_alive()) {
        assert!(tokio::time::Instant::now() < deadline, "the failpoint was never reached\n{}", f.cluster.log_tails(40));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f.cluster.kill9(i);
}

/// `k` of every document on the member at `addr` (unversioned: orphans included), sorted.
async fn keys_on(addr: &str) -> anyhow::Result<Vec<i64>> {
    let body = doc! { "find": COLL, "filter": {}, "projection": {"k": 1}, "batchSize": 1_000_000, "singleBatch": true };
    let mut client = shoal_tests::grpc::shard(addr).await?.max_decoding_message_size(usize::MAX);
    let req = shoal_proto::shard::CommandRequest {
        db: DB.into(),
        body: body.to_vec()?.into(),
        secondary_ok: true,
        ..Default::default()
    };
    let reply = tokio::time::timeout(shoal_tests::repl::MEMBER_CALL_TIMEOUT, client.find(req)).await??.into_inner();
    if let Some(e) = reply.error {
        anyhow::bail!("find on {addr}: {}", e.errmsg);
    }
    let mut keys = Vec::new();
    for raw in &reply.documents {
        keys.push(Document::from_reader(&mut &raw[..])?.get_i64("k")?);
    }
    keys.sort_unstable();
    Ok(keys)
}

/// Every live `rs0` member holds exactly the lower range, `other` exactly the upper one, and the
/// router counts every document once.
async fn settled(f: &Fixture, live: &[usize]) -> Result<(), String> {
    let lower: Vec<i64> = (0..SPLIT).collect();
    let upper: Vec<i64> = (SPLIT..DOCS).collect();
    for &i in live {
        let keys = keys_on(&f.cluster.addr(i)).await.map_err(|e| e.to_string())?;
        if keys != lower {
            return Err(format!("{SHARD} member {i} holds {} documents, not the lower {SPLIT}", keys.len()));
        }
    }
    let keys = keys_on(&f.other.addr().to_string()).await.map_err(|e| e.to_string())?;
    if keys != upper {
        return Err(format!("{OTHER} holds {} documents, not the upper {}", keys.len(), upper.len()));
    }
    let n =
        f.client.database(DB).collection::<Document>(COLL).count_documents(doc! {}).await.map_err(|e| e.to_string())?;
    if n != DOCS as u64 {
        return Err(format!("the router counts {n} documents"));
    }
    Ok(())
}

async fn wait_settled(f: &Fixture, live: &[usize], what: &str) {
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        match settled(f, live).await {
            Ok(()) => return,
            Err(why) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not settled: {why}\n{}", f.cluster.log_tails(40))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_donor_primary_killed_after_the_commit_is_settled_by_the_next_primary() {
    let mut f = setup(&["--failpoints", "migration.after_commit=exit"]).await;
    let old = f.cluster.wait_primary(WAIT).await.expect("primary");
    // The donor primary aborts right after the catalog committed, before it told the recipient or
    // scheduled the deletion of the donated range.
    let _ = move_upper_to_other(&f.client).await;
    wait_exit(&mut f, old).await;
    let new = f.cluster.wait_new_primary(old, WAIT).await.expect("a new primary");
    let live: Vec<usize> = (0..f.cluster.size()).filter(|i| *i != old).collect();
    wait_settled(&f, &live, "after the donor's failover").await;
    assert_ne!(new, old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_range_deletion_pending_at_failover_is_finished_by_the_next_primary() {
    let mut f = setup(&[]).await;
    let old = f.cluster.wait_primary(WAIT).await.expect("primary");
    // An open cursor on the donor pins the collection: the donated range's deletion waits for it.
    let coll = f.client.database(DB).collection::<Document>(COLL);
    let mut cursor = coll.find(doc! {}).batch_size(2).await.expect("find");
    assert!(cursor.advance().await.expect("first document"));
    move_upper_to_other(&f.client).await.expect("moveChunk");
    let before = keys_on(&f.cluster.addr(old)).await.expect("keys on the primary");
    assert_eq!(before.len() as i64, DOCS, "the deletion waits for the pinned cursor");
    // The task record reached the secondaries with the oplog; the primary dies with it pending.
    f.cluster.kill9(old);
    f.cluster.wait_new_primary(old, WAIT).await.expect("a new primary");
    let live: Vec<usize> = (0..f.cluster.size()).filter(|i| *i != old).collect();
    wait_settled(&f, &live, "after the failover").await;
    // The old primary comes back as a secondary and converges too.
    drop(cursor);
    f.cluster.restart(old).await.expect("restart");
    wait_settled(&f, &[0, 1, 2], "after the old primary returned").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recipient_primary_killed_mid_migration_is_settled_by_the_next_primary() {
    let mut f = setup(&["--failpoints", "migration.recipient_after_batch=exit"]).await;
    // rs0 donates the upper chunk (its members only arm the recipient's failpoint) ...
    move_upper_to_other(&f.client).await.expect("moveChunk to other");
    wait_settled(&f, &[0, 1, 2], "after the first move").await;
    // ... and receives it back: its primary aborts after the first batch is majority-committed.
    let old = f.cluster.wait_primary(WAIT).await.expect("primary");
    let _ = move_upper(&f.client, SHARD).await;
    wait_exit(&mut f, old).await;
    f.cluster.wait_new_primary(old, WAIT).await.expect("a new primary");
    // The migration aborted: the next primary deletes the partial copy it inherited.
    let live: Vec<usize> = (0..f.cluster.size()).filter(|i| *i != old).collect();
    wait_settled(&f, &live, "after the recipient's failover").await;
}
