//! A client of the config service for routers, shards, admin tools and tests: finds the leader,
//! follows `NotWritablePrimary` hints, and retries within a bounded number of attempts and a
//! deadline, with exponential backoff.
//!
//! Writes are retried only when the server said the command was not attempted (not the leader,
//! not initialized, transport failure before sending). A "no quorum" or "leader changed" answer
//! means the outcome is unknown, so it is returned to the caller, who may re-read and decide (every
//! chunk-changing command is a compare-and-set, so a blind retry would be refused anyway). Reads
//! are retried on those too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use shoal_proto::ErrorCode;
use shoal_proto::catalog::wire;
use shoal_proto::config::config_client::ConfigClient as GrpcClient;
use shoal_proto::config::{
    AddLearnerRequest, CatalogVersion, ChangeMembershipRequest, ConfigError, GroupStatusReply, GroupStatusRequest,
    HeartbeatReply, HeartbeatRequest, MembershipReply, MetricsReply, MetricsRequest, QueryReply, QueryRequest,
    WatchRequest, WriteRequest,
};
use shoal_proto::limits::GRPC_MESSAGE_SIZE_MAX_BYTES;
use tonic::transport::Channel;

use shoal_proto::catalog::{
    CatalogError, Collection, Command, Database, Reply, RoutingAnswer, RoutingSince, SecurityCatalog, Settings, Shard,
};

use crate::net::{CONFIG_KEEPALIVE, connect_lazy_with};
use shoal_proto::catalog::{ClusterCatalogView, Parts};
pub use shoal_proto::config::CatalogQuery;
pub use shoal_proto::config::catalog_query::What;
use shoal_proto::config::{All, RoutingTableQuery, ViewQuery};

/// One heartbeat attempt; above the leader's lease confirmation (250 ms by default).
pub const HEARTBEAT_RPC_TIMEOUT: Duration = Duration::from_millis(300);
/// One heartbeat call including retries and leader redirects.
pub const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(1);
/// A call answered after this long is logged (debug) with the servers it passed over.
const SLOW_CALL: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Per-RPC limit; above the servers' own write/read timeouts so their answer arrives first.
    pub rpc_timeout: Duration,
    /// Per-RPC limit of membership changes (adding a learner waits for it to catch up); above
    /// the servers' `membership_timeout`.
    pub membership_rpc_timeout: Duration,
    /// Overall limit of one call including retries.
    pub deadline: Duration,
    pub attempts_max: u32,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub connect_timeout: Duration,
    /// First attempt's limit of a read or heartbeat, doubled after each
    /// attempt that timed out, up to `rpc_timeout`: a paused server costs a read about this much
    /// before the next server is asked, while a slow answer still gets the full time in the end.
    pub first_attempt_timeout: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            rpc_timeout: Duration::from_secs(8),
            membership_rpc_timeout: Duration::from_secs(40),
            deadline: Duration::from_secs(15),
            attempts_max: 30,
            backoff_min: Duration::from_millis(25),
            backoff_max: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(2),
            first_attempt_timeout: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The config service answered with an error (a MongoDB code: `NotWritablePrimary`,
    /// `ExceededTimeLimit`, ...).
    #[error("{code_name} ({code}): {errmsg}")]
    Service { code: i32, code_name: String, errmsg: String },
    #[error("no config server reachable: {0}")]
    Unavailable(String),
    /// No server could serve the call in time: typically no quorum (no leader can be elected).
    #[error("no config leader served the request within {elapsed_ms} ms ({attempts} attempts); last error: {last}")]
    Exhausted { attempts: u32, elapsed_ms: u64, last: Box<ClientError> },
    #[error("bad reply: {0}")]
    Decode(String),
}

impl ClientError {
    /// The MongoDB error code, if the service answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Service { code, .. } => ErrorCode::from_code(*code),
            ClientError::Exhausted { .. } => Some(ErrorCode::ExceededTimeLimit),
            _ => None,
        }
    }
}

impl From<ConfigError> for ClientError {
    fn from(e: ConfigError) -> Self {
        ClientError::Service { code: e.code, code_name: e.code_name, errmsg: e.errmsg }
    }
}

/// A committed command's result.
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    /// The catalog's answer; `Err` is a refusal that changed nothing.
    pub outcome: Result<Reply, CatalogError>,
    pub log_index: u64,
    pub catalog_version: u64,
}

