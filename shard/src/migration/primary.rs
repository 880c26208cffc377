//! movePrimary: the database's primary (donor) copies the database's unsharded collections to
//! another shard (recipient) and makes it the primary in the catalog.
//!
//! ```text
//!  router            donor (current primary)                        recipient            catalog
//!    |--MovePrimary-->| one move per db; linearizable read: primary is me, `to` exists
//!    |                | gates.enter(db): writes/DDL routed as unsharded wait (reads go on)
//!    |                | unsharded = local colls of db the catalog does not list as sharded
//!    |                |-- ClonePrimaryBatch(first: replace copy) ->| create, upsert by _id,
//!    |                |-- ClonePrimaryBatch* ---------------------->|   durable, then ack
//!    |                |------------------------------------------ MovePrimary (last_mod+1) ->|
//!    |                | refresh db entry (now "not primary")
//!    |                | leave section: waiting writes fail StaleDbVersion, routers retry on `to`
//!    |                | wait (bounded) for reads pinned before the commit; drop local copies
//!    |<-- ok ---------|
//!  failure before the commit: leave section ── ClonePrimaryAbort ──> recipient drops the clones
//! ```
//!
//! Nothing is persisted: the catalog commit is the only point of no return. Crash windows not
//! covered:
//! - the donor dies mid-clone (or its abort call is lost): the recipient keeps partial copies of
//!   collections it is not primary for. Requests never see them (routers send them only to the
//!   primary, with the database version), and the next movePrimary of that database to that
//!   shard replaces them (`first` drops an existing copy), but nothing else cleans them: a known
//!   gap (they show in that shard's own listCollections/listDatabases).
//! - the donor dies after the commit, before dropping its copies: they stay as unreachable
//!   orphans on the old primary, a known gap of the same kind.
//! - the commit's answer is lost and the catalog stays unreachable: the donor keeps both copies
//!   and answers an error; whichever shard the catalog names is the primary, the other's copy
//!   is an orphan as above.
//! - a shardCollection of one of the database's collections that commits between the donor's
//!   last catalog read and its commit would have its data dropped from the donor (MongoDB takes
//!   a database DDL lock; Shoal has none yet).
//!
//! Must not: touch sharded collections, or delete anything before the catalog names the
//! recipient primary (donor) / while this shard is the primary (recipient).

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::Document;
use bytes::Bytes;
use shoal_cluster::config_client::{ClientError, ConfigClient};
use shoal_proto::catalog::Command;
use shoal_proto::shard::migration_client::MigrationClient;
use shoal_proto::shard::{ClonePrimaryAbortRequest, ClonePrimaryBatchRequest, MovePrimaryRequest};
use shoal_proto::{ErrorCode, Namespace};
use tonic::transport::Channel;

use super::mods::{BATCH_BYTES_MAX, BATCH_DOCS_MAX};
use super::outcome::{Commit, write_then_verify};
use super::transfer::{peer_err, reply_ok};
use super::{
    CATALOG_ATTEMPTS_MAX, CRITICAL_SECTION_ENTER_WAIT_MS, MigrationError, Migrations, backoff, peer_client,
    shard_endpoint,
};
use crate::error::ExecError;
use crate::sharding::db_version::KnownDb;
use crate::store::Store;
use crate::store::local_catalog::CollectionInfo;

/// How long the donor waits, after the commit, for reads admitted before it to finish before it
/// drops its copies (a read still running then sees the collection vanish).
pub const READS_DRAIN_WAIT_MS: u64 = 10_000;
const READS_DRAIN_POLL_MS: u64 = 20;

/// Databases with a movePrimary running on this shard (as donor): one at a time per database.
#[derive(Default)]
pub struct PrimaryMoves {
    running: Mutex<HashSet<String>>,
}

struct Claim<'a> {
    moves: &'a PrimaryMoves,
    db: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.moves.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.db);
    }
}

impl PrimaryMoves {
    fn claim(&self, db: &str) -> Result<Claim<'_>, MigrationError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if !running.insert(db.to_owned()) {
            return Err(MigrationError::Busy(format!("movePrimary of {db}")));
        }
        Ok(Claim { moves: self, db: db.to_owned() })
    }
}

fn refused(code: ErrorCode, message: impl Into<String>) -> MigrationError {
    MigrationError::refused(code, message)
}

