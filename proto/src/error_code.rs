//! MongoDB error codes and names (from `src/mongo/base/error_codes.yml`), the ones Shoal emits.
//!
//! Libraries carry typed errors; they are mapped to one of these once, at the edge that replies.

macro_rules! codes {
    ($($name:ident = $code:literal),* $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $($name),* }

        impl ErrorCode {
            pub const fn code(self) -> i32 {
                match self { $(ErrorCode::$name => $code),* }
            }
            pub const fn name(self) -> &'static str {
                match self { $(ErrorCode::$name => stringify!($name)),* }
            }
            pub fn from_code(code: i32) -> Option<Self> {
                match code { $($code => Some(ErrorCode::$name),)* _ => None }
            }
        }
    };
}

codes! {
    InternalError = 1,
    BadValue = 2,
    NoSuchKey = 4,
    HostUnreachable = 6,
    HostNotFound = 7,
    UnknownError = 8,
    FailedToParse = 9,
    CannotMutateObject = 10,
    Unauthorized = 13,
    TypeMismatch = 14,
    Overflow = 15,
    InvalidLength = 16,
    IllegalOperation = 20,
    EmptyArrayOperation = 21,
    InvalidBSON = 22,
    AlreadyInitialized = 23,
    NamespaceNotFound = 26,
    IndexNotFound = 27,
    PathNotViable = 28,
    ConflictingUpdateOperators = 40,
    CursorNotFound = 43,
    LockBusy = 46,
    NamespaceExists = 48,
    MaxTimeMSExpired = 50,
    DollarPrefixedFieldName = 52,
    InvalidIdField = 53,
    NotSingleValueField = 54,
    CommandNotFound = 59,
    ShardKeyNotFound = 61,
    WriteConcernFailed = 64,
    ImmutableField = 66,
    ShardNotFound = 70,
    InvalidOptions = 72,
    InvalidNamespace = 73,
    CannotSplit = 87,
    NetworkTimeout = 89,
    ShutdownInProgress = 91,
    OperationFailed = 96,
    NotYetInitialized = 94,
    InvalidReplicaSetConfig = 93,
    NewReplicaSetConfigurationIncompatible = 103,
    ConfigurationInProgress = 109,
    ConflictingOperationInProgress = 117,
    NamespaceNotSharded = 118,
    FailedToSatisfyReadPreference = 133,
    StaleTerm = 135,
    MaxStalenessOutOfRange = 160,
    StaleEpoch = 150,
    StaleDbVersion = 249,
    ZoneStillInUse = 163,
    InvalidPipelineOperator = 168,
    ZoneNotFound = 177,
    RangeOverlapConflict = 178,
    ClientMetadataAppNameTooLarge = 184,
    ClientMetadataDocumentTooLarge = 185,
    NotImplemented = 238,
    CannotCreateIndex = 67,
    IndexAlreadyExists = 68,
    IndexOptionsConflict = 85,
    IndexKeySpecsConflict = 86,
    CannotIndexParallelArrays = 171,
    InvalidIndexSpecificationOption = 197,
    IndexBuildAborted = 276,
    NoQueryExecutionPlans = 291,
    Location16766 = 16766,
    Location51183 = 51183,
    Location51760 = 51760,
    ExceededTimeLimit = 262,
    IllegalOpMsgFlag = 223,
    TooManyDocumentSequences = 233,
    ChecksumMismatch = 288,
    QueryExceededMemoryLimitNoDiskUseAllowed = 292,
    UnsupportedOpQueryCommand = 352,
    InvalidUuid = 9005,
    SocketException = 9001,
    DuplicateKey = 11000,
    BSONObjectTooLarge = 10334,
    InterruptedAtShutdown = 11600,
    Interrupted = 11601,
    InterruptedDueToReplStateChange = 11602,
    NotWritablePrimary = 10107,
    NotPrimaryNoSecondaryOk = 13435,
    NotPrimaryOrSecondary = 13436,
    PrimarySteppedDown = 189,
    UnsatisfiableWriteConcern = 100,
    UnknownReplWriteConcern = 79,
    IncompleteTransactionHistory = 217,
    TransactionTooOld = 225,
    NoSuchTransaction = 251,
    NoProgressMade = 82,
    StaleConfig = 13388,
    Location16755 = 16755,
    Location17419 = 17419,
    Location15998 = 15998,
    Location40324 = 40324,
    Location40414 = 40414,
    Location15955 = 15955,
    Location31324 = 31324,
    Location51024 = 51024,
    Location31253 = 31253,
    Location31254 = 31254,
    Location40415 = 40415,
    ConversionFailure = 241,
    Location16006 = 16006,
    Location18535 = 18535,
    Location18536 = 18536,
    Location40485 = 40485,
    Location40517 = 40517,
    Location40228 = 40228,
    Location17276 = 17276,
    Location16866 = 16866,
    Location16867 = 16867,
    Location16868 = 16868,
    Location15952 = 15952,
    ExceededMemoryLimit = 146,
    Location40601 = 40601,
    Location51132 = 51132,
    Location13113 = 13113,
    Location28769 = 28769,
    UserNotFound = 11,
    ProtocolError = 17,
    AuthenticationFailed = 18,
    RoleNotFound = 31,
    InvalidRoleModification = 49,
    MechanismUnavailable = 334,
    InvalidSSLConfiguration = 140,
    SSLHandshakeFailed = 141,
    Location51002 = 51002,
    Location51003 = 51003,
    Location17053 = 17053,
    Location40602 = 40602,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(ErrorCode::DuplicateKey.code(), 11000);
        assert_eq!(ErrorCode::DuplicateKey.name(), "DuplicateKey");
        assert_eq!(ErrorCode::from_code(43), Some(ErrorCode::CursorNotFound));
        assert_eq!(ErrorCode::from_code(-5), None);
    }
}
