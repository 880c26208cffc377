//! The shard's gRPC service: decodes requests, runs commands on the blocking pool (storage calls
//! may block on I/O; a point read by `_id` runs inline, see [`crate::inline`]; insert, update and
//! delete run on the writer lane, see [`crate::lane`]), waits for durability as the write concern
//! asks, and maps every [`ExecError`] to the wire once.
//!
//! A request carrying a `shard_version` is checked first ([`ShardingState::check`], async: it may
//! ask the catalog); a mismatch is the reply's top-level error (StaleConfig), returned before any
//! document changes, so the router can retry the whole request. Writes hold their collection's
//! write permit from before the check until they are applied, so a migration's critical section
//! waits for them and a write that waited for it is checked against the new metadata. Versioned
//! reads hold a read pin (see `cursors`) so the range deleter waits for them.
//!
//! Every RPC that runs a command is counted once, by name, in the process's metrics
//! ([`crate::metrics::CommandMetrics`]: its latency from received to reply built, and its
//! top-level error's code name); calls on an `Exchange` stream count through the same methods.
//!
//! Every RPC that runs a command is also an operation in progress for its lifetime
//! ([`crate::ops`]: `currentOp`, `killOp`, `top`, the profiler, the slow-query log): registered
//! with the request's client info before admission, made the current operation of the blocking
//! call that runs it (an op killed before that call starts answers Interrupted at once), and
//! ended with its reply's size and documents returned.
//!
//! ```text
//! router --gRPC--> ShardService::insert -- permit(ns) -- check(ns, version) --writer lane--> exec::insert::run
//!                        |                                                      (writer lock, batch, ownership)
//!                        +<-- drop permit -- wait_durable(seq) (group commit) <----------------+
//! ```
//!
//! [`ShardingState::check`]: crate::sharding::ShardingState::check

use std::future::Future;
use std::sync::Arc;

use bson::Document;
use shoal_proto::shard::shard_server::Shard;
use shoal_proto::shard::{
    Call, CommandError, CommandReply, CommandRequest, CursorReply, GetMoreRequest, KillCursorsReply,
    KillCursorsRequest, Upserted, WriteReply,
};
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::commands::{self, Access, Forget, Handler};
use crate::cursors::ReadPin;
use crate::error::{ExecError, ExecResult};
use crate::exec::{self, Node, WriteConcern, WriteOutcome};
use crate::lane::WriteLane;
use crate::metrics::PerCommand;
use crate::ops::{Begin, CommandSource, Op, OpKind, Outcome, Running};
use crate::repl::read_concern::{self, MajorityCursors, ReadConcern};
use crate::sharding::{Ownership, WRITE_WAIT_MAX, WritePermit, load};

/// What a request holds while it runs, from before its version check until it is applied.
#[derive(Default)]
struct Admitted {
    ownership: Option<Arc<Ownership>>,
    _permit: Option<WritePermit>,
    /// Writes and DDL routed as unsharded: a movePrimary's critical section holds them back.
    _db_permit: Option<WritePermit>,
    pin: Option<ReadPin>,
}

/// `db.coll` of a command whose first field names its collection (`{find: "c", ...}`); `None`
/// for database-level commands (`{aggregate: 1}`, `listCollections`).
fn target_ns(req: &CommandRequest) -> Option<String> {
    let body = bson::RawDocument::from_bytes(&req.body).ok()?;
    let (name, first) = body.iter().next()?.ok()?;
    // `explain` names its collection inside the explained command.
    let first = match (name.as_str(), first.as_document()) {
        ("explain", Some(inner)) => inner.iter().next()?.ok()?.1,
        _ => first,
    };
    let coll = first.as_str()?;
    (!coll.is_empty()).then(|| format!("{}.{coll}", req.db))
}

fn admit_span(req: &CommandRequest) -> tracing::Span {
    let span = tracing::debug_span!("admit", request_id = %req.request_id, db = %req.db);
    shoal_telemetry::otlp::adopt(&span, &req.traceparent);
    span
}

/// The command name (first field) of a generic command.
fn command_name(req: &CommandRequest) -> String {
    bson::RawDocument::from_bytes(&req.body)
        .ok()
        .and_then(|b| b.iter().next().and_then(|e| e.ok()).map(|(k, _)| k.as_str().to_owned()))
        .unwrap_or_default()
}

