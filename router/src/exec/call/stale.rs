//! The StaleConfig retry around a call: the namespace's placement is looked up, the call runs
//! with it, and when a shard answers StaleConfig or StaleDbVersion (the placement changed under
//! the router) the routing is refreshed and the call runs again with the new placement, up to
//! [`STALE_ATTEMPTS_MAX`] attempts in all. Shards refuse a stale request before changing
//! anything, so running it again is safe for writes too.
//!
//! Must not: refresh anything itself (`routing::on_stale` owns the routing cache), or retry
//! other errors.

use std::future::Future;

use crate::error::CommandError;
use crate::routing::{self, Placement, STALE_ATTEMPTS_MAX};
use crate::state::RouterState;

/// Runs `call` with the current placement of `db.coll` (`create`: a write, which creates a
/// missing database), again with a refreshed one after a stale answer.
pub async fn with_placement<T, F, Fut>(
    state: &RouterState,
    db: &str,
    coll: &str,
    create: bool,
    mut call: F,
) -> Result<T, CommandError>
where
    F: FnMut(Placement) -> Fut,
    Fut: Future<Output = Result<T, CommandError>>,
{
    let mut attempt = 0;
    loop {
        let placement = routing::placement(state, db, coll, create).await?;
        match call(placement.clone()).await {
            Err(e) if routing::is_stale(&e) && attempt + 1 < STALE_ATTEMPTS_MAX => {
                routing::on_stale(state, db, coll, &placement, &e, attempt).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}
