//! The process's recent log, as MongoDB keeps it for `getLog`: the last [`KEPT_LINES`] events as
//! MongoDB 4.4+ structured JSON lines (`{"t":{"$date":…},"s":"I","c":…,"id":…,"ctx":…,
//! "msg":…,"attr":{…}}`), counted since the process started, and the warnings logged before the
//! server said it was up (`startupWarnings`). [`RingLayer`] fills it from the process's `tracing`
//! events; the binary adds it beside its stderr formatter.
//!
//! The slow-operation line is MongoDB's own (`"c":"COMMAND","id":51803,"msg":"Slow query"`,
//! [`slow_query`]): servers hand it the attributes and it is written to stderr as that JSON line
//! (through `tracing`, target [`SLOW_QUERY_TARGET`]) and kept here verbatim, so log tooling that
//! parses mongod's slow-query lines reads ours.
//!
//! Must not: block a logging thread on more than a short mutex (lines are formatted before it is
//! taken), or grow: old lines are dropped.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

/// Lines `getLog: "global"` returns at most (MongoDB's RamLog keeps 1024).
pub const KEPT_LINES: usize = 1024;

/// Startup warnings kept at most.
const KEPT_WARNINGS: usize = 64;

/// The `tracing` target of slow-operation lines.
pub const SLOW_QUERY_TARGET: &str = "shoal::slow_query";

/// MongoDB's log id of "Slow query".
const SLOW_QUERY_ID: i32 = 51803;

struct Ring {
    lines: VecDeque<String>,
    startup_warnings: Vec<String>,
}

static RING: Mutex<Ring> = Mutex::new(Ring { lines: VecDeque::new(), startup_warnings: Vec::new() });
static WRITTEN: AtomicU64 = AtomicU64::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);

/// What `getLog` returns for one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// Lines written to this log since the process started (more than `lines` once it wrapped).
    pub total_lines_written: u64,
    /// The kept lines, oldest first.
    pub lines: Vec<String>,
}

/// The last lines of the process's log.
pub fn global() -> Log {
    let ring = RING.lock().unwrap_or_else(|e| e.into_inner());
    Log { total_lines_written: WRITTEN.load(Ordering::Relaxed), lines: ring.lines.iter().cloned().collect() }
}

/// The warnings logged before [`startup_done`].
pub fn startup_warnings() -> Log {
    let ring = RING.lock().unwrap_or_else(|e| e.into_inner());
    let lines = ring.startup_warnings.clone();
    Log { total_lines_written: lines.len() as u64, lines }
}

/// Marks the end of startup: later warnings are not startup warnings.
pub fn startup_done() {
    STARTED.store(true, Ordering::Relaxed);
}

fn keep(line: String, warning: bool) {
    let mut ring = RING.lock().unwrap_or_else(|e| e.into_inner());
    if warning && !STARTED.load(Ordering::Relaxed) && ring.startup_warnings.len() < KEPT_WARNINGS {
        ring.startup_warnings.push(line.clone());
    }
    if ring.lines.len() == KEPT_LINES {
        ring.lines.pop_front();
    }
    ring.lines.push_back(line);
    WRITTEN.fetch_add(1, Ordering::Relaxed);
}

/// Logs one slow operation as MongoDB does: `ctx` names the connection or thread (`conn12`),
/// `attr` holds `type`, `ns`, `command`, `planSummary`, `keysExamined`, `docsExamined`,
/// `nreturned`, `durationMillis` and the rest, in MongoDB's names.
pub fn slow_query(ctx: &str, attr: bson::Document) {
    let attr = bson::Bson::Document(attr).into_relaxed_extjson();
    let line = json_line('I', "COMMAND", SLOW_QUERY_ID, ctx, "Slow query", attr);
    tracing::info!(target: SLOW_QUERY_TARGET, line = line.as_str(), "Slow query");
}

fn json_line(severity: char, component: &str, id: i32, ctx: &str, msg: &str, attr: serde_json::Value) -> String {
    let t = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
    let mut line = serde_json::json!({
        "t": { "$date": t },
        "s": severity.to_string(),
        "c": component,
        "id": id,
        "ctx": ctx,
        "msg": msg,
    });
    if attr.as_object().is_some_and(|a| !a.is_empty())
        && let Some(obj) = line.as_object_mut()
    {
        obj.insert("attr".into(), attr);
    }
    line.to_string()
}

/// The layer keeping every event at `INFO` and above (as the stderr formatter's filter lets
/// through) in the ring.
#[derive(Debug, Default, Clone, Copy)]
pub struct RingLayer;

impl<S: Subscriber> tracing_subscriber::Layer<S> for RingLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *meta.level();
        let warning = level <= Level::WARN;
        if meta.target() == SLOW_QUERY_TARGET
            && let Some(line) = fields.line
        {
            keep(line, warning);
            return;
        }
        let severity = match level {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            Level::INFO => 'I',
            _ => 'D',
        };
        let component = meta.target().split("::").next().unwrap_or("-");
        let thread = std::thread::current();
        let ctx = thread.name().unwrap_or("-");
        keep(json_line(severity, component, 0, ctx, &fields.message, serde_json::Value::Object(fields.attr)), warning);
    }
}

/// An event's message and its other fields as `attr`.
#[derive(Default)]
struct Fields {
    message: String,
    line: Option<String>,
    attr: serde_json::Map<String, serde_json::Value>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "line" => self.line = Some(value.to_owned()),
            name => {
                self.attr.insert(name.to_owned(), value.into());
            }
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attr.insert(field.name().to_owned(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.attr.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attr.insert(field.name().to_owned(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attr.insert(field.name().to_owned(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.attr.insert(field.name().to_owned(), text.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn events_become_mongodb_json_lines_and_slow_queries_keep_their_shape() {
        let subscriber = tracing_subscriber::registry().with(RingLayer);
        let before = global().total_lines_written;
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(shard = "s0", n = 3, "primary stepped down");
            slow_query(
                "conn7",
                bson::doc! { "ns": "app.people", "durationMillis": 120_i64, "planSummary": "COLLSCAN" },
            );
        });
        let log = global();
        assert!(log.total_lines_written >= before + 2);
        let find = |needle: &str| -> serde_json::Value {
            let line = log.lines.iter().rev().find(|l| l.contains(needle)).expect("logged");
            serde_json::from_str(line).expect("json")
        };
        let (slow, warn) = (&find("Slow query"), &find("primary stepped down"));
        assert_eq!(warn["s"], "W");
        assert_eq!(warn["msg"], "primary stepped down");
        assert_eq!(warn["attr"]["shard"], "s0");
        assert_eq!(warn["attr"]["n"], 3);
        assert!(warn["t"]["$date"].as_str().is_some_and(|t| t.ends_with("+00:00")));
        assert_eq!(slow["c"], "COMMAND");
        assert_eq!(slow["id"], 51803);
        assert_eq!(slow["ctx"], "conn7");
        assert_eq!(slow["msg"], "Slow query");
        assert_eq!(slow["attr"]["durationMillis"], 120);
        assert_eq!(slow["attr"]["planSummary"], "COLLSCAN");
        // Startup had not been marked done: the warning is a startup warning.
        assert!(startup_warnings().lines.iter().any(|l| l.contains("primary stepped down")));
    }

    #[test]
    fn the_ring_keeps_the_last_lines() {
        for i in 0..KEPT_LINES + 10 {
            keep(format!("{{\"n\":{i}}}"), false);
        }
        let log = global();
        assert_eq!(log.lines.len(), KEPT_LINES);
        assert!(log.total_lines_written >= (KEPT_LINES + 10) as u64);
    }
}
