//! The `Migration` gRPC service: `MoveRange` and `MovePrimary` from routers, `Receive*` and
//! `ClonePrimary*` from donors. Errors travel
//! as `CommandError` in the reply, mapped once here.
//!
//! Must not: hold protocol logic (see `donor`, `recipient`).

use std::sync::Arc;

use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkVersion, Epoch, Fencing};
use shoal_proto::shard::migration_server::Migration;
use shoal_proto::shard::{
    ClonePrimaryAbortRequest, ClonePrimaryBatchRequest, MigrationFateReply, MigrationFateRequest, MovePrimaryReply,
    MovePrimaryRequest, MoveRangeReply, MoveRangeRequest, ReceiveBatchRequest, ReceiveEndRequest, ReceiveReply,
    ReceiveStartRequest,
};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::donor::{MoveRequest, move_range};
use super::primary::{self, PrimaryMoves};
use super::record::{Record, Side};
use super::{Fate, MigrationError, Migrations, bound_from_wire, recipient};

#[derive(Clone)]
pub struct MigrationService {
    migrations: Arc<Migrations>,
    primary_moves: Arc<PrimaryMoves>,
}

impl MigrationService {
    pub fn new(migrations: Arc<Migrations>) -> Self {
        Self { migrations, primary_moves: Arc::default() }
    }
}

fn parse_move(req: MoveRangeRequest) -> Result<MoveRequest, MigrationError> {
    let epoch: [u8; 12] = req
        .epoch
        .as_ref()
        .try_into()
        .map_err(|_| MigrationError::refused(ErrorCode::BadValue, "MoveRange: the epoch must be 12 bytes"))?;
    Ok(MoveRequest {
        request_id: req.request_id,
        ns: req.ns,
        min: bound_from_wire(req.min.as_ref(), "min")?,
        max: bound_from_wire(req.max.as_ref(), "max")?,
        to: req.to_shard,
        epoch: Epoch(epoch),
        expected_version: ChunkVersion { major: req.major, minor: req.minor },
        wait_for_delete: req.wait_for_delete,
        fencing: (!req.fencing_lease.is_empty())
            .then_some(Fencing { lease: req.fencing_lease, token: req.fencing_token }),
        latency_target_ms: req.latency_target_ms,
    })
}

/// Runs a recipient's commit or abort in its own task: a donor that stops waiting (it bounds the
/// wait, `outcome::NOTIFY_MAX`) does not cancel it half-way.
async fn settle(
    work: impl std::future::Future<Output = Result<(), MigrationError>> + Send + 'static,
) -> Result<(), MigrationError> {
    tokio::spawn(work).await.unwrap_or_else(|e| Err(MigrationError::from(e)))
}

fn receive_reply(result: Result<(), MigrationError>) -> Response<ReceiveReply> {
    Response::new(ReceiveReply { error: result.err().map(|e| e.to_exec().to_wire()) })
}

#[tonic::async_trait]
impl Migration for MigrationService {
    async fn move_range(&self, request: Request<MoveRangeRequest>) -> Result<Response<MoveRangeReply>, Status> {
        let req = match parse_move(request.into_inner()) {
            Ok(r) => r,
            Err(e) => return Ok(Response::new(MoveRangeReply { error: Some(e.to_exec().to_wire()), millis: 0 })),
        };
        tracing::info!(request_id = %req.request_id, ns = %req.ns, min = %req.min, max = %req.max, to = %req.to, "moveRange");
        // Its own task: a router that disconnects does not cancel the migration.
        let task = tokio::spawn(move_range(Arc::clone(&self.migrations), req));
        let reply = match task.await {
            Ok(Ok(millis)) => MoveRangeReply { error: None, millis: millis as i64 },
            Ok(Err(e)) => MoveRangeReply { error: Some(e.to_exec().to_wire()), millis: 0 },
            Err(e) => return Err(Status::internal(format!("migration task failed: {e}"))),
        };
        Ok(Response::new(reply))
    }

