//! The config service: the single source of truth for the cluster's shape.
//!
//! Owns: the catalog state machine ([`catalog`]: pure, I/O-free `ClusterCatalog::apply`), the Raft group
//! of config servers ([`raft`]: openraft with a fjall log store and the catalog as its state
//! machine, peer RPCs over gRPC), the client API routers and shards call
//! ([`service`]: commands, linearizable reads, incremental routing tables, a watch stream of catalog
//! versions, membership changes), the replica-group arbiter that names each shard's primary and
//! term from its members' heartbeats ([`arbiter`]), the server's Prometheus metrics ([`metrics`]:
//! Raft, catalog sizes, API and peer-RPC latency), and the process entry point `shoal configsvr`
//! ([`server`]). Its clients (routers, shards, admin tools) use `shoal_cluster::config_client`,
//! which speaks only `config.proto` and `shoal_proto::catalog`.
//!
//! ```text
//!  router/shard --Config gRPC--> service --client_write / ensure_linearizable--> raft (openraft)
//!                                  |  follower: forwards to the leader once        |  ConfigRaft gRPC
//!                                  +<-- CatalogState (watch of versions) <-- state machine <-- peers
//! ```
//!
//! Must not: depend on `shard`, `router` or `query`; shard-key bounds are opaque order-preserving
//! bytes here.

#![forbid(unsafe_code)]

#[cfg(feature = "server")]
pub mod arbiter;
pub mod catalog;
pub mod codec;
pub mod error;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod raft;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod service;

/// A config server's Raft node id.
pub type NodeId = u64;
