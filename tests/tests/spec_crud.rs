//! MongoDB's driver specification tests (unified test format), vendored under `tests/spec/`, run
//! against one sharded cluster (three config servers, two shards, a router) through the official
//! Rust driver by `shoal_tests::unified`. Fails if a test not listed in `tests/spec/skips.txt`
//! fails, if a listed one passes, or if a listed one no longer exists. `SHOAL_SPEC_FILTER=crud/find`
//! runs only the files whose `area/file` contains it; `SHOAL_SPEC_VERBOSE=1` prints why each
//! skipped test failed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use shoal_tests::sharded_cluster::ShardedCluster;
use shoal_tests::unified::skips::{Outcome, Skips, summary};
use shoal_tests::unified::{run_areas, spec_dir};

const AREAS: &[&str] = &["crud", "index-management", "collection-management", "retryable-writes"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unified_spec_tests() {
    let text = std::fs::read_to_string(spec_dir().join("skips.txt")).expect("tests/spec/skips.txt");
    let skips = Skips::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let filter = std::env::var("SHOAL_SPEC_FILTER").ok();
    let router = cluster.router.addr().to_string();
    let started = std::time::Instant::now();
    let records = run_areas(AREAS, &router, &skips, filter.as_deref()).await;
    println!("{}", summary(&records));
    println!("ran {} tests in {:?}", records.len(), started.elapsed());
    if std::env::var("SHOAL_SPEC_VERBOSE").is_ok() {
        for r in &records {
            if let Outcome::Skip { reason, error } = &r.outcome {
                println!("SKIP {} :: {} ({reason})\n    {error}", r.file, r.test);
            }
        }
    }
    let failed = records.iter().filter(|r| matches!(r.outcome, Outcome::Fail(_))).count();
    let unused = if filter.is_none() { skips.unused(&records) } else { Vec::new() };
    if failed > 0 || !unused.is_empty() {
        eprintln!("{}", cluster.log_tails(20));
    }
    assert!(unused.is_empty(), "skips.txt lines that match no failing test: {unused:#?}");
    assert_eq!(failed, 0, "{failed} unified spec tests failed (see the summary above)");
}
