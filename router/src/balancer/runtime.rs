//! The balancer's runtime: the loop every router with config servers runs (unless
//! `--no-balancer`); only the one holding the `balancer` lease acts.
//!
//! ```text
//!  every round (interval, or BUSY_ROUND_INTERVAL after a round that did something — only
//!  IDLE_CLUSTER_BUSY_ROUND_INTERVAL when no chunk saw client load — or at once when
//!  balancerStart reaches this router; see [`next_pause`]):
//!    lease token? --no--> idle (not the holder; nothing written)
//!    read catalog; mode off / outside activeWindow --> idle round
//!    stats <- _shoalChunkStats of every shard; memory.observe; plan(catalog, stats, memory)
//!    empty plan --> idle round
//!    else: ReportBalancerRounds{in_round} ; splits & jumbo marks in order ; moves at once
//!          (the plan puts at most one per shard) ; merges ; each fenced by the token, each
//!          re-checking the lease first, each logged (tracing + config.actionlog)
//!          ReportBalancerRounds{+1, !in_round} ; LogAction balancer.round
//! ```
//!
//! Metrics (`super::metrics`, in `state.balancer_metrics`): every round the holder runs, the
//! jumbo chunks and data bytes it saw, each split and move (with its duration and the policy's
//! reason, the last moves kept for the status page).
//!
//! Records: an active round writes its decisions and a `balancer.round` entry. Idle rounds are
//! counted and written sparsely ([`RoundBook`]): an action-log entry only when the reason for
//! idling changes, and the round count at most every [`ROUND_REPORT_INTERVAL`], so an idle
//! cluster costs a raft write every few seconds, not one per round. `balancerStatus` on any router
//! reads the count from the catalog, so it may lag the holder by that interval.
//!
//! Clock for `activeWindow`: the lease holder's local wall clock, in its local time zone (as
//! MongoDB uses the config primary's); containers without a zone run in UTC.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use shoal_proto::catalog::{ChunkBound, ClusterCatalogView, Command, Detail, Settings};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::execute::{self, Done};
use super::lease::{self, LeaseBook, SharedBook};
use super::policy::{self, Action, Decision, Memory, Params, Plan, SplitAt, SplitReason};
use super::stats;
use crate::error::CommandError;
use crate::state::RouterState;

/// Next round soon after one that did something, as MongoDB does (it waits 1 s, else 10 s).
pub const BUSY_ROUND_INTERVAL: Duration = Duration::from_secs(1);
/// After a round that did something while no client load was sampled on any chunk: the next
/// round nearly at once, so an idle cluster balances at the speed of its migrations rather
/// than one move per second (with two shards a round holds one move).
pub const IDLE_CLUSTER_BUSY_ROUND_INTERVAL: Duration = Duration::from_millis(100);
/// Client requests per second, summed over every chunk, below which the cluster counts as idle.
pub const IDLE_CLUSTER_OPS_PER_SEC: f64 = 1.0;
/// Idle rounds are added to the catalog's round count at most this often.
pub const ROUND_REPORT_INTERVAL: Duration = Duration::from_secs(5);
/// Bound on one catalog write of the balancer's own records (they are best effort).
const RECORD_TIMEOUT: Duration = Duration::from_secs(5);
/// Rounds wait this long for the lease keeper's first answer before the first round.
const FIRST_ROUND_DELAY: Duration = Duration::from_millis(200);

/// The balancer's settings (router flags).
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerSettings {
    /// `--no-balancer` turns this off: the router never takes the lease.
    pub enabled: bool,
    /// Pause between rounds that did nothing.
    pub round_interval: Duration,
    /// Passed to every balancer migration's donor (admission control; 0 = off).
    pub migration_latency_target_ms: u32,
    pub params: Params,
}

impl Default for BalancerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            round_interval: Duration::from_secs(10),
            migration_latency_target_ms: 50,
            params: Params::default(),
        }
    }
}

