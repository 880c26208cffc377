//! Incoming Raft RPCs: the `ConfigRaft` gRPC service, decoding openraft messages and handing them
//! to the local [`Raft`]. The mirror of [`super::network`].
//!
//! A request that does not decode is `InvalidArgument`; a stopped Raft core is `Unavailable` (the
//! sender backs off). A snapshot stream is bounded in bytes and in time. Every call is timed and
//! its failure counted ([`PeerRpcMetrics`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shoal_proto::config::config_raft_server::ConfigRaft;
use shoal_proto::config::{RaftMessage, SnapshotChunk};
use tonic::{Request, Response, Status, Streaming};

use super::network::SnapshotHeader;
use super::types::{Raft, Snapshot};
use crate::codec;
use crate::metrics::{PeerRpc, PeerRpcMetrics};

pub struct RaftRpcService {
    raft: Raft,
    /// Largest snapshot accepted from a leader.
    snapshot_size_max_bytes: usize,
    /// Longest a snapshot stream may take to arrive.
    snapshot_timeout: Duration,
    metrics: Arc<PeerRpcMetrics>,
}

impl RaftRpcService {
    pub fn new(
        raft: Raft,
        snapshot_size_max_bytes: usize,
        snapshot_timeout: Duration,
        metrics: Arc<PeerRpcMetrics>,
    ) -> Self {
        Self { raft, snapshot_size_max_bytes, snapshot_timeout, metrics }
    }
}

fn decode<T: DeserializeOwned>(msg: &RaftMessage) -> Result<T, Status> {
    codec::decode(&msg.data).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn reply<T: Serialize>(value: &T) -> Result<Response<RaftMessage>, Status> {
    let data = codec::encode(value).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(RaftMessage { data: data.into() }))
}

fn stopped(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("raft node stopped: {e}"))
}

impl RaftRpcService {
    async fn receive_snapshot(&self, mut stream: Streaming<SnapshotChunk>) -> Result<Response<RaftMessage>, Status> {
        let first = stream.next().await.ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        let header: SnapshotHeader =
            codec::decode(&first.header).map_err(|e| Status::invalid_argument(format!("snapshot header: {e}")))?;
        let mut data = BytesMut::from(&first.data[..]);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if data.len() + chunk.data.len() > self.snapshot_size_max_bytes {
                return Err(Status::resource_exhausted(format!(
                    "snapshot larger than {} bytes",
                    self.snapshot_size_max_bytes
                )));
            }
            data.extend_from_slice(&chunk.data);
        }
        let snapshot = Snapshot { meta: header.meta, snapshot: data.freeze() };
        let resp = self.raft.install_full_snapshot(header.vote, snapshot).await.map_err(stopped)?;
        reply(&resp)
    }
}

#[tonic::async_trait]
impl ConfigRaft for RaftRpcService {
    async fn append_entries(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        self.metrics
            .observe(PeerRpc::AppendEntries, async {
                let req = decode(request.get_ref())?;
                let resp = self.raft.append_entries(req).await.map_err(stopped)?;
                reply(&resp)
            })
            .await
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        self.metrics
            .observe(PeerRpc::Vote, async {
                let req = decode(request.get_ref())?;
                let resp = self.raft.vote(req).await.map_err(stopped)?;
                reply(&resp)
            })
            .await
    }

    async fn pre_vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        self.metrics
            .observe(PeerRpc::PreVote, async {
                let req = decode(request.get_ref())?;
                let resp = self.raft.pre_vote(req).await.map_err(stopped)?;
                reply(&resp)
            })
            .await
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.metrics
            .observe(PeerRpc::InstallSnapshot, async {
                match tokio::time::timeout(self.snapshot_timeout, self.receive_snapshot(request.into_inner())).await {
                    Ok(result) => result,
                    Err(_) => Err(Status::deadline_exceeded(format!(
                        "snapshot not received within {} ms",
                        self.snapshot_timeout.as_millis()
                    ))),
                }
            })
            .await
    }

    async fn transfer_leader(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        self.metrics
            .observe(PeerRpc::TransferLeader, async {
                let req = decode(request.get_ref())?;
                let resp = self.raft.handle_transfer_leader(req).await.map_err(stopped)?;
                reply(&resp)
            })
            .await
    }
}