enum Verdict {
    /// Try the server at this address next, at once.
    Redirect(String),
    /// Try another server after a backoff.
    Retry,
    Fail,
}

fn verdict(e: &ConfigError, idempotent: bool) -> Verdict {
    match ErrorCode::from_code(e.code) {
        Some(ErrorCode::NotWritablePrimary) if !e.leader_addr.is_empty() => Verdict::Redirect(e.leader_addr.clone()),
        Some(ErrorCode::NotWritablePrimary | ErrorCode::NotYetInitialized | ErrorCode::ShutdownInProgress) => {
            Verdict::Retry
        }
        Some(ErrorCode::ExceededTimeLimit | ErrorCode::InterruptedDueToReplStateChange) if idempotent => Verdict::Retry,
        _ => Verdict::Fail,
    }
}

pub struct ConfigClient {
    addrs: Vec<String>,
    settings: ClientSettings,
    channels: Mutex<HashMap<String, Channel>>,
    /// Where the last successful call went (or a server's leader hint).
    preferred: Mutex<Option<String>>,
}

impl ConfigClient {
    /// `addrs`: `host:port` of one or more config servers.
    pub fn new(addrs: Vec<String>, settings: ClientSettings) -> Self {
        Self { addrs, settings, channels: Mutex::new(HashMap::new()), preferred: Mutex::new(None) }
    }

