//! Metrics from outside: a `shoal up` cluster (three config servers, a shard, a router) scraped by
//! a real Prometheus server (Debian's `prometheus`) through the configuration
//! `shoal deploy render --format prometheus` writes for its spec; every process is a healthy
//! target, and the query API returns the series an operator's dashboard reads: the router's
//! counts of what the driver sent, the shard's command latencies and replication state, the config
//! servers' Raft state, and every process's CPU and memory. Debian's `prometheus-mongodb-exporter`
//! pointed at the router reports `mongodb_up 1` and the router's `serverStatus` series.

use std::time::Duration;

use bson::{Document, doc};
use mongodb::Client;
use shoal_tests::process::shoal_bin;
use shoal_tests::prometheus::{Prometheus, Sample};
use shoal_tests::up::{LocalUp, stop};

/// Bound on every target having been scraped with the expected series.
const SCRAPED_TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_process_of_a_shoal_up_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::new(dir.path()).expect("spec");
    let launcher = cluster.start(1).await.expect("shoal up starts");

    let client = Client::with_uri_str(cluster.uri("")).await.expect("client");
    let people = client.database("app").collection::<Document>("people");
    people.insert_many((0..7).map(|i| doc! { "_id": i })).await.expect("insert");
    assert_eq!(people.count_documents(doc! {}).await.expect("count"), 7);
    let error = client.database("app").run_command(doc! { "noSuchCommand": 1 }).await.expect_err("unknown command");
    assert!(error.to_string().contains("no such command"), "{error}");

    let rendered = dir.path().join("prometheus");
    let output = std::process::Command::new(shoal_bin().expect("shoal binary"))
        .args(["deploy", "render", "--format", "prometheus", "--out"])
        .arg(&rendered)
        .arg("-f")
        .arg(&cluster.spec)
        .output()
        .expect("shoal deploy render runs");
    assert!(output.status.success(), "render: {}", String::from_utf8_lossy(&output.stderr));
    // Scraped every second rather than the rendered 15 s, so the test waits seconds.
    let config = rendered.join("prometheus.yml");
    let text = std::fs::read_to_string(&config).expect("prometheus.yml");
    assert!(text.contains("scrape_interval: 15s"), "{text}");
    std::fs::write(&config, text.replace("scrape_interval: 15s", "scrape_interval: 1s")).expect("rewrite");

    let prometheus = Prometheus::start(&config, dir.path()).await.expect("prometheus starts");
    let deadline = tokio::time::Instant::now() + SCRAPED_TIMEOUT;
    loop {
        let targets = prometheus.targets().await.expect("targets");
        let up = targets.iter().filter(|t| t.2 == "up").count();
        if targets.len() == 5
            && up == 5
            && prometheus.query("shoal_raft_leader == 1").await.is_ok_and(|s| !s.is_empty())
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "targets not all up and scraped: {targets:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let q = |expr: &'static str| {
        let prometheus = &prometheus;
        async move { prometheus.query(expr).await.unwrap_or_else(|e| panic!("{expr}: {e:#}")) }
    };
    let value = |samples: &[Sample], what: &str| -> f64 {
        assert_eq!(samples.len(), 1, "{what}: one series expected: {samples:?}");
        samples[0].value
    };
    let jobs = |samples: &[Sample]| -> Vec<String> {
        let mut jobs: Vec<String> = samples.iter().map(|s| s.labels["job"].clone()).collect();
        jobs.sort();
        jobs
    };

    // The router counted what the driver sent, as serverStatus.opcounters does.
    let inserts = q(r#"shoal_opcounters_total{job="shoal-router",type="insert"}"#).await;
    assert_eq!(value(&inserts, "router inserts"), 7.0);
    assert_eq!(inserts[0].labels["process"], "router0");
    assert_eq!(inserts[0].labels["cluster"], "test");
    let unknown = q(r#"shoal_command_errors_total{job="shoal-router",code_name="CommandNotFound"}"#).await;
    assert_eq!(value(&unknown, "CommandNotFound"), 1.0);
    let counted = q(r#"shoal_command_duration_seconds_count{job="shoal-router",command="count"}"#).await;
    assert!(!counted.is_empty(), "count's latency histogram");
    assert!(value(&q(r#"shoal_connections_current{job="shoal-router"}"#).await, "connections") >= 1.0);
    let shard_calls = q(r#"shoal_shard_call_duration_seconds_count{job="shoal-router"}"#).await;
    assert!(shard_calls.iter().any(|s| s.labels["shard"] == "shard0" && s.value >= 1.0), "{shard_calls:?}");

    // The shard ran the writes and is its group's primary.
    let shard_inserts = q(r#"shoal_command_duration_seconds_count{job="shoal-shard",command="insert"}"#).await;
    assert!(value(&shard_inserts, "shard inserts") >= 1.0);
    assert_eq!(shard_inserts[0].labels["shard"], "shard0");
    assert_eq!(value(&q(r#"shoal_repl_primary{job="shoal-shard"}"#).await, "shard primary"), 1.0);

    // One Raft leader among three config servers, all in the same term.
    assert_eq!(q("shoal_raft_leader").await.len(), 3);
    assert_eq!(value(&q("sum(shoal_raft_leader)").await, "leaders"), 1.0);
    assert_eq!(value(&q(r#"count(count_values("term", shoal_raft_term))"#).await, "terms"), 1.0);
    assert!(value(&q("min(shoal_raft_applied_index)").await, "applied") >= 1.0);

    // Every process reports its own CPU, memory and open files.
    let all = ["shoal-configsvr", "shoal-configsvr", "shoal-configsvr", "shoal-router", "shoal-shard"];
    assert_eq!(jobs(&q("process_resident_memory_bytes").await), all);
    assert_eq!(jobs(&q("process_open_fds > 0").await), all);
    assert_eq!(jobs(&q("process_cpu_seconds_total").await), all);

    prometheus.stop().await;

    // Debian's MongoDB exporter (mgo: OP_QUERY only) pointed at the router reads serverStatus.
    let exporter_port = shoal_tests::ports::free_ports(1).expect("port")[0];
    let log = std::fs::File::create(dir.path().join("exporter.log")).expect("exporter.log");
    let mut exporter = tokio::process::Command::new("prometheus-mongodb-exporter")
        .arg(format!("-mongodb.uri=mongodb://127.0.0.1:{}", cluster.router_port()))
        .arg(format!("-web.listen-address=127.0.0.1:{exporter_port}"))
        .arg("-logtostderr")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus-mongodb-exporter runs (Debian's package; .ci/run installs it)");
    let url = format!("http://127.0.0.1:{exporter_port}/metrics");
    let deadline = tokio::time::Instant::now() + SCRAPED_TIMEOUT;
    let text = loop {
        match shoal_tests::http::get(&url).await {
            Ok((200, text)) if text.lines().any(|l| l == "mongodb_up 1") => break text,
            other => {
                let log = std::fs::read_to_string(dir.path().join("exporter.log")).unwrap_or_default();
                assert!(tokio::time::Instant::now() < deadline, "exporter: {other:?}\n{log}");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let sample = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok());
    assert_eq!(sample(r#"mongodb_op_counters_total{type="insert"}"#), Some(7.0), "{text}");
    assert!(sample(r#"mongodb_connections{state="current"}"#).is_some_and(|n| n >= 1.0), "{text}");
    assert!(sample("mongodb_network_metrics_num_requests_total").is_some_and(|n| n >= 1.0), "{text}");
    assert!(sample(r#"mongodb_memory{type="resident"}"#).is_some_and(|n| n > 0.0), "{text}");
    let log = std::fs::read_to_string(dir.path().join("exporter.log")).unwrap_or_default();
    assert!(!log.contains("Cannot connect"), "{log}");
    let _ = exporter.kill().await;
    drop(client);
    stop(&launcher).await.expect("shoal up stops on SIGINT");
}
