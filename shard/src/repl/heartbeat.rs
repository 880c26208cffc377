//! The member's heartbeat to the config service: reports its term, state and optimes; learns the
//! group's term, members and primary; and, as primary, renews its lease. It runs on a thread and
//! runtime of its own ([`spawn_thread`]), so a member busy with writes still renews on time.
//!
//! Rules this member follows (the config service arbitrates: docs/architecture.md,
//! "Replica-group arbitration"):
//! - a newer term is adopted at once; a primary of an older term stops taking writes and becomes
//!   a secondary (its unreplicated entries are rolled back when it follows the new primary);
//! - named primary of its current term, it writes the term's no-op and takes writes only while
//!   its lease lasts: `lease_ms` counted from when it *sent* the heartbeat, so its lease always
//!   ends before the config service's view of it does;
//! - as primary, it steps down and resigns when no majority of its group has reported for a
//!   window (`Repl::step_down_if_isolated`);
//! - after a change it heartbeats again at once, so a failover costs round trips, not intervals;
//! - named primary of a term it learns from that very reply (and holds no entry of), it never
//!   promotes: the arbiter promotes only members that already reported the term, so the catalog
//!   names an earlier incarnation at this address (a member replaced or restarted without its
//!   data). It resigns instead, so the arbiter opens a new term at once and elects a member that
//!   holds the group's writes (no lease is waited out: the earlier incarnation cannot be serving
//!   at the address this member now holds).

use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_cluster::config_client::ConfigClient;
use shoal_proto::ErrorCode;
use shoal_proto::config::{HeartbeatReply, HeartbeatRequest};

use super::Repl;
use super::state::MemberState;
use super::wire::to_config;

/// Runs [`run`] on a thread and single-threaded runtime of its own, with its own config client
/// (whose connections then live on that runtime too): a member busy writing on its main runtime
/// still heartbeats on time, so its lease does not lapse under its own load. Returns the handle
/// that stops it.
pub fn spawn_thread(
    repl: Arc<Repl>,
    servers: Vec<String>,
    settings: shoal_cluster::config_client::ClientSettings,
) -> std::io::Result<tokio::task::AbortHandle> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("shoal-heartbeat".into()).spawn(move || {
        runtime.block_on(async move {
            let config = Arc::new(ConfigClient::new(servers, settings));
            let task = tokio::spawn(run(repl, config));
            let _ = tx.send(task.abort_handle());
            let _ = task.await;
        });
    })?;
    rx.recv().map_err(|_| std::io::Error::other("the heartbeat thread did not start"))
}

/// Runs for the member's lifetime.
pub async fn run(repl: Arc<Repl>, config: Arc<ConfigClient>) {
    let interval = repl.settings.heartbeat_interval;
    let mut failures = 0u32;
    loop {
        repl.step_down_if_lease_lapsed();
        repl.step_down_if_isolated();
        let sent_at = Instant::now();
        let request = request(&repl);
        let outcome = tokio::time::timeout(repl.settings.heartbeat_timeout, config.heartbeat(request)).await;
        let again_now = match outcome {
            Ok(Ok(reply)) => {
                failures = 0;
                on_reply(&repl, reply, sent_at).await
            }
            Ok(Err(e)) => {
                failures += 1;
                if e.code() == Some(ErrorCode::ShardNotFound) {
                    repl.set_state_if(MemberState::Startup, "not registered in the catalog yet");
                }
                // MongoDB's REMOVED: the catalog no longer lists this member (replSetReconfig
                // removed it, or it was never added); it neither serves nor counts until added.
                if e.code() == Some(ErrorCode::NoSuchKey) {
                    repl.set_removed();
                }
                if failures % 25 == 1 {
                    tracing::info!(error = %e, failures, "heartbeat to the config service failed");
                }
                false
            }
            Err(_) => {
                failures += 1;
                if failures % 25 == 1 {
                    tracing::info!(failures, "heartbeat to the config service timed out");
                }
                false
            }
        };
        if !again_now {
            let wake = repl.heartbeat_now.notified();
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = wake => {}
            }
        }
    }
}

fn request(repl: &Repl) -> HeartbeatRequest {
    let applied = repl.store.position().optime;
    let inner = repl.lock();
    let unelectable_for_ms =
        inner.unelectable_until.map_or(0, |t| t.saturating_duration_since(Instant::now()).as_millis() as u64);
    HeartbeatRequest {
        shard: repl.shard.clone(),
        member: repl.me.clone(),
        term: inner.term,
        state: inner.state.name().into(),
        applied: Some(to_config(applied)),
        durable: Some(to_config(inner.durable)),
        resign: inner.resigning,
        unelectable_for_ms,
        commit_point: Some(to_config(repl.commit_point())),
        progress: inner.progress.clone(),
        heartbeat_interval_ms: shoal_proto::heartbeat::report(repl.settings.heartbeat_interval),
        config_version: inner.config_version,
    }
}

/// What a reply asks of this member.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Nothing,
    /// A new term (or primary) was adopted: tell the config service at once.
    Adopted,
    /// Become primary of the term.
    Promote {
        term: u64,
    },
}

/// Whether a reply naming this member primary of `reply_term` promotes it (pure).
#[derive(Debug, PartialEq, Eq)]
enum Named {
    Promote,
    /// Named in a term this member had not reported: an earlier incarnation was promoted.
    Disown,
    Keep,
}

