//! A phase's results as text: YCSB's report lines (so YCSB tooling parses them), a table for
//! people, and JSON for machines.

use std::fmt::Write as _;

use super::stats::{OpStats, RunReport};

/// YCSB's name for a percentile line: `95th`, `99th`, `99.9th`.
fn ordinal(p: f64) -> String {
    if p.fract() == 0.0 { format!("{}th", p as u64) } else { format!("{p}th") }
}

fn percentile(op: &OpStats, p: f64) -> u64 {
    match p {
        50.0 => op.p50_us,
        95.0 => op.p95_us,
        99.0 => op.p99_us,
        _ => op.p999_us,
    }
}

/// `[OVERALL], RunTime(ms), …` and per operation `[READ], Operations, …` lines, as YCSB's
/// HdrHistogram measurement prints them.
pub fn ycsb_text(report: &RunReport, percentiles: &[f64]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "[OVERALL], RunTime(ms), {}", report.runtime_ms);
    let _ = writeln!(out, "[OVERALL], Throughput(ops/sec), {}", report.throughput);
    if let Some(us) = report.server_cpu_us_per_op {
        let _ = writeln!(out, "[OVERALL], ServerCpuPerOp(us), {us:.1}");
    }
    let _ = writeln!(out, "[OVERALL], ClientCpuPerOp(us), {:.1}", report.client_cpu_us_per_op);
    for op in &report.operations {
        let name = &op.operation;
        let _ = writeln!(out, "[{name}], Operations, {}", op.operations);
        let _ = writeln!(out, "[{name}], AverageLatency(us), {}", op.avg_us);
        let _ = writeln!(out, "[{name}], MinLatency(us), {}", op.min_us);
        let _ = writeln!(out, "[{name}], MaxLatency(us), {}", op.max_us);
        for p in percentiles {
            let _ = writeln!(out, "[{name}], {}PercentileLatency(us), {}", ordinal(*p), percentile(op, *p));
        }
        let _ = writeln!(out, "[{name}], Return=OK, {}", op.ok);
        if op.not_found > 0 {
            let _ = writeln!(out, "[{name}], Return=NOT_FOUND, {}", op.not_found);
        }
        if op.errors > 0 {
            let _ = writeln!(out, "[{name}], Return=ERROR, {}", op.errors);
        }
    }
    out
}

/// A table for people: one line per operation type.
pub fn human_table(report: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} · {} {} · {} threads · {}-byte records · {:.1} s · {:.0} ops/s",
        report.target,
        report.phase,
        report.workload,
        report.threads,
        report.record_bytes,
        report.runtime_ms as f64 / 1000.0,
        report.throughput
    );
    let _ = writeln!(out, "durability: {}", report.durability);
    let server = report
        .server_cpu_us_per_op
        .map_or_else(|| "not measured (--server-pids)".to_owned(), |us| format!("{us:.1} µs"));
    let _ = writeln!(out, "CPU per operation: server {server}, this client {:.1} µs", report.client_cpu_us_per_op);
    let _ = writeln!(
        out,
        "{:<18} {:>9} {:>9} {:>9} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "operation", "count", "ok", "not-found", "errors", "avg µs", "p50 µs", "p95 µs", "p99 µs", "p99.9 µs", "max µs"
    );
    for op in &report.operations {
        let _ = writeln!(
            out,
            "{:<18} {:>9} {:>9} {:>9} {:>7} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>9}",
            op.operation,
            op.operations,
            op.ok,
            op.not_found,
            op.errors,
            op.avg_us,
            op.p50_us,
            op.p95_us,
            op.p99_us,
            op.p999_us,
            op.max_us
        );
    }
    out
}

pub fn json(reports: &[RunReport]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(reports)
}

/// Operations that failed, over all types.
pub fn errors(report: &RunReport) -> u64 {
    report.operations.iter().map(|o| o.errors).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ycsb::stats::TimelinePoint;

    fn sample() -> RunReport {
        let op = OpStats {
            operation: "READ".into(),
            operations: 10,
            ok: 8,
            not_found: 1,
            errors: 1,
            avg_us: 120.5,
            min_us: 50,
            p50_us: 100,
            p95_us: 200,
            p99_us: 300,
            p999_us: 400,
            max_us: 500,
        };
        RunReport {
            target: "shoal".into(),
            phase: "run".into(),
            workload: "workloada".into(),
            threads: 4,
            record_bytes: 1000,
            records: 100,
            runtime_ms: 2000,
            throughput: 5.0,
            operations: vec![op],
            timeline: vec![TimelinePoint { t_s: 1.0, ops_per_sec: 5.0 }],
            durability: "journaled".into(),
            server_cpu_us_per_op: None,
            client_cpu_us_per_op: 0.0,
        }
    }

    #[test]
    fn ycsb_lines_have_ycsbs_names() {
        let text = ycsb_text(&sample(), &[95.0, 99.0, 99.9]);
        for line in [
            "[OVERALL], RunTime(ms), 2000",
            "[OVERALL], Throughput(ops/sec), 5",
            "[READ], Operations, 10",
            "[READ], AverageLatency(us), 120.5",
            "[READ], 95thPercentileLatency(us), 200",
            "[READ], 99thPercentileLatency(us), 300",
            "[READ], 99.9thPercentileLatency(us), 400",
            "[READ], Return=OK, 8",
            "[READ], Return=NOT_FOUND, 1",
            "[READ], Return=ERROR, 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert_eq!(errors(&sample()), 1);
    }

    #[test]
    fn json_round_trips() -> Result<(), serde_json::Error> {
        let reports = vec![sample()];
        let back: Vec<RunReport> = serde_json::from_str(&json(&reports)?)?;
        assert_eq!(back, reports);
        assert!(human_table(&reports[0]).contains("READ"));
        Ok(())
    }
}
