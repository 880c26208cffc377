//! The values the catalog holds: shards and their replica groups, databases, sharded collections,
//! chunks, chunk bounds and versions, zone ranges.
//!
//! Invariants these types carry (the config service's command handlers maintain them and its
//! `catalog::invariants` checks them):
//! - `ChunkBound` is totally ordered `Min < Key(any bytes) < Max`; `Key` bytes are opaque
//!   order-preserving encodings (the query crate's keystring), never decoded here.
//! - `Collection::chunks` is keyed by each chunk's `min` and covers `Min..Max` with no gap or overlap.
//! - `Collection::version` equals the highest chunk version; chunk versions are unique within an
//!   epoch, so a version names one (range, shard) state and works as a compare-and-set token.
//!
//! These are the Rust values; on the wire they travel as the protobuf messages of `catalog.proto`
//! (see [`super::convert`]). The serde derives are for the config service's own Raft log and
//! snapshots, whose encoding that crate owns; the chunk map serializes as a list of chunks (see
//! [`chunk_map`]) so formats whose map keys must be strings can carry it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A shard's name (`config.shards._id`).
pub type ShardId = String;

/// How many history entries a chunk keeps. MongoDB trims history older than its snapshot window
/// (10 s by default); a count bound keeps the catalog size independent of time.
pub const CHUNK_HISTORY_ENTRIES_MAX: usize = 16;

/// One end of a chunk or zone range. The derived order is the key-space order:
/// `Min < Key(..) < Max`, and keys compare bytewise.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChunkBound {
    /// MinKey of the whole shard-key space (every field MinKey).
    Min,
    /// An interior point: the order-preserving encoding of a shard-key value.
    Key(Vec<u8>),
    /// MaxKey of the whole shard-key space.
    Max,
}

impl ChunkBound {
    pub fn key(bytes: impl Into<Vec<u8>>) -> Self {
        ChunkBound::Key(bytes.into())
    }
}

/// Bytes shown in messages before the rest is elided.
const BOUND_DISPLAY_BYTES_MAX: usize = 24;

impl fmt::Display for ChunkBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChunkBound::Min => f.write_str("MinKey"),
            ChunkBound::Max => f.write_str("MaxKey"),
            ChunkBound::Key(bytes) => {
                f.write_str("0x")?;
                for b in bytes.iter().take(BOUND_DISPLAY_BYTES_MAX) {
                    write!(f, "{b:02x}")?;
                }
                if bytes.len() > BOUND_DISPLAY_BYTES_MAX {
                    f.write_str("…")?;
                }
                Ok(())
            }
        }
    }
}

/// A chunk's placement version `major.minor` (`config.chunks.lastmod`, Timestamp(major, minor)).
/// Ordered major first.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkVersion {
    pub major: u32,
    pub minor: u32,
}

impl ChunkVersion {
    /// The version a shard that owns no chunk of the collection reports.
    pub const ZERO: ChunkVersion = ChunkVersion { major: 0, minor: 0 };

    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// MongoDB's packed form, `major << 32 | minor`.
    pub const fn as_u64(self) -> u64 {
        ((self.major as u64) << 32) | self.minor as u64
    }
}

impl fmt::Display for ChunkVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}|{}", self.major, self.minor)
    }
}

/// A collection's epoch: ObjectId bytes chosen by the caller when it shards (or re-shards) the
/// collection. Compared for equality only. All zeros is reserved (MongoDB's "unsharded").
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Epoch(pub [u8; 12]);

impl Epoch {
    pub const ZERO: Epoch = Epoch([0; 12]);
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A cluster timestamp (BSON Timestamp: seconds, increment), issued by the catalog's own clock so
/// every one it hands out is strictly greater than the last.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub secs: u32,
    pub inc: u32,
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}, {})", self.secs, self.inc)
    }
}

/// What a router sends a shard and a shard compares: the collection generation (epoch,
/// timestamp) plus a placement version. Used for both shard versions and collection versions.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlacementVersion {
    pub epoch: Epoch,
    pub timestamp: Timestamp,
    pub version: ChunkVersion,
}

