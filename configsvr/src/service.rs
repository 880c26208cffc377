//! The client-facing `Config` gRPC service: catalog commands, catalog queries, the version watch,
//! membership changes and metrics.
//!
//! ```text
//!  client --Write--> follower --Write{forwarded}--> leader --client_write (<= write_timeout)--> Raft
//!                       \ no leader / forward failed: NotWritablePrimary + leader hint
//!  client --Query{linearizable}--> leader: ensure_linearizable(ReadIndex), then read CatalogState
//!                       (not linearizable: any server answers from what it applied)
//!  client --Watch{from}--> any server: stream of versions as its state machine applies entries
//!  member --Heartbeat--> leader only, never forwarded (else NotWritablePrimary + hint): `crate::arbiter`
//! ```
//!
//! Every call that needs a quorum runs under a timeout, so a minority side answers
//! `ExceededTimeLimit` ("no quorum") in bounded time instead of hanging. A request is forwarded at
//! most once (`forwarded`), so two servers with stale leader views cannot bounce it forever.
//!
//! Every unary call is timed by method and every error reply counted by code ([`ApiMetrics`]);
//! watch streams are counted while open.

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use openraft::ChangeMembers;
use openraft::ReadPolicy;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ChangeMembershipError, ClientWriteError, ForwardToLeader, LinearizableReadError, RaftError};
use openraft::raft::ClientWriteResponse;
use shoal_proto::catalog::wire;
use shoal_proto::config::config_client::ConfigClient;
use shoal_proto::config::config_server::Config;
use shoal_proto::config::{
    AddLearnerRequest, CatalogVersion, ChangeMembershipRequest, ConfigError, GroupStatusReply, GroupStatusRequest,
    HeartbeatReply, HeartbeatRequest, Member, MembershipReply, MetricsReply, MetricsRequest, QueryReply, QueryRequest,
    WatchRequest, WriteReply, WriteRequest,
};
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use tokio::sync::watch;
use tokio::time::error::Elapsed;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::arbiter::task::Arbiter;
use crate::codec;
use crate::error::ServiceError;
use crate::metrics::{ApiMethod, ApiMetrics};
use crate::raft::catalog_api::{self, QueryError};
use crate::raft::network::connect_lazy;
use crate::raft::state_machine::CatalogState;
use crate::raft::types::{Command, Node, NodeId, Raft, RaftRequest, TypeConfig, now_ms};

/// Time limits of the client API, with units in the names.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// A write not committed by then fails with "no quorum" (its outcome is then unknown).
    pub write_timeout: Duration,
    /// A linearizable read that cannot confirm leadership by then fails with "no quorum".
    pub read_timeout: Duration,
    /// Adding a learner (which may wait for it to catch up) or changing the voters.
    pub membership_timeout: Duration,
    pub connect_timeout: Duration,
    /// How long a follower forwarding a read waits for the leader before answering "no quorum"
    /// with the leader's name: below the clients' first attempt (1 s), so a client asks another
    /// server rather than timing out on a follower stuck behind a paused leader.
    pub forward_read_timeout: Duration,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            write_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
            membership_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            forward_read_timeout: Duration::from_millis(700),
        }
    }
}

/// What a forwarded write or membership change may take beyond the leader's own limit (which
/// answers first): only a dead connection to the leader runs into it.
const FORWARD_SLACK: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct ConfigService {
    pub(crate) raft: Raft,
    pub(crate) state: Arc<CatalogState>,
    pub(crate) settings: ApiSettings,
    /// Replica-group arbitration (`Heartbeat`, `GroupStatus`; see `crate::arbiter`).
    pub(crate) arbiter: Arc<Arbiter>,
    /// Client channels to other config servers, by address, for forwarding.
    peers: Arc<Mutex<HashMap<String, Channel>>>,
    /// Flips to `true` at shutdown so watch streams end and the server can stop.
    shutdown: watch::Receiver<bool>,
    metrics: Arc<ApiMetrics>,
}

pub(crate) type ApiResult<T> = Result<T, ServiceError>;
type MembershipWrite = Result<ClientWriteResponse<TypeConfig>, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>;

fn leader_of(f: &ForwardToLeader<TypeConfig>) -> Option<(NodeId, String)> {
    match (&f.leader_id, &f.leader_node) {
        (Some(id), Some(node)) => Some((*id, node.addr.clone())),
        _ => None,
    }
}

impl ConfigService {
    pub fn new(
        raft: Raft,
        state: Arc<CatalogState>,
        settings: ApiSettings,
        arbiter: Arc<Arbiter>,
        shutdown: watch::Receiver<bool>,
        metrics: Arc<ApiMetrics>,
    ) -> Self {
        Self { raft, state, settings, arbiter, peers: Arc::new(Mutex::new(HashMap::new())), shutdown, metrics }
    }

