//! Runs one YCSB phase: `threadcount` client tasks carry out the workload's actions against a
//! target, each timed into its own HDR histogram per operation type; a ticker samples throughput
//! every second for the timeline and the progress display; `target` throttles, and
//! `maxexecutiontime` stops the phase early.
//!
//! Errors are counted per operation type and reported; they never stop the phase or vanish.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::MissedTickBehavior;

use super::db::{DbError, Found, Session, Target};
use super::props::Workload;
use super::stats::{OpStats, RunReport, TimelinePoint};
use super::workload::{Action, ClientWorkload, OpKind, Shared};

/// Latencies up to 10 minutes are recorded exactly (3 significant digits); longer ones saturate.
const MAX_LATENCY_US: u64 = 600_000_000;
/// A status line this often when stderr is not a terminal (a progress bar otherwise).
const STATUS_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Load,
    Run,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Run => "run",
        }
    }
}

/// What one operation type recorded in one client task.
struct OpRecord {
    hist: Histogram<u64>,
    ok: u64,
    not_found: u64,
    errors: u64,
    first_error: Option<String>,
}

impl OpRecord {
    fn new() -> Self {
        // The bounds are constants that hdrhistogram accepts.
        // Constant, valid bounds: hdrhistogram only refuses low < 1 or high < 2 * low.
        #[allow(clippy::expect_used)]
        let hist = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("constant histogram bounds are valid");
        Self { hist, ok: 0, not_found: 0, errors: 0, first_error: None }
    }

