//! The catalog reads the replication layer and the API make beyond `Catalog::apply`, in one
//! place, so a change of the catalog's read API touches only this file.

use serde::{Deserialize, Serialize};

use super::Catalog;
use crate::catalog::{ChangedChunks, ChunkVersion, Epoch, RoutingTable};

/// The catalog's version counter (grows with every change).
pub fn version(catalog: &Catalog) -> u64 {
    catalog.version()
}

/// The routing-table version a router has cached (its incremental refresh point).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingSince {
    pub epoch: Epoch,
    pub version: ChunkVersion,
}

/// The answer of the `RoutingTable` RPC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RoutingAnswer {
    /// The whole table; `None` if the collection is not sharded.
    Full(Option<RoutingTable>),
    /// The chunks changed after the cached version (or why the cache must be dropped).
    Changes(ChangedChunks),
}

/// The routing table of `ns`, whole or incrementally after `since`.
pub fn routing_table(catalog: &Catalog, ns: &str, since: Option<RoutingSince>) -> RoutingAnswer {
    match since {
        None => RoutingAnswer::Full(catalog.routing_table(ns)),
        Some(s) => RoutingAnswer::Changes(catalog.chunks_since(ns, s.epoch, s.version)),
    }
}