/// One narrow catalog read, retried with backoff up to [`CATALOG_ATTEMPTS_MAX`] times.
async fn read_catalog<T, F, Fut>(read: F) -> Result<T, MigrationError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut last = String::new();
    for attempt in 0..CATALOG_ATTEMPTS_MAX {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(backoff(attempt)).await;
    }
    Err(MigrationError::CatalogUnreachable(last))
}

/// The donor's run. Answers once the catalog names `to` primary and the local copies are gone,
/// or once a failure before the commit was undone.
pub async fn move_primary(
    mig: &Arc<Migrations>,
    moves: &PrimaryMoves,
    req: MovePrimaryRequest,
) -> Result<(), MigrationError> {
    let sharding = &mig.node.sharding;
    let me = sharding.shard_id().to_owned();
    let catalog =
        sharding.catalog().ok_or_else(|| refused(ErrorCode::IllegalOperation, "this shard is not in a cluster"))?;
    shoal_proto::namespace::validate_db(&req.db).map_err(|e| refused(ErrorCode::InvalidNamespace, e.to_string()))?;
    let _claim = moves.claim(&req.db)?;
    let db = read_catalog(|| catalog.database(&req.db, true))
        .await?
        .ok_or_else(|| refused(ErrorCode::NamespaceNotFound, format!("Database {} not found", req.db)))?;
    if db.primary == req.to_shard {
        return Ok(());
    }
    if db.primary != me {
        return Err(refused(
            ErrorCode::StaleDbVersion,
            format!("{me} is not the primary of {} (the catalog says {})", req.db, db.primary),
        ));
    }
    let to = read_catalog(|| catalog.shard(&req.to_shard, true)).await?;
    match &to {
        None => return Err(refused(ErrorCode::ShardNotFound, format!("Shard {} not found", req.to_shard))),
        Some(s) if s.is_draining() => {
            return Err(refused(ErrorCode::IllegalOperation, format!("shard {} is draining", req.to_shard)));
        }
        Some(_) => {}
    }
    let mut peer = peer_client(&shard_endpoint(to.as_ref(), &req.to_shard)?)?;
    let started = Instant::now();
    let wait = Duration::from_millis(CRITICAL_SECTION_ENTER_WAIT_MS);
    let section = tokio::time::timeout(wait, sharding.gates.enter(&req.db))
        .await
        .map_err(|_| MigrationError::SectionTimeout { ns: req.db.clone(), ms: CRITICAL_SECTION_ENTER_WAIT_MS })?;
    // Read again inside the section: a shardCollection may have committed since the first read.
    let sharded = read_catalog(|| catalog.collections_in(&req.db, true)).await?;
    let colls: Vec<Arc<CollectionInfo>> = mig
        .node
        .store
        .collections_in(&req.db)
        .into_iter()
        .filter(|c| !sharded.iter().any(|s| s.ns == c.full_name()))
        .collect();
    tracing::info!(db = %req.db, to = %req.to_shard, collections = colls.len(), "movePrimary: cloning");
    let cloned = match clone_all(&mig.node.store, &mut peer, &req, &colls).await {
        Ok(n) => n,
        Err(e) => {
            drop(section);
            abort(&mut peer, &req, &colls).await;
            return Err(e);
        }
    };
    match commit(catalog, &req.db, &req.to_shard).await {
        Commit::Committed => {}
        Commit::Refused(e) => {
            drop(section);
            abort(&mut peer, &req, &colls).await;
            return Err(e);
        }
        Commit::Unknown(e) => {
            sharding.forget_database_version(&req.db);
            drop(section);
            return Err(e);
        }
    }
    if let Err(e) = sharding.refresh_database(&req.db).await {
        // Forgotten, the entry is reloaded by the next request that carries a database version.
        tracing::warn!(db = %req.db, error = %e, "refresh after movePrimary failed");
        sharding.forget_database_version(&req.db);
    }
    drop(section);
    tracing::info!(db = %req.db, to = %req.to_shard, docs = cloned, ms = started.elapsed().as_millis() as u64, "movePrimary committed");
    drop_local_copies(mig, &colls).await;
    Ok(())
}