    /// The leader as this node's metrics see it, with its address.
    fn current_leader(&self) -> Option<(NodeId, String)> {
        let watch = self.raft.metrics();
        let metrics = watch.borrow_watched();
        let id = metrics.current_leader?;
        let node = metrics.membership_config.membership().get_node(&id)?;
        Some((id, node.addr.clone()))
    }

    pub(crate) fn not_leader(&self, hint: Option<(NodeId, String)>) -> ServiceError {
        if self.raft.metrics().borrow_watched().membership_config.membership().voter_ids().next().is_none() {
            return ServiceError::NotInitialized;
        }
        ServiceError::NotLeader { leader: hint.or_else(|| self.current_leader()) }
    }

    fn peer(&self, addr: &str) -> ApiResult<ConfigClient<Channel>> {
        let channel = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            match peers.get(addr) {
                Some(c) => c.clone(),
                None => {
                    let c = connect_lazy(addr, self.settings.connect_timeout)
                        .map_err(|e| ServiceError::Internal(format!("bad peer address {addr:?}: {e}")))?;
                    peers.insert(addr.to_owned(), c.clone());
                    c
                }
            }
        };
        Ok(ConfigClient::new(channel)
            .max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES)
            .max_encoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES))
    }

    /// Forwards one request to `leader` under `timeout`; a transport failure becomes
    /// `LeaderUnreachable` (retryable: the request did not reach a leader).
    async fn forward<T, F, Fut>(&self, leader: (NodeId, String), timeout: Duration, call: F) -> ApiResult<T>
    where
        F: FnOnce(ConfigClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let client = self.peer(&leader.1)?;
        match tokio::time::timeout(timeout, call(client)).await {
            Ok(Ok(reply)) => Ok(reply.into_inner()),
            // Unavailable: no connection to the leader, so the request most likely never reached it.
            Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
                tracing::debug!(leader = leader.0, %status, "cannot reach the leader");
                Err(ServiceError::LeaderUnreachable { leader })
            }
            Ok(Err(status)) => Err(ServiceError::Internal(format!("forwarding to the leader failed: {status}"))),
            Err(_) => Err(ServiceError::NoQuorum {
                what: "forwarded request",
                waited_ms: timeout.as_millis() as u64,
                leader: Some(leader),
            }),
        }
    }

    async fn write_local(&self, command: Command) -> ApiResult<WriteReply> {
        let request = RaftRequest { issued_at_ms: now_ms(), command };
        let timeout = self.settings.write_timeout;
        let result = match tokio::time::timeout(timeout, self.raft.client_write(request)).await {
            Ok(r) => r,
            Err(_) => {
                return Err(ServiceError::NoQuorum {
                    what: "write",
                    waited_ms: timeout.as_millis() as u64,
                    leader: self.current_leader(),
                });
            }
        };
        match result {
            Ok(resp) => {
                let outcome = resp
                    .data
                    .outcome
                    .ok_or_else(|| ServiceError::Internal("a command entry was applied without an outcome".into()))?;
                let outcome = wire::encode(&outcome).map_err(|e| ServiceError::Internal(e.to_string()))?;
                Ok(WriteReply {
                    error: None,
                    outcome: outcome.into(),
                    log_index: resp.log_id.index(),
                    catalog_version: resp.data.catalog_version,
                })
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(self.not_leader(leader_of(&f))),
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(f))) => {
                Err(ServiceError::LeaderChanged { leader: leader_of(&f) })
            }
            Err(RaftError::APIError(e)) => Err(ServiceError::Internal(e.to_string())),
            Err(RaftError::Fatal(e)) => Err(ServiceError::ShuttingDown(e.to_string())),
        }
    }

    /// Confirms, with a quorum, that the local state machine is current (leader only).
    async fn linearize(&self) -> ApiResult<()> {
        self.linearize_within(self.settings.read_timeout).await
    }

    /// [`Self::linearize`] under a caller's time limit (a heartbeat cannot wait long).
    pub(crate) async fn linearize_within(&self, timeout: Duration) -> ApiResult<()> {
        match tokio::time::timeout(timeout, self.raft.ensure_linearizable(ReadPolicy::ReadIndex)).await {
            Err(_) => Err(ServiceError::NoQuorum {
                what: "linearizable read",
                waited_ms: timeout.as_millis() as u64,
                leader: self.current_leader(),
            }),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f)))) => {
                Err(self.not_leader(leader_of(&f)))
            }
            Ok(Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(q)))) => Err(ServiceError::NoQuorum {
                what: "linearizable read",
                waited_ms: timeout.as_millis() as u64,
                leader: None,
            })
            .inspect_err(|_| tracing::debug!(%q, "linearizable read without quorum")),
            Ok(Err(RaftError::Fatal(e))) => Err(ServiceError::ShuttingDown(e.to_string())),
        }
    }

    /// Answers `queries` from the applied catalog, all at one version.
    fn query_local(&self, queries: &[shoal_proto::config::CatalogQuery]) -> ApiResult<QueryReply> {
        let applied = self.state.read();
        let answers = catalog_api::answer_all(&applied.catalog, queries).map_err(|e| match e {
            QueryError::Encode(e) => ServiceError::Internal(e.to_string()),
            bad => ServiceError::Parse(bad.to_string()),
        })?;
        let answers = answers.into_iter().map(bytes::Bytes::from).collect();
        Ok(QueryReply { error: None, answers, catalog_version: catalog_api::version(&applied.catalog) })
    }

    /// Runs `local` if this node can serve the request, else forwards it once with `call`.
    /// `timeout` is the leader's own limit for the request (the forward allows a little more).
    pub(crate) async fn leader_or_forward<T, L, LFut, F, FFut>(
        &self,
        forwarded: bool,
        timeout: Duration,
        local: L,
        call: F,
    ) -> ApiResult<T>
    where
        L: FnOnce() -> LFut,
        LFut: Future<Output = ApiResult<T>>,
        F: FnOnce(ConfigClient<Channel>) -> FFut,
        FFut: Future<Output = Result<Response<T>, Status>>,
    {
        match local().await {
            Err(ServiceError::NotLeader { leader: Some(leader) }) if !forwarded && leader.0 != *self.raft.node_id() => {
                self.forward(leader, timeout, call).await
            }
            other => other,
        }
    }

    async fn membership_call(&self, result: Result<MembershipWrite, Elapsed>) -> ApiResult<MembershipReply> {
        match result {
            Err(_) => Err(ServiceError::NoQuorum {
                what: "membership change",
                waited_ms: self.settings.membership_timeout.as_millis() as u64,
                leader: self.current_leader(),
            }),
            Ok(Ok(resp)) => {
                let membership = self.raft.metrics().borrow_watched().membership_config.membership().clone();
                let membership = codec::encode(&membership).map_err(|e| ServiceError::Internal(e.to_string()))?;
                Ok(MembershipReply { error: None, log_index: resp.log_id.index(), membership: membership.into() })
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => Err(self.not_leader(leader_of(&f))),
            Ok(Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)))) => {
                Err(ServiceError::LeaderChanged { leader: leader_of(&f) })
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => match e {
                ChangeMembershipError::InProgress(_) | ChangeMembershipError::UncommittedLeaderLog(_) => {
                    Err(ServiceError::MembershipInProgress(e.to_string()))
                }
                other => Err(ServiceError::BadMembership(other.to_string())),
            },
            Ok(Err(RaftError::APIError(e))) => Err(ServiceError::Internal(e.to_string())),
            Ok(Err(RaftError::Fatal(e))) => Err(ServiceError::ShuttingDown(e.to_string())),
        }
    }
}

