//! What the config service answers a catalog command with.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::types::{Chunk, Database, PlacementVersion, ShardId};

/// What a successful command answers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Reply {
    /// Success with nothing to report (also the reply to a command that changed nothing).
    Done,
    ShardAdded {
        shard: ShardId,
    },
    RemoveShard(RemoveShardProgress),
    /// The database as it now is (created, already present, or with its new primary).
    Database(Database),
    CollectionSharded {
        uuid: Uuid,
        version: PlacementVersion,
    },
    /// A split, merge, migration or jumbo change: the new collection version and the chunks the
    /// command created or changed, in key order.
    Chunks {
        collection_version: PlacementVersion,
        changed: Vec<Chunk>,
    },
    Dropped {
        existed: bool,
    },
    /// The collection's version after `RefineShardKey`: its new generation.
    ShardKeyRefined {
        version: PlacementVersion,
    },
    Lease {
        token: u64,
        expires_at_ms: u64,
    },
    ReplicaGroup {
        term: u64,
        primary: Option<String>,
    },
    /// A group's membership after `ReconfigReplicaGroup` or `PromoteMember`.
    ReplicaGroupMembers {
        members: Vec<String>,
        pending: Vec<String>,
        config_version: u64,
    },
    /// How many users or roles a `dropAll...FromDatabase` removed.
    Count(u64),
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveShardState {
    Started,
    Ongoing,
    Completed,
}

/// The `removeShard` reply: where draining is and what still keeps the shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RemoveShardProgress {
    pub state: RemoveShardState,
    pub remaining_chunks: u64,
    pub remaining_jumbo_chunks: u64,
    /// Databases whose primary is still this shard (`dbsToMove`).
    pub databases_to_move: Vec<String>,
}