/// The running balancer of this router: stop it at shutdown so it gives the lease back.
pub struct Balancer {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Balancer {
    pub async fn stop(self) {
        self.stop.send_replace(true);
        for task in self.tasks {
            if tokio::time::timeout(lease::LEASE_SAFETY_MARGIN, task).await.is_err() {
                tracing::warn!("balancer task still busy at shutdown");
            }
        }
    }
}

/// Starts the balancer if this router has config servers and it is not disabled. `holder` names
/// this router process uniquely (host:port:pid).
pub fn start(state: &Arc<RouterState>, holder: String) -> Option<Balancer> {
    if !state.catalog.is_configured() || !state.settings.balancer.enabled {
        return None;
    }
    tracing::info!(%holder, interval_ms = state.settings.balancer.round_interval.as_millis() as u64, "balancer started");
    let (stop, stop_rx) = watch::channel(false);
    let book: SharedBook = Arc::new(Mutex::new(LeaseBook::default()));
    let keeper = tokio::spawn(lease::keep(Arc::clone(state), holder, Arc::clone(&book), stop_rx.clone()));
    let rounds = tokio::spawn(run_rounds(Arc::clone(state), book, stop_rx));
    Some(Balancer { stop, tasks: vec![keeper, rounds] })
}

/// Wall-clock milliseconds since the Unix epoch (the policy's `now`).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Minutes since local midnight (see the module note on the clock).
fn local_minute_of_day() -> u32 {
    use chrono::Timelike;
    let now = chrono::Local::now();
    now.hour() * 60 + now.minute()
}

/// Why a round does nothing before asking the policy, if it does nothing.
pub fn idle_reason(settings: &Settings, minute_of_day: u32) -> Option<String> {
    if !settings.balancer_enabled() {
        return Some("the balancer is stopped".into());
    }
    match &settings.active_window {
        Some(w) if !w.contains(minute_of_day) => {
            Some(format!("outside the active window {}-{} (local time)", w.start, w.stop))
        }
        _ => None,
    }
}

/// Counting and sparse recording of rounds (pure; see the module note).
#[derive(Debug, Default)]
pub struct RoundBook {
    unreported: u64,
    reported_at: Option<Instant>,
    /// The idle reason of the last action-log entry; `None` after an active round.
    logged_idle: Option<String>,
    /// Idle rounds since the last action-log entry.
    idle_unlogged: u64,
}

/// What to write after an idle round.
#[derive(Debug, Default, PartialEq)]
pub struct IdleRecord {
    /// Write a `balancer.round` entry covering this many idle rounds.
    pub log_rounds: Option<u64>,
    /// Add this many rounds to the catalog's count.
    pub report: Option<u64>,
}

impl RoundBook {
    pub fn idle(&mut self, why: &str, now: Instant) -> IdleRecord {
        self.unreported += 1;
        self.idle_unlogged += 1;
        let mut record = IdleRecord::default();
        if self.logged_idle.as_deref() != Some(why) {
            record.log_rounds = Some(std::mem::take(&mut self.idle_unlogged));
            self.logged_idle = Some(why.to_owned());
        }
        if record.log_rounds.is_some()
            || self.reported_at.is_none_or(|t| now.duration_since(t) >= ROUND_REPORT_INTERVAL)
        {
            record.report = Some(self.take(now));
        }
        record
    }

    /// An active round begins: the rounds not yet reported go with the `in_round` report.
    pub fn begin_active(&mut self, now: Instant) -> u64 {
        self.take(now)
    }

    /// An active round ended: it is reported at once, and the next idle round is logged.
    pub fn end_active(&mut self, now: Instant) -> u64 {
        self.logged_idle = None;
        self.idle_unlogged = 0;
        self.unreported += 1;
        self.take(now)
    }

    /// The lease was lost or newly taken: start recording afresh.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    fn take(&mut self, now: Instant) -> u64 {
        self.reported_at = Some(now);
        std::mem::take(&mut self.unreported)
    }
}

struct Rounds {
    state: Arc<RouterState>,
    book: SharedBook,
    memory: Memory,
    rounds: RoundBook,
    /// The lease grant the memory belongs to (a new grant starts an empty memory).
    grant: u64,
    /// Client requests per second over every chunk, from the last round's statistics.
    client_ops_per_sec: f64,
}

async fn run_rounds(state: Arc<RouterState>, book: SharedBook, mut stop: watch::Receiver<bool>) {
    let mut r = Rounds {
        state,
        book,
        memory: Memory::default(),
        rounds: RoundBook::default(),
        grant: 0,
        client_ops_per_sec: f64::INFINITY,
    };
    let mut pause = FIRST_ROUND_DELAY;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = r.state.balancer_wake.notified() => {}
            _ = stop.changed() => return,
        }
        let busy = r.round().await;
        pause = next_pause(busy, r.client_ops_per_sec, r.state.settings.balancer.round_interval);
    }
}

/// The pause before the next round: `idle_interval` after a round that did nothing; after one
/// that did something, MongoDB's short interval while clients are using the cluster (their
/// latency has the donors' throttle and this pause to protect it) and almost none while no chunk
/// saw a client request in the shards' load window.
pub fn next_pause(busy: bool, client_ops_per_sec: f64, idle_interval: Duration) -> Duration {
    match busy {
        false => idle_interval,
        true if client_ops_per_sec < IDLE_CLUSTER_OPS_PER_SEC => IDLE_CLUSTER_BUSY_ROUND_INTERVAL,
        true => BUSY_ROUND_INTERVAL,
    }
}

