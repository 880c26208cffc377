//! Outgoing Raft RPCs: openraft's [`RaftNetworkV2`] over the `ConfigRaft` gRPC service.
//!
//! ```text
//!  openraft replication task --append_entries/vote/full_snapshot--> PeerClient
//!      PeerClient: serde-encode request -> tonic (one Channel per peer, shared) -> peer's rpc.rs
//!      <- serde-encoded response | gRPC status -> RPCError (Unreachable / Network / Timeout)
//! ```
//!
//! Every RPC runs under a timeout: openraft's `RPCOption` TTL, raised to a floor for appends (a
//! debug build on a busy machine can take longer than one heartbeat interval to encode a batch).
//! Snapshots are streamed in chunks under their own timeout and openraft's cancel signal.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use openraft::raft::{TransferLeaderRequest, TransferLeaderResponse};
use openraft::{RPCTypes, RaftNetworkV2};
use serde::Serialize;
use serde::de::DeserializeOwned;
use shoal_proto::config::config_raft_client::ConfigRaftClient;
use shoal_proto::config::{RaftMessage, SnapshotChunk};
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use tonic::transport::Channel;

use super::types::{Node, NodeId, Snapshot, TypeConfig, Vote};
use crate::codec;

/// Network timeouts and sizes, with units in the names.
#[derive(Debug, Clone)]
pub struct NetworkSettings {
    pub connect_timeout: Duration,
    /// Lower bound of an AppendEntries / Vote RPC's timeout.
    pub rpc_timeout_min: Duration,
    /// Whole-transfer timeout of one snapshot.
    pub snapshot_timeout: Duration,
    /// Bytes of snapshot data per streamed message.
    pub snapshot_chunk_bytes: usize,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            rpc_timeout_min: Duration::from_millis(1000),
            snapshot_timeout: Duration::from_secs(60),
            snapshot_chunk_bytes: 1 << 20,
        }
    }
}

pub use shoal_cluster::net::connect_lazy;

/// Hands openraft one client per peer; channels are cached per (peer, address) and reused.
#[derive(Clone)]
pub struct NetworkFactory {
    id: NodeId,
    settings: NetworkSettings,
    channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
}

impl NetworkFactory {
    pub fn new(id: NodeId, settings: NetworkSettings) -> Self {
        Self { id, settings, channels: Arc::new(Mutex::new(HashMap::new())) }
    }

    fn channel(&self, target: NodeId, addr: &str) -> Result<Channel, String> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((cached_addr, channel)) = channels.get(&target)
            && cached_addr == addr
        {
            return Ok(channel.clone());
        }
        let channel = connect_lazy(addr, self.settings.connect_timeout)
            .map_err(|e| format!("bad address {addr:?} for node {target}: {e}"))?;
        channels.insert(target, (addr.to_owned(), channel.clone()));
        Ok(channel)
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        let client = self.channel(target, &node.addr).map(|channel| {
            ConfigRaftClient::new(channel)
                .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
                .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
        });
        PeerClient { id: self.id, target, client, settings: self.settings.clone() }
    }
}

/// openraft's handle on one peer.
pub struct PeerClient {
    id: NodeId,
    target: NodeId,
    /// `Err` when the peer's address cannot be parsed: every RPC then reports it as unreachable.
    client: Result<ConfigRaftClient<Channel>, String>,
    settings: NetworkSettings,
}

fn status_to_rpc(status: &tonic::Status) -> RPCError<TypeConfig> {
    match status.code() {
        // Connection refused / reset: let openraft back off before retrying.
        tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::from_string(status.to_string())),
        _ => RPCError::Network(NetworkError::from_string(status.to_string())),
    }
}

impl PeerClient {
    fn client(&self) -> Result<ConfigRaftClient<Channel>, RPCError<TypeConfig>> {
        self.client.clone().map_err(|e| RPCError::Unreachable(Unreachable::from_string(e)))
    }

    fn timeout_err(&self, action: RPCTypes, timeout: Duration) -> Timeout<TypeConfig> {
        Timeout { action, id: self.id, target: self.target, timeout }
    }

    /// One unary RPC: encode, send under a timeout, decode.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        action: RPCTypes,
        req: &Req,
        option: &RPCOption,
        call: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        F: FnOnce(ConfigRaftClient<Channel>, RaftMessage) -> Fut,
        Fut: Future<Output = Result<tonic::Response<RaftMessage>, tonic::Status>>,
    {
        let data = codec::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let timeout = option.hard_ttl().max(self.settings.rpc_timeout_min);
        let reply = match tokio::time::timeout(timeout, call(self.client()?, RaftMessage { data: data.into() })).await {
            Err(_) => return Err(RPCError::Timeout(self.timeout_err(action, timeout))),
            Ok(Err(status)) => return Err(status_to_rpc(&status)),
            Ok(Ok(reply)) => reply.into_inner(),
        };
        codec::decode(&reply.data).map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }
}

/// The first message of a snapshot stream.
#[derive(Serialize, serde::Deserialize)]
pub(crate) struct SnapshotHeader {
    pub vote: Vote,
    pub meta: super::types::SnapshotMeta,
}

/// Splits a snapshot into stream messages: the header first, then `chunk_bytes` slices (zero-copy).
pub(crate) fn snapshot_chunks(header: Bytes, data: &Bytes, chunk_bytes: usize) -> Vec<SnapshotChunk> {
    let chunk_bytes = chunk_bytes.max(1);
    let mut chunks = vec![SnapshotChunk { header, data: Bytes::new() }];
    let mut offset = 0;
    while offset < data.len() {
        let end = (offset + chunk_bytes).min(data.len());
        chunks.push(SnapshotChunk { header: Bytes::new(), data: data.slice(offset..end) });
        offset = end;
    }
    chunks
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Bytes;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(RPCTypes::AppendEntries, &rpc, &option, |mut c, m| async move { c.append_entries(m).await }).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(RPCTypes::Vote, &rpc, &option, |mut c, m| async move { c.vote(m).await }).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(RPCTypes::Vote, &rpc, &option, |mut c, m| async move { c.pre_vote(m).await }).await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(RPCTypes::TransferLeader, &req, &option, |mut c, m| async move { c.transfer_leader(m).await }).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let header = SnapshotHeader { vote, meta: snapshot.meta.clone() };
        let header = codec::encode(&header).map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let chunks = snapshot_chunks(header.into(), &snapshot.snapshot, self.settings.snapshot_chunk_bytes);
        let timeout = option.hard_ttl().max(self.settings.snapshot_timeout);
        let mut client = self.client()?;
        let send = client.install_snapshot(futures::stream::iter(chunks));
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            res = tokio::time::timeout(timeout, send) => match res {
                Err(_) => return Err(StreamingError::Timeout(self.timeout_err(RPCTypes::InstallSnapshot, timeout))),
                Ok(Err(status)) => return Err(status_to_rpc(&status).into()),
                Ok(Ok(reply)) => reply.into_inner(),
            },
        };
        codec::decode(&reply.data).map_err(|e| StreamingError::Network(NetworkError::new(&e)))
    }
}
