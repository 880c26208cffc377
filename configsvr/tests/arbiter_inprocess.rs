//! The replica-group arbiter end to end: three config servers in this process and fake shard
//! members that heartbeat through `ConfigClient` the way the shard side does (learn the term,
//! freeze, become primary when named), while the test moves their optimes and silences them.
//!
//! Timing is asserted only as lower bounds that a slow machine cannot break (a new term is never
//! committed before the deposed primary's lease has run out), or against a lease far longer than
//! any scheduling delay.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

mod raft_common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use raft_common::{InProcCluster, client_settings, eventually};
use shoal_cluster::config_client::ConfigClient;
use shoal_configsvr::catalog::{ClusterCatalogView, Command, Detail, Parts, ReplicaGroup};
use shoal_proto::ErrorCode;
use shoal_proto::config::config_client::ConfigClient as GrpcClient;
use shoal_proto::config::{HeartbeatRequest, OpTime};
use tokio::task::JoinHandle;

const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
const SHARD: &str = "s0";
const MEMBERS: [&str; 3] = ["m1.example:1", "m2.example:2", "m3.example:3"];

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn op(term: i64, secs: u32) -> OpTime {
    OpTime { ts_secs: secs, ts_inc: 0, term }
}

/// What a fake member reports and what it has learnt.
#[derive(Debug, Clone, Default)]
struct FakeState {
    term: u64,
    state: String,
    applied: OpTime,
    silent: bool,
    resign: bool,
    unelectable_for_ms: u64,
    /// Wall-clock send time and length of the last heartbeat granted a lease.
    last_lease: Option<(u64, u64)>,
    /// Heartbeats answered since the member last went silent or changed its report.
    answered: u64,
}

struct Fake {
    state: Arc<Mutex<FakeState>>,
    task: JoinHandle<()>,
}

impl Fake {
    fn start(client: Arc<ConfigClient>, member: &'static str, applied: OpTime) -> Self {
        let state = Arc::new(Mutex::new(FakeState { state: "SECONDARY".into(), applied, ..FakeState::default() }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT_INTERVAL).await;
                let snapshot = shared.lock().expect("fake state").clone();
                if snapshot.silent {
                    continue;
                }
                let req = HeartbeatRequest {
                    shard: SHARD.into(),
                    member: member.into(),
                    term: snapshot.term,
                    state: snapshot.state.clone(),
                    applied: Some(snapshot.applied),
                    durable: Some(snapshot.applied),
                    resign: snapshot.resign,
                    unelectable_for_ms: snapshot.unelectable_for_ms,
                    commit_point: None,
                    progress: String::new(),
                    heartbeat_interval_ms: HEARTBEAT_INTERVAL.as_millis() as u64,
                    config_version: 1,
                };
                let sent = wall_ms();
                let Ok(reply) = client.heartbeat(req).await else { continue };
                let mut s = shared.lock().expect("fake state");
                if s.silent {
                    continue;
                }
                s.answered += 1;
                // Learn a newer term (which freezes the member's optime: the test stops moving it).
                s.term = s.term.max(reply.term);
                let named = reply.primary == member && reply.term == s.term;
                s.state = if named && !s.resign { "PRIMARY" } else { "SECONDARY" }.into();
                if reply.lease_ms > 0 {
                    s.last_lease = Some((sent, reply.lease_ms));
                }
            }
        });
        Self { state, task }
    }

    fn update(&self, f: impl FnOnce(&mut FakeState)) {
        let mut s = self.state.lock().expect("fake state");
        f(&mut s);
        s.answered = 0;
    }

    fn get(&self) -> FakeState {
        self.state.lock().expect("fake state").clone()
    }
}

async fn add_group(cluster: &InProcCluster) {
    let command = Command::AddShard {
        shard: SHARD.into(),
        replica_set: "rs0".into(),
        members: MEMBERS.iter().map(|m| (*m).to_owned()).collect(),
    };
    let out = cluster.client().write(&command).await.expect("add shard");
    assert!(out.outcome.is_ok(), "{:?}", out.outcome);
}

async fn group(client: &ConfigClient) -> Option<ReplicaGroup> {
    let (catalog, _) = client.view(Parts::ALL, true).await.ok()?;
    catalog.shard(SHARD).map(|s| s.group.clone())
}

async fn wait_group(client: &ConfigClient, what: &str, want: impl Fn(&ReplicaGroup) -> bool) -> ReplicaGroup {
    eventually(what, FAILOVER_TIMEOUT, || async { group(client).await.filter(|g| want(g)) }).await
}

/// When the term change to `term` (with `primary`, "" for none) was proposed, by the changelog.
fn term_change_ms(catalog: &ClusterCatalogView, term: u64, primary: &str) -> u64 {
    catalog
        .changelog()
        .iter()
        .find(|e| {
            e.what == "replicaGroup.term"
                && e.ns == SHARD
                && e.details.get("term") == Some(&Detail::from(term))
                && e.details.get("primary") == Some(&Detail::from(primary))
        })
        .unwrap_or_else(|| panic!("no changelog entry for term {term} primary {primary:?}"))
        .time_ms
}

