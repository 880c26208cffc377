//! Carries out one [`Decision`] of a plan, fenced by the balancer lease's token.
//!
//! ```text
//!  Split Points  -> catalog SplitChunk{fencing}
//!  Split BySize  -> owner: splitVector{maxChunkSizeBytes} -> keys -> catalog SplitChunk{fencing}
//!  Move          -> donor: MoveRange{fencing, latency target} (donor commits with the fencing)
//!  Merge         -> catalog MergeChunks{fencing}
//!  MarkJumbo     -> catalog SetChunkJumbo{jumbo: true, fencing}
//! ```
//!
//! Every catalog write names the versions the policy read, so a chunk that changed since the
//! snapshot is refused by the catalog's compare-and-set rather than acted on twice. Must not:
//! issue anything without a token (the caller checks the lease before each action).

use shoal_proto::ErrorCode;
use shoal_proto::catalog::{BALANCER_LEASE, ChunkBound, ClusterCatalogView, Command, Fencing};
use shoal_proto::shard::MoveRangeRequest;

use super::policy::{Action, Decision, SplitAt};
use crate::cmd::sharding::{size_split_points, wire_bound};
use crate::error::CommandError;
use crate::state::RouterState;

/// What an executed action did, for the log.
#[derive(Debug, PartialEq)]
pub enum Done {
    Split { points: usize },
    Moved { millis: i64 },
    Merged,
    MarkedJumbo,
}

/// Whether an error means the chunk cannot be split (it counts towards marking it jumbo).
pub fn is_cannot_split(e: &CommandError) -> bool {
    e.is(ErrorCode::CannotSplit)
}

pub async fn execute(
    state: &RouterState,
    catalog: &ClusterCatalogView,
    decision: &Decision,
    token: u64,
    latency_target_ms: u32,
) -> Result<Done, CommandError> {
    let fencing = Some(Fencing { lease: BALANCER_LEASE.to_owned(), token });
    match &decision.action {
        Action::Split { ns, epoch, min, version, at, .. } => {
            let split_points = match at {
                SplitAt::Points(points) => points.clone(),
                SplitAt::BySize => size_points(state, catalog, ns, min, *version).await?,
            };
            let points = split_points.len();
            let command = Command::SplitChunk {
                ns: ns.clone(),
                epoch: *epoch,
                min: min.clone(),
                expected_version: *version,
                split_points,
                fencing,
            };
            state.catalog.write(&command).await?;
            Ok(Done::Split { points })
        }
        Action::Move { ns, epoch, min, max, version, from, to, reason } => {
            let donor = catalog
                .shard(from)
                .ok_or_else(|| CommandError::new(ErrorCode::ShardNotFound, format!("Shard {from} not found")))?;
            let request = MoveRangeRequest {
                request_id: format!("balancer-{token}-{ns}-{min}"),
                ns: ns.clone(),
                min: Some(wire_bound(min)),
                max: Some(wire_bound(max)),
                to_shard: to.clone(),
                epoch: epoch.0.to_vec().into(),
                major: version.major,
                minor: version.minor,
                wait_for_delete: false,
                fencing_lease: BALANCER_LEASE.to_owned(),
                fencing_token: token,
                latency_target_ms,
            };
            tracing::debug!(%ns, %min, %from, %to, ?reason, "balancer migration starting");
            // Bounded by the donor call's timeout; sent to the next primary if the donor's stepped down.
            let millis = crate::exec::call::donor::move_range(state, &donor.id, request).await?;
            Ok(Done::Moved { millis })
        }
        Action::Merge { ns, epoch, min, max, versions, .. } => {
            let command = Command::MergeChunks {
                ns: ns.clone(),
                epoch: *epoch,
                min: min.clone(),
                max: max.clone(),
                expected_versions: versions.clone(),
                fencing,
            };
            state.catalog.write(&command).await?;
            Ok(Done::Merged)
        }
        Action::MarkJumbo { ns, epoch, min, version, .. } => {
            let command = Command::SetChunkJumbo {
                ns: ns.clone(),
                epoch: *epoch,
                min: min.clone(),
                expected_version: *version,
                jumbo: true,
                fencing,
            };
            state.catalog.write(&command).await?;
            Ok(Done::MarkedJumbo)
        }
    }
}

/// Points cutting the chunk into pieces of half the chunk size, computed by its owner;
/// CannotSplit when there are none.
async fn size_points(
    state: &RouterState,
    catalog: &ClusterCatalogView,
    ns: &str,
    min: &ChunkBound,
    version: shoal_proto::catalog::ChunkVersion,
) -> Result<Vec<Vec<u8>>, CommandError> {
    let coll = catalog
        .collection(ns)
        .ok_or_else(|| CommandError::new(ErrorCode::NamespaceNotSharded, format!("Collection {ns} is not sharded.")))?;
    let chunk = coll.chunks.get(min).filter(|c| c.version == version).ok_or_else(|| {
        CommandError::new(ErrorCode::ConflictingOperationInProgress, format!("chunk {ns} at {min} changed meanwhile"))
    })?;
    let max_bytes = coll.max_chunk_size_bytes.unwrap_or_else(|| catalog.settings().chunk_size_bytes());
    size_split_points(state, coll, chunk, max_bytes).await
}
