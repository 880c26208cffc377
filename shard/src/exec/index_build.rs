//! Building a secondary index on a primary while writes continue.
//!
//! 1. The spec joins the catalog as `building` (local): from then on every write maintains it.
//! 2. Existing documents are indexed in batches of [`BUILD_BATCH_DOCS`]: their `_id`s are read
//!    without the writer lock, then each batch takes the writer lock briefly and indexes the
//!    documents' *current* versions (a document written in between was indexed by its write; one
//!    deleted is skipped), so writers wait at most one batch.
//! 3. The commit marks it ready and logs one `createIndexes` entry; members build it on apply.
//!
//! A unique violation, a document that cannot be indexed, a step-down or `maxTimeMS` abandons the
//! build: the spec is removed (it was never logged) and its entries purged. A `dropIndexes`
//! during the build ends it with IndexBuildAborted.
//!
//! Must not: be used by secondaries (they build in one pass when applying the entry).

use std::ops::Bound;
use std::sync::Arc;

use bson::Bson;
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::exec::deadline;
use crate::store::Store;
use crate::store::indexes::IndexSpec;
use crate::store::local_catalog::CollectionInfo;

/// Documents indexed per writer-lock hold.
pub const BUILD_BATCH_DOCS: usize = 512;

/// Builds `spec` on `coll`; returns the write sequence to wait on for durability.
pub fn build(store: &Store, coll: &CollectionInfo, spec: IndexSpec) -> ExecResult<u64> {
    let name = spec.name.clone();
    let (spec, _) = store.write(|txn| txn.begin_index_build(coll, spec))?;
    tracing::info!(ns = %coll.full_name(), index = %name, "index build started");
    match populate(store, coll, &spec) {
        Ok(()) => {}
        Err(e) => {
            abandon(store, coll, &name);
            tracing::warn!(ns = %coll.full_name(), index = %name, error = %e.message, "index build abandoned");
            return Err(e);
        }
    }
    let (committed, seq) = store.write(|txn| {
        let still_there = txn.collection(&coll.full_name()).and_then(|c| c.index(&name).map(|s| s.ident));
        if still_there != Some(spec.ident) {
            return Ok(false);
        }
        txn.commit_index_build(coll, &name)?;
        Ok(true)
    })?;
    if !committed {
        return Err(ExecError::new(
            ErrorCode::IndexBuildAborted,
            format!("index build of '{name}' on {} was aborted: the index was dropped", coll.full_name()),
        ));
    }
    tracing::info!(ns = %coll.full_name(), index = %name, "index build committed");
    Ok(seq)
}

fn populate(store: &Store, coll: &CollectionInfo, spec: &Arc<IndexSpec>) -> ExecResult<()> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        deadline::check()?;
        let lower = after.take().map_or(Bound::Unbounded, Bound::Excluded);
        let mut ids: Vec<Bson> = Vec::with_capacity(BUILD_BATCH_DOCS);
        let mut last = None;
        for kv in store.scan(coll, lower, Bound::Unbounded, false).take(BUILD_BATCH_DOCS) {
            let (key, raw) = kv?;
            let id = bson::RawDocument::from_bytes(&raw)
                .ok()
                .and_then(|d| d.get("_id").ok().flatten())
                .and_then(|v| Bson::try_from(v).ok())
                .ok_or_else(|| ExecError::new(ErrorCode::InternalError, "a stored document has no _id"))?;
            ids.push(id);
            last = Some(key.to_vec());
        }
        if ids.is_empty() {
            return Ok(());
        }
        store.write(|txn| txn.index_existing(coll, spec.ident, &ids))?;
        match last {
            Some(k) if ids.len() == BUILD_BATCH_DOCS => after = Some(k),
            _ => return Ok(()),
        }
    }
}

/// Removes a failed build's spec (never logged, so unlogged removal is enough, and possible on
/// a member that just stepped down).
fn abandon(store: &Store, coll: &CollectionInfo, name: &str) {
    if let Err(e) = store.write_unlogged(|txn| txn.drop_index(coll, name, false)) {
        tracing::error!(ns = %coll.full_name(), index = %name, error = %e, "could not remove an abandoned index build");
    }
}