    fn grpc(&self, addr: &str) -> Result<GrpcClient<Channel>, ClientError> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let channel = match channels.get(addr) {
            Some(c) => c.clone(),
            None => {
                let c = connect_lazy_with(addr, self.settings.connect_timeout, CONFIG_KEEPALIVE)
                    .map_err(|e| ClientError::Unavailable(format!("bad address {addr:?}: {e}")))?;
                channels.insert(addr.to_owned(), c.clone());
                c
            }
        };
        Ok(GrpcClient::new(channel).max_decoding_message_size(GRPC_MESSAGE_SIZE_MAX_BYTES))
    }

    /// Calls `call` on config servers until one answers without a retryable error.
    /// `error_of` extracts the reply's `ConfigError`.
    async fn call<T, F, Fut>(
        &self,
        kind: Call,
        rpc_timeout: Duration,
        error_of: fn(&T) -> Option<&ConfigError>,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(GrpcClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_within(kind, rpc_timeout, self.settings.deadline.max(rpc_timeout), error_of, call).await
    }

    /// [`Self::call`] with its own overall deadline (a member's heartbeat loop cannot wait long).
    async fn call_within<T, F, Fut>(
        &self,
        kind: Call,
        rpc_timeout: Duration,
        overall: Duration,
        error_of: fn(&T) -> Option<&ConfigError>,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(GrpcClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        if self.addrs.is_empty() {
            return Err(ClientError::Unavailable("no config server addresses".into()));
        }
        let idempotent = kind != Call::Write;
        let start = tokio::time::Instant::now();
        let deadline = start + overall;
        let mut backoff = self.settings.backoff_min;
        let mut next = 0usize;
        let mut redirect: Option<String> = self.preferred.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut last = ClientError::Unavailable("no attempt made".into());
        // Servers that did not answer during this call (timed out: a paused or cut-off server):
        // passed over in turn while another is left, and a stale leader hint naming one is not
        // followed again.
        let mut unreachable: Vec<String> = Vec::new();
        // Servers whose call failed at once (connection refused or reset: a killed server, or a
        // resumed one whose old connections broke): still asked in turn (a reconnect may well
        // succeed, and costs nothing if not), but a hint naming one is not followed again.
        let mut refused: Vec<String> = Vec::new();
        let mut attempts = 0;
        let mut timed_out = 0u32;
        while attempts < self.settings.attempts_max && tokio::time::Instant::now() < deadline {
            attempts += 1;
            let addr = match redirect.take() {
                Some(a) => a,
                // The next server in turn, passing over those that did not answer in this call
                // (a paused leader must not be waited on twice) while another is left to try.
                None => {
                    let n = self.addrs.len();
                    let fresh = (0..n).map(|i| (next + i) % n).find(|i| !unreachable.contains(&self.addrs[*i]));
                    let i = fresh.unwrap_or(next % n);
                    next = i + 1;
                    self.addrs[i].clone()
                }
            };
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let limit = attempt_timeout(kind, rpc_timeout, self.settings.first_attempt_timeout, timed_out);
            let timeout = limit.min(remaining.max(Duration::from_millis(1)));
            let outcome = match self.grpc(&addr) {
                Ok(client) => tokio::time::timeout(timeout, call(client)).await,
                Err(e) => Ok(Err(tonic::Status::unavailable(e.to_string()))),
            };
            let wait = match outcome {
                Ok(Ok(reply)) => {
                    let reply = reply.into_inner();
                    match error_of(&reply) {
                        None => {
                            if start.elapsed() >= SLOW_CALL {
                                tracing::debug!(
                                    %addr, attempts, ?kind, elapsed_ms = start.elapsed().as_millis() as u64,
                                    timed_out = ?unreachable, ?refused, "slow config call answered"
                                );
                            }
                            *self.preferred.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr);
                            return Ok(reply);
                        }
                        Some(e) => {
                            let v = verdict(e, idempotent);
                            last = e.clone().into();
                            match v {
                                Verdict::Redirect(leader)
                                    if leader != addr
                                        && !unreachable.contains(&leader)
                                        && !refused.contains(&leader) =>
                                {
                                    redirect = Some(leader);
                                    false
                                }
                                Verdict::Redirect(_) | Verdict::Retry => true,
                                Verdict::Fail => return Err(last),
                            }
                        }
                    }
                }
                Ok(Err(status)) => {
                    last = ClientError::Unavailable(format!("{addr}: {}", status.message()));
                    refused.push(addr);
                    true
                }
                Err(_) => {
                    last = ClientError::Unavailable(format!("{addr}: no answer within {} ms", timeout.as_millis()));
                    unreachable.push(addr);
                    timed_out += 1;
                    // A write that timed out on the wire may have been committed: do not resend.
                    if !idempotent {
                        return Err(last);
                    }
                    true
                }
            };
            if wait {
                *self.preferred.lock().unwrap_or_else(|p| p.into_inner()) = None;
                let pause = backoff.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                tokio::time::sleep(pause).await;
                backoff = (backoff * 2).min(self.settings.backoff_max);
            }
        }
        Err(ClientError::Exhausted { attempts, elapsed_ms: start.elapsed().as_millis() as u64, last: Box::new(last) })
    }

    /// Proposes `command` and waits until it is committed and applied.
    pub async fn write(&self, command: &Command) -> Result<WriteOutcome, ClientError> {
        let bytes = bytes::Bytes::from(wire::encode(command).map_err(|e| ClientError::Decode(e.to_string()))?);
        let reply = self
            .call(
                Call::Write,
                self.settings.rpc_timeout,
                |r: &shoal_proto::config::WriteReply| r.error.as_ref(),
                |mut c| {
                    let req = WriteRequest { command: bytes.clone(), forwarded: false };
                    async move { c.write(req).await }
                },
            )
            .await?;
        let outcome = wire::decode(&reply.outcome).map_err(|e| ClientError::Decode(e.to_string()))?;
        Ok(WriteOutcome { outcome, log_index: reply.log_index, catalog_version: reply.catalog_version })
    }

    /// Narrow reads (`config.proto`'s `Query`): one encoded answer per query, all read at one
    /// catalog version, which comes back too. Decode each answer with [`answer`], as the type listed
    /// beside its query; the typed methods below do it for a single query.
    pub async fn query(
        &self,
        queries: Vec<CatalogQuery>,
        linearizable: bool,
    ) -> Result<(Vec<bytes::Bytes>, u64), ClientError> {
        let asked = queries.len();
        let reply = self
            .call(
                Call::Read,
                self.settings.rpc_timeout,
                |r: &QueryReply| r.error.as_ref(),
                |mut c| {
                    let req = QueryRequest { queries: queries.clone(), linearizable, forwarded: false };
                    async move { c.query(req).await }
                },
            )
            .await?;
        if reply.answers.len() != asked {
            return Err(ClientError::Decode(format!("{} answers to {asked} queries", reply.answers.len())));
        }
        Ok((reply.answers, reply.catalog_version))
    }

    async fn query_one<T: serde::de::DeserializeOwned>(
        &self,
        what: What,
        linearizable: bool,
    ) -> Result<(T, u64), ClientError> {
        let (answers, version) = self.query(vec![CatalogQuery { what: Some(what) }], linearizable).await?;
        let first = answers.first().ok_or_else(|| ClientError::Decode("no answer".into()))?;
        Ok((answer(first)?, version))
    }

    /// Every shard in id order, and the catalog version they were read at.
    pub async fn shards(&self, linearizable: bool) -> Result<(Vec<Shard>, u64), ClientError> {
        self.query_one(What::Shards(All {}), linearizable).await
    }

    pub async fn shard(&self, id: &str, linearizable: bool) -> Result<Option<Shard>, ClientError> {
        Ok(self.query_one(What::Shard(id.to_owned()), linearizable).await?.0)
    }

    pub async fn database(&self, name: &str, linearizable: bool) -> Result<Option<Database>, ClientError> {
        Ok(self.query_one(What::Database(name.to_owned()), linearizable).await?.0)
    }

    /// The sharded collection `ns` with its chunks; `None` if it is not sharded.
    pub async fn collection(&self, ns: &str, linearizable: bool) -> Result<Option<Collection>, ClientError> {
        Ok(self.query_one(What::Collection(ns.to_owned()), linearizable).await?.0)
    }

    /// The sharded collections of database `db`.
    pub async fn collections_in(&self, db: &str, linearizable: bool) -> Result<Vec<Collection>, ClientError> {
        Ok(self.query_one(What::CollectionsIn(db.to_owned()), linearizable).await?.0)
    }

    pub async fn settings(&self, linearizable: bool) -> Result<Settings, ClientError> {
        Ok(self.query_one(What::Settings(All {}), linearizable).await?.0)
    }

    /// The routing table of `ns` (whole, or the changes after `since`) and the catalog version.
    pub async fn routing_table(
        &self,
        ns: &str,
        since: Option<RoutingSince>,
        linearizable: bool,
    ) -> Result<(RoutingAnswer, u64), ClientError> {
        let since = since.map(|s| shoal_proto::config::RoutingSince {
            epoch: bytes::Bytes::copy_from_slice(&s.epoch.0),
            major: s.version.major,
            minor: s.version.minor,
        });
        self.query_one(What::RoutingTable(RoutingTableQuery { ns: ns.to_owned(), since }), linearizable).await
    }

    /// The named `parts` of the catalog, all at one version, and that version.
    pub async fn view(&self, parts: Parts, linearizable: bool) -> Result<(ClusterCatalogView, u64), ClientError> {
        self.query_one(What::View(ViewQuery { parts: parts.to_wire() }), linearizable).await
    }

    /// Every user and user-defined role, with their version.
    pub async fn security(&self, linearizable: bool) -> Result<SecurityCatalog, ClientError> {
        Ok(self.query_one(What::Security(All {}), linearizable).await?.0)
    }

    /// A stream of catalog versions greater than `from_version`, from one server.
    pub async fn watch(&self, from_version: u64) -> Result<tonic::Streaming<CatalogVersion>, ClientError> {
        // Any server can serve it; streams are not wrapped in `call`'s reply/error shape.
        let mut last = ClientError::Unavailable("no config server addresses".into());
        for addr in &self.addrs {
            let mut client = self.grpc(addr)?;
            let call = client.watch(WatchRequest { from_version });
            match tokio::time::timeout(self.settings.rpc_timeout, call).await {
                Ok(Ok(stream)) => return Ok(stream.into_inner()),
                Ok(Err(status)) => last = ClientError::Unavailable(format!("{addr}: {}", status.message())),
                Err(_) => last = ClientError::Unavailable(format!("{addr}: no answer")),
            }
        }
        Err(last)
    }

    pub async fn add_learner(&self, node_id: u64, addr: &str, blocking: bool) -> Result<MembershipReply, ClientError> {
        self.call(
            Call::Wait,
            self.settings.membership_rpc_timeout,
            |r: &MembershipReply| r.error.as_ref(),
            |mut c| {
                let req = AddLearnerRequest { node_id, addr: addr.to_owned(), blocking, forwarded: false };
                async move { c.add_learner(req).await }
            },
        )
        .await
    }

    /// Replaces the voter set (joint consensus inside openraft).
    pub async fn change_membership(&self, voters: &[u64], retain: bool) -> Result<MembershipReply, ClientError> {
        self.call(
            Call::Wait,
            self.settings.membership_rpc_timeout,
            |r: &MembershipReply| r.error.as_ref(),
            |mut c| {
                let req = ChangeMembershipRequest { voters: voters.to_vec(), retain, forwarded: false };
                async move { c.change_membership(req).await }
            },
        )
        .await
    }

    /// Reports a shard member's state to the config leader and learns the group's term, primary
    /// and members (and, for the primary, its lease). Sent every heartbeat interval, so it gives
    /// up quickly: [`HEARTBEAT_RPC_TIMEOUT`] per attempt, [`HEARTBEAT_DEADLINE`] in all.
    pub async fn heartbeat(&self, req: HeartbeatRequest) -> Result<HeartbeatReply, ClientError> {
        self.call_within(
            Call::Read,
            HEARTBEAT_RPC_TIMEOUT,
            HEARTBEAT_DEADLINE,
            |r: &HeartbeatReply| r.error.as_ref(),
            |mut c| {
                let req = req.clone();
                async move { c.heartbeat(req).await }
            },
        )
        .await
    }

    /// The config leader's view of one shard's replica group (members, phase, commit point).
    pub async fn group_status(&self, shard: &str) -> Result<GroupStatusReply, ClientError> {
        self.call(
            Call::Read,
            self.settings.rpc_timeout,
            |r: &GroupStatusReply| r.error.as_ref(),
            |mut c| {
                let req = GroupStatusRequest { shard: shard.to_owned(), forwarded: false };
                async move { c.group_status(req).await }
            },
        )
        .await
    }

    /// Metrics of the server at `addr` (not necessarily the leader).
    pub async fn metrics(&self, addr: &str) -> Result<MetricsReply, ClientError> {
        let mut client = self.grpc(addr)?;
        match tokio::time::timeout(self.settings.rpc_timeout, client.metrics(MetricsRequest {})).await {
            Ok(Ok(reply)) => Ok(reply.into_inner()),
            Ok(Err(status)) => Err(ClientError::Unavailable(format!("{addr}: {}", status.message()))),
            Err(_) => Err(ClientError::Unavailable(format!("{addr}: no answer"))),
        }
    }
}

