//! `shoal bench matrix`: the seed benchmark's grid — record sizes × client threads ×
//! {load, 50/50 read/update, 80/20 read/update} — against Shoal and PostgreSQL in one run,
//! interleaved cell by cell (which system goes first alternates), so both see the same machine
//! state. Writes `report.md` (every cell with the Shoal/PostgreSQL ratio), `results.json` and PNG
//! charts into the output directory.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

use super::db::Target;
use super::mongo::MongoOptions;
use super::props::{Properties, Workload};
use super::runner::{self, Phase};
use super::stats::RunReport;
use super::{chart, report};

#[derive(Debug, Clone)]
pub struct MatrixOptions {
    pub shoal_uri: String,
    pub postgres_uri: String,
    /// Record payload sizes in bytes (`fieldcount` × `fieldlength`).
    pub sizes: Vec<usize>,
    pub threads: Vec<usize>,
    pub records: u64,
    /// Operations per run phase (each run phase also stops after `max_seconds`; loads never do).
    pub operations: u64,
    pub max_seconds: u64,
    pub field_count: usize,
    pub out: PathBuf,
    pub mongo: MongoOptions,
    /// Roots of each system's server process trees, for CPU per operation (empty: not measured).
    pub shoal_pids: Vec<u32>,
    pub postgres_pids: Vec<u32>,
}

/// The run-phase mixes of the matrix: (label, read proportion, update proportion).
const MIXES: [(&str, &str, &str); 2] = [("50/50", "0.5", "0.5"), ("80/20", "0.8", "0.2")];

fn workload(opts: &MatrixOptions, size: usize, threads: usize, mix: Option<(&str, &str)>) -> anyhow::Result<Workload> {
    let field_length = (size / opts.field_count).max(1);
    let mut p = Properties::default();
    for (k, v) in [
        ("recordcount", opts.records.to_string()),
        ("operationcount", opts.operations.to_string()),
        ("threadcount", threads.to_string()),
        ("fieldcount", opts.field_count.to_string()),
        ("fieldlength", field_length.to_string()),
        ("requestdistribution", "zipfian".to_string()),
        ("readallfields", "true".to_string()),
        ("hdrhistogram.percentiles", "50,95,99,99.9".to_string()),
    ] {
        p.set(k, &v)?;
    }
    // Only run phases are time-boxed: a load always inserts every record, so both systems run the
    // mixes over the same data.
    if let Some((read, update)) = mix {
        p.set("maxexecutiontime", &opts.max_seconds.to_string())?;
        p.set("readproportion", read)?;
        p.set("updateproportion", update)?;
    }
    Ok(Workload::from_properties(&p, mix.is_some())?)
}

/// One phase on one system; the report's `target` is `shoal` or `postgres`.
async fn phase(
    (name, uri, pids): (&str, &str, &[u32]),
    mongo: &MongoOptions,
    w: &Workload,
    phase: Phase,
    label: &str,
) -> anyhow::Result<(RunReport, Option<String>)> {
    let target = Target::connect(uri, &w.table, w.thread_count, mongo).await.with_context(|| name.to_string())?;
    let durability = target.describe().await?;
    let mut note = None;
    if phase == Phase::Load {
        target.prepare(true).await?;
    }
    let outcome = runner::run_phase(&target, w, phase, label, durability, pids).await?;
    if phase == Phase::Load {
        let count = target.count().await?;
        if count != w.record_count {
            note = Some(format!(
                "{name}, {} B, {} threads: {count} records after loading {}",
                w.record_bytes(),
                w.thread_count,
                w.record_count
            ));
        }
    }
    for (op, e) in &outcome.first_errors {
        eprintln!("{name} {label}: first {op} error: {e}");
    }
    target.close().await;
    let mut report = outcome.report;
    report.target = name.to_string();
    eprintln!(
        "{name:>8} {:>5}B {:>3} threads {:<5} {:>9.0} ops/s, {} errors",
        report.record_bytes,
        report.threads,
        report.workload,
        report.throughput,
        report::errors(&report)
    );
    Ok((report, note))
}

