//! The catalog reads the replication layer and the API make beyond `Catalog::apply`, in one
//! place, so a change of the catalog's read API touches only this file.

use super::Catalog;
pub use crate::catalog::{RoutingAnswer, RoutingSince};

/// The catalog's version counter (grows with every change).
pub fn version(catalog: &Catalog) -> u64 {
    catalog.version()
}

/// The routing table of `ns`, whole or incrementally after `since`.
pub fn routing_table(catalog: &Catalog, ns: &str, since: Option<RoutingSince>) -> RoutingAnswer {
    match since {
        None => RoutingAnswer::Full(catalog.routing_table(ns)),
        Some(s) => RoutingAnswer::Changes(catalog.chunks_since(ns, s.epoch, s.version)),
    }
}
