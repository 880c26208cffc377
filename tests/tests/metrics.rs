//! Metrics from outside: a `shoal up` cluster (three config servers, a shard, a router) scraped by
//! a real Prometheus server (Debian's `prometheus`) through the configuration
//! `shoal deploy render --format prometheus` writes for its spec; every process is a healthy
//! target, and the query API returns the series an operator's dashboard reads: the router's
//! counts of what the driver sent, the shard's command latencies and replication state, the config
//! servers' Raft state, and every process's CPU and memory. Debian's `prometheus-mongodb-exporter`
//! pointed at the router reports `mongodb_up 1` and the router's `serverStatus` series. Every
//! query of the Grafana dashboard (`deploy/grafana/shoal.json`) runs on that Prometheus, and the
//! series it reads are among those scraped.

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

    the_dashboards_queries_run_on_scraped_series(&prometheus).await;
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
    // Its only errors are the two it logs against any mongos: no replica set, no oplog of its own.
    let known = ["Failed to get replSet status.", "Failed to get local.oplog_rs collection stats."];
    for line in log.lines().filter(|l| l.starts_with('E')) {
        assert!(known.iter().any(|k| line.contains(k)), "unexpected exporter error: {line}\n{log}");
    }
    let _ = exporter.kill().await;
    drop(client);
    stop(&launcher).await.expect("shoal up stops on SIGINT");
}

/// Dashboard series that exist only once their first event happened (a vector gets a series at its
/// first label set), which this cluster of one one-member shard without sharded collections never
/// sees: lag of other members, waits for a new primary, stale-routing retries, chunks and data per
/// sharded collection. deploy/tests/grafana.rs checks that their servers register them.
const SERIES_AFTER_AN_EVENT: [&str; 5] = [
    "shoal_repl_lag_seconds",
    "shoal_shard_failover_waits_total",
    "shoal_routing_stale_retries_total",
    "shoal_chunks",
    "shoal_data_bytes",
];

/// Every panel query and template variable of the Grafana dashboard: the query runs (Prometheus
/// parses it, with the dashboard's variables set as Grafana would set them) and every series name
/// it reads was scraped from some process of the cluster.
async fn the_dashboards_queries_run_on_scraped_series(prometheus: &Prometheus) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/shoal.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("dashboard: {e}"));
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        let nested = panel["panels"].as_array().into_iter().flatten();
        for panel in std::iter::once(panel).chain(nested) {
            for target in panel["targets"].as_array().into_iter().flatten() {
                queries.push(target["expr"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        // `label_values(SELECTOR, label)`: the selector is a query of its own.
        if let Some(selector) = variable["query"]["query"]
            .as_str()
            .and_then(|q| q.strip_prefix("label_values("))
            .and_then(|q| q.rsplit_once(','))
            .map(|(selector, _)| selector.to_owned())
        {
            queries.push(selector);
        }
    }
    assert!(queries.len() > 50, "dashboard queries: {queries:?}");

    let scraped: std::collections::BTreeSet<String> = prometheus
        .query(r#"count by (__name__) ({__name__=~"shoal_.+|process_.+", cluster="test"})"#)
        .await
        .unwrap_or_else(|e| panic!("series names: {e:#}"))
        .into_iter()
        .filter_map(|s| s.labels.get("__name__").cloned())
        .collect();
    let mut missing = std::collections::BTreeMap::<String, String>::new();
    for query in &queries {
        let expr = query.replace("$__rate_interval", "1m").replace("$cluster", "test").replace("$shard", ".*");
        prometheus.query(&expr).await.unwrap_or_else(|e| panic!("the dashboard's query does not run: {e:#}"));
        let names = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .filter(|w| w.starts_with("shoal_") || w.starts_with("process_"));
        for name in names {
            if !scraped.contains(name) && !SERIES_AFTER_AN_EVENT.contains(&name) {
                missing.insert(name.to_owned(), query.clone());
            }
        }
    }
    assert!(missing.is_empty(), "the dashboard reads series no process exported: {missing:#?}\nscraped: {scraped:?}");
    for name in SERIES_AFTER_AN_EVENT {
        assert!(queries.iter().any(|q| q.contains(name)), "{name} is no longer on the dashboard: drop it here");
    }
}
