//! Reads of the collections the router assembles itself: `find`, `aggregate`, `count` and
//! `distinct` on the `config` collections in [`SERVED`] and on `admin.system.users`/`roles`,
//! built from a cluster catalog view in MongoDB's document shapes (builders in [`super::docs`]),
//! and on `<db>.system.profile`, every shard's profiler entries
//! ([`crate::cmd::profile::documents`]); then filtered, sorted (`$natural` is the order they
//! were built in), skipped, limited, projected or run through a pipeline with the query crate.
//! Results larger than the requested batch wait in a buffered router cursor. Writes are in
//! [`super::write`].
//!
//! Must not: ask shards for anything but profiler entries (the rest comes from the catalog).

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{BalancerMode, ClusterCatalogView, Command, Epoch};
use shoal_proto::config::CatalogPart;
use shoal_query::aggregate::Pipeline;
use shoal_query::filter::Filter;
use shoal_query::order::compare_values;
use shoal_query::path::lookup_unwound;
use shoal_query::projection::Projection;
use shoal_query::sort::{SortSpec, sort_documents};

use super::docs;
use crate::cmd::info::MONGODB_VERSION;
use crate::cmd::profile::PROFILE_COLLECTION;
use crate::cmd::sharding::shard_document;
use crate::command::Command as ClientCommand;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::reply::{self, BatchField};
use crate::state::{ConnContext, RouterState};

/// `config` collections served from the catalog.
pub const SERVED: &[&str] = &[
    "shards",
    "databases",
    "settings",
    "version",
    "collections",
    "chunks",
    "tags",
    "changelog",
    "locks",
    "mongos",
    "actionlog",
];

/// Whether the router answers `db.coll` from the cluster catalog: the `config` collections and
/// `admin.system.users` / `admin.system.roles` (users and roles live in the catalog).
pub fn serves(db: &str, coll: &str) -> bool {
    db == super::NAME || (db == "admin" && SYSTEM_COLLECTIONS.contains(&coll)) || coll == PROFILE_COLLECTION
}

/// `admin` collections served from the catalog's users and roles.
pub const SYSTEM_COLLECTIONS: &[&str] = &["system.users", "system.roles"];

fn check_served(db: &str, coll: &str) -> Result<(), CommandError> {
    if db != super::NAME {
        return Ok(());
    }
    if SERVED.contains(&coll) || coll == PROFILE_COLLECTION {
        return Ok(());
    }
    Err(CommandError::new(
        ErrorCode::NotImplemented,
        format!("config.{coll} is not available through this router (served: {})", SERVED.join(", ")),
    ))
}

/// An optional document field of the command (`filter`, `sort`, `projection`, `query`).
fn get_doc(body: &Document, cmd: &str, field: &str) -> Result<Document, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(Document::new()),
        Some(Bson::Document(d)) => Ok(d.clone()),
        Some(_) => Err(CommandError::type_mismatch(format!(
            "BSON field '{cmd}.{field}' is the wrong type, expected type 'object'"
        ))),
    }
}

fn number(body: &Document, field: &str) -> Option<i64> {
    body.get(field).and_then(|v| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) => Some(*d as i64),
        _ => None,
    })
}

/// How a router-built result is handed out: `batch_size` documents first (all if `None`), the
/// rest through a buffered router cursor unless `single_batch`.
struct Batching {
    batch_size: Option<usize>,
    single_batch: bool,
}

fn batch_size(v: Option<&Bson>, cmd: &str) -> Result<Option<usize>, CommandError> {
    let n = match v {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) => *d as i64,
        Some(_) => return Err(CommandError::type_mismatch(format!("BSON field '{cmd}.batchSize' must be a number"))),
    };
    usize::try_from(n)
        .map(Some)
        .map_err(|_| CommandError::new(ErrorCode::BadValue, format!("batchSize must be non-negative, not {n}")))
}

fn cursor_reply(state: &RouterState, docs: Vec<Document>, ns: &str, batching: &Batching) -> HandlerResult {
    let mut out = std::collections::VecDeque::with_capacity(docs.len());
    for d in &docs {
        out.push_back(bytes::Bytes::from(bson::RawDocumentBuf::try_from(d)?.into_bytes()));
    }
    let ns = ns.to_owned();
    let first_len = batching.batch_size.unwrap_or(usize::MAX).min(out.len());
    let rest = out.split_off(first_len);
    let id = if rest.is_empty() || batching.single_batch {
        0
    } else {
        match state.cursors.register_buffered(ns.clone(), rest) {
            Ok(id) => id,
            // No room for another cursor: batchSize is advisory, so send the rest now.
            Err(rest) => {
                out.extend(rest);
                0
            }
        }
    };
    reply::cursor_reply(BatchField::First, out.make_contiguous(), id, &ns)
}

