//! `shoal bench load|run` (YCSB) as a user runs it against `shoal up`: a tiny load and run finish
//! with every operation OK, the records have YCSB's shape, the report has YCSB's lines, JSON and
//! charts are written; bad arguments and an unreachable target fail with one clear message.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::Client;
use shoal_tests::ports::free_ports;
use shoal_tests::shoal_bin;
use shoal_tests::up::{LocalUp, stop};

/// Bound on one `shoal bench` invocation (a tiny phase takes well under a second).
const BENCH_TIMEOUT: Duration = Duration::from_secs(120);

fn workload(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/workloads").join(name)
}

async fn bench(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(shoal_bin().expect("shoal binary"));
    cmd.arg("bench").args(args).kill_on_drop(true);
    tokio::time::timeout(BENCH_TIMEOUT, cmd.output()).await.expect("shoal bench finishes").expect("shoal bench runs")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The value of a YCSB report line `[OP], Metric, value`.
fn metric(stdout: &str, op: &str, name: &str) -> Option<f64> {
    let prefix = format!("[{op}], {name}, ");
    stdout.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ycsb_load_and_run_against_shoal_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::new(dir.path()).expect("spec");
    let launcher = cluster.start(1).await.expect("shoal up starts");
    let uri = cluster.uri("ycsb");
    let wa = workload("workloada").display().to_string();
    let load_json = dir.path().join("load.json").display().to_string();
    let charts = dir.path().join("charts");

    let common =
        ["-P", &wa, "-p", "recordcount=200", "-p", "threadcount=4", "-p", "fieldcount=3", "-p", "fieldlength=50"];
    let mut args = vec!["load"];
    args.extend(common);
    args.extend(["--uri", &uri, "--fresh", "--json", &load_json]);
    let out = bench(&args).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "load failed:\n{stdout}\n{stderr}");
    assert_eq!(metric(&stdout, "INSERT", "Operations"), Some(200.0), "{stdout}");
    assert_eq!(metric(&stdout, "INSERT", "Return=OK"), Some(200.0), "{stdout}");
    assert!(metric(&stdout, "OVERALL", "Throughput(ops/sec)").is_some_and(|t| t > 0.0), "{stdout}");
    assert!(metric(&stdout, "INSERT", "99thPercentileLatency(us)").is_some(), "{stdout}");

    let client = Client::with_uri_str(&uri).await.expect("client");
    let table = client.database("ycsb").collection::<Document>("usertable");
    assert_eq!(table.count_documents(doc! {}).await.expect("count"), 200);
    let record = table.find_one(doc! {}).await.expect("find").expect("a record");
    let id = record.get_str("_id").expect("string _id");
    assert!(id.starts_with("user") && id[4..].parse::<u64>().is_ok(), "YCSB key {id}");
    for f in ["field0", "field1", "field2"] {
        assert!(matches!(record.get(f), Some(Bson::String(s)) if s.len() == 50), "{f} of {record}");
    }
    assert_eq!(record.len(), 4, "_id and three fields: {record}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&load_json).expect("json written")).expect("valid json");
    assert_eq!(json[0]["phase"], "load");
    assert_eq!(json[0]["operations"][0]["ok"], 200);

    let mut args = vec!["run"];
    args.extend(common);
    let charts_arg = charts.display().to_string();
    args.extend(["-p", "operationcount=300", "--uri", &uri, "--charts", &charts_arg]);
    let out = bench(&args).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "run failed:\n{stdout}\n{stderr}");
    let reads = metric(&stdout, "READ", "Return=OK").unwrap_or(0.0);
    let updates = metric(&stdout, "UPDATE", "Return=OK").unwrap_or(0.0);
    assert_eq!(reads + updates, 300.0, "every operation of workload A succeeds:\n{stdout}");
    assert!(reads > 0.0 && updates > 0.0, "a 50/50 mix:\n{stdout}");
    let pngs: Vec<_> = std::fs::read_dir(&charts).expect("charts dir").filter_map(Result::ok).collect();
    assert!(pngs.len() >= 2, "throughput and latency charts: {pngs:?}");
    for png in pngs {
        let bytes = std::fs::read(png.path()).expect("read png");
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is a PNG", png.path().display());
    }
    drop(client);
    stop(&launcher).await.expect("shoal up stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ycsb_bad_arguments_fail_with_one_clear_message() {
    let wa = workload("workloada").display().to_string();
    let port = free_ports(1).expect("port")[0];
    let nowhere = format!("mongodb://127.0.0.1:{port}/ycsb?serverSelectionTimeoutMS=1000&directConnection=true");
    let cases: [(&[&str], &str); 5] = [
        (&["run", "-P", &wa, "-p", "readproportoin=0.9", "--uri", &nowhere], "readproportoin"),
        (&["load", "-P", &wa, "-p", "recordcount=0", "--uri", &nowhere], "recordcount"),
        (&["load", "-P", "/nonexistent/workloadz", "--uri", &nowhere], "/nonexistent/workloadz"),
        (&["run", "-P", &wa, "--uri", "http://example.com"], "mongodb:// or postgres://"),
        (&["load", "-P", &wa, "--uri", &nowhere], "unreachable"),
    ];
    for (args, expected) in cases {
        let out = bench(args).await;
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{args:?} succeeded:\n{stdout}\n{stderr}");
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?} in:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
        assert_eq!(stderr.lines().filter(|l| l.contains("ERROR")).count(), 1, "one message for {args:?}:\n{stderr}");
    }
}

/// The same tiny load and run against PostgreSQL (JSONB rows) when `SHOAL_PG_URL` names one
/// (`.ci/run` starts it with bench/postgres.sh); skipped, saying so, otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ycsb_load_and_run_against_postgres() {
    let Ok(url) = std::env::var("SHOAL_PG_URL") else {
        eprintln!("skipped: set SHOAL_PG_URL (bench/postgres.sh start prints it) to run against PostgreSQL");
        return;
    };
    let wf = workload("workloadf").display().to_string();
    let table = format!("table=ycsb_it_{}", std::process::id());
    let common = ["-P", &wf, "-p", "recordcount=100", "-p", "threadcount=4", "-p", &table, "--uri", &url];
    let mut args = vec!["load", "--fresh"];
    args.extend(common);
    let out = bench(&args).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "load failed:\n{stdout}\n{stderr}");
    assert_eq!(metric(&stdout, "INSERT", "Return=OK"), Some(100.0), "{stdout}");
    assert!(stdout.contains("synchronous_commit=on"), "durability stated:\n{stdout}");

    let mut args = vec!["run", "-p", "operationcount=200"];
    args.extend(common);
    let out = bench(&args).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "run failed:\n{stdout}\n{stderr}");
    let rmw = metric(&stdout, "READ-MODIFY-WRITE", "Return=OK").unwrap_or(0.0);
    let reads = metric(&stdout, "READ", "Return=OK").unwrap_or(0.0);
    assert!(rmw > 0.0, "workload F has read-modify-writes:\n{stdout}");
    assert_eq!(reads, 200.0, "every operation reads once (plain reads + RMW reads):\n{stdout}");
}
