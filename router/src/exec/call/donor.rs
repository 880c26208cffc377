//! Long-running calls to a donor shard's primary: `moveRange` (a chunk migration) and
//! `movePrimary`, for the `moveChunk`/`moveRange`/`movePrimary` commands and the balancer.
//!
//! Each goes to the primary the router's shard registry names for the donor, through the same
//! failover rule as every other shard call ([`super::on_primary`]): a donor that answered
//! NotWritablePrimary or could not be reached did not start the migration, so the call waits for
//! the group's next primary and is sent there (MongoDB's config server retries its donor call the
//! same way). A call that may have started is never resent. The channel is made per call with
//! the migration's own limit, longer than a shard call's.
//!
//! Must not: decide what moves where (the commands and the balancer do), or move data itself.

use std::sync::Arc;
use std::time::Duration;

use shoal_proto::shard::migration_client::MigrationClient;
use shoal_proto::shard::{MovePrimaryRequest, MoveRangeRequest};
use tonic::transport::Channel;

use super::channels::ShardPool;
use crate::error::CommandError;
use crate::state::RouterState;

/// How long a router waits for a donor to finish a migration or a movePrimary (MongoDB has no
/// limit; a bound keeps a lost donor from holding the client forever).
pub const DONOR_CALL_TIMEOUT: Duration = Duration::from_secs(600);

fn client(pool: &ShardPool) -> MigrationClient<Channel> {
    MigrationClient::new(pool.dedicated_channel(DONOR_CALL_TIMEOUT))
}

/// `moveRange` on `donor`'s primary; the migration's duration in milliseconds.
pub async fn move_range(state: &RouterState, donor: &str, request: MoveRangeRequest) -> Result<i64, CommandError> {
    super::on_primary(state, donor, false, |pool: Arc<ShardPool>| {
        let request = request.clone();
        async move {
            let reply = client(&pool).move_range(request).await.map_err(|s| pool.status_error(&s))?.into_inner();
            match reply.error {
                None => Ok(reply.millis),
                Some(e) => Err(e.into()),
            }
        }
    })
    .await
}

/// `movePrimary` on the database's primary shard `donor`.
pub async fn move_primary(state: &RouterState, donor: &str, request: MovePrimaryRequest) -> Result<(), CommandError> {
    super::on_primary(state, donor, false, |pool: Arc<ShardPool>| {
        let request = request.clone();
        async move {
            let reply = client(&pool).move_primary(request).await.map_err(|s| pool.status_error(&s))?.into_inner();
            match reply.error {
                None => Ok(()),
                Some(e) => Err(e.into()),
            }
        }
    })
    .await
}