/// Measures one foreground command for admission control (on drop, so every exit counts).
struct Timed<'a> {
    node: &'a Node,
    started: std::time::Instant,
}

impl<'a> Timed<'a> {
    fn start(node: &'a Node) -> Self {
        Self { node, started: std::time::Instant::now() }
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        self.node.latency.observe(self.started.elapsed());
    }
}

/// A reply's top-level error, as the command metrics count it (write errors of single statements
/// and write-concern errors are not the command's failure).
trait TopLevelError {
    fn code_name(&self) -> Option<&str>;
}

macro_rules! top_level_error {
    ($($reply:ty),*) => {$(
        impl TopLevelError for $reply {
            fn code_name(&self) -> Option<&str> {
                self.error.as_ref().map(|e| e.code_name.as_str())
            }
        }
    )*};
}

top_level_error!(WriteReply, CursorReply, CommandReply);

/// What an operation's reply tells the profiler: documents returned and (about) its size.
trait Measured {
    fn outcome(&self) -> Outcome;
}

impl Measured for WriteReply {
    fn outcome(&self) -> Outcome {
        let errors: usize = self.write_errors.iter().map(|e| 48 + e.errmsg.len()).sum();
        Outcome { nreturned: None, reslen: (64 + errors) as u64 }
    }
}

impl Measured for CursorReply {
    fn outcome(&self) -> Outcome {
        let docs: usize = self.documents.iter().map(|d| d.len()).sum();
        Outcome { nreturned: Some(self.documents.len() as u64), reslen: (docs + self.ns.len() + 64) as u64 }
    }
}

impl Measured for CommandReply {
    fn outcome(&self) -> Outcome {
        Outcome { nreturned: None, reslen: (self.body.len() + 16) as u64 }
    }
}

/// Ends an operation with its RPC's answer (an RPC that failed as a whole measured as empty).
fn ended<R: Measured>(running: Running<'_>, out: &Result<Response<R>, Status>) {
    running.finish(out.as_ref().map(|r| r.get_ref().outcome()).unwrap_or_default());
}

impl TopLevelError for KillCursorsReply {
    fn code_name(&self) -> Option<&str> {
        None
    }
}

/// Where a command's work runs (see [`ShardService::execute`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// On the async worker that received it: a point read ([`crate::inline`]).
    Inline,
    /// On tokio's blocking pool.
    Blocking,
    /// On the writer lane ([`crate::lane`]): insert, update, delete.
    Lane,
}

#[derive(Clone)]
pub struct ShardService {
    node: Arc<Node>,
    /// Cursors whose `getMore`s wait for the commit point (see `repl::read_concern`).
    majority_cursors: Arc<MajorityCursors>,
    lane: Arc<WriteLane>,
}

impl ShardService {
    pub fn new(node: Arc<Node>) -> std::io::Result<Self> {
        Ok(Self { node, majority_cursors: Arc::default(), lane: Arc::new(WriteLane::start("shoal-writer")?) })
    }

