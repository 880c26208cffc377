//! Routing tables as routers and shards load them: whole on first use, then incrementally (the
//! chunks changed since the cached collection version, folded in with
//! `RoutingTable::merge_changes`) while the collection's epoch is unchanged, and whole again
//! after an epoch change (drop and re-shard, refined key).
//!
//! [`RoutingSource`] is the seam: the config servers ([`ConfigClient`]) in production, a fake in
//! tests. Cache the results in a [`crate::single_flight::SingleFlight`].
//!
//! Must not: decide what a stale request means (the router retries, the shard refuses) or cache.

use std::future::Future;

use shoal_proto::catalog::{ChangedChunks, RoutingAnswer, RoutingSince, RoutingTable};

use crate::config_client::{ClientError, ConfigClient};

/// Where routing tables come from.
pub trait RoutingSource: Sync {
    fn routing_table(
        &self,
        ns: &str,
        since: Option<RoutingSince>,
        linearizable: bool,
    ) -> impl Future<Output = Result<RoutingAnswer, ClientError>> + Send;
}

impl RoutingSource for ConfigClient {
    async fn routing_table(
        &self,
        ns: &str,
        since: Option<RoutingSince>,
        linearizable: bool,
    ) -> Result<RoutingAnswer, ClientError> {
        Ok(ConfigClient::routing_table(self, ns, since, linearizable).await?.0)
    }
}

/// Folds a catalog answer into the cached table: `Some(None)` the collection is not sharded,
/// `Some(Some(table))` its current table, `None` a whole reload is needed (its epoch changed).
pub fn fold(cached: Option<&RoutingTable>, answer: RoutingAnswer) -> Option<Option<RoutingTable>> {
    match answer {
        RoutingAnswer::Full(table) => Some(table),
        RoutingAnswer::Changes(ChangedChunks::NotSharded) => Some(None),
        RoutingAnswer::Changes(ChangedChunks::EpochChanged { .. }) => None,
        RoutingAnswer::Changes(ChangedChunks::Changed { collection_version, chunks }) => {
            let mut table = cached?.clone();
            if collection_version.epoch != table.epoch {
                return None;
            }
            table.merge_changes(collection_version.version, &chunks);
            Some(Some(table))
        }
    }
}

