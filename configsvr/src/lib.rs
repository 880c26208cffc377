//! The config service: the single source of truth for the cluster's shape.
//!
//! Will own (issue 3): an openraft group with a persistent log and state machine holding the
//! catalog — shards, databases, collections, chunks with versions, zones, settings, leases and each
//! shard's replica-group term — plus its gRPC API (catalog reads, incremental routing tables, a
//! watch stream, compare-and-set admin commits).
//!
//! Must not: depend on `shard`, `router` or `query`; it stores shard-key bounds as opaque
//! order-preserving bytes. Until issue 3 lands the crate is empty and the router talks to a
//! single shard named in its own configuration.
