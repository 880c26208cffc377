//! `shoal bench load|run|matrix`: YCSB's CoreWorkload against any MongoDB-protocol endpoint
//! (Shoal's router, or a real MongoDB) or PostgreSQL with JSONB rows, measured and reported the
//! way YCSB does, so the numbers can be set beside published YCSB results.
//!
//! ```text
//!  props.rs     -P files + -p overrides --> Workload (validated; unknown properties refused)
//!  workload.rs  Workload --> per-thread Actions (keys, fields, values, the op mix); no I/O
//!  generator.rs YCSB's uniform / zipfian / scrambled zipfian / latest / counter generators
//!  runner.rs    threadcount tasks x Actions --> db.rs --> mongo.rs | postgres.rs; HDR histograms
//!  report.rs    RunReport --> YCSB text lines, a human table, JSON;  chart.rs --> PNG
//!  matrix.rs    doc sizes x threads x {load, 50/50, 80/20}, Shoal and PostgreSQL interleaved
//! ```
//!
//! Must not: be linked by the servers, or assert timing anywhere (it measures; tests check shape).

pub mod chart;
pub mod db;
pub mod generator;
pub mod matrix;
pub mod mongo;
pub mod postgres;
pub mod props;
pub mod report;
pub mod runner;
pub mod stats;
pub mod workload;

use std::path::PathBuf;

use anyhow::Context as _;

pub use mongo::MongoOptions;
pub use runner::Phase;
use stats::RunReport;

/// One `shoal bench load` or `shoal bench run`.
#[derive(Debug, Clone)]
pub struct PhaseOptions {
    pub phase: Phase,
    /// `-P` workload files, applied in order.
    pub workload_files: Vec<PathBuf>,
    /// `-p key=value` overrides, applied after the files.
    pub overrides: Vec<String>,
    /// `mongodb://…` or `postgres://…`.
    pub uri: String,
    pub mongo: MongoOptions,
    /// Load phase: drop the table/collection first.
    pub fresh: bool,
    /// Write the report as JSON here.
    pub json: Option<PathBuf>,
    /// Write PNG charts into this directory.
    pub charts: Option<PathBuf>,
    /// Roots of the server's process trees (`shoal up`, PostgreSQL's postmaster): their CPU per
    /// operation goes into the report.
    pub server_pids: Vec<u32>,
}

/// Reads the workload: files in order, then overrides.
pub fn workload(files: &[PathBuf], overrides: &[String], phase: Phase) -> anyhow::Result<props::Workload> {
    let mut p = props::Properties::default();
    for f in files {
        p.load_file(f)?;
    }
    for o in overrides {
        p.set_override(o)?;
    }
    Ok(props::Workload::from_properties(&p, phase == Phase::Run)?)
}

/// Short name of the workload: the last `-P` file's name, else `core`.
pub fn label(files: &[PathBuf]) -> String {
    files.last().and_then(|f| f.file_name()).map_or_else(|| "core".to_string(), |n| n.to_string_lossy().into_owned())
}

/// Runs one phase and prints YCSB's report lines and a table on stdout; returns the report.
pub async fn run_phase(opts: &PhaseOptions) -> anyhow::Result<RunReport> {
    let workload = workload(&opts.workload_files, &opts.overrides, opts.phase)?;
    let target = db::Target::connect(&opts.uri, &workload.table, workload.thread_count, &opts.mongo).await?;
    let durability = target.describe().await?;
    if opts.phase == Phase::Load {
        target.prepare(opts.fresh).await?;
    }
    let label = label(&opts.workload_files);
    let outcome = runner::run_phase(&target, &workload, opts.phase, &label, durability, &opts.server_pids).await?;
    let mut report = outcome.report;
    report.target = target.kind().to_string();
    target.close().await;
    println!("{}", report::ycsb_text(&report, &workload.percentiles));
    println!("{}", report::human_table(&report));
    for (op, e) in &outcome.first_errors {
        eprintln!("first {op} error: {e}");
    }
    if let Some(path) = &opts.json {
        std::fs::write(path, report::json(std::slice::from_ref(&report))?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &opts.charts {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let stem = format!("{}-{}-{}", report.target, report.phase, report.workload);
        for path in chart::run_charts(&report, dir, &stem)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(report)
}