pub async fn find(state: &RouterState, conn: &ConnContext, cmd: &ClientCommand, coll: &str) -> HandlerResult {
    check_served(&cmd.db, coll)?;
    let body = Document::try_from(cmd.body.as_ref())?;
    let filter = Filter::parse(&get_doc(&body, "FindCommandRequest", "filter")?)?;
    let sort = get_doc(&body, "FindCommandRequest", "sort")?;
    let projection = get_doc(&body, "FindCommandRequest", "projection")?;
    let skip = number(&body, "skip").unwrap_or(0).max(0) as usize;
    // A negative limit is the legacy "single batch of |n|".
    let limit = number(&body, "limit").filter(|l| *l != 0).map(|l| l.unsigned_abs() as usize);
    let batching = Batching {
        batch_size: batch_size(body.get("batchSize"), "FindCommandRequest")?,
        single_batch: body.get_bool("singleBatch").unwrap_or(false) || number(&body, "limit").is_some_and(|l| l < 0),
    };

    let mut docs = documents(state, conn, &cmd.db, coll).await?;
    docs.retain(|d| filter.matches(d));
    // `{$natural: ±1}`: the order the documents were built in (for system.profile, by time).
    if let Some(natural) = sort.get("$natural").filter(|_| sort.len() == 1) {
        if number(&doc! { "n": natural.clone() }, "n").is_some_and(|n| n < 0) {
            docs.reverse();
        }
    } else if !sort.is_empty() {
        sort_documents(&mut docs, &SortSpec::parse(&sort)?);
    }
    let docs = docs.into_iter().skip(skip).take(limit.unwrap_or(usize::MAX));
    let projection = if projection.is_empty() { None } else { Some(Projection::parse(&projection)?) };
    let mut out = Vec::new();
    for d in docs {
        out.push(match &projection {
            Some(p) => p.apply(&d)?,
            None => d,
        });
    }
    cursor_reply(state, out, &format!("{}.{coll}", cmd.db), &batching)
}

pub async fn aggregate(state: &RouterState, conn: &ConnContext, cmd: &ClientCommand, coll: &str) -> HandlerResult {
    check_served(&cmd.db, coll)?;
    let body = Document::try_from(cmd.body.as_ref())?;
    let stages = match body.get("pipeline") {
        Some(Bson::Array(stages)) => stages,
        _ => {
            return Err(CommandError::type_mismatch(
                "BSON field 'aggregate.pipeline' is missing or the wrong type, expected type 'array'",
            ));
        }
    };
    let pipeline = Pipeline::parse(stages)?;
    let requested = match body.get("cursor") {
        Some(Bson::Document(c)) => c.get("batchSize"),
        _ => None,
    };
    let batching = Batching { batch_size: batch_size(requested, "aggregate.cursor")?, single_batch: false };
    let docs = documents(state, conn, &cmd.db, coll).await?;
    cursor_reply(state, pipeline.run(docs.into_iter())?, &format!("{}.{coll}", cmd.db), &batching)
}

/// `count` with `query`, `skip` and `limit`.
pub async fn count(state: &RouterState, conn: &ConnContext, cmd: &ClientCommand, coll: &str) -> HandlerResult {
    check_served(&cmd.db, coll)?;
    let body = Document::try_from(cmd.body.as_ref())?;
    let filter = Filter::parse(&get_doc(&body, "count", "query")?)?;
    let skip = number(&body, "skip").unwrap_or(0).max(0) as usize;
    let limit = number(&body, "limit").filter(|l| *l != 0).map(|l| l.unsigned_abs() as usize);
    let docs = documents(state, conn, &cmd.db, coll).await?;
    let n = docs.iter().filter(|d| filter.matches(d)).skip(skip).take(limit.unwrap_or(usize::MAX)).count();
    let mut out = bson::RawDocumentBuf::new();
    reply::append_count(&mut out, bson::cstr!("n"), i64::try_from(n).unwrap_or(i64::MAX));
    Ok(out)
}