/// How one shard-key field is distributed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyFieldKind {
    /// Ascending range (`{field: 1}`).
    Range,
    /// `{field: "hashed"}`: MongoDB's 64-bit hash of the value.
    Hashed,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyField {
    pub name: String,
    pub kind: KeyFieldKind,
}

/// A shard-key pattern: ordered fields, at most one of them hashed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyPattern {
    pub fields: Vec<KeyField>,
}

/// MongoDB's limit on compound index (and so shard key) fields.
pub const KEY_PATTERN_FIELDS_MAX: usize = 32;

impl KeyPattern {
    pub fn range(names: &[&str]) -> Self {
        Self { fields: names.iter().map(|n| KeyField { name: (*n).to_owned(), kind: KeyFieldKind::Range }).collect() }
    }

    pub fn hashed(name: &str) -> Self {
        Self { fields: vec![KeyField { name: name.to_owned(), kind: KeyFieldKind::Hashed }] }
    }

    pub fn is_hashed(&self) -> bool {
        self.fields.iter().any(|f| f.kind == KeyFieldKind::Hashed)
    }

    /// Why the pattern is unusable, if it is.
    pub fn problem(&self) -> Option<String> {
        if self.fields.is_empty() {
            return Some("the shard key has no fields".into());
        }
        if self.fields.len() > KEY_PATTERN_FIELDS_MAX {
            return Some(format!("the shard key has more than {KEY_PATTERN_FIELDS_MAX} fields"));
        }
        let mut seen = BTreeSet::new();
        for f in &self.fields {
            if f.name.is_empty() || f.name.starts_with('$') || f.name.split('.').any(str::is_empty) {
                return Some(format!("invalid shard key field name '{}'", f.name));
            }
            if !seen.insert(f.name.as_str()) {
                return Some(format!("shard key field '{}' appears twice", f.name));
            }
        }
        if self.fields.iter().filter(|f| f.kind == KeyFieldKind::Hashed).count() > 1 {
            return Some("a shard key may have at most one hashed field".into());
        }
        None
    }
}

/// Where a shard is in its life. `Draining` is set by the first `RemoveShard`: the shard takes no
/// new chunks or databases, and the balancer moves its chunks away.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardState {
    Active,
    Draining,
}

/// A shard's replica group as the config service arbitrates it (docs/architecture.md,
/// "Replica-group arbitration"): the members, the current term, and the member promoted to primary
/// in that term (none while a failover runs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ReplicaGroup {
    /// `host:port` of each member, in the order given to `AddShard`: the members that vote, count
    /// toward a majority and may be elected.
    pub members: Vec<String>,
    pub term: u64,
    pub primary: Option<String>,
    /// Members being added (MongoDB's `newlyAdded`): they heartbeat and initial-sync but count
    /// toward no majority and are never elected, until the arbiter moves each to `members` once
    /// it has caught up with the group's commit point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// The group's configuration version (`replSetGetConfig`'s `config.version`): 1 at
    /// `AddShard`, one more at every change of `members` or `pending`.
    #[serde(default = "first_config_version")]
    pub config_version: u64,
}

fn first_config_version() -> u64 {
    1
}

impl ReplicaGroup {
    /// A new group of `members`.
    pub fn new(members: Vec<String>) -> ReplicaGroup {
        ReplicaGroup { members, term: 0, primary: None, pending: Vec::new(), config_version: first_config_version() }
    }

    /// Whether `member` belongs to the group, voting or pending.
    pub fn has(&self, member: &str) -> bool {
        self.members.iter().chain(&self.pending).any(|m| m == member)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub id: ShardId,
    /// Replica-set name, the part before `/` in `config.shards.host`.
    pub replica_set: String,
    pub group: ReplicaGroup,
    pub state: ShardState,
    pub zones: BTreeSet<String>,
    /// When the shard was added (`config.shards.topologyTime`).
    pub topology_time: Timestamp,
}

impl Shard {
    /// The member a client dials first (`host:port`): the primary the catalog names, else the
    /// first member.
    pub fn endpoint(&self) -> Option<&str> {
        self.group.primary.as_deref().or_else(|| self.group.members.first().map(String::as_str))
    }

    pub fn is_draining(&self) -> bool {
        self.state == ShardState::Draining
    }