/// One answer of [`ConfigClient::query`], decoded as the type its query names.
pub fn answer<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ClientError> {
    shoal_proto::catalog::wire::decode(bytes).map_err(|e| ClientError::Decode(e.to_string()))
}

/// A query for [`ConfigClient::query`].
pub fn query(what: What) -> CatalogQuery {
    CatalogQuery { what: Some(what) }
}
/// What a call does, for how its attempts are limited and retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// A catalog write: one attempt gets the whole `rpc_timeout` and is never resent after a
    /// timeout (it may have been committed).
    Write,
    /// A read or heartbeat, answered in milliseconds: resent, the first attempt limited to
    /// `first_attempt_timeout` so a paused server is passed over quickly.
    Read,
    /// A call that waits on purpose (a learner catching up): resent, each attempt given the
    /// whole `rpc_timeout`.
    Wait,
}

/// One attempt's limit: a [`Call::Read`] gets `first` after `timed_out` attempts that timed out,
/// doubled each time, never above `rpc_timeout`; the others `rpc_timeout`.
fn attempt_timeout(kind: Call, rpc_timeout: Duration, first: Duration, timed_out: u32) -> Duration {
    if kind != Call::Read {
        return rpc_timeout;
    }
    first.saturating_mul(1 << timed_out.min(16)).min(rpc_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotent_attempts_start_short_and_double_up_to_the_rpc_timeout() {
        let (rpc, first) = (Duration::from_secs(8), Duration::from_secs(1));
        let limits: Vec<u64> = (0..5).map(|n| attempt_timeout(Call::Read, rpc, first, n).as_secs()).collect();
        assert_eq!(limits, [1, 2, 4, 8, 8]);
        assert_eq!(attempt_timeout(Call::Read, rpc, first, u32::MAX), rpc);
        // A write is never cut short (timed out, it is not resent), nor a call that waits.
        assert_eq!(attempt_timeout(Call::Write, rpc, first, 0), rpc);
        assert_eq!(attempt_timeout(Call::Wait, rpc, first, 0), rpc);
    }
}