async fn wait_answered(fake: &Fake, n: u64) {
    eventually("fake member heartbeats answered", FAILOVER_TIMEOUT, || async {
        (fake.get().answered >= n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_waits_out_the_lease_then_promotes_the_most_up_to_date() {
    let cluster = InProcCluster::start(3, |_| {}).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    add_group(&cluster).await;
    let member_client = Arc::new(ConfigClient::new(cluster.addrs(), client_settings()));
    // m3 starts later, so the first frozen majority is exactly {m1, m2}.
    let mut fakes: Vec<Fake> = [op(0, 10), op(0, 12)]
        .into_iter()
        .zip(MEMBERS)
        .map(|(applied, m)| Fake::start(Arc::clone(&member_client), m, applied))
        .collect();
    let client = cluster.client();

    // Bootstrap: term 1 opened, then the member with the highest optime promoted.
    let g = wait_group(&client, "term 1 with a primary", |g| g.term == 1 && g.primary.is_some()).await;
    assert_eq!(g.primary.as_deref(), Some(MEMBERS[1]));
    fakes.push(Fake::start(Arc::clone(&member_client), MEMBERS[2], op(0, 11)));
    eventually("the primary holds a lease", FAILOVER_TIMEOUT, || async {
        fakes[1].get().last_lease.filter(|_| fakes[1].get().state == "PRIMARY")
    })
    .await;
    assert!(fakes[0].get().last_lease.is_none() && fakes[2].get().last_lease.is_none(), "lease to a secondary");
    let status = client.group_status(SHARD).await.expect("group status");
    assert_eq!((status.term, status.phase.as_str()), (1, "stable"));
    assert_eq!(status.members.len(), 3);
    // Each member's reported heartbeat period is passed on to routers (0: not heard from yet).
    let heard: Vec<u64> =
        status.members.iter().filter(|m| m.last_heartbeat_ms_ago >= 0).map(|m| m.heartbeat_interval_ms).collect();
    assert!(!heard.is_empty() && heard.iter().all(|ms| *ms == HEARTBEAT_INTERVAL.as_millis() as u64), "{status:?}");
    assert!(status.members.iter().filter(|m| m.last_heartbeat_ms_ago < 0).all(|m| m.heartbeat_interval_ms == 0));

    // The secondaries replicate a little more in term 1, then the primary goes silent.
    fakes[0].update(|s| s.applied = op(1, 15));
    fakes[2].update(|s| s.applied = op(1, 20));
    wait_answered(&fakes[0], 2).await;
    wait_answered(&fakes[2], 2).await;
    fakes[1].update(|s| s.silent = true);
    let (lease_sent_ms, lease_ms) = fakes[1].get().last_lease.expect("primary had a lease");

    let g = wait_group(&client, "term 2 with a new primary", |g| g.term == 2 && g.primary.is_some()).await;
    assert_eq!(g.primary.as_deref(), Some(MEMBERS[2]), "the frozen member with the highest optime");
    let (catalog, _) = client.view(Parts::ALL, true).await.expect("read");
    let opened_ms = term_change_ms(&catalog, 2, "");
    assert!(
        opened_ms >= lease_sent_ms + lease_ms,
        "term 2 opened at {opened_ms}, before the old primary's lease ended at {}",
        lease_sent_ms + lease_ms
    );
    assert!(term_change_ms(&catalog, 2, MEMBERS[2]) >= opened_ms);
    eventually("the new primary holds a lease", FAILOVER_TIMEOUT, || async {
        let s = fakes[2].get();
        (s.state == "PRIMARY" && s.last_lease.is_some()).then_some(())
    })
    .await;

    // The old primary comes back: it learns term 2 and stays a secondary, without a lease.
    fakes[1].update(|s| {
        s.silent = false;
        s.last_lease = None;
    });
    wait_answered(&fakes[1], 3).await;
    let old = fakes[1].get();
    assert_eq!((old.term, old.state.as_str(), old.last_lease), (2, "SECONDARY", None));
    for fake in fakes {
        fake.task.abort();
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resign_opens_a_new_term_at_once_and_non_leaders_redirect() {
    // A lease far longer than any scheduling delay: opening a term before it ends proves the
    // resignation skipped the wait.
    let cluster = InProcCluster::start(3, |c| {
        c.arbiter.lease = Duration::from_secs(20);
        c.arbiter.failover_timeout = Duration::from_secs(30);
    })
    .await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    add_group(&cluster).await;

    // A follower answers NotWritablePrimary with the leader's address (no forwarding).
    let follower = cluster.nodes.iter().find(|n| n.id != leader).expect("a follower");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", follower.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let hb = HeartbeatRequest { shard: SHARD.into(), member: MEMBERS[0].into(), ..HeartbeatRequest::default() };
    let reply = GrpcClient::new(channel).heartbeat(hb.clone()).await.expect("rpc").into_inner();
    let error = reply.error.expect("a follower refuses heartbeats");
    assert_eq!(error.code, ErrorCode::NotWritablePrimary.code());
    assert_eq!(error.leader_addr, cluster.node(leader).addr.to_string());
    // A client that knows only the follower follows the hint; GroupStatus is forwarded.
    let via_follower = Arc::new(ConfigClient::new(vec![follower.addr.to_string()], client_settings()));
    via_follower.heartbeat(hb.clone()).await.expect("heartbeat through the leader's hint");
    via_follower.group_status(SHARD).await.expect("group status forwarded to the leader");
    // Bad input.
    let err = via_follower
        .heartbeat(HeartbeatRequest { shard: "nope".into(), ..hb.clone() })
        .await
        .expect_err("unknown shard");
    assert_eq!(err.code(), Some(ErrorCode::ShardNotFound));
    let err = via_follower
        .heartbeat(HeartbeatRequest { member: "stranger.example:9".into(), ..hb })
        .await
        .expect_err("unknown member");
    assert_eq!(err.code(), Some(ErrorCode::NoSuchKey));

    // m3 starts later, so the first frozen majority is exactly {m1, m2}.
    let mut fakes: Vec<Fake> = [op(0, 30), op(0, 20)]
        .into_iter()
        .zip(MEMBERS)
        .map(|(applied, m)| Fake::start(Arc::clone(&via_follower), m, applied))
        .collect();
    let client = cluster.client();
    let g = wait_group(&client, "term 1 with a primary", |g| g.term == 1 && g.primary.is_some()).await;
    assert_eq!(g.primary.as_deref(), Some(MEMBERS[0]));
    fakes.push(Fake::start(Arc::clone(&via_follower), MEMBERS[2], op(0, 10)));
    eventually("the primary holds a lease", FAILOVER_TIMEOUT, || async { fakes[0].get().last_lease }).await;

    // replSetStepDown: the primary resigns and asks not to be re-elected for a while.
    fakes[0].update(|s| {
        s.resign = true;
        s.unelectable_for_ms = 600_000;
    });
    let (lease_sent_ms, lease_ms) = fakes[0].get().last_lease.expect("lease");
    let g = wait_group(&client, "term 2 with a primary", |g| g.term == 2 && g.primary.is_some()).await;
    assert_eq!(g.primary.as_deref(), Some(MEMBERS[1]), "the resigned member is unelectable; m2 is next");
    let (catalog, _) = client.view(Parts::ALL, true).await.expect("read");
    let opened_ms = term_change_ms(&catalog, 2, "");
    assert!(
        opened_ms < lease_sent_ms + lease_ms,
        "term 2 opened at {opened_ms}, after the resigned primary's lease ({})",
        lease_sent_ms + lease_ms
    );
    let status = client.group_status(SHARD).await.expect("group status");
    let m1 = status.members.iter().find(|m| m.member == MEMBERS[0]).expect("m1 listed");
    assert!(m1.unelectable);
    for fake in fakes {
        fake.task.abort();
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_config_leader_keeps_a_live_primary_and_waits_out_its_lease() {
    let mut cluster = InProcCluster::start(3, |_| {}).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    add_group(&cluster).await;
    let member_client = Arc::new(ConfigClient::new(cluster.addrs(), client_settings()));
    let mut fakes: Vec<Fake> = [op(0, 10), op(0, 12)]
        .into_iter()
        .zip(MEMBERS)
        .map(|(applied, m)| Fake::start(Arc::clone(&member_client), m, applied))
        .collect();
    let client = cluster.client();
    let g = wait_group(&client, "term 1 with a primary", |g| g.term == 1 && g.primary.is_some()).await;
    assert_eq!(g.primary.as_deref(), Some(MEMBERS[1]));
    fakes.push(Fake::start(Arc::clone(&member_client), MEMBERS[2], op(1, 20)));
    eventually("the primary holds a lease", FAILOVER_TIMEOUT, || async { fakes[1].get().last_lease }).await;

    // The config leader goes away; the new one starts with an empty view.
    cluster.stop(leader).await;
    eventually("a new config leader", LEADER_TIMEOUT, || async {
        let now = cluster.wait_leader(LEADER_TIMEOUT).await;
        (now != leader).then_some(())
    })
    .await;
    fakes[1].update(|s| s.last_lease = None);
    eventually("the new leader renews the live primary's lease", FAILOVER_TIMEOUT, || async {
        fakes[1].get().last_lease
    })
    .await;
    wait_answered(&fakes[1], 15).await; // > failover_timeout of heartbeats under the new leader
    let g = group(&client).await.expect("group");
    assert_eq!((g.term, g.primary.as_deref()), (1, Some(MEMBERS[1])), "a live primary is not deposed");

    fakes[1].update(|s| s.silent = true);
    let (lease_sent_ms, lease_ms) = fakes[1].get().last_lease.expect("lease");
    let g = wait_group(&client, "term 2 with a primary", |g| g.term == 2 && g.primary.is_some()).await;
    assert_eq!(g.primary.as_deref(), Some(MEMBERS[2]));
    let (catalog, _) = client.view(Parts::ALL, true).await.expect("read");
    assert!(term_change_ms(&catalog, 2, "") >= lease_sent_ms + lease_ms);
    for fake in fakes {
        fake.task.abort();
    }
    cluster.shutdown().await;
}
