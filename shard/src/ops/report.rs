//! The documents an operation shows, in MongoDB's shapes: its `currentOp` entry
//! ([`current_op`]), its `system.profile` document ([`profile_doc`]) and the attributes of its
//! slow-query log line ([`slow_attr`]); all built only when asked.
//!
//! A command document over [`COMMAND_SHOWN_MAX_BYTES`] is shown as MongoDB shows it:
//! `{$truncated: "<the start of its JSON-like rendering>...", comment: <its comment>}`.

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};

use super::{CommandSource, Op, Outcome};

/// Command documents larger than this (BSON bytes) are truncated.
pub const COMMAND_SHOWN_MAX_BYTES: usize = 1024;

/// The op's command as shown: decoded, with its `$db`, truncated when large.
pub fn command(op: &Op) -> Document {
    let (mut doc, size) = match &op.command {
        CommandSource::Body(bytes) => match Document::from_reader(&mut &bytes[..]) {
            Ok(d) => (d, bytes.len()),
            Err(_) => return doc! { "$truncated": "<invalid BSON>" },
        },
        CommandSource::GetMore { cursor_id, batch_size } => {
            let coll = op.ns.split_once('.').map_or(op.ns.as_str(), |(_, c)| c);
            let mut d = doc! { "getMore": *cursor_id, "collection": coll };
            if *batch_size > 0 {
                d.insert("batchSize", *batch_size);
            }
            (d, 0)
        }
    };
    if !doc.contains_key("$db") {
        doc.insert("$db", op.db.as_str());
    }
    if size <= COMMAND_SHOWN_MAX_BYTES {
        return doc;
    }
    let comment = doc.get("comment").cloned();
    // Display keeps the fields' order (MongoDB shows its own JSON-like rendering here).
    let mut json = doc.to_string();
    let mut cut = COMMAND_SHOWN_MAX_BYTES.saturating_sub(3).min(json.len());
    while !json.is_char_boundary(cut) {
        cut -= 1;
    }
    json.truncate(cut);
    json.push_str("...");
    let mut out = doc! { "$truncated": json };
    if let Some(c) = comment {
        out.insert("comment", c);
    }
    out
}

fn iso_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

fn long(n: u64) -> Bson {
    Bson::Int64(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A count as MongoDB's `appendNumber` writes it in `system.profile`: int32 while it fits.
fn number(n: u64) -> Bson {
    i32::try_from(n).map_or_else(|_| long(n), Bson::Int32)
}

fn users(op: &Op) -> Vec<Bson> {
    op.user().map(|(user, db)| Bson::Document(doc! { "user": user, "db": db })).into_iter().collect()
}

/// Whether the op read documents (its counters mean something).
fn scanned(op: &Op, plan: &Option<String>) -> bool {
    let (keys, docs) = op.examined_so_far();
    plan.is_some() || keys > 0 || docs > 0
}

/// Its `currentOp` entry at `now`.
pub fn current_op(host: &str, op: &Op, now: Instant) -> Document {
    let mut d = doc! { "type": "op", "host": host, "desc": op.desc() };
    if let Some(c) = &op.client {
        d.insert("connectionId", long(c.connection_id));
        d.insert("client", c.address.as_str());
        if !c.app_name.is_empty() {
            d.insert("appName", c.app_name.as_str());
        }
    }
    d.insert("active", true);
    d.insert("currentOpTime", iso_now());
    let users = users(op);
    if !users.is_empty() {
        d.insert("effectiveUsers", users);
    }
    d.insert("opid", op.opid);
    if let Some(lsid) = op.lsid() {
        d.insert("lsid", lsid);
    }
    let running = now.saturating_duration_since(op.started);
    d.insert("secs_running", running.as_secs() as i64);
    d.insert("microsecs_running", long(running.as_micros() as u64));
    d.insert("op", op.kind.name());
    d.insert("ns", op.ns.as_str());
    d.insert("command", command(op));
    let plan = op.plan_summary();
    let scanned = scanned(op, &plan);
    if let Some(p) = plan {
        d.insert("planSummary", p);
    }
    d.insert("numYields", 0);
    d.insert("locks", Document::new());
    d.insert("waitingForLock", false);
    if scanned {
        let (keys, docs) = op.examined_so_far();
        d.insert("keysExamined", long(keys));
        d.insert("docsExamined", long(docs));
    }
    d
}

/// Its `system.profile` document, once it ended after `elapsed` with `outcome`.
pub fn profile_doc(op: &Op, outcome: &Outcome, elapsed: Duration) -> Document {
    let (keys, docs) = op.examined_so_far();
    let mut d = doc! {
        "op": op.kind.name(),
        "ns": op.ns.as_str(),
        "command": command(op),
        "keysExamined": number(keys),
        "docsExamined": number(docs),
    };
    if let Some(n) = outcome.nreturned {
        d.insert("nreturned", number(n));
    }
    d.insert("numYield", 0);
    d.insert("locks", Document::new());
    d.insert("responseLength", number(outcome.reslen));
    d.insert("protocol", "op_msg");
    d.insert("millis", number(elapsed.as_millis() as u64));
    if let Some(p) = op.plan_summary() {
        d.insert("planSummary", p);
    }
    d.insert("ts", bson::DateTime::now());
    match &op.client {
        Some(c) => {
            d.insert("client", c.address.as_str());
            d.insert("appName", c.app_name.as_str());
        }
        None => {
            d.insert("client", "internal");
        }
    }
    d.insert("allUsers", users(op));
    d.insert("user", op.client.as_ref().map_or("", |c| c.user.as_str()));
    d
}

/// The attributes of its slow-query log line.
pub fn slow_attr(op: &Op, outcome: &Outcome, elapsed: Duration) -> Document {
    let mut d = doc! { "type": "command", "ns": op.ns.as_str() };
    if let Some(c) = op.client.as_ref().filter(|c| !c.app_name.is_empty()) {
        d.insert("appName", c.app_name.as_str());
    }
    d.insert("command", command(op));
    let plan = op.plan_summary();
    let scanned = scanned(op, &plan);
    if let Some(p) = plan {
        d.insert("planSummary", p);
    }
    if scanned {
        let (keys, docs) = op.examined_so_far();
        d.insert("keysExamined", long(keys));
        d.insert("docsExamined", long(docs));
    }
    if let Some(n) = outcome.nreturned {
        d.insert("nreturned", long(n));
    }
    d.insert("numYields", 0);
    d.insert("reslen", long(outcome.reslen));
    if let Some(c) = &op.client {
        d.insert("remote", c.address.as_str());
    }
    d.insert("protocol", "op_msg");
    d.insert("durationMillis", long(elapsed.as_millis() as u64));
    d
}