impl Rounds {
    fn token(&self) -> Option<u64> {
        lease::token(&self.book)
    }

    /// One round; whether it did something.
    async fn round(&mut self) -> bool {
        if self.token().is_none() {
            tracing::trace!("not the balancer lease holder");
            self.rounds.reset();
            return false;
        }
        let grant = self.book.lock().map(|b| b.grants()).unwrap_or(0);
        if grant != self.grant {
            self.grant = grant;
            self.memory = Memory { since_ms: now_ms(), ..Memory::default() };
            self.rounds.reset();
        }
        self.state.balancer_metrics.round();
        let started = Instant::now();
        let catalog = match self.state.catalog.view(policy::INPUT).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(errmsg = %e.errmsg, "balancer round: cannot read the catalog");
                self.idle(&format!("cannot read the catalog: {}", e.errmsg), Vec::new()).await;
                return false;
            }
        };
        self.state.balancer_metrics.saw_catalog(&catalog);
        if let Some(why) = idle_reason(catalog.settings(), local_minute_of_day()) {
            tracing::debug!(%why, "balancer round idle");
            self.idle(&why, Vec::new()).await;
            return false;
        }
        let now = now_ms();
        let params = self.state.settings.balancer.params.clone();
        let stats = stats::gather(&self.state, &catalog, None).await;
        self.client_ops_per_sec = stats.ops_per_sec();
        self.state.balancer_metrics.saw_stats(&catalog, &stats);
        stats::observe_hot(&mut self.memory, &catalog, &stats, &params, now);
        let plan = policy::plan(&catalog, &stats, &self.memory, &params, now);
        for key in &plan.unsplittable {
            *self.memory.failed_splits.entry(key.clone()).or_insert(0) += 1;
        }
        for note in &plan.notes {
            tracing::debug!(%note, "balancer note");
        }
        if plan.decisions.is_empty() {
            let why = if plan.notes.is_empty() { "balanced" } else { "nothing to do (see notes)" };
            self.idle(why, plan.notes).await;
            return false;
        }
        self.active(&catalog, plan, started).await
    }

    async fn idle(&mut self, why: &str, notes: Vec<String>) {
        let record = self.rounds.idle(why, Instant::now());
        if let Some(completed) = record.report {
            self.record(Command::ReportBalancerRounds { completed, in_round: false }).await;
        }
        if let Some(rounds) = record.log_rounds {
            tracing::info!(%why, idle_rounds = rounds, "balancer idle");
            let mut details = BTreeMap::from([
                ("why".to_owned(), Detail::from(why)),
                ("idleRounds".to_owned(), Detail::from(rounds)),
                ("executionTimeMillis".to_owned(), Detail::from(0_u64)),
                ("errorOccurred".to_owned(), Detail::from(false)),
            ]);
            round_error_alias(&mut details);
            if !notes.is_empty() {
                let notes = notes.into_iter().take(8).map(Detail::Str).collect();
                details.insert("notes".to_owned(), Detail::List(notes));
            }
            self.log_action("balancer.round", "", details).await;
        }
    }

    async fn active(&mut self, catalog: &ClusterCatalogView, plan: Plan, started: Instant) -> bool {
        let unreported = self.rounds.begin_active(Instant::now());
        self.record(Command::ReportBalancerRounds { completed: unreported, in_round: true }).await;
        let (moves, mut rest): (Vec<Decision>, Vec<Decision>) =
            plan.decisions.into_iter().partition(|d| matches!(d.action, Action::Move { .. }));
        let merges: Vec<Decision> = {
            let (m, r): (Vec<_>, Vec<_>) = rest.into_iter().partition(|d| matches!(d.action, Action::Merge { .. }));
            rest = r;
            m
        };
        let total = rest.len() + moves.len() + merges.len();
        let (mut done, mut failed, mut lost) = (0_u64, 0_u64, false);
        for d in &rest {
            match self.one(catalog, d).await {
                Some(true) => done += 1,
                Some(false) => failed += 1,
                None => lost = true,
            }
            if lost {
                break;
            }
        }
        if !lost && !moves.is_empty() {
            let this = &*self;
            let results = join_all(moves.iter().map(|d| this.run_logged(catalog, d))).await;
            for result in results {
                match result {
                    Some(Ok(_)) => done += 1,
                    Some(Err(_)) => failed += 1,
                    None => lost = true,
                }
            }
        }
        if !lost {
            for d in &merges {
                match self.one(catalog, d).await {
                    Some(true) => done += 1,
                    Some(false) => failed += 1,
                    None => {
                        lost = true;
                        break;
                    }
                }
            }
        }
        let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let completed = self.rounds.end_active(Instant::now());
        self.record(Command::ReportBalancerRounds { completed, in_round: false }).await;
        let why = if lost { "stopped: the balancer lease was lost" } else { "acted" };
        tracing::info!(planned = total, done, failed, lost, millis, "balancer round");
        let mut details = BTreeMap::from([
            ("why".to_owned(), Detail::from(why)),
            ("candidateActions".to_owned(), Detail::from(total as u64)),
            ("actionsDone".to_owned(), Detail::from(done)),
            ("actionsFailed".to_owned(), Detail::from(failed)),
            ("executionTimeMillis".to_owned(), Detail::from(millis)),
            ("errorOccurred".to_owned(), Detail::from(failed > 0 || lost)),
        ]);
        if failed > 0 || lost {
            let errmsg =
                format!("{failed} of {total} actions failed{}", if lost { "; the lease was lost" } else { "" });
            details.insert("errmsg".to_owned(), Detail::Str(errmsg));
        }
        round_error_alias(&mut details);
        self.log_action("balancer.round", "", details).await;
        done > 0
    }

    /// A non-move decision, with its memory updates: `Some(success)`, `None` if the lease is gone.
    async fn one(&mut self, catalog: &ClusterCatalogView, d: &Decision) -> Option<bool> {
        let result = self.run_logged(catalog, d).await?;
        let now = now_ms();
        match (&d.action, &result) {
            (Action::Split { ns, min, version, .. }, Err(e)) if execute::is_cannot_split(e) => {
                *self.memory.failed_splits.entry((ns.clone(), min.clone(), *version)).or_insert(0) += 1;
            }
            (Action::Split { ns, at: SplitAt::Points(points), reason: SplitReason::Load, .. }, Ok(_)) => {
                for p in points {
                    self.memory.load_split_boundaries.insert((ns.clone(), p.clone()), now);
                }
            }
            (Action::MarkJumbo { ns, min, version, .. }, Ok(_)) => {
                self.memory.failed_splits.remove(&(ns.clone(), min.clone(), *version));
            }
            _ => {}
        }
        Some(result.is_ok())
    }

    /// Executes `d` if the lease is still ours, logging it either way it ends.
    async fn run_logged(&self, catalog: &ClusterCatalogView, d: &Decision) -> Option<Result<Done, CommandError>> {
        let token = self.token()?;
        let started = Instant::now();
        let latency = self.state.settings.balancer.migration_latency_target_ms;
        let result = execute::execute(&self.state, catalog, d, token, latency).await;
        let error = result.as_ref().err().map(|e| e.errmsg.as_str());
        self.state.balancer_metrics.done(catalog, d, started.elapsed(), error);
        let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (what, ns, mut details) = describe(&d.action);
        details.insert("why".into(), Detail::from(d.why.as_str()));
        details.insert("executionTimeMillis".into(), Detail::from(millis));
        details.insert("errorOccurred".into(), Detail::from(result.is_err()));
        match &result {
            Ok(done) => {
                tracing::info!(what, %ns, why = %d.why, ?done, millis, "balancer action");
                if let Done::Split { points } = done {
                    details.insert("splitPoints".into(), Detail::from(*points as u64));
                }
            }
            Err(e) => {
                tracing::warn!(what, %ns, why = %d.why, errmsg = %e.errmsg, millis, "balancer action failed");
                details.insert("errmsg".into(), Detail::from(e.errmsg.as_str()));
            }
        }
        self.log_action(what, &ns, details).await;
        Some(result)
    }

    async fn log_action(&self, what: &str, ns: &str, details: BTreeMap<String, Detail>) {
        self.record(Command::LogAction { what: what.to_owned(), ns: ns.to_owned(), details }).await;
    }

    /// Writes one of the balancer's own records; a failure is logged and the round goes on.
    async fn record(&self, command: Command) {
        match tokio::time::timeout(RECORD_TIMEOUT, self.state.catalog.write(&command)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(%command, errmsg = %e.errmsg, "balancer record not written"),
            Err(_) => tracing::warn!(%command, "balancer record timed out"),
        }
    }
}

