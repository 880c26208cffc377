//! Size limits every process enforces, with MongoDB's values.

/// Largest BSON document a client may store (MongoDB `maxBsonObjectSize`).
pub const MAX_BSON_OBJECT_SIZE_BYTES: usize = 16 * 1024 * 1024;
/// Largest wire message (MongoDB `maxMessageSizeBytes`, 48 MB decimal).
pub const MAX_MESSAGE_SIZE_BYTES: usize = 48_000_000;
/// Most statements in one write command (MongoDB `maxWriteBatchSize`).
pub const MAX_WRITE_BATCH_SIZE: usize = 100_000;
/// Commands may exceed the object limit by this much (MongoDB's 16 KiB command overhead).
pub const COMMAND_OVERHEAD_BYTES: usize = 16 * 1024;
/// gRPC message limit between our processes: a whole wire message plus envelope fits.
pub const GRPC_MESSAGE_SIZE_MAX_BYTES: usize = 64 * 1024 * 1024;