/// The current routing table of `ns` (`None`: not sharded), incrementally from `cached` when it
/// is still the collection's generation.
pub async fn load(
    source: &impl RoutingSource,
    ns: &str,
    cached: Option<&RoutingTable>,
    linearizable: bool,
) -> Result<Option<RoutingTable>, ClientError> {
    if let Some(table) = cached {
        let since = RoutingSince { epoch: table.epoch, version: table.version };
        let answer = source.routing_table(ns, Some(since), linearizable).await?;
        match fold(Some(table), answer) {
            Some(fresh) => return Ok(fresh),
            None => tracing::debug!(ns, "collection generation changed; reloading its routing table"),
        }
    }
    let answer = source.routing_table(ns, None, linearizable).await?;
    fold(None, answer).ok_or_else(|| ClientError::Decode(format!("{ns}: a whole routing table read answered changes")))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use shoal_proto::catalog::{Chunk, ChunkBound, ChunkVersion, Epoch, KeyPattern, PlacementVersion, Timestamp};

    use super::*;

    fn chunk(min: ChunkBound, max: ChunkBound, shard: &str, major: u32, minor: u32) -> Chunk {
        Chunk::new(min, max, shard, ChunkVersion::new(major, minor))
    }

    fn key(b: u8) -> ChunkBound {
        ChunkBound::Key(vec![b])
    }

    fn table(epoch: u8, chunks: Vec<Chunk>) -> RoutingTable {
        let version = chunks.iter().map(|c| c.version).max().unwrap_or(ChunkVersion::ZERO);
        RoutingTable {
            ns: "db.c".into(),
            uuid: uuid::Uuid::from_u128(1),
            epoch: Epoch([epoch; 12]),
            timestamp: Timestamp { secs: 1, inc: 0 },
            key: KeyPattern::range(&["x"]),
            unique: false,
            version,
            chunks,
        }
    }

    /// Answers from a script, recording what was asked.
    struct Script {
        answers: Mutex<Vec<RoutingAnswer>>,
        asked: Mutex<Vec<Option<RoutingSince>>>,
    }

    impl RoutingSource for Script {
        async fn routing_table(
            &self,
            _: &str,
            since: Option<RoutingSince>,
            _: bool,
        ) -> Result<RoutingAnswer, ClientError> {
            self.asked.lock().unwrap().push(since);
            let mut answers = self.answers.lock().unwrap();
            if answers.is_empty() {
                return Err(ClientError::Unavailable("script ran out".into()));
            }
            Ok(answers.remove(0))
        }
    }

    fn script(answers: Vec<RoutingAnswer>) -> Script {
        Script { answers: Mutex::new(answers), asked: Mutex::new(Vec::new()) }
    }

    #[tokio::test]
    async fn first_load_is_whole_then_incremental() {
        let t = table(1, vec![chunk(ChunkBound::Min, key(5), "s0", 1, 0), chunk(key(5), ChunkBound::Max, "s0", 1, 1)]);
        let moved = chunk(key(5), ChunkBound::Max, "s1", 2, 0);
        let changes = ChangedChunks::Changed {
            collection_version: PlacementVersion { epoch: t.epoch, timestamp: t.timestamp, version: moved.version },
            chunks: vec![moved.clone()],
        };
        let source = script(vec![RoutingAnswer::Full(Some(t.clone())), RoutingAnswer::Changes(changes)]);
        let first = load(&source, "db.c", None, true).await.unwrap().unwrap();
        assert_eq!(first, t);
        let second = load(&source, "db.c", Some(&first), true).await.unwrap().unwrap();
        assert_eq!(second.version, ChunkVersion::new(2, 0));
        assert_eq!(second.chunks.last(), Some(&moved));
        let asked = source.asked.lock().unwrap().clone();
        assert_eq!(asked[0], None);
        assert_eq!(asked[1], Some(RoutingSince { epoch: t.epoch, version: t.version }));
    }

    #[tokio::test]
    async fn an_epoch_change_reloads_the_whole_table() {
        let old = table(1, vec![chunk(ChunkBound::Min, ChunkBound::Max, "s0", 3, 0)]);
        let new = table(2, vec![chunk(ChunkBound::Min, ChunkBound::Max, "s1", 1, 0)]);
        let epoch_changed = ChangedChunks::EpochChanged {
            current: PlacementVersion { epoch: new.epoch, timestamp: new.timestamp, version: new.version },
        };
        let source = script(vec![RoutingAnswer::Changes(epoch_changed), RoutingAnswer::Full(Some(new.clone()))]);
        assert_eq!(load(&source, "db.c", Some(&old), true).await.unwrap(), Some(new));
        assert_eq!(source.asked.lock().unwrap().len(), 2);
    }

    #[test]
    fn changes_of_another_generation_are_not_folded_into_the_cached_table() {
        let old = table(1, vec![chunk(ChunkBound::Min, ChunkBound::Max, "s0", 3, 0)]);
        let other = ChangedChunks::Changed {
            collection_version: PlacementVersion {
                epoch: Epoch([9; 12]),
                timestamp: old.timestamp,
                version: ChunkVersion::new(4, 0),
            },
            chunks: vec![chunk(ChunkBound::Min, ChunkBound::Max, "s1", 4, 0)],
        };
        assert_eq!(fold(Some(&old), RoutingAnswer::Changes(other)), None);
        assert_eq!(fold(Some(&old), RoutingAnswer::Changes(ChangedChunks::NotSharded)), Some(None));
        // Changes without a cached table cannot be folded.
        assert_eq!(fold(None, RoutingAnswer::Changes(ChangedChunks::NotSharded)), Some(None));
    }

    #[tokio::test]
    async fn a_dropped_collection_loads_as_unsharded() {
        let old = table(1, vec![chunk(ChunkBound::Min, ChunkBound::Max, "s0", 3, 0)]);
        let source = script(vec![RoutingAnswer::Changes(ChangedChunks::NotSharded)]);
        assert_eq!(load(&source, "db.c", Some(&old), false).await.unwrap(), None);
    }
}