    async fn receive_start(&self, request: Request<ReceiveStartRequest>) -> Result<Response<ReceiveReply>, Status> {
        let req = request.into_inner();
        let span = tracing::info_span!("receive_start", request_id = %req.request_id, ns = %req.ns);
        Ok(receive_reply(recipient::start(&self.migrations, req).instrument(span).await))
    }

    async fn receive_batch(&self, request: Request<ReceiveBatchRequest>) -> Result<Response<ReceiveReply>, Status> {
        let req = request.into_inner();
        let span = tracing::debug_span!("receive_batch", request_id = %req.request_id, mods = req.mods.len());
        Ok(receive_reply(recipient::batch(&self.migrations, req).instrument(span).await))
    }

    async fn receive_commit(&self, request: Request<ReceiveEndRequest>) -> Result<Response<ReceiveReply>, Status> {
        let req = request.into_inner();
        let span = tracing::info_span!("receive_commit", request_id = %req.request_id);
        let mig = Arc::clone(&self.migrations);
        Ok(receive_reply(settle(async move { recipient::commit(&mig, req).instrument(span).await }).await))
    }

    async fn receive_abort(&self, request: Request<ReceiveEndRequest>) -> Result<Response<ReceiveReply>, Status> {
        let req = request.into_inner();
        let span = tracing::info_span!("receive_abort", request_id = %req.request_id);
        let mig = Arc::clone(&self.migrations);
        Ok(receive_reply(settle(async move { recipient::abort(&mig, req).instrument(span).await }).await))
    }

    async fn migration_fate(
        &self,
        request: Request<MigrationFateRequest>,
    ) -> Result<Response<MigrationFateReply>, Status> {
        let id = request.into_inner().migration_id;
        let store = Arc::clone(&self.migrations.node.store);
        let wanted = id.clone();
        let persisted = tokio::task::spawn_blocking(move || Record::load_all(&store, Side::Donor))
            .await
            .map_err(|e| Status::internal(format!("fate task failed: {e}")))?
            .map_err(|e| Status::internal(format!("reading migration records: {e}")))?
            .iter()
            .any(|r| r.id == wanted);
        let fate = self.migrations.fate(&id, persisted);
        tracing::info!(migration = %id, ?fate, "a restarted recipient asked for a migration's fate");
        Ok(Response::new(MigrationFateReply { decided: fate == Fate::Decided }))
    }

    async fn move_primary(&self, request: Request<MovePrimaryRequest>) -> Result<Response<MovePrimaryReply>, Status> {
        let req = request.into_inner();
        tracing::info!(request_id = %req.request_id, db = %req.db, to = %req.to_shard, "movePrimary");
        // Its own task: a router that disconnects does not cancel the move halfway.
        let (mig, moves) = (Arc::clone(&self.migrations), Arc::clone(&self.primary_moves));
        let task = tokio::spawn(async move { primary::move_primary(&mig, &moves, req).await });
        let error = match task.await {
            Ok(result) => result.err().map(|e| e.to_exec().to_wire()),
            Err(e) => return Err(Status::internal(format!("movePrimary task failed: {e}"))),
        };
        Ok(Response::new(MovePrimaryReply { error }))
    }

    async fn clone_primary_batch(
        &self,
        request: Request<ClonePrimaryBatchRequest>,
    ) -> Result<Response<ReceiveReply>, Status> {
        let req = request.into_inner();
        let span = tracing::debug_span!("clone_primary_batch", request_id = %req.request_id, db = %req.db);
        Ok(receive_reply(primary::clone_batch(&self.migrations, req).instrument(span).await))
    }

    async fn clone_primary_abort(
        &self,
        request: Request<ClonePrimaryAbortRequest>,
    ) -> Result<Response<ReceiveReply>, Status> {
        let req = request.into_inner();
        let span = tracing::info_span!("clone_primary_abort", request_id = %req.request_id, db = %req.db);
        Ok(receive_reply(primary::clone_abort(&self.migrations, req).instrument(span).await))
    }
}