impl ConfigService {
    /// The reply carrying `e`, counted by its code.
    fn err_reply<T>(&self, e: &ServiceError, make: impl FnOnce(ConfigError) -> T) -> Result<Response<T>, Status> {
        if !matches!(e, ServiceError::NotLeader { .. }) {
            tracing::debug!(error = %e, "config request failed");
        }
        self.metrics.failed(e.code().name());
        Ok(Response::new(make(e.to_proto())))
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<CatalogVersion, Status>> + Send>>;

#[tonic::async_trait]
impl Config for ConfigService {
    async fn write(&self, request: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::Write).start_timer();
        let req = request.into_inner();
        let command: Command = match wire::decode(&req.command) {
            Ok(c) => c,
            Err(e) => {
                return self.err_reply(&ServiceError::Parse(e.to_string()), |error| WriteReply {
                    error: Some(error),
                    ..Default::default()
                });
            }
        };
        let forward_req = WriteRequest { command: req.command.clone(), forwarded: true };
        let result = self
            .leader_or_forward(
                req.forwarded,
                self.settings.write_timeout + FORWARD_SLACK,
                || self.write_local(command),
                |mut c| async move { c.write(forward_req).await },
            )
            .await;
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => self.err_reply(&e, |error| WriteReply { error: Some(error), ..Default::default() }),
        }
    }