/// `distinct` of `key` over the documents matching `query`, sorted, equal numbers counted once.
pub async fn distinct(state: &RouterState, conn: &ConnContext, cmd: &ClientCommand, coll: &str) -> HandlerResult {
    check_served(&cmd.db, coll)?;
    let body = Document::try_from(cmd.body.as_ref())?;
    let key = match body.get("key") {
        Some(Bson::String(k)) => k.clone(),
        _ => return Err(CommandError::type_mismatch("BSON field 'distinct.key' must be a string")),
    };
    let filter = Filter::parse(&get_doc(&body, "distinct", "query")?)?;
    let docs = documents(state, conn, &cmd.db, coll).await?;
    let mut seen = std::collections::HashSet::new();
    let mut values: Vec<Bson> = Vec::new();
    for d in docs.iter().filter(|d| filter.matches(d)) {
        for v in lookup_unwound(d, &key) {
            if seen.insert(shoal_query::keystring::encode(v)) {
                values.push(v.clone());
            }
        }
    }
    values.sort_by(compare_values);
    Ok(bson::RawDocumentBuf::try_from(&doc! { "values": values })?)
}

/// The parts of the catalog `config.<coll>` shows (bounds in logs and zones are decoded with the
/// collection's key pattern, hence `Collections` beside them).
fn parts_of(coll: &str) -> &'static [CatalogPart] {
    use CatalogPart as P;
    match coll {
        "shards" => &[P::Shards],
        "databases" => &[P::Databases],
        "settings" => &[P::Settings],
        "collections" | "chunks" => &[P::Collections],
        "tags" => &[P::Zones, P::Collections],
        "changelog" => &[P::Changelog, P::Collections],
        "actionlog" => &[P::Actionlog, P::Collections],
        "locks" => &[P::Leases],
        // `version` (the cluster id, which every view carries), `mongos` and the rest.
        _ => &[],
    }
}

/// Every document of `config.<coll>`, in `_id` order where the catalog keeps one.
async fn documents(
    state: &RouterState,
    conn: &ConnContext,
    db: &str,
    coll: &str,
) -> Result<Vec<Document>, CommandError> {
    if coll == PROFILE_COLLECTION {
        return crate::cmd::profile::documents(state, db).await;
    }
    if db != super::NAME {
        return crate::cmd::user_admin::system_documents(state, coll).await;
    }
    let catalog = state.catalog.view(parts_of(coll)).await?;
    Ok(match coll {
        "shards" => catalog.shards().values().map(shard_document).collect(),
        "databases" => databases(&catalog),
        "settings" => settings(&catalog),
        "version" => vec![doc! { "_id": 1, "clusterId": cluster_id(state, &catalog).await? }],
        "collections" => catalog.collections().values().map(docs::collection_document).collect(),
        "chunks" => catalog
            .collections()
            .values()
            .flat_map(|c| c.chunks.values().map(move |chunk| docs::chunk_document(c, chunk)))
            .collect(),
        "tags" => catalog
            .all_zone_ranges()
            .iter()
            .flat_map(|(ns, ranges)| {
                let pattern = catalog.collection(ns).map(|c| &c.key);
                ranges.iter().map(move |r| docs::zone_document(ns, pattern, r))
            })
            .collect(),
        "changelog" => catalog.changelog().iter().map(|e| docs::changelog_document(&catalog, e)).collect(),
        "locks" => {
            let now = catalog.now_ms();
            catalog.leases().iter().map(|(name, lease)| docs::lock_document(name, lease, now)).collect()
        }
        "mongos" => vec![mongos(state, conn)],
        "actionlog" => catalog.actionlog().iter().map(|e| docs::action_document(&catalog, e)).collect(),
        other => return check_served(super::NAME, other).map(|()| Vec::new()),
    })
}

/// The port is the connection's local one: the configured port may be 0 (any free port).
fn mongos(state: &RouterState, conn: &ConnContext) -> Document {
    let host = format!("{}:{}", crate::cmd::info::hostname(), conn.local.port());
    let now = bson::DateTime::now();
    docs::mongos_document(&host, now, state.started.elapsed().as_secs(), MONGODB_VERSION)
}

fn databases(catalog: &ClusterCatalogView) -> Vec<Document> {
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

fn settings(catalog: &ClusterCatalogView) -> Vec<Document> {
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
async fn cluster_id(state: &RouterState, catalog: &ClusterCatalogView) -> Result<bson::oid::ObjectId, CommandError> {
    if let Some(Epoch(bytes)) = catalog.cluster_id() {
        return Ok(bson::oid::ObjectId::from_bytes(bytes));
    }
    let proposed = bson::oid::ObjectId::new().bytes();
    state.catalog.write(&Command::InitCluster { cluster_id: Epoch(proposed) }).await?;
    let catalog = state.catalog.view(&[]).await?;
    match catalog.cluster_id() {
        Some(Epoch(bytes)) => Ok(bson::oid::ObjectId::from_bytes(bytes)),
        None => Err(CommandError::new(ErrorCode::InternalError, "the catalog did not record a cluster id")),
    }
}