pub async fn run(opts: &MatrixOptions) -> anyhow::Result<Vec<RunReport>> {
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let systems = [
        ("shoal", opts.shoal_uri.as_str(), opts.shoal_pids.as_slice()),
        ("postgres", opts.postgres_uri.as_str(), opts.postgres_pids.as_slice()),
    ];
    // Fail fast on an unreachable system, before any cell runs.
    for (name, uri, _) in systems {
        Target::connect(uri, "usertable", 1, &opts.mongo).await.with_context(|| name.to_string())?.close().await;
    }
    let mut reports = Vec::new();
    let mut notes = Vec::new();
    let mut cell = 0usize;
    for &size in &opts.sizes {
        for &threads in &opts.threads {
            let order: Vec<_> =
                if cell.is_multiple_of(2) { systems.to_vec() } else { systems.iter().rev().copied().collect() };
            cell += 1;
            let load = workload(opts, size, threads, None)?;
            for system in &order {
                let (r, note) = phase(*system, &opts.mongo, &load, Phase::Load, "load").await?;
                reports.push(r);
                notes.extend(note);
            }
            for (label, read, update) in MIXES {
                let w = workload(opts, size, threads, Some((read, update)))?;
                for system in &order {
                    let (r, note) = phase(*system, &opts.mongo, &w, Phase::Run, label).await?;
                    reports.push(r);
                    notes.extend(note);
                }
            }
            // Written after every cell, so an interrupted matrix keeps what it measured.
            std::fs::write(opts.out.join("results.json"), report::json(&reports)?)?;
        }
    }
    let charts = chart::matrix_charts(&reports, &opts.out)?;
    std::fs::write(opts.out.join("report.md"), markdown(opts, &reports, &notes, &charts))?;
    Ok(reports)
}

fn find<'a>(reports: &'a [RunReport], target: &str, like: &RunReport) -> Option<&'a RunReport> {
    reports.iter().find(|r| {
        r.target == target
            && r.workload == like.workload
            && r.threads == like.threads
            && r.record_bytes == like.record_bytes
    })
}

/// p99 of the operations that define the phase: INSERT for load, the worst of READ/UPDATE else.
pub fn main_p99(r: &RunReport) -> u64 {
    r.operations.iter().filter(|o| o.operation != "READ-MODIFY-WRITE").map(|o| o.p99_us).max().unwrap_or(0)
}

/// `163 / 99 (1.65×)`, or `–` where a system's server processes were not given.
fn cpu_cell(shoal: &RunReport, pg: &RunReport) -> String {
    match (shoal.server_cpu_us_per_op, pg.server_cpu_us_per_op) {
        (Some(s), Some(p)) => format!("{s:.0} / {p:.0} ({:.2}×)", s / p.max(1e-9)),
        (Some(s), None) => format!("{s:.0} / –"),
        (None, Some(p)) => format!("– / {p:.0}"),
        (None, None) => "–".to_owned(),
    }
}

/// The report: one row per cell with both systems and the ratio.
pub fn markdown(opts: &MatrixOptions, reports: &[RunReport], notes: &[String], charts: &[PathBuf]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# YCSB matrix: Shoal vs PostgreSQL\n");
    let _ = writeln!(
        out,
        "{} records per cell ({} fields), run phases of up to {} operations or {} s, zipfian requests, \
         all fields read; record sizes {:?} B; client threads {:?}.\n",
        opts.records, opts.field_count, opts.operations, opts.max_seconds, opts.sizes, opts.threads
    );
    for name in ["shoal", "postgres"] {
        if let Some(r) = reports.iter().find(|r| r.target == name) {
            let _ = writeln!(out, "- **{name}**: {}", r.durability);
        }
    }
    let _ = writeln!(
        out,
        "\n| record B | threads | phase | Shoal ops/s | PostgreSQL ops/s | Shoal / PG | Shoal p99 µs | PG p99 µs | \
         server CPU µs/op Shoal / PG | errors Shoal / PG |"
    );
    let _ = writeln!(out, "|---:|---:|---|---:|---:|---:|---:|---:|---|---|");
    for shoal in reports.iter().filter(|r| r.target == "shoal") {
        let Some(pg) = find(reports, "postgres", shoal) else { continue };
        let ratio = shoal.throughput / pg.throughput.max(1e-9);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {:.2}× | {} | {} | {} | {} / {} |",
            shoal.record_bytes,
            shoal.threads,
            shoal.workload,
            shoal.throughput,
            pg.throughput,
            ratio,
            main_p99(shoal),
            main_p99(pg),
            cpu_cell(shoal, pg),
            report::errors(shoal),
            report::errors(pg)
        );
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\nNotes:\n");
        for n in notes {
            let _ = writeln!(out, "- {n}");
        }
    }
    if !charts.is_empty() {
        let _ = writeln!(out);
        for c in charts {
            if let Some(name) = c.file_name() {
                let _ = writeln!(out, "![{}]({})", name.to_string_lossy(), name.to_string_lossy());
            }
        }
    }
    out
}