    async fn query(&self, request: Request<QueryRequest>) -> Result<Response<QueryReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::Query).start_timer();
        let req = request.into_inner();
        let result = if req.linearizable {
            let forward_req = QueryRequest { forwarded: true, ..req.clone() };
            self.leader_or_forward(
                req.forwarded,
                self.settings.forward_read_timeout,
                || async {
                    self.linearize().await?;
                    self.query_local(&req.queries)
                },
                |mut c| async move { c.query(forward_req).await },
            )
            .await
        } else {
            self.query_local(&req.queries)
        };
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => self.err_reply(&e, |error| QueryReply { error: Some(error), ..Default::default() }),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let from = request.into_inner().from_version;
        let versions = self.state.subscribe();
        let shutdown = self.shutdown.clone();
        // Counted open as long as the stream (which owns the guard in its state) lives.
        let open = self.metrics.watch_opened();
        // State: (version receiver, shutdown receiver, last version sent, open-stream guard).
        let state = (versions, shutdown, from, open);
        let stream = futures::stream::unfold(state, |(mut rx, mut stop, last, open)| async move {
            loop {
                if *stop.borrow() {
                    return None;
                }
                let mark = *rx.borrow_and_update();
                if mark.catalog_version > last {
                    let item = CatalogVersion {
                        version: mark.catalog_version,
                        applied_index: mark.applied_index,
                        security_version: mark.security_version,
                    };
                    return Some((Ok(item), (rx, stop, mark.catalog_version, open)));
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return None },
                    changed = stop.changed() => if changed.is_err() { return None },
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn add_learner(&self, request: Request<AddLearnerRequest>) -> Result<Response<MembershipReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::AddLearner).start_timer();
        let req = request.into_inner();
        let forward_req = AddLearnerRequest { forwarded: true, ..req.clone() };
        let result = self
            .leader_or_forward(
                req.forwarded,
                self.settings.membership_timeout + FORWARD_SLACK,
                || async {
                    let node = Node { addr: req.addr.clone() };
                    let fut = self.raft.add_learner(req.node_id, node, req.blocking);
                    self.membership_call(tokio::time::timeout(self.settings.membership_timeout, fut).await).await
                },
                |mut c| async move { c.add_learner(forward_req).await },
            )
            .await;
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => self.err_reply(&e, |error| MembershipReply { error: Some(error), ..Default::default() }),
        }
    }

    async fn change_membership(
        &self,
        request: Request<ChangeMembershipRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::ChangeMembership).start_timer();
        let req = request.into_inner();
        let forward_req = ChangeMembershipRequest { forwarded: true, ..req.clone() };
        let result = self
            .leader_or_forward(
                req.forwarded,
                self.settings.membership_timeout + FORWARD_SLACK,
                || async {
                    let voters: BTreeSet<NodeId> = req.voters.iter().copied().collect();
                    if voters.is_empty() {
                        return Err(ServiceError::BadMembership("the voter set must not be empty".into()));
                    }
                    let fut = self.raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), req.retain);
                    self.membership_call(tokio::time::timeout(self.settings.membership_timeout, fut).await).await
                },
                |mut c| async move { c.change_membership(forward_req).await },
            )
            .await;
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => self.err_reply(&e, |error| MembershipReply { error: Some(error), ..Default::default() }),
        }
    }

    async fn metrics(&self, _request: Request<MetricsRequest>) -> Result<Response<MetricsReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::Metrics).start_timer();
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, node)| Member { id: *id, addr: node.addr.clone(), voter: voters.contains(id) })
            .collect();
        let leader_addr =
            m.current_leader.and_then(|id| membership.get_node(&id)).map(|n| n.addr.clone()).unwrap_or_default();
        let index = |id: &Option<crate::raft::types::LogId>| id.as_ref().map_or(0, |id| id.index());
        Ok(Response::new(MetricsReply {
            id: m.id,
            state: format!("{:?}", m.state),
            leader_id: m.current_leader.unwrap_or(0),
            leader_addr,
            term: m.current_term,
            last_log_index: m.last_log_index.unwrap_or(0),
            last_applied_index: index(&m.last_applied),
            snapshot_index: index(&m.snapshot),
            purged_index: index(&m.purged),
            catalog_version: self.state.mark().catalog_version,
            members,
            has_log: m.last_log_index.is_some(),
            membership_log_index: index(m.membership_config.log_id()),
        }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::Heartbeat).start_timer();
        match self.heartbeat_local(request.into_inner()).await {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => self.err_reply(&e, |error| HeartbeatReply { error: Some(error), ..Default::default() }),
        }
    }

    async fn group_status(&self, request: Request<GroupStatusRequest>) -> Result<Response<GroupStatusReply>, Status> {
        let _timer = self.metrics.latency(ApiMethod::GroupStatus).start_timer();
        let req = request.into_inner();
        let forward_req = GroupStatusRequest { forwarded: true, ..req.clone() };
        let result = self
            .leader_or_forward(
                req.forwarded,
                self.settings.forward_read_timeout,
                || async { self.group_status_local(&req.shard) },
                |mut c| async move { c.group_status(forward_req).await },
            )
            .await;
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(e) => self.err_reply(&e, |error| GroupStatusReply { error: Some(error), ..Default::default() }),
        }
    }
}
