//! What one YCSB phase measured, in the shape every output (text, JSON, charts) is built from.

use serde::{Deserialize, Serialize};

/// Latency and outcome counts of one operation type (`READ`, `UPDATE`, `INSERT`, `SCAN`,
/// `READ-MODIFY-WRITE`) over one phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpStats {
    /// YCSB's operation name, upper case: `READ`, `UPDATE`, `INSERT`, `SCAN`, `READ-MODIFY-WRITE`.
    pub operation: String,
    /// Operations attempted (successful + not found + failed).
    pub operations: u64,
    /// Operations that returned OK.
    pub ok: u64,
    /// Reads/updates of a key that did not exist (YCSB's `Return=NOT_FOUND`).
    pub not_found: u64,
    /// Operations that failed (YCSB's `Return=ERROR`); never hidden.
    pub errors: u64,
    pub avg_us: f64,
    pub min_us: u64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

/// Operations completed during one second of a phase.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct TimelinePoint {
    /// Seconds since the phase started (end of the interval).
    pub t_s: f64,
    /// Operations completed in the interval divided by its length.
    pub ops_per_sec: f64,
}

/// One phase (`load` or `run`) of one workload against one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunReport {
    /// Which system: `shoal`, `postgres`, or a `mongodb` endpoint.
    pub target: String,
    /// `load` or `run`.
    pub phase: String,
    /// Short workload name, e.g. `workloada`, `50/50`, `80/20`, `load`.
    pub workload: String,
    /// Client threads (concurrent operations in flight).
    pub threads: usize,
    /// `fieldcount` × `fieldlength`: the payload bytes of one record.
    pub record_bytes: usize,
    pub records: u64,
    pub runtime_ms: u64,
    /// Completed operations (all types) per second over the whole phase.
    pub throughput: f64,
    pub operations: Vec<OpStats>,
    pub timeline: Vec<TimelinePoint>,
    /// Durability the target was run with, in words (write concern, synchronous_commit, ...).
    pub durability: String,
    /// CPU microseconds the server processes used per operation (`--server-pids`: the trees of
    /// `shoal up` or of PostgreSQL's postmaster), when they were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_us_per_op: Option<f64>,
    /// CPU microseconds this benchmark client used per operation.
    #[serde(default)]
    pub client_cpu_us_per_op: f64,
}
