//! `shoal status --router host:port` against a real three-member shard: it prints each member
//! with its state, health and optime as `replSetGetStatus {shard}` reports them, and shows a
//! killed member as unreachable.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use shoal_tests::process::shoal_bin;
use shoal_tests::replica_cluster::{ReplicaCluster, SHARD};

const RUN_TIMEOUT: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(60);

async fn shoal_status(router: &str) -> String {
    let mut command = tokio::process::Command::new(shoal_bin().expect("shoal binary"));
    command.args(["status", "--router", router]);
    if shoal_tests::security::enabled() {
        command.args(["-u", shoal_tests::security::ROOT_USER, "-p", shoal_tests::security::ROOT_PASSWORD]);
    }
    let run = command.kill_on_drop(true).output();
    let out = tokio::time::timeout(RUN_TIMEOUT, run).await.expect("shoal status finishes").expect("shoal status runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "shoal status failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The first `shoal status` output that satisfies `done`, or the last one after [`WAIT`].
async fn status_until(router: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = shoal_status(router).await;
        if done(&out) || tokio::time::Instant::now() >= deadline {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The row of `member`: its words.
fn row(out: &str, member: &str) -> Vec<String> {
    let line = out.lines().find(|l| l.trim_start().starts_with(member)).unwrap_or_else(|| panic!("{member}: {out}"));
    line.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shoal_status_prints_every_member_of_every_shard() {
    let mut cluster = ReplicaCluster::start(3).await.expect("cluster starts");
    let router = cluster.router.addr().to_string();
    let primary = cluster.wait_primary(WAIT).await.expect("primary");

    // Heartbeats carry states and optimes to the primary a moment after it is elected: wait for
    // the view in which every member is settled, and check that view row by row.
    let out = status_until(&router, |out| {
        (0..cluster.size()).all(|i| {
            let line = out.lines().find(|l| l.trim_start().starts_with(&cluster.addr(i)));
            line.is_some_and(|l| l.contains("PRIMARY") || (l.contains("SECONDARY") && l.trim_end().ends_with(" s")))
        })
    })
    .await;
    assert!(out.contains(&format!("{SHARD}  (replica set {SHARD}, term ")), "{out}");
    for i in 0..cluster.size() {
        let words = row(&out, &cluster.addr(i));
        let state = if i == primary { "PRIMARY" } else { "SECONDARY" };
        assert_eq!(words[1], state, "{out}");
        assert_eq!(words[2], "1", "health: {out}");
        assert!(words[3].starts_with('('), "optime: {out}");
        let lag = words[5..].join(" ");
        assert!(if i == primary { lag == "-" } else { lag.ends_with(" s") }, "lag {lag:?}: {out}");
    }

    let down = (primary + 1) % cluster.size();
    cluster.kill9(down);
    let out = status_until(&router, |out| row(out, &cluster.addr(down))[1] == "(not").await;
    let words = row(&out, &cluster.addr(down));
    assert_eq!(words[1..4], ["(not", "reachable/healthy)", "0"], "{out}");
    assert_eq!(row(&out, &cluster.addr(primary))[1], "PRIMARY", "{out}");
}