    /// `config.shards.host`: `rs/h1:p,h2:p`.
    pub fn host_string(&self) -> String {
        format!("{}/{}", self.replica_set, self.group.members.join(","))
    }
}

/// `config.databases.version`: lastMod grows on every primary change.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DatabaseVersion {
    pub uuid: Uuid,
    pub timestamp: Timestamp,
    pub last_mod: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Database {
    pub name: String,
    /// Holds the database's unsharded collections.
    pub primary: ShardId,
    pub version: DatabaseVersion,
}

/// Which shard owned a chunk from when: lets a snapshot read at an older time find the owner.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ChunkHistoryEntry {
    pub valid_after: Timestamp,
    pub shard: ShardId,
}

/// The half-open key range `[min, max)` of one collection, owned by one shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub min: ChunkBound,
    pub max: ChunkBound,
    pub shard: ShardId,
    pub version: ChunkVersion,
    /// Newest first, at most [`CHUNK_HISTORY_ENTRIES_MAX`].
    pub history: Vec<ChunkHistoryEntry>,
    /// Too big to move (set by the balancer after a failed split).
    pub jumbo: bool,
    pub on_current_shard_since: Timestamp,
}

impl Chunk {
    /// A chunk without history, not jumbo (tests and fixtures; the catalog builds its own).
    pub fn new(min: ChunkBound, max: ChunkBound, shard: impl Into<ShardId>, version: ChunkVersion) -> Self {
        Self {
            min,
            max,
            shard: shard.into(),
            version,
            history: Vec::new(),
            jumbo: false,
            on_current_shard_since: Timestamp::default(),
        }
    }
}

/// A sharded collection with its chunks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Collection {
    /// `db.coll`.
    pub ns: String,
    pub uuid: Uuid,
    pub epoch: Epoch,
    /// Generation timestamp, set when the collection is sharded; comparable, unlike the epoch.
    pub timestamp: Timestamp,
    pub key: KeyPattern,
    pub unique: bool,
    pub no_balance: bool,
    /// `enableAutoMerge: false` in `config.collections`: the balancer merges none of its chunks.
    #[serde(default)]
    pub no_auto_merge: bool,
    pub max_chunk_size_bytes: Option<u64>,
    /// The collection version: the highest chunk version.
    pub version: ChunkVersion,
    #[serde(with = "chunk_map")]
    pub chunks: BTreeMap<ChunkBound, Chunk>,
}

impl Collection {
    pub fn placement(&self, version: ChunkVersion) -> PlacementVersion {
        PlacementVersion { epoch: self.epoch, timestamp: self.timestamp, version }
    }

    /// The highest version among the chunks `shard` owns, `0|0` if it owns none.
    pub fn shard_version(&self, shard: &str) -> ChunkVersion {
        self.chunks.values().filter(|c| c.shard == shard).map(|c| c.version).max().unwrap_or(ChunkVersion::ZERO)
    }

    /// The chunk containing `key`, which is never `Max` (no chunk contains MaxKey's point).
    pub fn chunk_containing(&self, key: &ChunkBound) -> Option<&Chunk> {
        self.chunks.range(..=key.clone()).next_back().map(|(_, c)| c).filter(|c| *key < c.max)
    }
}

/// A key range `[min, max)` of one namespace assigned to a zone (`config.tags`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ZoneRange {
    pub min: ChunkBound,
    pub max: ChunkBound,
    pub zone: String,
}

/// Serde for the chunk map as a list of chunks: JSON object keys must be strings, and each chunk
/// already carries its `min`, so nothing is lost.
pub mod chunk_map {
    use std::collections::BTreeMap;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{Chunk, ChunkBound};

    pub fn serialize<S: Serializer>(map: &BTreeMap<ChunkBound, Chunk>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.values())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<ChunkBound, Chunk>, D::Error> {
        let mut map = BTreeMap::new();
        for chunk in Vec::<Chunk>::deserialize(d)? {
            let min = chunk.min.clone();
            if map.insert(min, chunk).is_some() {
                return Err(D::Error::custom("two chunks share a min bound"));
            }
        }
        Ok(map)
    }
}