    /// The member this service serves.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Registers the operation a request runs (see [`crate::ops`]), taking its client info.
    fn begin(&self, kind: OpKind, writes: bool, req: &mut CommandRequest) -> Running<'_> {
        let ns = target_ns(req).unwrap_or_else(|| format!("{}.$cmd", req.db));
        self.node.ops.begin(Begin {
            kind,
            writes,
            db: req.db.clone(),
            ns,
            command: CommandSource::Body(req.body.clone()),
            client: req.client.take(),
        })
    }

    /// Runs one command's RPC and counts it in `per` (a call the router abandons midway, whose
    /// future is dropped, is not counted). A failed RPC (a task that died) counts as InternalError.
    async fn counted<R: TopLevelError>(
        &self,
        per: &PerCommand,
        rpc: impl Future<Output = Result<Response<R>, Status>>,
    ) -> Result<Response<R>, Status> {
        let started = std::time::Instant::now();
        let out = rpc.await;
        let failed = match &out {
            Ok(reply) => reply.get_ref().code_name(),
            Err(_) => Some(shoal_proto::ErrorCode::InternalError.name()),
        };
        self.node.metrics.commands.finished(per, started.elapsed(), failed);
        out
    }

    /// The request's read concern, checked before the read runs (see `repl::read_concern`).
    async fn read_concern(&self, req: &CommandRequest) -> ExecResult<ReadConcern> {
        let body = bson::RawDocument::from_bytes(&req.body)?;
        let rc = read_concern::parse(body, &command_name(req))?;
        read_concern::before(&self.node.repl, &rc, req.secondary_ok).await?;
        Ok(rc)
    }

    /// Admits a request: takes a write's permit (waiting out a critical section) or a versioned
    /// read's pin, then checks its shard version and database version. Unversioned reads and
    /// other commands take nothing; unversioned writes take only the permit, which is free unless
    /// a migration commits. Writes and DDL carrying a database version also take the database's
    /// permit, so a movePrimary's critical section holds them back and they are checked after it.
    async fn admit(&self, req: &CommandRequest, access: Access) -> ExecResult<Admitted> {
        let versioned = req.shard_version.is_some() || req.database_version.is_some();
        if !versioned && access != Access::Write {
            return Ok(Admitted::default());
        }
        let sharding = &self.node.sharding;
        let mut admitted = Admitted::default();
        if req.database_version.is_some() && matches!(access, Access::Write | Access::Ddl) {
            // Keyed by the bare database name, which no namespace (`db.coll`) can equal.
            admitted._db_permit = Some(sharding.gates.write_permit(&req.db, WRITE_WAIT_MAX).await?);
        }
        let Some(ns) = target_ns(req) else {
            sharding.check_database(&req.db, req.database_version.as_ref()).await?;
            return Ok(admitted);
        };
        match access {
            Access::Write => admitted._permit = Some(sharding.gates.write_permit(&ns, WRITE_WAIT_MAX).await?),
            Access::Read => admitted.pin = Some(self.node.cursors.pin(&ns)),
            Access::Ddl | Access::Other => {}
        }
        admitted.ownership = sharding.check(&ns, req.shard_version.as_ref()).await?;
        sharding.check_database(&req.db, req.database_version.as_ref()).await?;
        Ok(admitted)
    }

    /// Whether this member may serve a read: the primary always; a secondary only when the
    /// router said a secondary may answer (read preference), and only with consistent data.
    fn check_readable(&self, req: &CommandRequest) -> ExecResult<()> {
        use crate::repl::MemberState;
        let role = self.node.repl.role();
        match role.state {
            MemberState::Primary | MemberState::Standalone => Ok(()),
            state if req.secondary_ok && state.readable() => Ok(()),
            state if req.secondary_ok => Err(ExecError::new(
                shoal_proto::ErrorCode::NotPrimaryOrSecondary,
                format!("{} is {} and cannot serve reads", self.node.repl.me, state.name()),
            )),
            state => Err(ExecError::new(
                shoal_proto::ErrorCode::NotPrimaryNoSecondaryOk,
                format!("not primary and secondaryOk=false ({} is {})", self.node.repl.me, state.name()),
            )),
        }
    }

    /// Runs `f` with the parsed request where `runs` says. With `writes`, the write concern is
    /// parsed first: a bad one fails the command before it runs, a good one comes back for the
    /// durability wait.
    async fn execute<T: Send + 'static>(
        &self,
        req: CommandRequest,
        writes: bool,
        admitted: &Admitted,
        runs: Runs,
        op: Arc<Op>,
        f: impl FnOnce(&Node, &exec::Request<'_>) -> ExecResult<T> + Send + 'static,
    ) -> Result<(ExecResult<T>, Option<WriteConcern>), Status> {
        let (ownership, read_pin_seq) = (admitted.ownership.clone(), admitted.pin.as_ref().map(ReadPin::seq));
        let node = Arc::clone(&self.node);
        let span = tracing::debug_span!("shard_command", request_id = %req.request_id, db = %req.db);
        shoal_telemetry::otlp::adopt(&span, &req.traceparent);
        // Requests on sharded collections are counted for the balancer's load statistics.
        let sampled = ownership.as_ref().and_then(|o| node.sharding.load.begin(&o.ns));
        let received = std::time::Instant::now();
        let run = move || {
            let _entered = span.enter();
            // Killed while it waited for admission or a thread: it does not start.
            if op.is_killed() {
                return (Err(exec::deadline::interrupted()), None);
            }
            let _op = exec::deadline::enter(op);
            let recording = sampled.map(|t| (t, load::Recording::start()));
            let mut parsed = match exec::Request::parse(&req) {
                Ok(p) => p,
                Err(e) => return (Err(e), None),
            };
            // The operation's maxTimeMS counts from its arrival here, queueing included.
            let _deadline = match exec::deadline::parse(&parsed.body) {
                Ok(limit) => exec::deadline::set(limit.map(|l| received + l)),
                Err(e) => return (Err(e), None),
            };
            parsed.ownership = ownership;
            parsed.read_pin_seq = read_pin_seq;
            let out = if !writes {
                (f(&node, &parsed), None)
            } else {
                match WriteConcern::parse(&parsed.body, parsed.name()) {
                    Ok(wc) => (f(&node, &parsed), Some(wc)),
                    Err(e) => (Err(e), None),
                }
            };
            if let (Some((ticket, rec)), Some(o)) = (recording, parsed.owned()) {
                node.sharding.load.record(&o.ns, ticket, rec.finish());
            }
            out
        };
        match runs {
            Runs::Inline => Ok(run()),
            Runs::Blocking => tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| Status::internal(format!("command task failed: {e}"))),
            Runs::Lane => self.lane.run(run).await.map_err(|e| Status::internal(e.to_string())),
        }
    }

    async fn read(
        &self,
        req: CommandRequest,
        op: Arc<Op>,
        f: fn(&Node, &exec::Request<'_>) -> ExecResult<(exec::find::Batch, String)>,
    ) -> Result<Response<CursorReply>, Status> {
        let _timed = Timed::start(&self.node);
        if let Err(e) = self.check_readable(&req) {
            return Ok(Response::new(cursor_reply(Err(e))));
        }
        let rc = match self.read_concern(&req).await {
            Ok(rc) => rc,
            Err(e) => return Ok(Response::new(cursor_reply(Err(e)))),
        };
        let admitted = match self.admit(&req, Access::Read).instrument(admit_span(&req)).await {
            Ok(a) => a,
            Err(e) => return Ok(Response::new(cursor_reply(Err(e)))),
        };
        // The pin is held until the cursor (if any) has its own.
        let runs = if crate::inline::point_read(&req.body) { Runs::Inline } else { Runs::Blocking };
        let (result, _) = self.execute(req, false, &admitted, runs, op, f).await?;
        drop(admitted);
        let result = match result {
            Ok((batch, ns)) => self.majority_committed(&rc, batch.cursor_id).await.map(|()| (batch, ns)),
            Err(e) => Err(e),
        };
        Ok(Response::new(cursor_reply(result)))
    }

    /// Holds a batch back until what it read is majority committed (`majority`, `linearizable`);
    /// a cursor that cannot be answered is killed, one that continues is remembered.
    async fn majority_committed(&self, rc: &ReadConcern, cursor_id: i64) -> ExecResult<()> {
        let read_at = self.node.store.position().optime;
        if let Err(e) = read_concern::after(&self.node.repl, rc, read_at).await {
            if cursor_id != 0 {
                self.node.cursors.kill(cursor_id);
                self.majority_cursors.forget(cursor_id);
            }
            return Err(e);
        }
        if cursor_id == 0 {
            self.majority_cursors.forget(cursor_id);
        } else {
            self.majority_cursors.remember(cursor_id, *rc);
        }
        Ok(())
    }

    /// Waits for the write concern of a write that committed batch `seq`. `Err`: the command
    /// fails (the journal sync failed); `Ok(Some)`: the reply's `writeConcernError`.
    async fn write_concern(&self, seq: u64, wc: Option<WriteConcern>) -> ExecResult<Option<CommandError>> {
        let Some(wc) = wc else { return Ok(None) };
        // Conservative: the newest position now is at or after this write's last entry.
        let position = self.node.store.position();
        debug_assert!(position.seq >= seq);
        if wc.journal {
            self.node.store.wait_durable(position.seq).await?;
            self.node.repl.set_durable(position.optime);
        }
        Ok(crate::repl::wait::wait(&self.node.repl, &wc, position.optime).await.err().map(|e| e.to_wire()))
    }

    async fn write(
        &self,
        req: CommandRequest,
        op: Arc<Op>,
        f: fn(&Node, &exec::Request<'_>) -> ExecResult<(WriteOutcome, u64)>,
    ) -> Result<Response<WriteReply>, Status> {
        let _timed = Timed::start(&self.node);
        if let Err(e) = crate::ops::system_profile::refuse_write(&req.db, &req.body) {
            return Ok(Response::new(WriteReply { error: Some(e.to_wire()), ..Default::default() }));
        }
        let admitted = match self.admit(&req, Access::Write).instrument(admit_span(&req)).await {
            Ok(a) => a,
            Err(e) => return Ok(Response::new(WriteReply { error: Some(e.to_wire()), ..Default::default() })),
        };
        let (result, wc) = self.execute(req, true, &admitted, Runs::Lane, op, f).await?;
        // Applied: the critical section may start; durability is waited for without the permit.
        drop(admitted);
        let reply = match result {
            Ok((outcome, seq)) => match self.write_concern(seq, wc).await {
                Ok(wc_error) => WriteReply { write_concern_error: wc_error, ..write_reply(outcome) },
                Err(e) => WriteReply { error: Some(e.to_wire()), ..Default::default() },
            },
            Err(e) => WriteReply { error: Some(e.to_wire()), ..Default::default() },
        };
        Ok(Response::new(reply))
    }
}

fn write_reply(o: WriteOutcome) -> WriteReply {
    let upserted = o
        .upserted
        .into_iter()
        .map(|(index, id)| Upserted {
            index,
            id: bson::doc! { "_id": id }.to_vec().map(Into::into).unwrap_or_default(),
        })
        .collect();
    WriteReply {
        error: None,
        n: o.n,
        n_modified: o.n_modified,
        upserted,
        write_errors: o.write_errors,
        write_concern_error: None,
    }
}

fn cursor_reply(result: ExecResult<(exec::find::Batch, String)>) -> CursorReply {
    match result {
        Ok((batch, ns)) => CursorReply { error: None, cursor_id: batch.cursor_id, ns, documents: batch.documents },
        Err(e) => CursorReply { error: Some(e.to_wire()), ..Default::default() },
    }
}

fn command_reply(result: ExecResult<Document>) -> CommandReply {
    match result.and_then(|d| Ok(d.to_vec()?)) {
        Ok(body) => CommandReply { error: None, body: body.into(), write_concern_error: None },
        Err(e) => CommandReply { error: Some(e.to_wire()), ..Default::default() },
    }
}

#[tonic::async_trait]
impl Shard for ShardService {
    type ExchangeStream = crate::exchange::Replies;

    async fn exchange(&self, request: Request<Streaming<Call>>) -> Result<Response<Self::ExchangeStream>, Status> {
        Ok(Response::new(crate::exchange::serve(self.clone(), request.into_inner())))
    }

    async fn insert(&self, request: Request<CommandRequest>) -> Result<Response<WriteReply>, Status> {
        let mut req = request.into_inner();
        let running = self.begin(OpKind::Insert, true, &mut req);
        let per = &self.node.metrics.commands.insert;
        let out = self
            .counted(per, self.write(req, running.op(), exec::insert::run).instrument(tracing::debug_span!("insert")))
            .await;
        ended(running, &out);
        out
    }

    async fn update(&self, request: Request<CommandRequest>) -> Result<Response<WriteReply>, Status> {
        let mut req = request.into_inner();
        let running = self.begin(OpKind::Update, true, &mut req);
        let per = &self.node.metrics.commands.update;
        let out = self
            .counted(per, self.write(req, running.op(), exec::update::run).instrument(tracing::debug_span!("update")))
            .await;
        ended(running, &out);
        out
    }

    async fn delete(&self, request: Request<CommandRequest>) -> Result<Response<WriteReply>, Status> {
        let mut req = request.into_inner();
        let running = self.begin(OpKind::Remove, true, &mut req);
        let per = &self.node.metrics.commands.delete;
        let out = self
            .counted(per, self.write(req, running.op(), exec::delete::run).instrument(tracing::debug_span!("delete")))
            .await;
        ended(running, &out);
        out
    }

    async fn find(&self, request: Request<CommandRequest>) -> Result<Response<CursorReply>, Status> {
        let mut req = request.into_inner();
        let running = self.begin(OpKind::Query, false, &mut req);
        let per = &self.node.metrics.commands.find;
        let out = self
            .counted(per, self.read(req, running.op(), exec::find::run).instrument(tracing::debug_span!("find")))
            .await;
        ended(running, &out);
        out
    }

    async fn aggregate(&self, request: Request<CommandRequest>) -> Result<Response<CursorReply>, Status> {
        let mut req = request.into_inner();
        let running = self.begin(OpKind::Command, false, &mut req);
        let per = &self.node.metrics.commands.aggregate;
        let read = self.read(req, running.op(), exec::aggregate::run).instrument(tracing::debug_span!("aggregate"));
        let out = self.counted(per, read).await;
        ended(running, &out);
        out
    }

    async fn get_more(&self, request: Request<GetMoreRequest>) -> Result<Response<CursorReply>, Status> {
        let mut req = request.into_inner();
        let running = self.node.ops.begin(Begin {
            kind: OpKind::GetMore,
            writes: false,
            db: req.ns.split_once('.').map_or(req.ns.as_str(), |(db, _)| db).to_owned(),
            ns: req.ns.clone(),
            command: CommandSource::GetMore { cursor_id: req.cursor_id, batch_size: req.batch_size },
            client: req.client.take(),
        });
        let out = self.counted(&self.node.metrics.commands.get_more, self.get_more_rpc(req, running.op())).await;
        ended(running, &out);
        out
    }

    async fn kill_cursors(&self, request: Request<KillCursorsRequest>) -> Result<Response<KillCursorsReply>, Status> {
        self.counted(&self.node.metrics.commands.kill_cursors, self.kill_cursors_rpc(request.into_inner())).await
    }

    async fn command(&self, request: Request<CommandRequest>) -> Result<Response<CommandReply>, Status> {
        let mut req = request.into_inner();
        let name = command_name(&req);
        let spec = commands::lookup(&name);
        let writes = spec.is_some_and(|s| matches!(s.access, Access::Write | Access::Ddl));
        let running = self.begin(OpKind::Command, writes, &mut req);
        let out =
            self.counted(self.node.metrics.commands.of(spec), self.command_rpc(req, &name, spec, running.op())).await;
        ended(running, &out);
        out
    }
}

/// The RPCs' bodies, counted by their `Shard` methods.
impl ShardService {
    async fn get_more_rpc(&self, req: GetMoreRequest, op: Arc<Op>) -> Result<Response<CursorReply>, Status> {
        let _timed = Timed::start(&self.node);
        let node = Arc::clone(&self.node);
        let cursor_id = req.cursor_id;
        let result = tokio::task::spawn_blocking(move || {
            if op.is_killed() {
                return Err(exec::deadline::interrupted());
            }
            let _op = exec::deadline::enter(op);
            exec::find::get_more(&node, req.cursor_id, req.batch_size.max(0) as usize, &req.ns)
        })
        .await
        .map_err(|e| Status::internal(format!("getMore task failed: {e}")))?;
        let result = match (result, self.majority_cursors.get(cursor_id)) {
            (Ok((batch, ns)), Some(rc)) => {
                let next = batch.cursor_id;
                let waited = self.majority_committed(&rc, next).await;
                if next != cursor_id {
                    self.majority_cursors.forget(cursor_id);
                }
                waited.map(|()| (batch, ns))
            }
            (Err(e), Some(_)) => {
                self.majority_cursors.forget(cursor_id);
                Err(e)
            }
            (result, None) => result,
        };
        Ok(Response::new(cursor_reply(result)))
    }

    async fn kill_cursors_rpc(&self, req: KillCursorsRequest) -> Result<Response<KillCursorsReply>, Status> {
        let (mut killed, mut not_found) = (Vec::new(), Vec::new());
        for id in req.cursor_ids {
            self.majority_cursors.forget(id);
            if self.node.cursors.kill(id) { killed.push(id) } else { not_found.push(id) }
        }
        Ok(Response::new(KillCursorsReply { killed, not_found }))
    }

    async fn command_rpc(
        &self,
        req: CommandRequest,
        name: &str,
        spec: Option<&'static commands::Spec>,
        op: Arc<Op>,
    ) -> Result<Response<CommandReply>, Status> {
        let Some(spec) = spec else {
            let e = ExecError::new(shoal_proto::ErrorCode::CommandNotFound, format!("no such command: '{name}'"));
            return Ok(Response::new(command_reply(Err(e))));
        };
        let _timed = spec.foreground.then(|| Timed::start(&self.node));
        // A dropped collection's metadata is reloaded on next use (it may be re-sharded).
        let forget = match spec.forgets {
            Forget::Collection => target_ns(&req),
            Forget::Database => Some(format!("{}.", req.db)),
            Forget::Nothing => None,
        };
        let access = spec.access;
        if access == Access::Write
            && let Err(e) = crate::ops::system_profile::refuse_write(&req.db, &req.body)
        {
            return Ok(Response::new(command_reply(Err(e))));
        }
        let run = match spec.handler {
            Handler::Blocking(run) => run,
            Handler::StepDown => {
                let result = match exec::Request::parse(&req) {
                    Ok(parsed) => crate::repl::step_down::step_down(&self.node.repl, &parsed.body).await,
                    Err(e) => Err(e),
                };
                return Ok(Response::new(command_reply(result)));
            }
        };
        if spec.reads
            && let Err(e) = self.check_readable(&req)
        {
            return Ok(Response::new(command_reply(Err(e))));
        }
        let rc = match access {
            Access::Read => match self.read_concern(&req).await {
                Ok(rc) => Some(rc),
                Err(e) => return Ok(Response::new(command_reply(Err(e)))),
            },
            _ => None,
        };
        let admitted = match self.admit(&req, access).instrument(admit_span(&req)).await {
            Ok(a) => a,
            Err(e) => return Ok(Response::new(command_reply(Err(e)))),
        };
        let (result, wc) = self
            .execute(
                req,
                true,
                &admitted,
                Runs::Blocking,
                Arc::clone(&op),
                move |node, r| -> ExecResult<(Document, u64)> { run(node, r) },
            )
            .await?;
        drop(admitted);
        if let (Some(ns), Ok(_)) = (&forget, &result) {
            if ns.ends_with('.') {
                self.node.sharding.forget_database(&ns[..ns.len() - 1]);
                self.node.ops.top.forget_database(&ns[..ns.len() - 1]);
            } else {
                self.node.sharding.forget(ns);
                // A dropped collection leaves `top`, this drop included.
                self.node.ops.top.forget(ns);
                op.untrack();
            }
        }
        let result = match (result, &rc) {
            (Ok(out), Some(rc)) => self.majority_committed(rc, 0).await.map(|()| out),
            (result, _) => result,
        };
        let (result, wc_error) = match result {
            // Reads report no write concern.
            Ok((doc, 0)) => (Ok(doc), None),
            Ok((doc, seq)) => match self.write_concern(seq, wc).await {
                Ok(wc_error) => (Ok(doc), wc_error),
                Err(e) => (Err(e), None),
            },
            Err(e) => (Err(e), None),
        };
        Ok(Response::new(CommandReply { write_concern_error: wc_error, ..command_reply(result) }))
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;
    use shoal_proto::shard::ShardVersion;

    use super::*;

    fn service(dir: &std::path::Path) -> ShardService {
        let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
        ShardService::new(crate::open_node(&config).expect("open")).expect("lane")
    }

    fn request(body: Document, shard_version: Option<ShardVersion>) -> Request<CommandRequest> {
        Request::new(CommandRequest {
            request_id: "t".into(),
            db: "db".into(),
            body: body.to_vec().expect("encode").into(),
            sequence_id: String::new(),
            sequence: Vec::new(),
            shard_version,
            database_version: None,
            secondary_ok: false,
            client: None,
            traceparent: String::new(),
        })
    }

    #[tokio::test]
    async fn writes_wait_for_a_critical_section() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = service(dir.path());
        let section = svc.node.sharding.gates.enter("db.c").await;
        let s = svc.clone();
        let insert =
            tokio::spawn(async move { s.insert(request(doc! {"insert": "c", "documents": [{"_id": 1}]}, None)).await });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!insert.is_finished(), "the insert ran during the critical section");
        assert!(svc.node.store.collection("db.c").is_none());
        drop(section);
        let reply = insert.await.expect("task").expect("rpc").into_inner();
        assert!(reply.error.is_none(), "{:?}", reply.error);
        assert_eq!(reply.n, 1);
    }

    #[tokio::test]
    async fn writes_routed_as_unsharded_wait_for_a_move_primary_then_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = service(dir.path());
        let section = svc.node.sharding.gates.enter("db").await;
        let s = svc.clone();
        let insert = tokio::spawn(async move {
            let mut req = request(doc! {"insert": "c", "documents": [{"_id": 1}]}, Some(ShardVersion::default()));
            req.get_mut().database_version =
                Some(shoal_proto::shard::DatabaseVersion { uuid: vec![1; 16].into(), ..Default::default() });
            s.insert(req).await
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!insert.is_finished(), "the insert ran during the database's critical section");
        // Unsharded-collection writes without a database version (tools) are not held back.
        let reply = svc.insert(request(doc! {"insert": "d", "documents": [{"_id": 1}]}, None)).await.expect("rpc");
        assert!(reply.into_inner().error.is_none());
        drop(section);
        // Checked after the wait: this shard has no catalog to check the database version with.
        let reply = insert.await.expect("task").expect("rpc").into_inner();
        assert_eq!(reply.error.map(|e| e.code), Some(shoal_proto::ErrorCode::NotYetInitialized.code()));
        assert!(svc.node.store.collection("db.c").is_none());
    }

    #[tokio::test]
    async fn commands_count_by_name_with_errors_by_code_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = service(dir.path());
        let reply = svc.insert(request(doc! {"insert": "c", "documents": [{"_id": 1}]}, None)).await.expect("rpc");
        assert!(reply.into_inner().error.is_none());
        let reply = svc.find(request(doc! {"find": "c"}, None)).await.expect("rpc").into_inner();
        assert!(reply.error.is_none());
        // A versioned read on a shard outside any cluster fails, by its code name.
        let reply = svc.find(request(doc! {"find": "c"}, Some(ShardVersion::default()))).await.expect("rpc");
        assert_eq!(reply.into_inner().error.map(|e| e.code_name), Some("NotYetInitialized".to_owned()));
        let reply = svc.command(request(doc! {"count": "c"}, None)).await.expect("rpc").into_inner();
        assert!(reply.error.is_none(), "{:?}", reply.error);
        // `collstats` is an alias: counted under its canonical name.
        let reply = svc.command(request(doc! {"collstats": "c"}, None)).await.expect("rpc").into_inner();
        assert!(reply.error.is_none(), "{:?}", reply.error);
        let reply = svc.command(request(doc! {"noSuchCommand": 1}, None)).await.expect("rpc").into_inner();
        assert_eq!(reply.error.map(|e| e.code_name), Some("CommandNotFound".to_owned()));
        let killed = svc.kill_cursors(Request::new(KillCursorsRequest { cursor_ids: vec![42], ..Default::default() }));
        assert_eq!(killed.await.expect("rpc").into_inner().not_found, vec![42]);

        let text = svc.node.metrics.registry().render();
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        has(r#"shoal_command_duration_seconds_count{command="insert"} 1"#);
        has(r#"shoal_command_duration_seconds_count{command="find"} 2"#);
        has(r#"shoal_command_duration_seconds_count{command="count"} 1"#);
        has(r#"shoal_command_duration_seconds_count{command="collStats"} 1"#);
        has(r#"shoal_command_duration_seconds_count{command="killCursors"} 1"#);
        has(r#"shoal_command_duration_seconds_count{command="<UNKNOWN>"} 1"#);
        has(r#"shoal_command_duration_seconds_count{command="getMore"} 0"#);
        has(r#"shoal_command_failures_total{command="find"} 1"#);
        has(r#"shoal_command_failures_total{command="insert"} 0"#);
        has(r#"shoal_command_failures_total{command="<UNKNOWN>"} 1"#);
        has(r#"shoal_command_errors_total{code_name="NotYetInitialized"} 1"#);
        has(r#"shoal_command_errors_total{code_name="CommandNotFound"} 1"#);
        assert!(!text.contains(r#"command="collstats""#), "aliases count under the canonical name: {text}");
    }

    #[tokio::test]
    async fn versioned_requests_need_config_servers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = service(dir.path());
        let versioned = Some(ShardVersion::default());
        let reply = svc.find(request(doc! {"find": "c"}, versioned.clone())).await.expect("rpc").into_inner();
        assert_eq!(reply.error.map(|e| e.code), Some(shoal_proto::ErrorCode::NotYetInitialized.code()));
        let reply = svc
            .insert(request(doc! {"insert": "c", "documents": [{"_id": 1}]}, versioned))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(reply.error.map(|e| e.code), Some(shoal_proto::ErrorCode::NotYetInitialized.code()));
        assert!(svc.node.store.collection("db.c").is_none(), "refused before anything ran");
        // Unversioned requests work as before.
        let reply = svc.find(request(doc! {"find": "c"}, None)).await.expect("rpc").into_inner();
        assert!(reply.error.is_none());
    }
}