/// Clones every collection in bounded batches; answers the number of documents sent.
async fn clone_all(
    store: &Arc<Store>,
    peer: &mut MigrationClient<Channel>,
    req: &MovePrimaryRequest,
    colls: &[Arc<CollectionInfo>],
) -> Result<u64, MigrationError> {
    let mut sent = 0u64;
    for coll in colls {
        let options = coll.options.to_vec().map_err(|e| refused(ErrorCode::InternalError, e.to_string()))?;
        let (mut after, mut first) = (None, true);
        loop {
            let (s, c) = (Arc::clone(store), Arc::clone(coll));
            let (documents, next) = tokio::task::spawn_blocking(move || read_batch(&s, &c, after)).await??;
            sent += documents.len() as u64;
            let batch = ClonePrimaryBatchRequest {
                request_id: req.request_id.clone(),
                db: req.db.clone(),
                coll: coll.ns.coll.clone(),
                options: options.clone().into(),
                first,
                documents,
                sessions: Vec::new(),
                indexes: if first {
                    crate::store::indexes::encode_listings(&coll.indexes).into()
                } else {
                    Bytes::new()
                },
            };
            let reply = peer.clone_primary_batch(batch).await.map_err(|e| peer_err(&req.to_shard, e))?.into_inner();
            reply_ok(&req.to_shard, reply.error)?;
            first = false;
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        // Writes to the database wait, so the records are complete: a write retried at the new
        // primary is answered from them.
        for sessions in super::transfer::session_batches(store, &coll.full_name()).await? {
            let batch = ClonePrimaryBatchRequest {
                request_id: req.request_id.clone(),
                db: req.db.clone(),
                coll: coll.ns.coll.clone(),
                options: options.clone().into(),
                first: false,
                documents: Vec::new(),
                sessions,
                indexes: Bytes::new(),
            };
            let reply = peer.clone_primary_batch(batch).await.map_err(|e| peer_err(&req.to_shard, e))?.into_inner();
            reply_ok(&req.to_shard, reply.error)?;
        }
    }
    Ok(sent)
}

/// One batch of `coll`'s documents after storage key `after`; where the next read starts.
fn read_batch(
    store: &Store,
    coll: &CollectionInfo,
    after: Option<Bytes>,
) -> Result<(Vec<Bytes>, Option<Bytes>), MigrationError> {
    let lower = after.map_or(Bound::Unbounded, |k| Bound::Excluded(k.to_vec()));
    let (mut docs, mut bytes) = (Vec::new(), 0usize);
    for kv in store.scan(coll, lower, Bound::Unbounded, false) {
        let (k, raw) = kv?;
        bytes += raw.len();
        docs.push(raw);
        if docs.len() >= BATCH_DOCS_MAX || bytes >= BATCH_BYTES_MAX {
            return Ok((docs, Some(k)));
        }
    }
    Ok((docs, None))
}

async fn commit(catalog: &ConfigClient, db: &str, to: &str) -> Commit {
    let cmd = Command::MovePrimary { name: db.to_owned(), to: to.to_owned() };
    // Committed when the catalog names `to` the database's primary.
    write_then_verify(catalog, &cmd, "movePrimary", || async {
        let found = read_catalog(|| catalog.database(db, true)).await?;
        Ok(found.is_some_and(|d| d.primary == to))
    })
    .await
}

/// Best effort: the recipient drops what it cloned (see the module's crash windows).
async fn abort(peer: &mut MigrationClient<Channel>, req: &MovePrimaryRequest, colls: &[Arc<CollectionInfo>]) {
    let abort = ClonePrimaryAbortRequest {
        request_id: req.request_id.clone(),
        db: req.db.clone(),
        collections: colls.iter().map(|c| c.ns.coll.clone()).collect(),
    };
    match peer.clone_primary_abort(abort).await.map(|r| r.into_inner().error) {
        Ok(None) => tracing::info!(db = %req.db, "movePrimary aborted; the recipient dropped its clones"),
        Ok(Some(e)) => tracing::warn!(db = %req.db, error = %e.errmsg, "recipient refused the movePrimary abort"),
        Err(e) => tracing::warn!(db = %req.db, error = %e, "recipient unreachable for the movePrimary abort"),
    }
}

/// After the commit: waits (bounded) for reads admitted before it, then drops the copies.
async fn drop_local_copies(mig: &Migrations, colls: &[Arc<CollectionInfo>]) {
    let node = &mig.node;
    let seq = node.cursors.pin_seq();
    let deadline = Instant::now() + Duration::from_millis(READS_DRAIN_WAIT_MS);
    while colls.iter().any(|c| node.cursors.pinned_at_or_before(&c.full_name(), seq)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(READS_DRAIN_POLL_MS)).await;
    }
    let (store, list) = (Arc::clone(&node.store), colls.to_vec());
    let dropped = tokio::task::spawn_blocking(move || {
        store.write(|txn| {
            for c in &list {
                if let Some(current) = txn.collection(&c.full_name()).filter(|cur| cur.uuid == c.uuid) {
                    txn.drop_collection(&current)?;
                }
            }
            Ok(())
        })
    })
    .await;
    match dropped {
        Ok(Ok(_)) => {
            for c in colls {
                node.sharding.forget(&c.full_name());
            }
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "dropping the moved collections failed; they stay as orphans"),
        Err(e) => tracing::warn!(error = %e, "dropping the moved collections failed; they stay as orphans"),
    }
}

