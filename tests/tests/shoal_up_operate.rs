//! Operating what `shoal up` runs: a process that dies is restarted by the supervisor, and
//! `shoal restart --rolling` restarts every process one at a time while a writer keeps writing —
//! no acknowledged majority write is lost and the writer sees only errors a MongoDB application
//! must expect while a primary changes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{Document, doc};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use shoal_tests::process::shoal_bin;
use shoal_tests::up::{LocalUp, pid_with_arg, stop};
use shoal_tests::writer::{Writer, check};

const WAIT: Duration = Duration::from_secs(90);
const RESTART_TIMEOUT: Duration = Duration::from_secs(900);

/// Every child's pid, by the data dir (or log path) on its command line.
fn pids(cluster: &LocalUp, names: &[&str]) -> BTreeMap<String, i32> {
    names
        .iter()
        .map(|name| {
            let dir = cluster.data_dir().join(name).display().to_string();
            let pid = pid_with_arg(&dir).unwrap_or_else(|| panic!("{name} ({dir}) is not running"));
            ((*name).to_owned(), pid)
        })
        .collect()
}

async fn wait_for_new_pid(needle: &str, old: i32) -> i32 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(pid) = pid_with_arg(needle)
            && pid != old
        {
            return pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "{needle} was not restarted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn insert_until_ok(client: &mongodb::Client, id: i64) {
    let coll = client.database("app").collection::<Document>("c");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match coll.insert_one(doc! { "_id": id }).await {
            Ok(_) => return,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "insert {id} never succeeded: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_restarts_a_process_that_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::new(dir.path()).expect("spec");
    let launcher = cluster.start(1).await.expect("shoal up starts");
    let client = mongodb::Client::with_uri_str(cluster.uri("")).await.expect("client");
    insert_until_ok(&client, 1).await;

    let shard = cluster.data_dir().join("shard0").display().to_string();
    let old = pid_with_arg(&shard).expect("shard0 runs");
    kill(Pid::from_raw(old), Signal::SIGKILL).expect("kill -9 shard0");
    wait_for_new_pid(&shard, old).await;
    // Back on the same data dir: the first document is still there and writes go on.
    insert_until_ok(&client, 2).await;
    let n = client.database("app").collection::<Document>("c").count_documents(doc! {}).await.expect("count");
    assert_eq!(n, 2);
    let log = std::fs::read_to_string(dir.path().join("up1.log")).unwrap_or_default();
    assert!(log.contains("shard0 exited unexpectedly") && log.contains("restarting it in"), "{log}");

    stop(&launcher).await.expect("shoal up stops on SIGINT");
    assert_eq!(pid_with_arg(&shard), None, "the supervisor's children stop with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::replicated(dir.path(), "").expect("spec");
    let launcher = cluster.start(1).await.expect("shoal up starts");
    let names = ["cfg1", "cfg2", "cfg3", "shard0-1", "shard0-2", "shard0-3"];
    let before = pids(&cluster, &names);

    // Both routers as seeds: the driver moves to the other one while one restarts.
    let uri = format!(
        "mongodb://127.0.0.1:{},127.0.0.1:{}/?serverSelectionTimeoutMS=10000",
        cluster.ports[3], cluster.ports[4]
    );
    let client = mongodb::Client::with_uri_str(&uri).await.expect("client");
    insert_until_ok(&client, -1).await;
    let writer = Writer::start(client.clone(), "app", "rolling");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut restart = tokio::process::Command::new(shoal_bin().expect("shoal binary"));
    restart.args(["restart", "--rolling", "-f"]).arg(&cluster.spec).arg("--data-dir").arg(cluster.data_dir());
    let out = tokio::time::timeout(RESTART_TIMEOUT, restart.kill_on_drop(true).output())
        .await
        .expect("the rolling restart finishes")
        .expect("shoal restart runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "shoal restart failed:\n{stderr}\n{}", String::from_utf8_lossy(&out.stdout));

    let written = writer.finish().await;
    let after = pids(&cluster, &names);
    for name in names {
        assert_ne!(before[name], after[name], "{name} was restarted");
    }
    assert!(stderr.contains("stepping the primary down"), "{stderr}");
    assert!(!written.acknowledged.is_empty(), "the writer wrote");
    assert!(written.other_errors.is_empty(), "only retryable errors: {:?}", written.other_errors);
    check(&client, "app", "rolling", &written).await.expect("every acknowledged write is there once");
    stop(&launcher).await.expect("shoal up stops on SIGINT");
}