/// mongosh's `sh.status()` counts failed rounds by `details.errorOccured` (a misspelling older
/// shells and servers share); round entries carry both spellings so either reader sees failures.
fn round_error_alias(details: &mut BTreeMap<String, Detail>) {
    if let Some(v) = details.get("errorOccurred").cloned() {
        details.insert("errorOccured".to_owned(), v);
    }
}

/// The action-log event name, namespace and identifying details of an action.
fn describe(action: &Action) -> (&'static str, String, BTreeMap<String, Detail>) {
    let bound = |b: &ChunkBound| Detail::Bound(b.clone());
    match action {
        Action::Split { ns, min, max, at, reason, .. } => {
            let at = match at {
                SplitAt::Points(p) => format!("{} points", p.len()),
                SplitAt::BySize => "by size".to_owned(),
            };
            let d = BTreeMap::from([
                ("min".to_owned(), bound(min)),
                ("max".to_owned(), bound(max)),
                ("at".to_owned(), Detail::Str(at)),
                ("reason".to_owned(), Detail::Str(format!("{reason:?}"))),
            ]);
            ("balancer.split", ns.clone(), d)
        }
        Action::Move { ns, min, max, from, to, reason, .. } => {
            let d = BTreeMap::from([
                ("min".to_owned(), bound(min)),
                ("max".to_owned(), bound(max)),
                ("from".to_owned(), Detail::from(from.as_str())),
                ("to".to_owned(), Detail::from(to.as_str())),
                ("reason".to_owned(), Detail::Str(format!("{reason:?}"))),
            ]);
            ("balancer.move", ns.clone(), d)
        }
        Action::Merge { ns, min, max, versions, shard, .. } => {
            let d = BTreeMap::from([
                ("min".to_owned(), bound(min)),
                ("max".to_owned(), bound(max)),
                ("chunks".to_owned(), Detail::from(versions.len() as u64)),
                ("shard".to_owned(), Detail::from(shard.as_str())),
            ]);
            ("balancer.merge", ns.clone(), d)
        }
        Action::MarkJumbo { ns, min, max, .. } => {
            let d = BTreeMap::from([("min".to_owned(), bound(min)), ("max".to_owned(), bound(max))]);
            ("balancer.jumbo", ns.clone(), d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::catalog::{ActiveWindow, BalancerMode};

    #[test]
    fn rounds_follow_quickly_only_while_the_cluster_is_idle_and_busy() {
        let idle = Duration::from_secs(10);
        assert_eq!(next_pause(false, 0.0, idle), idle);
        assert_eq!(next_pause(false, 500.0, idle), idle);
        assert_eq!(next_pause(true, 0.0, idle), IDLE_CLUSTER_BUSY_ROUND_INTERVAL);
        assert_eq!(next_pause(true, 0.5, idle), IDLE_CLUSTER_BUSY_ROUND_INTERVAL);
        assert_eq!(next_pause(true, 1.0, idle), BUSY_ROUND_INTERVAL);
        assert_eq!(next_pause(true, f64::INFINITY, idle), BUSY_ROUND_INTERVAL, "no statistics yet: MongoDB's pause");
    }

    #[test]
    fn idle_rounds_are_logged_on_change_and_counted_sparsely() {
        let t0 = Instant::now();
        let mut book = RoundBook::default();
        assert_eq!(book.idle("balanced", t0), IdleRecord { log_rounds: Some(1), report: Some(1) });
        let second = t0 + Duration::from_millis(100);
        assert_eq!(book.idle("balanced", second), IdleRecord::default(), "the same reason again writes nothing");
        let later = t0 + ROUND_REPORT_INTERVAL;
        assert_eq!(book.idle("balanced", later), IdleRecord { log_rounds: None, report: Some(2) });
        assert_eq!(
            book.idle("the balancer is stopped", later).log_rounds,
            Some(3),
            "a new reason is logged, counting this round"
        );
        assert_eq!(book.begin_active(later), 0, "every idle round was already reported");
        assert_eq!(book.end_active(later), 1);
        assert_eq!(book.idle("the balancer is stopped", later).log_rounds, Some(1), "logged again after acting");
    }

    #[test]
    fn mode_and_window_make_a_round_idle() {
        let mut s = Settings::default();
        assert_eq!(idle_reason(&s, 600), None);
        s.active_window = Some(ActiveWindow { start: "01:00".into(), stop: "02:00".into() });
        assert!(idle_reason(&s, 600).is_some_and(|w| w.contains("window")));
        assert_eq!(idle_reason(&s, 90), None);
        s.balancer_mode = BalancerMode::Off;
        assert_eq!(idle_reason(&s, 90).as_deref(), Some("the balancer is stopped"));
    }
}
