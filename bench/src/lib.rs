//! Benchmark drivers for Shoal.
//!
//! Owns: the CRUD-path benchmark (`shoal bench crud`): inserts/s and finds-by-`_id`/s measured
//! through the router, directly against a shard's gRPC service, and against the bare storage
//! engine, in one run. Later: YCSB-compatible workloads (issue 4).
//!
//! Must not: be linked by the server crates; it is a client of them.
