//! The operations in progress on this member, as MongoDB's `currentOp` shows them, and what is
//! counted when each one ends: `top`'s per-collection totals ([`top`]), the profiler and the
//! slow-operation log ([`profiler`]).
//!
//! Every command RPC the service runs (the typed ones, generic commands, the calls on an
//! `Exchange` stream, which go through the same methods) registers an [`Op`] for its lifetime
//! ([`Ops::begin`]; the [`Running`] guard removes it when dropped, whichever way the RPC ends).
//! Registering costs one short mutex insert and remove and one small allocation: the command
//! document is kept as the request's bytes (a reference count) and only decoded when `currentOp`
//! or the profiler asks. The blocking call that runs the command makes the op its thread's
//! current one (`exec::deadline::enter`): scans then publish their keys/documents examined to it
//! and stop with Interrupted (11601) at their next deadline check once it is killed ([`Ops::kill`],
//! `killOp`, `killSessions`). An RPC the router abandons is removed when its future is dropped,
//! even if its blocking work still runs to its next check.
//!
//! The operator's commands on this registry live in [`commands`]; the documents they show in
//! [`report`]; reads of `<db>.system.profile` in [`system_profile`].
//!
//! Must not: cost an operation more than the insert, the remove and a per-collection counter
//! update at its end; decode or build documents unless someone asks (`currentOp`) or the op is
//! profiled or logged as slow.

pub mod commands;
pub mod profiler;
pub mod report;
pub mod system_profile;
#[cfg(test)]
mod tests;
pub mod top;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_proto::shard::ClientInfo;

/// An operation's type as MongoDB names it in `currentOp` and the profiler (`op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Insert,
    Update,
    /// A delete.
    Remove,
    /// A find.
    Query,
    GetMore,
    /// Any other command (aggregate, count, findAndModify, admin commands).
    Command,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Insert => "insert",
            OpKind::Update => "update",
            OpKind::Remove => "remove",
            OpKind::Query => "query",
            OpKind::GetMore => "getmore",
            OpKind::Command => "command",
        }
    }
}

/// What an op's `command` document is built from, when asked.
#[derive(Debug, Clone)]
pub enum CommandSource {
    /// The request's body as it came (BSON bytes).
    Body(Bytes),
    /// A `getMore` RPC, which carries no body.
    GetMore { cursor_id: i64, batch_size: i32 },
}

/// One operation in progress.
#[derive(Debug)]
pub struct Op {
    /// Increasing per process.
    pub opid: i32,
    pub kind: OpKind,
    /// Counted under `writeLock` in `top` (else `readLock`).
    pub writes: bool,
    /// The database it runs on (the profiler's settings and ring are per database).
    pub db: String,
    /// `db.coll`, or `db.$cmd` for a command naming no collection.
    pub ns: String,
    pub command: CommandSource,
    pub started: Instant,
    pub started_wall: bson::DateTime,
    /// Who sent it through a router; `None`: an internal call or a tool talking to the shard.
    pub client: Option<ClientInfo>,
    killed: AtomicBool,
    keys_examined: AtomicU64,
    docs_examined: AtomicU64,
    plan_summary: Mutex<Option<Cow<'static, str>>>,
    /// Not counted in `top` when it ends (a `drop` of its own collection).
    untracked: AtomicBool,
}

impl Op {
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// The keys and documents its scans examined so far (published every few documents).
    pub fn examined(&self, keys: u64, docs: u64) {
        self.keys_examined.store(keys, Ordering::Relaxed);
        self.docs_examined.store(docs, Ordering::Relaxed);
    }

    /// (keysExamined, docsExamined) as last published.
    pub fn examined_so_far(&self) -> (u64, u64) {
        (self.keys_examined.load(Ordering::Relaxed), self.docs_examined.load(Ordering::Relaxed))
    }

    pub fn set_plan_summary(&self, summary: Cow<'static, str>) {
        *self.plan_summary.lock().unwrap_or_else(|e| e.into_inner()) = Some(summary);
    }

    pub fn plan_summary(&self) -> Option<String> {
        self.plan_summary.lock().unwrap_or_else(|e| e.into_inner()).as_deref().map(str::to_owned)
    }

    /// Not counted in `top` when it ends: it dropped the collection it names.
    pub fn untrack(&self) {
        self.untracked.store(true, Ordering::Relaxed);
    }

    /// The `lsid` of the client's session, if any.
    pub fn lsid(&self) -> Option<bson::Document> {
        let client = self.client.as_ref()?;
        if client.lsid.is_empty() {
            return None;
        }
        bson::Document::from_reader(&mut &client.lsid[..]).ok()
    }

