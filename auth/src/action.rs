//! MongoDB's action types (`find`, `insert`, `createUser`, ...) and sets of them.
//!
//! The names are MongoDB's, so a role created with mongosh's `db.createRole` means the same here.
//! An [`ActionSet`] is a bit set: checking a command's actions against a privilege is a few word
//! operations, done on every command of an authenticated connection.
//!
//! Must not: renumber on the wire: actions travel and are stored by name, never by bit.

use std::fmt;

macro_rules! actions {
    ($($variant:ident = $name:literal),* $(,)?) => {
        /// One action a privilege grants.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Action { $($variant),* }

        impl Action {
            /// Every action, in declaration order.
            pub const ALL: &'static [Action] = &[$(Action::$variant),*];

            /// MongoDB's name of the action.
            pub const fn name(self) -> &'static str {
                match self { $(Action::$variant => $name),* }
            }

            /// The action MongoDB calls `name`.
            pub fn from_name(name: &str) -> Option<Action> {
                match name { $($name => Some(Action::$variant),)* _ => None }
            }
        }
    };
}

actions! {
    AddShard = "addShard",
    AllCollectionStats = "allCollectionStats",
    Analyze = "analyze",
    AnalyzeShardKey = "analyzeShardKey",
    AnyAction = "anyAction",
    AppendOplogNote = "appendOplogNote",
    ApplicationMessage = "applicationMessage",
    ApplyOps = "applyOps",
    AuditConfigure = "auditConfigure",
    AuthSchemaUpgrade = "authSchemaUpgrade",
    BypassDocumentValidation = "bypassDocumentValidation",
    BypassWriteBlockingMode = "bypassWriteBlockingMode",
    ChangeCustomData = "changeCustomData",
    ChangeOwnCustomData = "changeOwnCustomData",
    ChangeOwnPassword = "changeOwnPassword",
    ChangePassword = "changePassword",
    ChangeStream = "changeStream",
    CheckMetadataConsistency = "checkMetadataConsistency",
    CleanupOrphaned = "cleanupOrphaned",
    CleanupStructuredEncryptionData = "cleanupStructuredEncryptionData",
    ClearJumboFlag = "clearJumboFlag",
    CollMod = "collMod",
    CollStats = "collStats",
    Compact = "compact",
    CompactStructuredEncryptionData = "compactStructuredEncryptionData",
    ConfigureQueryAnalyzer = "configureQueryAnalyzer",
    ConnPoolStats = "connPoolStats",
    ConnPoolSync = "connPoolSync",
    ConvertToCapped = "convertToCapped",
    CreateCollection = "createCollection",
    CreateIndex = "createIndex",
    CreateRole = "createRole",
    CreateSearchIndexes = "createSearchIndexes",
    CreateUser = "createUser",
    DbCheck = "dbCheck",
    DbHash = "dbHash",
    DbStats = "dbStats",
    DropCollection = "dropCollection",
    DropConnections = "dropConnections",
    DropDatabase = "dropDatabase",
    DropIndex = "dropIndex",
    DropRole = "dropRole",
    DropSearchIndex = "dropSearchIndex",
    DropUser = "dropUser",
    EnableProfiler = "enableProfiler",
    EnableSharding = "enableSharding",
    ExportCollection = "exportCollection",
    Find = "find",
    FlushRouterConfig = "flushRouterConfig",
    ForceUuid = "forceUUID",
    Fsync = "fsync",
    FsyncUnlock = "fsyncUnlock",
    GetChangeStreamState = "getChangeStreamState",
    GetClusterParameter = "getClusterParameter",
    GetCmdLineOpts = "getCmdLineOpts",
    GetDatabaseVersion = "getDatabaseVersion",
    GetDefaultRwConcern = "getDefaultRWConcern",
    GetLog = "getLog",
    GetParameter = "getParameter",
    GetShardMap = "getShardMap",
    GetShardVersion = "getShardVersion",
    GrantRole = "grantRole",
    HostInfo = "hostInfo",
    Impersonate = "impersonate",
    ImportCollection = "importCollection",
    IndexStats = "indexStats",
    Inprog = "inprog",
    Insert = "insert",
    Internal = "internal",
    InvalidateUserCache = "invalidateUserCache",
    IssueDirectShardOperations = "issueDirectShardOperations",
    KillAnyCursor = "killAnyCursor",
    KillAnySession = "killAnySession",
    KillCursors = "killCursors",
    Killop = "killop",
    ListCachedAndActiveUsers = "listCachedAndActiveUsers",
    ListCollections = "listCollections",
    ListCursors = "listCursors",
    ListDatabases = "listDatabases",
    ListIndexes = "listIndexes",
    ListSampledQueries = "listSampledQueries",
    ListSearchIndexes = "listSearchIndexes",
    ListSessions = "listSessions",
    ListShards = "listShards",
    LogRotate = "logRotate",
    MoveChunk = "moveChunk",
    MoveCollection = "moveCollection",
    Netstat = "netstat",
    OidcListKeys = "oidcListKeys",
    OidcRefreshKeys = "oidcRefreshKeys",
    OidReset = "oidReset",
    OperationMetrics = "operationMetrics",
    PlanCacheIndexFilter = "planCacheIndexFilter",
    PlanCacheRead = "planCacheRead",
    PlanCacheWrite = "planCacheWrite",
    QuerySettings = "querySettings",
    QueryStatsRead = "queryStatsRead",
    QueryStatsReadTransformed = "queryStatsReadTransformed",
    RefineCollectionShardKey = "refineCollectionShardKey",
    ReIndex = "reIndex",
    Remove = "remove",
    RemoveShard = "removeShard",
    RenameCollection = "renameCollection",
    RenameCollectionSameDb = "renameCollectionSameDB",
    ReplSetConfigure = "replSetConfigure",
    ReplSetGetConfig = "replSetGetConfig",
    ReplSetGetStatus = "replSetGetStatus",
    ReplSetHeartbeat = "replSetHeartbeat",
    ReplSetResizeOplog = "replSetResizeOplog",
    ReplSetStateChange = "replSetStateChange",
    ReshardCollection = "reshardCollection",
    Resync = "resync",
    RevokeRole = "revokeRole",
    RotateCertificates = "rotateCertificates",
    RunTenantMigration = "runTenantMigration",
    ServerStatus = "serverStatus",
    SetAuthenticationRestriction = "setAuthenticationRestriction",
    SetChangeStreamState = "setChangeStreamState",
    SetClusterParameter = "setClusterParameter",
    SetDefaultRwConcern = "setDefaultRWConcern",
    SetFeatureCompatibilityVersion = "setFeatureCompatibilityVersion",
    SetParameter = "setParameter",
    SetUserWriteBlockMode = "setUserWriteBlockMode",
    ShardCollection = "shardCollection",
    ShardedDataDistribution = "shardedDataDistribution",
    ShardingState = "shardingState",
    Shutdown = "shutdown",
    SplitChunk = "splitChunk",
    SplitVector = "splitVector",
    StorageDetails = "storageDetails",
    Top = "top",
    Touch = "touch",
    TrafficRecord = "trafficRecord",
    TransitionFromDedicatedConfigServer = "transitionFromDedicatedConfigServer",
    TransitionToDedicatedConfigServer = "transitionToDedicatedConfigServer",
    Unlock = "unlock",
    Update = "update",
    UpdateSearchIndex = "updateSearchIndex",
    UseTenant = "useTenant",
    UseUuid = "useUUID",
    Validate = "validate",
    ViewRole = "viewRole",
    ViewUser = "viewUser",
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Words of an [`ActionSet`]: room for 256 actions.
const WORDS: usize = 4;
const _: () = assert!(Action::ALL.len() <= WORDS * 64);

/// A set of actions. `anyAction` in a set grants every action.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ActionSet([u64; WORDS]);

impl ActionSet {
    pub const EMPTY: ActionSet = ActionSet([0; WORDS]);

    pub const fn of(actions: &[Action]) -> ActionSet {
        let mut set = ActionSet::EMPTY;
        let mut i = 0;
        while i < actions.len() {
            set = set.with(actions[i]);
            i += 1;
        }
        set
    }

    pub const fn with(mut self, action: Action) -> ActionSet {
        let bit = action as usize;
        self.0[bit / 64] |= 1 << (bit % 64);
        self
    }

    pub const fn union(mut self, other: ActionSet) -> ActionSet {
        let mut i = 0;
        while i < WORDS {
            self.0[i] |= other.0[i];
            i += 1;
        }
        self
    }

    pub fn remove_all(&mut self, other: ActionSet) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine &= !theirs;
        }
    }

    pub const fn contains(&self, action: Action) -> bool {
        let bit = action as usize;
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Whether every action of `needed` is in this set (or this set holds `anyAction`).
    pub fn covers(&self, needed: ActionSet) -> bool {
        self.contains(Action::AnyAction) || self.0.iter().zip(needed.0).all(|(have, need)| have & need == need)
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// The actions in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = Action> + '_ {
        Action::ALL.iter().copied().filter(|a| self.contains(*a))
    }

    /// Parses MongoDB action names; the first unknown one is the error.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<ActionSet, String> {
        names.into_iter().try_fold(ActionSet::EMPTY, |set, name| {
            Action::from_name(name).map(|a| set.with(a)).ok_or_else(|| name.to_owned())
        })
    }

    /// The actions' names, sorted as MongoDB lists them (alphabetically).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.iter().map(Action::name).collect();
        names.sort_unstable();
        names
    }
}

impl fmt::Debug for ActionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Action::name)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for a in Action::ALL {
            assert_eq!(Action::from_name(a.name()), Some(*a));
            assert!(seen.insert(a.name()), "{a} listed twice");
        }
        assert_eq!(Action::from_name("nosuchaction"), None);
    }

    #[test]
    fn sets_cover_and_any_action_covers_everything() {
        let rw = ActionSet::of(&[Action::Find, Action::Insert, Action::Update]);
        assert!(rw.covers(ActionSet::of(&[Action::Find])));
        assert!(rw.covers(ActionSet::of(&[Action::Find, Action::Insert])));
        assert!(!rw.covers(ActionSet::of(&[Action::Remove])));
        assert!(ActionSet::of(&[Action::AnyAction]).covers(ActionSet::of(&[Action::Shutdown])));
        let mut less = rw;
        less.remove_all(ActionSet::of(&[Action::Insert]));
        assert_eq!(less.names(), ["find", "update"]);
        assert_eq!(ActionSet::from_names(["find", "bogus"]), Err("bogus".to_owned()));
    }
}
