//! The shard's gRPC service: decodes requests, runs commands on the blocking pool (storage calls
//! may block on I/O), waits for durability as the write concern asks, and maps every
//! [`ExecError`] to the wire once.
//!
//! ```text
//! router --gRPC--> ShardService::insert --spawn_blocking--> exec::insert::run (writer lock, batch)
//!                        |                                                      |
//!                        +<-- wait_durable(seq) (group commit) <----------------+
//! ```

use std::sync::Arc;

use bson::Document;
use shoal_proto::shard::shard_server::Shard;
use shoal_proto::shard::{
    CommandReply, CommandRequest, CursorReply, GetMoreRequest, KillCursorsReply, KillCursorsRequest, Upserted,
    WriteReply,
};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::error::{ExecError, ExecResult};
use crate::exec::{self, Engine, WriteConcern, WriteOutcome};

#[derive(Clone)]
pub struct ShardService {
    engine: Arc<Engine>,
}

impl ShardService {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    /// Runs `f` on the blocking pool with the parsed request.
    /// With `writes`, the write concern is parsed first: a bad one fails the command before it
    /// runs, a good one comes back for the durability wait.
    async fn blocking<T: Send + 'static>(
        &self,
        req: CommandRequest,
        writes: bool,
        f: impl FnOnce(&Engine, &exec::Request<'_>) -> ExecResult<T> + Send + 'static,
    ) -> Result<(ExecResult<T>, Option<WriteConcern>), Status> {
        let engine = Arc::clone(&self.engine);
        let span = tracing::debug_span!("shard_command", request_id = %req.request_id, db = %req.db);
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let parsed = match exec::Request::parse(&req) {
                Ok(p) => p,
                Err(e) => return (Err(e), None),
            };
            if !writes {
                return (f(&engine, &parsed), None);
            }
            match WriteConcern::parse(&parsed.body, parsed.name()) {
                Ok(wc) => (f(&engine, &parsed), Some(wc)),
                Err(e) => (Err(e), None),
            }
        })
        .await
        .map_err(|e| Status::internal(format!("command task failed: {e}")))
    }

    async fn durable(&self, seq: u64, wc: Option<WriteConcern>) -> ExecResult<()> {
        if wc.is_some_and(|w| w.journal) {
            self.engine.store.wait_durable(seq).await?;
        }
        Ok(())
    }

    async fn write(
        &self,
        req: CommandRequest,
        f: fn(&Engine, &exec::Request<'_>) -> ExecResult<(WriteOutcome, u64)>,
    ) -> Result<Response<WriteReply>, Status> {
        let (result, wc) = self.blocking(req, true, f).await?;
        let reply = match result {
            Ok((outcome, seq)) => match self.durable(seq, wc).await {
                Ok(()) => write_reply(outcome),
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
    WriteReply { error: None, n: o.n, n_modified: o.n_modified, upserted, write_errors: o.write_errors }
}

fn cursor_reply(result: ExecResult<(exec::find::Batch, String)>) -> CursorReply {
    match result {
        Ok((batch, ns)) => CursorReply { error: None, cursor_id: batch.cursor_id, ns, documents: batch.documents },
        Err(e) => CursorReply { error: Some(e.to_wire()), ..Default::default() },
    }
}

fn command_reply(result: ExecResult<Document>) -> CommandReply {
    match result.and_then(|d| Ok(d.to_vec()?)) {
        Ok(body) => CommandReply { error: None, body: body.into() },
        Err(e) => CommandReply { error: Some(e.to_wire()), body: Default::default() },
    }
}

#[tonic::async_trait]
impl Shard for ShardService {
    async fn insert(&self, request: Request<CommandRequest>) -> Result<Response<WriteReply>, Status> {
        self.write(request.into_inner(), exec::insert::run).instrument(tracing::debug_span!("insert")).await
    }

    async fn update(&self, request: Request<CommandRequest>) -> Result<Response<WriteReply>, Status> {
        self.write(request.into_inner(), exec::update::run).instrument(tracing::debug_span!("update")).await
    }

    async fn delete(&self, request: Request<CommandRequest>) -> Result<Response<WriteReply>, Status> {
        self.write(request.into_inner(), exec::delete::run).instrument(tracing::debug_span!("delete")).await
    }

    async fn find(&self, request: Request<CommandRequest>) -> Result<Response<CursorReply>, Status> {
        let (result, _) = self.blocking(request.into_inner(), false, exec::find::run).await?;
        Ok(Response::new(cursor_reply(result)))
    }

    async fn aggregate(&self, request: Request<CommandRequest>) -> Result<Response<CursorReply>, Status> {
        let (result, _) = self.blocking(request.into_inner(), false, exec::aggregate::run).await?;
        Ok(Response::new(cursor_reply(result)))
    }

    async fn get_more(&self, request: Request<GetMoreRequest>) -> Result<Response<CursorReply>, Status> {
        let req = request.into_inner();
        let engine = Arc::clone(&self.engine);
        let result = tokio::task::spawn_blocking(move || {
            exec::find::get_more(&engine, req.cursor_id, req.batch_size.max(0) as usize, &req.ns)
        })
        .await
        .map_err(|e| Status::internal(format!("getMore task failed: {e}")))?;
        Ok(Response::new(cursor_reply(result)))
    }

    async fn kill_cursors(&self, request: Request<KillCursorsRequest>) -> Result<Response<KillCursorsReply>, Status> {
        let req = request.into_inner();
        let (mut killed, mut not_found) = (Vec::new(), Vec::new());
        for id in req.cursor_ids {
            if self.engine.cursors.kill(id) { killed.push(id) } else { not_found.push(id) }
        }
        Ok(Response::new(KillCursorsReply { killed, not_found }))
    }

    async fn command(&self, request: Request<CommandRequest>) -> Result<Response<CommandReply>, Status> {
        let (result, wc) = self
            .blocking(request.into_inner(), true, |engine, r| -> ExecResult<(Document, u64)> {
                match r.name() {
                    "findAndModify" | "findandmodify" => exec::find_and_modify::run(engine, r),
                    "count" => exec::count::count(engine, r).map(|d| (d, 0)),
                    "distinct" => exec::count::distinct(engine, r).map(|d| (d, 0)),
                    "create" => exec::ddl::create(engine, r),
                    "drop" => exec::ddl::drop(engine, r),
                    "dropDatabase" => exec::ddl::drop_database(engine, r),
                    "listCollections" => exec::ddl::list_collections(engine, r).map(|d| (d, 0)),
                    "listDatabases" => exec::ddl::list_databases(engine, r).map(|d| (d, 0)),
                    "listIndexes" => exec::ddl::list_indexes(engine, r).map(|d| (d, 0)),
                    "createIndexes" => exec::ddl::create_indexes(engine, r),
                    other => Err(ExecError::new(
                        shoal_proto::ErrorCode::CommandNotFound,
                        format!("no such command: '{other}'"),
                    )),
                }
            })
            .await?;
        let result = match result {
            Ok((doc, seq)) => self.durable(seq, wc).await.map(|()| doc),
            Err(e) => Err(e),
        };
        Ok(Response::new(command_reply(result)))
    }
}
