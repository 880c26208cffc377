//! The config service: the single source of truth for the cluster's shape.
//!
//! Owns: the catalog state machine ([`catalog`]: pure, I/O-free `Catalog::apply`), the Raft group
//! of config servers ([`raft`]: openraft with a fjall log store and the catalog as its state
//! machine, peer RPCs over gRPC), the client API routers and shards call
//! ([`service`]: commands, linearizable reads, incremental routing tables, a watch stream of catalog
//! versions, membership changes), a client for that API ([`client`]), and the process entry point
//! `shoal configsvr` ([`server`]).
//!
//! ```text
//!  router/shard --Config gRPC--> service --client_write / ensure_linearizable--> raft (openraft)
//!                                  |  follower: forwards to the leader once        |  ConfigRaft gRPC
//!                                  +<-- CatalogState (watch of versions) <-- state machine <-- peers
//! ```
//!
//! Must not: depend on `shard`, `router` or `query`; shard-key bounds are opaque order-preserving
//! bytes here.

pub mod catalog;
pub mod client;
pub mod codec;
pub mod error;
pub mod raft;
pub mod server;
pub mod service;
