//! The replica-group arbiter (docs/architecture.md, "Replica-group arbitration"): the config
//! leader decides which member of each shard is primary, in which term, and for how long a
//! primary may accept writes (its lease).
//!
//! ```text
//!  member --Heartbeat{term, state, optimes}--> config leader: record in View (never a Raft write)
//!         <--{catalog term, primary, members, lease_ms (primary of the term only)}--
//!  task (every tick_interval, leader only): for each shard
//!      View + catalog group --decide()--> OpenTerm / Promote --SetReplicaGroupTerm--> Raft
//!      View + catalog group --joinable()--> a caught-up pending member --PromoteMember--> Raft
//!
//!  failover of primary P in term T:
//!   P silent >= failover_timeout (or resigns) --> deposing: no more leases for P
//!   --> wait until last_grant + lease + lease_margin (skipped if P resigned)
//!   --> commit T+1, no primary       (members learn T+1 and stop pulling from P: optimes freeze)
//!   --> a majority reports term T+1 --> commit T+1 with the best electable frozen member
//! ```
//!
//! Owns: the in-memory [`view::View`] of what members report (lost on restart and on losing
//! leadership, rebuilt from heartbeats within one heartbeat interval), the pure decision core
//! [`decide`], and the [`task`] that carries decisions out through Raft.
//!
//! Invariants: a lease is granted only by a leader that has just confirmed its leadership with a
//! quorum, only to the catalog's primary of the current term, and never once its shard is being
//! deposed; a new term is committed only after every lease a past or present leader may have
//! granted has lapsed (a new leader assumes one was granted the moment it took over); a member
//! is promoted only if a majority of the group has frozen in that term with optimes no newer than
//! its own, so it holds every majority-acknowledged write.
//!
//! Must not: write to Raft on the heartbeat path; act while not the leader; hold the view's lock
//! across an await.

pub mod decide;
pub mod join;
mod rpc;
pub mod task;
pub mod view;

use std::time::Duration;

pub use decide::{Action, Decision, decide};
pub use view::{MemberReport, OpTime, View};

/// Timing of arbitration. The member side heartbeats every 200 ms.
#[derive(Debug, Clone)]
pub struct ArbiterSettings {
    /// How often the arbiter task re-evaluates every shard.
    pub tick_interval: Duration,
    /// A primary silent this long is deposed; a member heard from within it counts as reachable.
    pub failover_timeout: Duration,
    /// How long a primary may accept writes after sending a heartbeat that was granted a lease.
    pub lease: Duration,
    /// Extra wait after a lease's end before a new term, for clock-rate differences.
    pub lease_margin: Duration,
    /// Longest a heartbeat waits for the leader to confirm its leadership before granting a lease.
    pub lease_confirm_timeout: Duration,
    /// Repeated "still waiting" logs of one shard are at most this frequent.
    pub wait_log_interval: Duration,
}

impl Default for ArbiterSettings {
    fn default() -> Self {
        Self {
            tick_interval: Duration::from_millis(50),
            failover_timeout: Duration::from_millis(1000),
            lease: Duration::from_millis(800),
            lease_margin: Duration::from_millis(100),
            lease_confirm_timeout: Duration::from_millis(250),
            wait_log_interval: Duration::from_secs(5),
        }
    }
}

impl ArbiterSettings {
    /// The lease must end before the failover timeout, or a primary that is merely slow to
    /// heartbeat could still be writing when it is deposed for silence.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease.is_zero() || self.tick_interval.is_zero() {
            return Err("arbiter lease and tick interval must be positive".into());
        }
        if self.lease >= self.failover_timeout {
            return Err(format!(
                "arbiter lease ({} ms) must be shorter than the failover timeout ({} ms)",
                self.lease.as_millis(),
                self.failover_timeout.as_millis()
            ));
        }
        Ok(())
    }
}
