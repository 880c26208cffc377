//! Chart rendering on synthetic reports: files are valid PNGs of the right size, odd inputs never panic.

use super::*;

fn op(name: &str, p50: u64) -> OpStats {
    let n = 50_000;
    OpStats {
        operation: name.to_string(),
        operations: n,
        ok: n,
        not_found: 0,
        errors: 0,
        avg_us: p50 as f64 * 1.2,
        min_us: p50 / 3,
        p50_us: p50,
        p95_us: p50 * 3,
        p99_us: p50 * 7,
        p999_us: p50 * 25,
        max_us: p50 * 90,
    }
}

/// A plausible report: postgres slower than shoal, reads faster than writes, more threads help a bit.
fn report(target: &str, workload: &str, record_bytes: usize, threads: usize) -> RunReport {
    let mix = match workload {
        "load" => 0.8,
        "50/50" => 1.0,
        _ => 1.3,
    };
    let speed = if target == "shoal" { 1.0 } else { 0.6 } * mix * (threads as f64 / 64.0).sqrt();
    let base = 40_000.0 * speed * if record_bytes > 1000 { 0.7 } else { 1.0 };
    let lat = (threads as f64 * 15.0 / speed) as u64;
    let (phase, operations) = match workload {
        "load" => ("load", vec![op("INSERT", lat * 2)]),
        _ => ("run", vec![op("READ", lat), op("UPDATE", lat * 3)]),
    };
    let timeline = (1..=30)
        .map(|t| TimelinePoint { t_s: t as f64, ops_per_sec: base * (1.0 + 0.08 * (t as f64 * 0.7).sin()) })
        .collect();
    RunReport {
        target: target.to_string(),
        phase: phase.to_string(),
        workload: workload.to_string(),
        threads,
        record_bytes,
        records: 100_000,
        runtime_ms: 30_000,
        throughput: base,
        operations,
        timeline,
        durability: "journaled".to_string(),
        server_cpu_us_per_op: None,
        client_cpu_us_per_op: 0.0,
    }
}

fn matrix() -> Vec<RunReport> {
    let mut all = Vec::new();
    for target in ["shoal", "postgres"] {
        for workload in ["load", "50/50", "80/20"] {
            for bytes in [100, 2000] {
                for threads in [64, 96, 128] {
                    all.push(report(target, workload, bytes, threads));
                }
            }
        }
    }
    all
}

/// Asserts `path` is a PNG of `SIZE`: signature, IHDR dimensions, and image data that decodes.
fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).expect("chart file readable");
    assert!(bytes.len() > 1000, "{} is too small", path.display());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let dim = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    assert_eq!((dim(16), dim(20)), SIZE);
    let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().expect("PNG header");
    let mut pixels = vec![0; reader.output_buffer_size().expect("buffer size")];
    reader.next_frame(&mut pixels).expect("PNG image data");
    assert!(pixels.iter().any(|&b| b < 128), "{} is blank", path.display());
}

/// Copies the charts to `$YCSB_CHART_EXAMPLES`, names prefixed with `prefix`, when set: to look at them.
fn keep(paths: &[PathBuf], prefix: &str) {
    if let Some(out) = std::env::var_os("YCSB_CHART_EXAMPLES") {
        for p in paths {
            let name = format!("{prefix}{}", p.file_name().expect("file name").to_string_lossy());
            std::fs::copy(p, Path::new(&out).join(name)).expect("copy example");
        }
    }
}

#[test]
fn matrix_charts_write_one_pair_per_record_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = matrix_charts(&matrix(), dir.path()).expect("charts");
    let names: Vec<String> = paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        ["matrix-100B-throughput.png", "matrix-100B-p99.png", "matrix-2000B-throughput.png", "matrix-2000B-p99.png"]
    );
    paths.iter().for_each(|p| assert_png(p));
    keep(&paths, "");
}

#[test]
fn run_charts_write_throughput_and_latency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = run_charts(&report("shoal", "50/50", 2000, 96), dir.path(), "shoal-5050").expect("charts");
    paths.extend(run_charts(&report("postgres", "load", 2000, 64), dir.path(), "postgres-load").expect("charts"));
    let mut every_op = report("shoal", "workloadf", 100, 128);
    every_op.operations = ["READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"]
        .iter()
        .enumerate()
        .map(|(i, name)| op(name, 200 * (i as u64 + 1)))
        .collect();
    paths.extend(run_charts(&every_op, dir.path(), "every-op").expect("charts"));
    assert!(paths[0].ends_with("shoal-5050-throughput.png") && paths[1].ends_with("shoal-5050-latency.png"));
    paths.iter().for_each(|p| assert_png(p));
    keep(&paths, "");
}

#[test]
fn degenerate_inputs_render_without_panicking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut empty = report("shoal", "80/20", 100, 64);
    empty.timeline.clear();
    empty.operations.clear();
    empty.throughput = f64::NAN;
    let mut single = report("mongodb://127.0.0.1:27017", "50/50", 100, 64);
    single.timeline.truncate(1);
    single.operations.iter_mut().for_each(|o| (o.p50_us, o.p95_us, o.p99_us, o.p999_us) = (0, 0, 0, 0));
    let mut extreme = report("a-very-long-target-name-that-does-not-fit-anywhere", "load", 100, 1);
    extreme.timeline.extend([-1.0, f64::NAN, 1e12].map(|v| TimelinePoint { t_s: 31.0, ops_per_sec: v }));
    extreme.operations[0].p999_us = u64::MAX;
    extreme.throughput = -5.0;
    let mut crowded: Vec<RunReport> = (0..12)
        .flat_map(|t| matrix().into_iter().map(move |r| (t, r)))
        .map(|(t, mut r)| {
            r.target = format!("{}-{t}", r.target);
            r
        })
        .collect();
    crowded.push(extreme.clone());
    let mut paths = run_charts(&empty, dir.path(), "empty").expect("empty report");
    paths.extend(run_charts(&single, dir.path(), "single").expect("single point"));
    paths.extend(run_charts(&extreme, dir.path(), "extreme").expect("extreme values"));
    paths.iter().for_each(|p| assert_png(p));
    keep(&paths, "degenerate-");
    for (name, reports) in [("one-report-", vec![single]), ("no-values-", vec![empty]), ("crowded-", crowded)] {
        let sub = tempfile::tempdir().expect("tempdir");
        let paths = matrix_charts(&reports, sub.path()).expect("matrix of degenerate reports");
        assert!(!paths.is_empty());
        paths.iter().for_each(|p| assert_png(p));
        keep(&paths, name);
    }
    assert!(matrix_charts(&[], dir.path()).expect("no reports").is_empty());
}

#[test]
fn bad_output_locations_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = report("shoal", "load", 100, 64);
    let missing = dir.path().join("missing");
    assert!(matches!(run_charts(&r, &missing, "x"), Err(ChartError::NotADirectory(_))));
    assert!(matches!(matrix_charts(std::slice::from_ref(&r), &missing), Err(ChartError::NotADirectory(_))));
    assert!(matches!(run_charts(&r, dir.path(), "a/b"), Err(ChartError::InvalidStem(_))));
    assert!(matches!(run_charts(&r, dir.path(), ""), Err(ChartError::InvalidStem(_))));
}
