//! The catalog reads the replication layer and the client API make beyond `ClusterCatalog::apply`, in
//! one place, so a change of the catalog's read API touches only this file: the version, and the
//! answers to `config.proto`'s narrow queries ([`answer`]), encoded as `shoal_proto::catalog::wire`
//! says (the contract between processes, independent of the Raft log's encoding).

use shoal_proto::catalog::wire::{self, WireError};
use shoal_proto::config::catalog_query::What;
use shoal_proto::config::{CatalogQuery, RoutingTableQuery};

use super::{ChunkVersion, ClusterCatalog, ClusterCatalogView, Collection, Epoch, Parts, Shard};
pub use crate::catalog::{RoutingAnswer, RoutingSince};
use shoal_proto::config::CatalogPart;

/// The catalog's version counter (grows with every change).
pub fn version(catalog: &ClusterCatalog) -> u64 {
    catalog.version()
}

/// The routing table of `ns`, whole or incrementally after `since`.
pub fn routing_table(catalog: &ClusterCatalog, ns: &str, since: Option<RoutingSince>) -> RoutingAnswer {
    match since {
        None => RoutingAnswer::Full(catalog.routing_table(ns)),
        Some(s) => RoutingAnswer::Changes(catalog.chunks_since(ns, s.epoch, s.version)),
    }
}

/// Queries one request may carry (the answers are built under the state machine's read lock).
pub const QUERIES_PER_REQUEST_MAX: usize = 64;

/// A query the service cannot answer: the client sent something this version does not know.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{got} catalog queries in one request; at most {QUERIES_PER_REQUEST_MAX}")]
    TooMany { got: usize },
    #[error("a catalog query names nothing to read (a client newer than this config server?)")]
    Empty,
    #[error("routing_table query of {ns}: epoch must be 12 bytes, got {len}")]
    BadEpoch { ns: String, len: usize },
    #[error(transparent)]
    Encode(#[from] WireError),
}

/// The answers to `queries`, in order, all from the same `catalog`.
pub fn answer_all(catalog: &ClusterCatalog, queries: &[CatalogQuery]) -> Result<Vec<Vec<u8>>, QueryError> {
    if queries.len() > QUERIES_PER_REQUEST_MAX {
        return Err(QueryError::TooMany { got: queries.len() });
    }
    queries.iter().map(|q| answer(catalog, q)).collect()
}

/// The answer to `query`, encoded; the type of each answer is listed beside its query in
/// `config.proto`.
pub fn answer(catalog: &ClusterCatalog, query: &CatalogQuery) -> Result<Vec<u8>, QueryError> {
    let what = query.what.as_ref().ok_or(QueryError::Empty)?;
    Ok(match what {
        What::Shards(_) => wire::encode(&catalog.shards().values().collect::<Vec<&Shard>>())?,
        What::Shard(id) => wire::encode(&catalog.shard(id))?,
        What::Databases(_) => wire::encode(&catalog.databases().values().collect::<Vec<_>>())?,
        What::Database(name) => wire::encode(&catalog.database(name))?,
        What::Collection(ns) => wire::encode(&catalog.collection(ns))?,
        What::CollectionsIn(db) => wire::encode(&collections_in(catalog, db))?,
        What::Settings(_) => wire::encode(catalog.settings())?,
        What::ZoneRanges(ns) => wire::encode(catalog.zone_ranges(ns))?,
        What::RoutingTable(q) => wire::encode(&routing_table(catalog, &q.ns, since(q)?))?,
        What::View(q) => wire::encode(&view(catalog, Parts::from_wire(&q.parts)))?,
        What::Security(_) => wire::encode(catalog.security())?,
    })
}

/// The named `parts` of the catalog.
pub fn view(catalog: &ClusterCatalog, parts: Parts) -> ClusterCatalogView {
    let mut view = ClusterCatalogView::new(catalog.now_ms(), catalog.cluster_id(), catalog.balancer_rounds().clone());
    if parts.has(CatalogPart::Shards) {
        view = view.with_shards(catalog.shards().clone());
    }
    if parts.has(CatalogPart::Databases) {
        view = view.with_databases(catalog.databases().clone());
    }
    if parts.has(CatalogPart::Collections) {
        view = view.with_collections(catalog.collections().clone());
    }
    if parts.has(CatalogPart::Zones) {
        view = view.with_zone_ranges(catalog.all_zone_ranges().clone());
    }
    if parts.has(CatalogPart::Settings) {
        view = view.with_settings(catalog.settings().clone());
    }
    if parts.has(CatalogPart::Leases) {
        view = view.with_leases(catalog.leases().iter().map(|(n, l)| (n.clone(), l.clone())).collect());
    }
    if parts.has(CatalogPart::Changelog) {
        view = view.with_changelog(catalog.changelog().entries().cloned().collect());
    }
    if parts.has(CatalogPart::Actionlog) {
        view = view.with_actionlog(catalog.actionlog().entries().cloned().collect());
    }
    view
}

fn collections_in<'a>(catalog: &'a ClusterCatalog, db: &str) -> Vec<&'a Collection> {
    let prefix = format!("{db}.");
    catalog
        .collections()
        .range(prefix.clone()..)
        .take_while(|(ns, _)| ns.starts_with(&prefix))
        .map(|(_, c)| c)
        .collect()
}

fn since(q: &RoutingTableQuery) -> Result<Option<RoutingSince>, QueryError> {
    let Some(s) = &q.since else { return Ok(None) };
    let epoch: [u8; 12] =
        s.epoch.as_ref().try_into().map_err(|_| QueryError::BadEpoch { ns: q.ns.clone(), len: s.epoch.len() })?;
    Ok(Some(RoutingSince { epoch: Epoch(epoch), version: ChunkVersion { major: s.major, minor: s.minor } }))
}
