//! The `config` database through the router: `find` on `config.shards`, `config.databases`,
//! `config.settings` and `config.version`, built from the catalog in MongoDB's document shapes
//! (`mongo-protocol.md` §5), then filtered, sorted, skipped, limited and projected with the
//! query crate. Other `config` collections come with the sharding issue.

use bson::{Bson, Document, doc};
use shoal_configsvr::catalog::{BalancerMode, Catalog, Command, Epoch};
use shoal_proto::ErrorCode;
use shoal_query::filter::Filter;
use shoal_query::projection::Projection;
use shoal_query::sort::{SortSpec, sort_documents};

use crate::cmd::forward::{self, BatchField};
use crate::cmd::sharding::shard_document;
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::RouterState;

/// `config` collections served from the catalog.
pub const SERVED: &[&str] = &["shards", "databases", "settings", "version"];

pub async fn find(state: &RouterState, cmd: &ClientCommand, coll: &str) -> HandlerResult {
    if !SERVED.contains(&coll) {
        return Err(CommandError::new(
            ErrorCode::NotImplemented,
            format!("config.{coll} is not available yet (served: {})", SERVED.join(", ")),
        ));
    }
    let body = Document::try_from(cmd.body.as_ref())?;
    let get_doc = |field: &str| -> Result<Document, CommandError> {
        match body.get(field) {
            None | Some(Bson::Null) => Ok(Document::new()),
            Some(Bson::Document(d)) => Ok(d.clone()),
            Some(_) => Err(CommandError::type_mismatch(format!(
                "BSON field 'FindCommandRequest.{field}' is the wrong type, expected type 'object'"
            ))),
        }
    };
    let filter = Filter::parse(&get_doc("filter")?)?;
    let sort = get_doc("sort")?;
    let projection = get_doc("projection")?;
    let number = |field: &str| {
        body.get(field).and_then(|v| match v {
            Bson::Int32(i) => Some(*i as i64),
            Bson::Int64(i) => Some(*i),
            Bson::Double(d) => Some(*d as i64),
            _ => None,
        })
    };
    let skip = number("skip").unwrap_or(0).max(0) as usize;
    let limit = number("limit").filter(|l| *l > 0).map(|l| l as usize);

    let catalog = state.catalog.read().await?;
    let mut docs: Vec<Document> = match coll {
        "shards" => catalog.shards().values().map(shard_document).collect(),
        "databases" => databases(&catalog),
        "settings" => settings(&catalog),
        _ => vec![doc! { "_id": 1, "clusterId": cluster_id(state, &catalog).await? }],
    };
    docs.retain(|d| filter.matches(d));
    if !sort.is_empty() {
        sort_documents(&mut docs, &SortSpec::parse(&sort)?);
    }
    let docs = docs.into_iter().skip(skip).take(limit.unwrap_or(usize::MAX));
    let projection = if projection.is_empty() { None } else { Some(Projection::parse(&projection)?) };
    let mut out = Vec::new();
    for d in docs {
        let d = match &projection {
            Some(p) => p.apply(&d)?,
            None => d,
        };
        out.push(bytes::Bytes::from(bson::RawDocumentBuf::try_from(&d)?.into_bytes()));
    }
    forward::cursor_reply(BatchField::First, &out, 0, &format!("config.{coll}"))
}

fn databases(catalog: &Catalog) -> Vec<Document> {
    catalog
        .databases()
        .values()
        .map(|d| {
            doc! {
                "_id": &d.name,
                "primary": &d.primary,
                "partitioned": false,
                "version": {
                    "uuid": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: d.version.uuid.as_bytes().to_vec() },
                    "timestamp": bson::Timestamp { time: d.version.timestamp.secs, increment: d.version.timestamp.inc },
                    "lastMod": d.version.last_mod as i32,
                },
            }
        })
        .collect()
}

fn settings(catalog: &Catalog) -> Vec<Document> {
    let s = catalog.settings();
    let mut balancer = doc! {
        "_id": "balancer",
        "mode": if s.balancer_mode == BalancerMode::Full { "full" } else { "off" },
        "stopped": s.balancer_mode == BalancerMode::Off,
    };
    if let Some(w) = &s.active_window {
        balancer.insert("activeWindow", doc! { "start": &w.start, "stop": &w.stop });
    }
    vec![
        balancer,
        doc! { "_id": "chunksize", "value": s.chunk_size_mib as i32 },
        doc! { "_id": "autosplit", "enabled": s.autosplit },
        doc! { "_id": "automerge", "enabled": s.automerge },
    ]
}

/// The cluster id, set in the catalog by the first router that needs it (the first write wins,
/// so every router reports the same id).
async fn cluster_id(state: &RouterState, catalog: &Catalog) -> Result<bson::oid::ObjectId, CommandError> {
    if let Some(Epoch(bytes)) = catalog.cluster_id() {
        return Ok(bson::oid::ObjectId::from_bytes(bytes));
    }
    let proposed = bson::oid::ObjectId::new().bytes();
    state.catalog.write(&Command::InitCluster { cluster_id: Epoch(proposed) }).await?;
    let catalog = state.catalog.read().await?;
    match catalog.cluster_id() {
        Some(Epoch(bytes)) => Ok(bson::oid::ObjectId::from_bytes(bytes)),
        None => Err(CommandError::new(ErrorCode::InternalError, "the catalog did not record a cluster id")),
    }
}