fn named_primary(
    adopted_now: bool,
    state: MemberState,
    promoted_term: u64,
    resigning: bool,
    reply_term: u64,
    lease_ms: u64,
) -> Named {
    if state == MemberState::Primary {
        return Named::Keep;
    }
    if adopted_now {
        return Named::Disown;
    }
    // Promoted once per term without a lease (the lease may follow on the next heartbeat);
    // again in the same term (after the lease lapsed) only with one.
    let fresh = promoted_term != reply_term || lease_ms > 0;
    if state == MemberState::Secondary && fresh && !resigning { Named::Promote } else { Named::Keep }
}

/// Applies a reply to the member's state; returns whether to heartbeat again at once.
async fn on_reply(repl: &Arc<Repl>, reply: HeartbeatReply, sent_at: Instant) -> bool {
    let primary = (!reply.primary.is_empty()).then(|| reply.primary.clone());
    // The newest term this member holds an entry of: a restarted primary's own no-op shows it
    // was promoted in that term, though it has not reported the term since it restarted.
    let held_term = u64::try_from(repl.store.position().optime.term).unwrap_or(0);
    let action = {
        let mut inner = repl.lock();
        if !reply.members.is_empty() {
            inner.members = reply.members.clone();
            inner.config_version = reply.config_version;
        }
        if matches!(inner.state, MemberState::Startup | MemberState::Removed) {
            inner.state = MemberState::Secondary;
            inner.progress.clear();
        }
        let mut action = Action::Nothing;
        let adopted_now = reply.term > inner.term.max(held_term);
        if reply.term > inner.term {
            if inner.state == MemberState::Primary {
                tracing::warn!(old_term = inner.term, new_term = reply.term, "stepping down: a newer term began");
                inner.state = MemberState::Secondary;
                inner.peers.clear();
                inner.lease_until = None;
                repl.counters.step_downs.inc();
            }
            inner.resigning = false;
            inner.term = reply.term;
            inner.primary = primary.clone();
            repl.store.set_term(reply.term as i64);
            action = Action::Adopted;
        } else if reply.term == inner.term && inner.primary != primary {
            inner.primary = primary.clone();
            action = Action::Adopted;
        }
        let named = reply.term == inner.term && primary.as_deref() == Some(repl.me.as_str());
        let verdict = named.then(|| {
            named_primary(adopted_now, inner.state, inner.promoted_term, inner.resigning, reply.term, reply.lease_ms)
        });
        if verdict == Some(Named::Disown) {
            tracing::warn!(
                term = reply.term,
                "named primary of a term this member never reported: the catalog remembers an earlier incarnation \
                 at this address (replaced or restarted without its data); resigning so a member with the \
                 group's writes is elected"
            );
            inner.resigning = true;
        } else if verdict == Some(Named::Promote) {
            action = Action::Promote { term: reply.term };
        } else if named && inner.state == MemberState::Primary && reply.lease_ms > 0 && !inner.resigning {
            let until = sent_at + Duration::from_millis(reply.lease_ms);
            inner.lease_until = Some(until);
            repl.store.extend_lease(reply.term as i64, until);
        }
        action
    };
    match action {
        Action::Nothing => false,
        Action::Adopted => {
            repl.publish_role();
            true
        }
        Action::Promote { term } => {
            // The term may be new to followers of the role too.
            repl.publish_role();
            promote(repl, term, sent_at, reply.lease_ms).await;
            true
        }
    }
}

/// Becomes primary of `term`: waits out any batch being applied, writes the term's no-op, and
/// takes writes while the lease (if one came with the promotion) lasts.
async fn promote(repl: &Arc<Repl>, term: u64, sent_at: Instant, lease_ms: u64) {
    let _gate = repl.apply_gate.lock().await;
    if repl.lock().term != term {
        return;
    }
    let until = sent_at + Duration::from_millis(lease_ms);
    let store = Arc::clone(&repl.store);
    let written = tokio::task::spawn_blocking(move || store.become_primary(term as i64, until)).await;
    match written {
        Ok(Ok(noop)) => {
            {
                let mut inner = repl.lock();
                inner.state = MemberState::Primary;
                inner.peers.clear();
                inner.lease_until = (lease_ms > 0).then_some(until);
                inner.promoted_term = term;
                inner.promoted_at = Some(std::time::Instant::now());
                repl.counters.elections.inc();
            }
            tracing::warn!(term, %noop, "became primary");
            repl.publish_role();
            repl.recompute();
        }
        Ok(Err(e)) => tracing::error!(term, error = %e, "becoming primary failed"),
        Err(e) => tracing::error!(term, error = %e, "becoming primary failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::{MemberState, Named, named_primary};

    #[test]
    fn a_member_named_in_a_term_it_never_reported_disowns_it() {
        // A wiped member comes back at the address the catalog names primary of term 4.
        assert_eq!(named_primary(true, MemberState::Secondary, 0, false, 4, 0), Named::Disown);
        assert_eq!(named_primary(true, MemberState::Startup, 0, false, 4, 3_000), Named::Disown);
    }

    #[test]
    fn a_member_frozen_in_the_term_is_promoted_once_then_only_with_a_lease() {
        assert_eq!(named_primary(false, MemberState::Secondary, 3, false, 4, 0), Named::Promote);
        assert_eq!(named_primary(false, MemberState::Secondary, 4, false, 4, 0), Named::Keep);
        assert_eq!(named_primary(false, MemberState::Secondary, 4, false, 4, 3_000), Named::Promote);
        assert_eq!(named_primary(false, MemberState::Primary, 4, false, 4, 3_000), Named::Keep);
    }

    #[test]
    fn a_resigning_member_is_not_promoted_again() {
        assert_eq!(named_primary(false, MemberState::Secondary, 0, true, 4, 0), Named::Keep);
        assert_eq!(named_primary(false, MemberState::Secondary, 4, true, 4, 3_000), Named::Keep);
    }
}