    /// The authenticated user as (user, db), if any.
    pub fn user(&self) -> Option<(&str, &str)> {
        let user = &self.client.as_ref()?.user;
        if user.is_empty() {
            return None;
        }
        Some(user.rsplit_once('@').unwrap_or((user.as_str(), "")))
    }

    /// `conn<connectionId>` for a client's op, `internal` otherwise (currentOp's `desc`, the log's
    /// `ctx`).
    pub fn desc(&self) -> String {
        match &self.client {
            Some(c) => format!("conn{}", c.connection_id),
            None => "internal".to_owned(),
        }
    }
}

/// What the service tells an op when its RPC answers (for the profiler and the slow-query log).
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// Documents returned (reads).
    pub nreturned: Option<u64>,
    /// The reply's size in bytes.
    pub reslen: u64,
}

/// What a new op is.
pub struct Begin {
    pub kind: OpKind,
    pub writes: bool,
    pub db: String,
    pub ns: String,
    pub command: CommandSource,
    pub client: Option<ClientInfo>,
}

/// This member's operations in progress, `top`'s totals and the profiler.
pub struct Ops {
    next_opid: AtomicU32,
    active: Mutex<HashMap<i32, Arc<Op>>>,
    pub top: top::Top,
    pub profiler: profiler::Profiler,
    /// `hostname:port`, currentOp's `host`.
    pub host: String,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops").field("host", &self.host).finish_non_exhaustive()
    }
}

impl Ops {
    pub fn new(host: String) -> Self {
        Self {
            next_opid: AtomicU32::new(0),
            active: Mutex::default(),
            top: top::Top::default(),
            profiler: profiler::Profiler::default(),
            host,
        }
    }

    /// This machine's name with the port of `me` (`host:port`).
    pub fn host_of(me: &str) -> String {
        let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok());
        let host = host.unwrap_or_else(|| "localhost".to_owned());
        match me.rsplit_once(':') {
            Some((_, port)) => format!("{host}:{port}"),
            None => host,
        }
    }

    fn active(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Arc<Op>>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an operation until the returned guard drops.
    pub fn begin(&self, begin: Begin) -> Running<'_> {
        // Positive and increasing; after 2^31 - 1 operations it starts again at 1.
        let opid = (self.next_opid.fetch_add(1, Ordering::Relaxed) % i32::MAX as u32) as i32 + 1;
        let op = Arc::new(Op {
            opid,
            kind: begin.kind,
            writes: begin.writes,
            db: begin.db,
            ns: begin.ns,
            command: begin.command,
            started: Instant::now(),
            started_wall: bson::DateTime::now(),
            client: begin.client,
            killed: AtomicBool::new(false),
            keys_examined: AtomicU64::new(0),
            docs_examined: AtomicU64::new(0),
            plan_summary: Mutex::new(None),
            untracked: AtomicBool::new(false),
        });
        self.active().insert(opid, Arc::clone(&op));
        Running { ops: self, op, outcome: None }
    }

    /// The operations in progress, oldest first.
    pub fn snapshot(&self) -> Vec<Arc<Op>> {
        let mut ops: Vec<Arc<Op>> = self.active().values().cloned().collect();
        ops.sort_by_key(|op| op.started);
        ops
    }

    /// Marks operation `opid` killed; whether it was running.
    pub fn kill(&self, opid: i64) -> bool {
        let Ok(opid) = i32::try_from(opid) else { return false };
        match self.active().get(&opid) {
            Some(op) => {
                op.kill();
                true
            }
            None => false,
        }
    }

    /// Marks every operation `which` selects killed; how many.
    pub fn kill_where(&self, which: impl Fn(&Op) -> bool) -> usize {
        let active = self.active();
        let mut n = 0;
        for op in active.values().filter(|op| which(op)) {
            op.kill();
            n += 1;
        }
        n
    }
}

/// An operation in progress: removed from the registry and counted when dropped.
pub struct Running<'a> {
    ops: &'a Ops,
    op: Arc<Op>,
    outcome: Option<Outcome>,
}

impl Running<'_> {
    pub fn op(&self) -> Arc<Op> {
        Arc::clone(&self.op)
    }

    /// Ends the op with its RPC's reply measured (profiled and logged if it qualifies).
    pub fn finish(mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let elapsed: Duration = self.op.started.elapsed();
        self.ops.active().remove(&self.op.opid);
        if !self.op.untracked.load(Ordering::Relaxed) {
            self.ops.top.record(&self.op, elapsed);
        }
        if let Some(outcome) = self.outcome.take() {
            self.ops.profiler.finished(&self.op, &outcome, elapsed);
        }
    }
}
