//! What a router and a shard share as clients of the cluster, with one owner each: the config
//! service's client ([`config_client`]: leader finding, bounded retries, the narrow catalog reads and
//! the catalog commands of `config.proto`), the channels every process opens to its peers
//! ([`net`]), routing tables loaded whole then incrementally ([`routing`]), and the single-flight
//! cache the router's and the shard's routing caches are built on ([`single_flight`]); with the
//! `pki` feature, the cluster's own CA and key files (`pki`).
//!
//! Must not: depend on `configsvr`, `shard` or `router`, or link openraft or fjall. It speaks
//! only the contract in `shoal_proto` (protobuf messages and the values of `shoal_proto::catalog`),
//! so a config server's internals can change without touching its clients.

#![forbid(unsafe_code)]

pub mod config_client;
pub mod net;
#[cfg(any(feature = "pki", test))]
pub mod pki;
pub mod routing;
pub mod single_flight;
