//! The arbiter: the view shared with the heartbeat handler, and the task that runs on every
//! config server, acts only while it is the Raft leader, and every tick turns `decide`'s answers
//! into `SetReplicaGroupTerm` commands.
//!
//! Every command is a compare-and-set on the term, so a decision made on a slightly stale catalog
//! (a new leader still applying its predecessor's entries) or raced by another leader is refused
//! with `StaleTerm` and simply re-evaluated on the next tick.

use std::collections::{BTreeMap, HashMap};
use std::mem::Discriminant;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};
use tokio::sync::watch;
use tokio::time::Instant;

use super::ArbiterSettings;
use super::decide::{Action, decide};
use super::view::View;
use crate::catalog::{CatalogError, ReplicaGroup};
use crate::raft::state_machine::CatalogState;
use crate::raft::types::{Command, Raft, RaftRequest, now_ms};

/// The arbiter's state, shared by the task and the `Heartbeat`/`GroupStatus` handlers.
pub struct Arbiter {
    settings: ArbiterSettings,
    // std Mutex: held only to read or update the view, never across an await.
    view: Mutex<View>,
}

impl Arbiter {
    pub fn new(settings: ArbiterSettings) -> Arc<Self> {
        Arc::new(Self { settings, view: Mutex::new(View::default()) })
    }

    pub fn settings(&self) -> &ArbiterSettings {
        &self.settings
    }

    pub fn view(&self) -> MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// This node's Raft term if it is the leader.
pub fn leader_term(raft: &Raft) -> Option<u64> {
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    (m.state.is_leader() && m.current_leader == Some(m.id)).then_some(m.current_term)
}

/// The arbiter task; ends when `shutdown` flips to `true`.
pub async fn run(
    arbiter: Arc<Arbiter>,
    raft: Raft,
    state: Arc<CatalogState>,
    write_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut interval = tokio::time::interval(arbiter.settings.tick_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut waits = WaitLog::default();
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
        tick(&arbiter, &raft, &state, write_timeout, &mut waits).await;
    }
}

async fn tick(arbiter: &Arbiter, raft: &Raft, state: &CatalogState, write_timeout: Duration, waits: &mut WaitLog) {
    let now = Instant::now();
    let leader = leader_term(raft);
    let groups: BTreeMap<String, ReplicaGroup> = {
        let applied = state.read();
        applied.catalog.shards().iter().map(|(id, s)| (id.clone(), s.group.clone())).collect()
    };
    type Joins = Vec<(String, String)>;
    let (joins, actions): (Joins, Vec<(String, ReplicaGroup, Action)>) = {
        let mut view = arbiter.view();
        let Some(epoch_start) = view.observe_leadership(leader, now) else {
            return;
        };
        view.retain(&groups);
        let joins = groups
            .iter()
            .filter_map(|(id, group)| {
                super::join::joinable(group, view.shard(id), now, &arbiter.settings).map(|m| (id.clone(), m))
            })
            .collect();
        let actions = groups
            .iter()
            .map(|(id, group)| {
                let decision = decide(group, view.shard(id), epoch_start, now, &arbiter.settings);
                if let Some((term, reason)) = decision.depose {
                    let shard = view.shard_mut(id);
                    if shard.deposing != decision.depose {
                        tracing::info!(shard = %id, term, primary = ?group.primary, %reason,
                            "deposing the primary: no more leases in this term");
                        shard.deposing = decision.depose;
                    }
                }
                (id.clone(), group.clone(), decision.action)
            })
            .collect();
        (joins, actions)
    };
    waits.forget_except(&groups);
    let mut commits = Vec::new();
    for (shard, group, action) in actions {
        let command = match &action {
            Action::Stable | Action::AwaitFirstHeartbeat => {
                waits.clear(&shard);
                continue;
            }
            Action::WaitForLease { .. } | Action::AwaitFrozen { .. } | Action::NoneElectable { .. } => {
                if waits.should_log(&shard, &action, now, arbiter.settings.wait_log_interval) {
                    tracing::info!(shard = %shard, term = group.term, "replica group: {action}");
                }
                continue;
            }
            Action::OpenTerm { from, to, deposed } => {
                tracing::info!(shard = %shard, old_term = from, new_term = to, deposed = ?deposed,
                    "opening a new replica-group term without a primary");
                Command::SetReplicaGroupTerm {
                    shard: shard.clone(),
                    expected_term: *from,
                    new_term: *to,
                    primary: None,
                }
            }
            Action::Promote { term, member, compared } => {
                let compared: Vec<String> =
                    compared.iter().map(|(m, a, d)| format!("{m} applied {a} durable {d}")).collect();
                tracing::info!(shard = %shard, term, primary = %member, ?compared,
                    "promoting the most up-to-date electable member of the frozen majority");
                Command::SetReplicaGroupTerm {
                    shard: shard.clone(),
                    expected_term: *term,
                    new_term: *term,
                    primary: Some(member.clone()),
                }
            }
        };
        waits.clear(&shard);
        commits.push(commit(raft, shard, command, write_timeout));
    }
    for (shard, member) in joins {
        tracing::info!(shard = %shard, %member, "the added member caught up: it now votes and counts toward majorities");
        commits.push(commit(raft, shard.clone(), Command::PromoteMember { shard, member }, write_timeout));
    }
    futures::future::join_all(commits).await;
}

/// Proposes one term change and logs how it ended; a refusal is re-evaluated next tick.
async fn commit(raft: &Raft, shard: String, command: Command, timeout: Duration) {
    let request = RaftRequest { issued_at_ms: now_ms(), command };
    match tokio::time::timeout(timeout, raft.client_write(request)).await {
        Ok(Ok(resp)) => match resp.data.outcome {
            Some(Ok(response)) => tracing::info!(shard = %shard, ?response, "replica-group term committed"),
            Some(Err(CatalogError::StaleTerm { current, .. })) => {
                tracing::debug!(shard = %shard, current, "term already moved (another leader acted first)")
            }
            Some(Err(e)) => tracing::warn!(shard = %shard, error = %e, "the catalog refused a term change"),
            None => tracing::warn!(shard = %shard, "a term change was applied without an outcome"),
        },
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
            tracing::debug!(shard = %shard, "lost leadership before proposing a term change")
        }
        Ok(Err(e)) => tracing::warn!(shard = %shard, error = %e, "term change not committed"),
        Err(_) => tracing::warn!(shard = %shard, timeout_ms = timeout.as_millis() as u64,
            "term change not committed in time (no quorum?); outcome unknown, re-evaluating"),
    }
}

/// Rate limit of "still waiting" logs: a shard's wait is logged when its kind changes, or again
/// after `wait_log_interval`.
#[derive(Default)]
struct WaitLog {
    last: HashMap<String, (Discriminant<Action>, Instant)>,
}

impl WaitLog {
    fn should_log(&mut self, shard: &str, action: &Action, now: Instant, every: Duration) -> bool {
        let kind = std::mem::discriminant(action);
        match self.last.get(shard) {
            Some((k, at)) if *k == kind && now.saturating_duration_since(*at) < every => false,
            _ => {
                self.last.insert(shard.to_owned(), (kind, now));
                true
            }
        }
    }

    fn clear(&mut self, shard: &str) {
        self.last.remove(shard);
    }

    fn forget_except(&mut self, groups: &BTreeMap<String, ReplicaGroup>) {
        self.last.retain(|id, _| groups.contains_key(id));
    }
}
