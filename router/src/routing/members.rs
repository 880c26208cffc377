//! Replica-group members as reads see them: gRPC channel pools by member address (created
//! lazily, kept for the router's lifetime: a group has at most seven members), and each group's
//! member status (state, applied optime, heartbeat age) as the config leader knows it from
//! heartbeats, cached for at most [`STATUS_TTL`] and re-fetched on demand.
//!
//! ```text
//!  read with $readPreference ──> member_for(shard) ──cache older than STATUS_TTL?──> config leader GroupStatus
//!                                      └── read_pref::choose(members) ──> Primary | Member(addr) ──> pool(addr)
//! ```
//!
//! A read in flight on a member that goes silent is abandoned ([`Members::until_silent`]) and
//! chosen again: reads change nothing, so running one twice is harmless.
//!
//! Must not: decide which member serves (`read_pref::choose` does) or send writes anywhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::CommandError;
use crate::exec::call::channels::ShardPool;
use crate::routing::read_pref::{self, Choice, MemberInfo, ReadPreference, Role, Selection};
use crate::state::RouterState;

/// A group's member status is re-fetched from the config leader when older than this.
pub const STATUS_TTL: Duration = Duration::from_millis(250);
/// A member the config leader has not heard from for this long is not chosen, at least (longer
/// when its group heartbeats slowly: [`Selection::for_members`]).
pub const SILENT_AFTER: Duration = Duration::from_millis(1500);

struct Cached {
    fetched: Instant,
    members: Arc<Vec<MemberInfo>>,
}

pub struct Members {
    pools: RwLock<HashMap<String, Arc<ShardPool>>>,
    status: Mutex<HashMap<String, Cached>>,
    rpc_timeout: Duration,
}

fn role(state: &str) -> Role {
    match state {
        "PRIMARY" => Role::Primary,
        "SECONDARY" => Role::Secondary,
        _ => Role::Other,
    }
}

impl Members {
    pub fn new(rpc_timeout: Duration) -> Self {
        Self { pools: RwLock::new(HashMap::new()), status: Mutex::new(HashMap::new()), rpc_timeout }
    }

    /// The channels to member `addr` (`host:port`).
    pub fn pool(&self, addr: &str) -> Result<Arc<ShardPool>, CommandError> {
        if let Some(p) = self.pools.read().unwrap_or_else(|p| p.into_inner()).get(addr) {
            return Ok(p.clone());
        }
        let pool = Arc::new(ShardPool::new(&shoal_proto::endpoint::uri(addr), self.rpc_timeout)?);
        let mut pools = self.pools.write().unwrap_or_else(|p| p.into_inner());
        Ok(pools.entry(addr.to_owned()).or_insert(pool).clone())
    }

    /// Forgets `shard`'s cached status (a member failed a read): the next read asks again.
    pub fn invalidate(&self, shard: &str) {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).remove(shard);
    }

    /// The cached view if fresh. When it expired, the first caller to see that claims the refresh
    /// (the entry counts as fresh again for the others, who keep using it meanwhile), so a busy
    /// router asks the config leader once per [`STATUS_TTL`], not once per read.
    fn cached(&self, shard: &str) -> Option<Arc<Vec<MemberInfo>>> {
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let c = status.get_mut(shard)?;
        if c.fetched.elapsed() < STATUS_TTL {
            return Some(c.members.clone());
        }
        c.fetched = Instant::now();
        None
    }

    /// `shard`'s members, from the cache or the config leader. A failed fetch keeps serving the
    /// last view it had (or none: then only the catalog's primary is known).
    async fn status(&self, state: &RouterState, shard: &str) -> Arc<Vec<MemberInfo>> {
        if let Some(m) = self.cached(shard) {
            return m;
        }
        let fetched_at = Instant::now();
        match state.catalog.group_status(shard).await {
            Ok(reply) => {
                let members: Vec<MemberInfo> = reply
                    .members
                    .iter()
                    .map(|m| MemberInfo {
                        addr: m.member.clone(),
                        role: role(&m.state),
                        last_write_secs: m.applied.as_ref().map_or(0, |o| o.ts_secs),
                        // The age when the leader answered, plus the time since.
                        heartbeat_age: u64::try_from(m.last_heartbeat_ms_ago)
                            .ok()
                            .map(|ms| Duration::from_millis(ms) + fetched_at.elapsed()),
                        heartbeat_interval: shoal_proto::heartbeat::interval_of(m.heartbeat_interval_ms),
                    })
                    .collect();
                let members = Arc::new(members);
                let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
                status.insert(shard.to_owned(), Cached { fetched: fetched_at, members: members.clone() });
                members
            }
            Err(e) => {
                tracing::debug!(%shard, error = %e, "member status unavailable; using the last view");
                let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
                status.get(shard).map(|c| c.members.clone()).unwrap_or_default()
            }
        }
    }

    /// Returns once member `addr` of `shard` has gone silent (the config leader has not heard from
    /// it for its group's `silent_after`, [`Selection::for_members`]): a read in flight there is
    /// abandoned and sent elsewhere rather than waiting out the RPC timeout on a paused or partitioned member. Never returns while
    /// nothing is known of the member.
    pub async fn until_silent(&self, state: &RouterState, shard: &str, addr: &str) {
        loop {
            tokio::time::sleep(STATUS_TTL).await;
            let members = self.status(state, shard).await;
            let silent_after = Selection::for_members(&members, SILENT_AFTER).silent_after;
            let silent = members
                .iter()
                .find(|m| m.addr == addr)
                .is_some_and(|m| m.heartbeat_age.is_none_or(|age| age > silent_after));
            if silent {
                return;
            }
        }
    }

    /// The member of `shard` that serves a read with `pref`.
    pub async fn choose(&self, state: &RouterState, shard: &str, pref: &ReadPreference) -> Choice {
        if pref.mode == read_pref::Mode::Primary || !state.catalog.is_configured() {
            return Choice::Primary;
        }
        let members = self.status(state, shard).await;
        let primary = state.shards.primary(shard);
        let selection = Selection::for_members(&members, SILENT_AFTER);
        read_pref::choose(pref, primary.as_deref(), &members, &selection, &mut |n| rand::random_range(0..n.max(1)))
    }
}