    fn record(&mut self, started: Instant, outcome: &Result<Found, DbError>) {
        self.hist.saturating_record(started.elapsed().as_micros().max(1) as u64);
        match outcome {
            Ok(Found::Yes) => self.ok += 1,
            Ok(Found::No) => self.not_found += 1,
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    fn merge(&mut self, other: OpRecord) {
        // Both histograms share bounds, so adding cannot fail; a failure would only lose samples.
        let _ = self.hist.add(&other.hist);
        self.ok += other.ok;
        self.not_found += other.not_found;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn stats(&self, kind: OpKind) -> OpStats {
        let h = &self.hist;
        let n = h.len();
        OpStats {
            operation: kind.ycsb_name().to_string(),
            operations: self.ok + self.not_found + self.errors,
            ok: self.ok,
            not_found: self.not_found,
            errors: self.errors,
            avg_us: if n == 0 { 0.0 } else { h.mean() },
            min_us: if n == 0 { 0 } else { h.min() },
            p50_us: h.value_at_quantile(0.50),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

type Records = BTreeMap<OpKind, OpRecord>;

fn record(records: &mut Records, kind: OpKind, started: Instant, outcome: &Result<Found, DbError>) {
    records.entry(kind).or_insert_with(OpRecord::new).record(started, outcome);
}

/// What a finished phase hands back besides the report: the first error of each operation type,
/// so a run full of errors says why.
pub struct PhaseOutcome {
    pub report: RunReport,
    pub first_errors: Vec<(String, String)>,
}

/// Runs `phase` of `workload` against `target`. `label` names the workload in the report;
/// `server_pids` are the roots of the server's process trees, whose CPU per operation it gets.
pub async fn run_phase(
    target: &Target,
    workload: &Workload,
    phase: Phase,
    label: &str,
    durability: String,
    server_pids: &[u32],
) -> Result<PhaseOutcome, DbError> {
    let shared = Arc::new(Shared::new(workload.clone()));
    let threads = workload.thread_count;
    let total = match phase {
        Phase::Load => workload.insert_count,
        Phase::Run => workload.operation_count,
    };
    let mut sessions = Vec::with_capacity(threads);
    for _ in 0..threads {
        sessions.push(target.session().await?);
    }
    let budget = Arc::new(AtomicU64::new(total));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let per_thread_interval = workload.target.map(|t| Duration::from_secs_f64(threads as f64 / t));
    let cpu = crate::procs::CpuWindow::start(server_pids);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, session) in sessions.into_iter().enumerate() {
        let client = ClientWorkload::new(Arc::clone(&shared), seed(i));
        let ctx = TaskCtx {
            shared: Arc::clone(&shared),
            budget: Arc::clone(&budget),
            done: Arc::clone(&done),
            stop: Arc::clone(&stop),
            interval: per_thread_interval,
            phase,
        };
        tasks.spawn(client_task(ctx, client, session));
    }
    let (finished, finished_rx) = tokio::sync::oneshot::channel();
    let title = format!("{} {label}", phase.name());
    let ticker = tokio::spawn(tick(Arc::clone(&done), total, started, title, finished_rx));
    let deadline = workload.max_execution_time.map(|d| tokio::time::Instant::now() + d);
    let mut records = Records::new();
    let mut finished_sessions = Vec::with_capacity(threads);
    loop {
        let joined = match deadline {
            Some(at) => match tokio::time::timeout_at(at, tasks.join_next()).await {
                Ok(joined) => joined,
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
                    tasks.join_next().await
                }
            },
            None => tasks.join_next().await,
        };
        let Some(joined) = joined else { break };
        let (task_records, session) = joined.map_err(|e| DbError::Operation(format!("client task failed: {e}")))?;
        finished_sessions.push(session);
        for (kind, r) in task_records {
            match records.get_mut(&kind) {
                Some(existing) => existing.merge(r),
                None => {
                    records.insert(kind, r);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let (server_cpu, client_cpu) = cpu.per_op(done.load(Ordering::Relaxed));
    drop(finished_sessions);
    let _ = finished.send(());
    let timeline = ticker.await.map_err(|e| DbError::Operation(format!("ticker failed: {e}")))?;
    let mut outcome =
        summarize(records, elapsed, done.load(Ordering::Relaxed), timeline, workload, phase, label, durability);
    outcome.report.server_cpu_us_per_op = server_cpu;
    outcome.report.client_cpu_us_per_op = client_cpu;
    Ok(outcome)
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    records: Records,
    elapsed: Duration,
    done: u64,
    mut timeline: Vec<TimelinePoint>,
    workload: &Workload,
    phase: Phase,
    label: &str,
    durability: String,
) -> PhaseOutcome {
    let secs = elapsed.as_secs_f64().max(1e-9);
    if timeline.is_empty() {
        timeline.push(TimelinePoint { t_s: secs, ops_per_sec: done as f64 / secs });
    }
    let first_errors =
        records.iter().filter_map(|(k, r)| r.first_error.clone().map(|e| (k.ycsb_name().to_string(), e))).collect();
    let report = RunReport {
        target: String::new(),
        phase: phase.name().to_string(),
        workload: label.to_string(),
        threads: workload.thread_count,
        record_bytes: workload.record_bytes(),
        records: workload.record_count,
        runtime_ms: elapsed.as_millis() as u64,
        throughput: done as f64 / secs,
        operations: records.iter().map(|(k, r)| r.stats(*k)).collect(),
        timeline,
        durability,
        server_cpu_us_per_op: None,
        client_cpu_us_per_op: 0.0,
    };
    PhaseOutcome { report, first_errors }
}

/// Distinct, reproducible per-thread seeds.
fn seed(thread: usize) -> u64 {
    0x5eed_0000_0000_0000 ^ (thread as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

struct TaskCtx {
    shared: Arc<Shared>,
    budget: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    interval: Option<Duration>,
    phase: Phase,
}

impl TaskCtx {
    /// Takes one operation from the phase's budget; false once it is spent or time is up.
    fn take(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
            && self.budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok()
    }
}

/// Returns the session with the records: it stays connected until the phase's CPU is counted (a
/// PostgreSQL backend whose client left exits, and its CPU leaves the tree until it is reaped).
async fn client_task(ctx: TaskCtx, mut client: ClientWorkload, mut session: Session) -> (Records, Session) {
    let mut records = Records::new();
    let mut next_at = tokio::time::Instant::now();
    while ctx.take() {
        if let Some(interval) = ctx.interval {
            tokio::time::sleep_until(next_at).await;
            next_at += interval;
        }
        let action = match ctx.phase {
            Phase::Load => match client.next_load() {
                Some(a) => a,
                None => break,
            },
            Phase::Run => client.next_run(),
        };
        execute(&ctx, &mut client, &mut session, action, &mut records).await;
        ctx.done.fetch_add(1, Ordering::Relaxed);
    }
    (records, session)
}

async fn execute(
    ctx: &TaskCtx,
    client: &mut ClientWorkload,
    session: &mut Session,
    action: Action,
    records: &mut Records,
) {
    match action {
        Action::Insert { key, keynum, values } => {
            let t = Instant::now();
            let mut outcome = session.insert(&key, &values).await.map(|()| Found::Yes);
            if ctx.phase == Phase::Run
                && let Err(e) = ctx.shared.acknowledge(keynum)
            {
                outcome = Err(DbError::Operation(e.to_string()));
            }
            // Load-phase retries as YCSB's core_workload_insertion_retry_limit asks (bounded, jittered).
            let w = &ctx.shared.workload;
            let mut tries = 0;
            while outcome.is_err() && ctx.phase == Phase::Load && tries < w.insertion_retry_limit {
                tries += 1;
                let base = w.insertion_retry_interval.as_millis() as u64;
                let jitter = client.jitter(base / 5 + 1);
                tokio::time::sleep(Duration::from_millis(base * 4 / 5 + jitter * 2)).await;
                outcome = session.insert(&key, &values).await.map(|()| Found::Yes);
            }
            record(records, OpKind::Insert, t, &outcome);
        }
        Action::Read { key, fields } => {
            let t = Instant::now();
            let outcome = session.read(&key, fields.as_deref()).await;
            record(records, OpKind::Read, t, &outcome);
        }
        Action::Update { key, values } => {
            let t = Instant::now();
            let outcome = session.update(&key, &values).await;
            record(records, OpKind::Update, t, &outcome);
        }
        Action::Scan { start, count, fields } => {
            let t = Instant::now();
            let outcome = session.scan(&start, count, fields.as_deref()).await.map(|_| Found::Yes);
            record(records, OpKind::Scan, t, &outcome);
        }
        Action::ReadModifyWrite { key, fields, values } => {
            let t = Instant::now();
            let read = session.read(&key, fields.as_deref()).await;
            record(records, OpKind::Read, t, &read);
            let outcome = match read {
                Ok(_) => {
                    let tu = Instant::now();
                    let update = session.update(&key, &values).await;
                    record(records, OpKind::Update, tu, &update);
                    update
                }
                Err(e) => Err(e),
            };
            record(records, OpKind::ReadModifyWrite, t, &outcome);
        }
    }
}

/// Samples completed operations every second: the timeline, and a progress bar (terminal) or a
/// status line every [`STATUS_EVERY`] (logs). Returns the timeline once `finished` fires.
async fn tick(
    done: Arc<AtomicU64>,
    total: u64,
    started: Instant,
    title: String,
    mut finished: tokio::sync::oneshot::Receiver<()>,
) -> Vec<TimelinePoint> {
    let bar = if std::io::stderr().is_terminal() { ProgressBar::new(total) } else { ProgressBar::hidden() };
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar.set_prefix(title.clone());
    let mut timeline = Vec::new();
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval.tick().await;
    let (mut last_n, mut last_t, mut last_status) = (0u64, started, started);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = &mut finished => break,
        }
        let now = Instant::now();
        let n = done.load(Ordering::Relaxed);
        let rate = n.saturating_sub(last_n) as f64 / now.duration_since(last_t).as_secs_f64().max(1e-9);
        timeline.push(TimelinePoint { t_s: now.duration_since(started).as_secs_f64(), ops_per_sec: rate });
        bar.set_position(n);
        bar.set_message(format!("{rate:.0} ops/s"));
        if bar.is_hidden() && now.duration_since(last_status) >= STATUS_EVERY {
            let secs = now.duration_since(started).as_secs();
            eprintln!("{title}: {secs} sec: {n} operations; {rate:.1} current ops/sec");
            last_status = now;
        }
        (last_n, last_t) = (n, now);
    }
    // The partial last second, so short phases still have a point.
    let now = Instant::now();
    let n = done.load(Ordering::Relaxed);
    let span = now.duration_since(last_t).as_secs_f64();
    if span > 0.05 || timeline.is_empty() {
        let rate = n.saturating_sub(last_n) as f64 / span.max(1e-9);
        timeline.push(TimelinePoint { t_s: now.duration_since(started).as_secs_f64(), ops_per_sec: rate });
    }
    bar.finish_and_clear();
    timeline
}
