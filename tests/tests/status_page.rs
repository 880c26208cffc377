//! The router's live status page in a real browser: a `shoal up` cluster of two shards (one of
//! three members, one of one) with a sharded collection split into chunks and a zone that makes
//! the balancer move two of them, then Debian's `chromium` in headless mode loads
//! `http://<router metrics port>/` and its DOM (after the page's script ran) shows every shard and
//! member with its state, the collection's chunks per shard, the balancer's moves with their
//! reason, and a collection named like markup as text, not markup. `/status.json` parses and says
//! the same; `/metrics` has the balancer's and routing's series. A screenshot goes to the test's
//! temp dir (removed with it).
//!
//! Chromium is required (CI installs it, `.ci/run`): without it the test fails saying so.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bson::{Document, doc};
use mongodb::Client;
use serde_json::Value;
use shoal_tests::up::{LocalUp, stop};

/// Bound on the cluster showing what the test set up (members up, the balancer's moves done).
const SETTLED_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on one run of chromium.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);
/// A collection whose name is markup: the page must show it as text.
const MARKUP_COLL: &str = "<b>bold</b>";

fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .expect("`chromium` is not on PATH: this test needs Debian's chromium package (apt-get install chromium; .ci/run installs it)")
}

/// Runs headless chromium on `url` with `extra` arguments, a profile under `dir`, bounded by
/// [`BROWSER_TIMEOUT`]; its stdout.
async fn browse(dir: &Path, url: &str, extra: &[String]) -> String {
    let profile = dir.join("chromium-profile");
    let mut cmd = tokio::process::Command::new(chromium());
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--virtual-time-budget=8000")
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(BROWSER_TIMEOUT, cmd.output())
        .await
        .expect("chromium finished in time")
        .expect("chromium runs");
    assert!(output.status.success(), "chromium: {:?}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `/status.json` once it shows both shards with every member up, the collection on both
/// shards, the balancer's moves and a traffic sample; the last document seen if the timeout ends first.
async fn settled_status(url: &str) -> Value {
    let deadline = tokio::time::Instant::now() + SETTLED_TIMEOUT;
    let mut last = Value::Null;
    loop {
        if let Ok((200, text)) = shoal_tests::http::get(url).await {
            last = serde_json::from_str(&text).unwrap_or_else(|e| panic!("status.json parses: {e}\n{text}"));
            if settled(&last) {
                return last;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the status never settled:\n{last:#}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn settled(status: &Value) -> bool {
    let states = |shard: &str| -> Vec<String> {
        let shards = status["shards"].as_array().cloned().unwrap_or_default();
        let found = shards.into_iter().find(|s| s["id"] == shard).unwrap_or_default();
        let members = found["members"].as_array().cloned().unwrap_or_default();
        members.iter().map(|m| m["state"].as_str().unwrap_or("").to_owned()).collect()
    };
    let mut shard0 = states("shard0");
    shard0.sort();
    let people = status["collections"].as_array().and_then(|c| c.iter().find(|c| c["ns"] == "app.people").cloned());
    let on_shard1 =
        people.as_ref().and_then(|p| p["shards"].as_array()?.iter().find(|s| s["shard"] == "shard1").cloned());
    let moves_ok = status["balancer"]["recentMoves"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["outcome"] == "ok" && m["ns"] == "app.people").count());
    shard0 == ["PRIMARY", "SECONDARY", "SECONDARY"]
        && states("shard1") == ["PRIMARY"]
        && on_shard1.is_some_and(|s| s["chunks"] == 2)
        && moves_ok >= 2
        // The sampler's first interval ends 5 s after the router started.
        && status["ops"]["points"].as_array().is_some_and(|p| !p.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_shards_members_chunks_and_moves_in_headless_chromium() {
    let _ = chromium();
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::two_shards(dir.path()).expect("spec");
    let launcher = cluster.start(1).await.expect("shoal up starts");
    let client = Client::with_uri_str(cluster.uri("")).await.expect("client");
    let admin = client.database("admin");
    let run = |command: Document| {
        let admin = admin.clone();
        async move { admin.run_command(command.clone()).await.unwrap_or_else(|e| panic!("{command}: {e}")) }
    };

    // app.people in five chunks on shard0; the zone `eu` on shard1 covers two of them, so the
    // balancer moves exactly those (ZoneViolation) and nothing else (the data is far below three
    // chunk sizes).
    run(doc! { "enableSharding": "app", "primaryShard": "shard0" }).await;
    run(doc! { "shardCollection": "app.people", "key": { "k": 1 } }).await;
    run(doc! { "shardCollection": format!("app.{MARKUP_COLL}"), "key": { "k": 1 } }).await;
    let people = client.database("app").collection::<Document>("people");
    people.insert_many((0..200).map(|k| doc! { "_id": k, "k": k })).await.expect("insert");
    for middle in [25, 50, 75, 100] {
        run(doc! { "split": "app.people", "middle": { "k": middle } }).await;
    }
    run(doc! { "addShardToZone": "shard1", "zone": "eu" }).await;
    run(doc! { "updateZoneKeyRange": "app.people", "min": { "k": 50 }, "max": { "k": 100 }, "zone": "eu" }).await;
    // The balancer starts its round now rather than after its idle interval.
    run(doc! { "balancerStart": 1 }).await;

    let base = format!("http://127.0.0.1:{}", cluster.router_metrics_port());
    let status = settled_status(&format!("{base}/status.json")).await;
    assert_eq!(status["balancer"]["mode"], "full", "{status:#}");
    assert_eq!(status["balancer"]["enabled"], true);
    let moves = status["balancer"]["recentMoves"].as_array().unwrap();
    assert!(moves.iter().all(|m| m["reason"] == "ZoneViolation" && m["to"] == "shard1"), "{moves:#?}");
    assert!(moves.iter().all(|m| m["why"].as_str().is_some_and(|w| !w.is_empty())), "{moves:#?}");
    let people_status = status["collections"].as_array().unwrap().iter().find(|c| c["ns"] == "app.people").unwrap();
    assert_eq!(people_status["chunks"], 5, "{people_status:#}");
    assert_eq!(status["errors"], serde_json::json!([]), "{status:#}");
    assert!(status["ops"]["points"][0]["opsPerSec"].as_f64().is_some_and(|n| n > 0.0), "{:#}", status["ops"]);

    // The browser's view, after the page's script rendered the document (and polled it).
    let dom = browse(dir.path(), &format!("{base}/"), &["--dump-dom".to_owned()]).await;
    for shown in ["shard0", "shard1", "app.people", "PRIMARY", "SECONDARY", "ZoneViolation", "Recent balancer moves"] {
        assert!(dom.contains(shown), "the page shows {shown}:\n{dom}");
    }
    for member in &cluster.ports[4..8] {
        assert!(dom.contains(&format!("127.0.0.1:{member}")), "member {member} listed:\n{dom}");
    }
    assert!(dom.contains("2 chunks") && dom.contains("3 chunks"), "chunks per shard:\n{dom}");
    assert!(dom.contains("app.&lt;b&gt;bold&lt;/b&gt;"), "a markup name is text:\n{dom}");
    assert!(!dom.contains(MARKUP_COLL), "a markup name is never markup:\n{dom}");
    assert!(dom.contains(r#"<span id="updated" class="muted">updated "#), "the page's polls succeed:\n{dom}");

    let shot = dir.path().join("status.png");
    let extra = [format!("--screenshot={}", shot.display()), "--window-size=1280,900".to_owned()];
    browse(dir.path(), &format!("{base}/"), &extra).await;
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "a real screenshot: {} bytes", png.len());

    // The same facts in the router's Prometheus series.
    let (code, metrics) = shoal_tests::http::get(&format!("{base}/metrics")).await.expect("metrics");
    assert_eq!(code, 200);
    let sample = |name: &str| metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok());
    assert!(sample(r#"shoal_balancer_moves_total{outcome="ok"}"#).is_some_and(|n| n >= 2.0), "{metrics}");
    assert!(sample("shoal_balancer_rounds_total").is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(sample("shoal_balancer_move_duration_seconds_count").is_some_and(|n| n >= 2.0), "{metrics}");
    assert_eq!(sample("shoal_balancer_jumbo_chunks"), Some(0.0), "{metrics}");
    assert!(sample("shoal_routing_refreshes_total").is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(metrics.contains(r#"shoal_chunks{collection="app.people",shard="shard0"}"#), "{metrics}");

    // The page changed nothing: both collections are still there with every document.
    assert_eq!(people.count_documents(doc! {}).await.expect("count"), 200);
    drop(client);
    stop(&launcher).await.expect("shoal up stops on SIGINT");
}