/// Recipient: refuses if this shard is the database's primary (its collections are live data).
async fn not_primary_here(mig: &Migrations, db: &str) -> Result<(), MigrationError> {
    match mig.node.sharding.refresh_database(db).await? {
        KnownDb::Present { primary_here: true, .. } => Err(refused(
            ErrorCode::IllegalOperation,
            format!("this shard is the primary of {db}: its collections are not a movePrimary's to replace"),
        )),
        _ => Ok(()),
    }
}

/// Recipient `ClonePrimaryBatch`: creates (on `first`: replaces) the collection and upserts the
/// documents by `_id`; acked once durable.
pub async fn clone_batch(mig: &Migrations, req: ClonePrimaryBatchRequest) -> Result<(), MigrationError> {
    let ns = Namespace::parse(&format!("{}.{}", req.db, req.coll))
        .map_err(|e| refused(ErrorCode::InvalidNamespace, e.to_string()))?;
    if req.first {
        not_primary_here(mig, &req.db).await?;
    }
    let options = if req.options.is_empty() {
        Document::new()
    } else {
        Document::from_reader(&mut &req.options[..]).map_err(ExecError::from)?
    };
    let mut docs = Vec::with_capacity(req.documents.len());
    for d in &req.documents {
        let raw = bson::RawDocumentBuf::from_bytes(d.to_vec()).map_err(ExecError::from)?;
        let id = raw
            .get("_id")
            .ok()
            .flatten()
            .and_then(|v| bson::Bson::try_from(v).ok())
            .ok_or_else(|| refused(ErrorCode::BadValue, "a cloned document has no _id"))?;
        docs.push((id, raw));
    }
    let sessions: Vec<(Bytes, Bytes)> = req.sessions.into_iter().map(|s| (s.key, s.value)).collect();
    let indexes = crate::store::indexes::decode_listings(&req.indexes).map_err(ExecError::from)?;
    let (store, first, n) = (Arc::clone(&mig.node.store), req.first, docs.len());
    let ((), seq) = tokio::task::spawn_blocking(move || {
        store.write(|txn| {
            txn.set_from_migrate(true);
            if first && let Some(old) = txn.collection(&ns.to_string()) {
                txn.drop_collection(&old)?;
            }
            let (coll, _) = txn.ensure_collection(&ns, options)?;
            txn.ensure_indexes(&coll, indexes)?;
            for (id, doc) in &docs {
                if txn.get(&coll, id)?.is_some() {
                    txn.update(&coll, id, doc)?;
                } else {
                    txn.insert(&coll, id, doc)?;
                }
            }
            crate::exec::retry::merge(txn, &sessions)?;
            Ok(())
        })
    })
    .await??;
    debug_assert!(seq <= mig.node.store.position().seq);
    super::majority_committed(&mig.node).await?;
    tracing::debug!(db = %req.db, coll = %req.coll, docs = n, first, "movePrimary batch majority-committed");
    Ok(())
}

/// Recipient `ClonePrimaryAbort`: drops the listed collections, unless this shard became the
/// primary after all.
pub async fn clone_abort(mig: &Migrations, req: ClonePrimaryAbortRequest) -> Result<(), MigrationError> {
    not_primary_here(mig, &req.db).await?;
    let mut names = Vec::with_capacity(req.collections.len());
    for c in &req.collections {
        names.push(format!("{}.{c}", req.db));
    }
    let store = Arc::clone(&mig.node.store);
    let list = names.clone();
    tokio::task::spawn_blocking(move || {
        store.write(|txn| {
            for ns in &list {
                if let Some(c) = txn.collection(ns) {
                    txn.drop_collection(&c)?;
                }
            }
            Ok(())
        })
    })
    .await??;
    for ns in &names {
        mig.node.sharding.forget(ns);
    }
    tracing::info!(db = %req.db, collections = names.len(), "movePrimary aborted: clones dropped");
    Ok(())
}
