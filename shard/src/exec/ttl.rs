//! The TTL monitor: on a primary (or a member outside any group), every pass deletes the
//! documents of each collection whose TTL index field holds a date (or an array with a date)
//! older than `expireAfterSeconds`, as MongoDB's `TTLMonitor` does. Deletions are ordinary
//! logged deletes, so members apply them; documents without a date in the field never expire.
//!
//! A pass reads expired `_id`s through the index (dates sort together, so the expired ones are
//! one key range) and deletes them in batches of [`TTL_DELETE_BATCH`], re-checking each document
//! under the writer lock (a document updated meanwhile to a fresh date is kept).
//!
//! Must not: run on secondaries (they receive the primary's deletes).

use std::ops::ControlFlow;
use std::sync::Arc;

use bson::{Bson, DateTime, doc};
use shoal_query::filter::Filter;

use crate::error::ExecResult;
use crate::exec::plan::{self, AccessPath};
use crate::exec::scan::for_each_match;
use crate::store::Store;

/// Documents deleted per writer-lock hold.
pub const TTL_DELETE_BATCH: usize = 500;

/// One pass over every TTL index at time `now`; returns how many documents it deleted.
pub fn pass(store: &Store, now: DateTime) -> ExecResult<u64> {
    let mut deleted = 0u64;
    for coll in store.all_collections() {
        for spec in coll.ready_indexes().filter(|s| s.expire_after_secs.is_some()) {
            let Some(secs) = spec.expire_after_secs else { continue };
            let Some((field, _)) = spec.pattern.fields.first() else { continue };
            let cutoff = DateTime::from_millis(now.timestamp_millis().saturating_sub(secs.saturating_mul(1000)));
            let filter_doc = doc! { field.clone(): { "$lt": cutoff } };
            let filter = Filter::parse(&filter_doc)?;
            let hint = Bson::String(spec.name.clone());
            let chosen = plan::plan(&coll, &filter_doc, None, Some(&hint))?;
            loop {
                let ids = expired_ids(store, &coll, &chosen.path, &filter)?;
                if ids.is_empty() {
                    break;
                }
                let done = ids.len() < TTL_DELETE_BATCH;
                let (n, _) = store.write(|txn| {
                    let mut n = 0u64;
                    for id in &ids {
                        let Some(raw) = txn.get(&coll, id)? else { continue };
                        let doc = bson::Document::from_reader(&mut &raw[..]).map_err(|e| {
                            crate::storage::StorageError::Corrupt { space: "documents", detail: e.to_string() }
                        })?;
                        if filter.matches(&doc) {
                            txn.delete(&coll, id)?;
                            n += 1;
                        }
                    }
                    Ok(n)
                })?;
                deleted += n;
                if done || n == 0 {
                    break;
                }
            }
        }
    }
    Ok(deleted)
}

fn expired_ids(
    store: &Store,
    coll: &Arc<crate::store::local_catalog::CollectionInfo>,
    path: &AccessPath,
    filter: &Filter,
) -> ExecResult<Vec<Bson>> {
    let mut ids = Vec::new();
    for_each_match(store, None, coll, path, Some(filter), None, false, |m| {
        ids.push(m.doc.get("_id").cloned().unwrap_or(Bson::Null));
        Ok(if ids.len() >= TTL_DELETE_BATCH { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    })?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use bson::doc;
    use shoal_proto::shard::CommandRequest;

    use super::*;
    use crate::exec::{self, Request};

    #[test]
    fn expired_documents_are_deleted_and_others_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.path().to_path_buf());
        let e = crate::open_node(&config).expect("open");
        let now = DateTime::now();
        let old = DateTime::from_millis(now.timestamp_millis() - 120_000);
        let docs = vec![
            doc! {"_id": 1, "at": old},
            doc! {"_id": 2, "at": now},
            doc! {"_id": 3, "at": "not a date"},
            doc! {"_id": 4, "at": [now, old]},
            doc! {"_id": 5},
        ];
        let run = |body: bson::Document, f: fn(&exec::Node, &Request<'_>) -> ExecResult<(bson::Document, u64)>| {
            let r = CommandRequest { db: "db".into(), body: body.to_vec().expect("bson").into(), ..Default::default() };
            f(&e, &Request::parse(&r).expect("parse")).expect("command")
        };
        let r = CommandRequest {
            db: "db".into(),
            body: doc! {"insert": "c", "documents": docs}.to_vec().expect("bson").into(),
            ..Default::default()
        };
        exec::insert::run(&e, &Request::parse(&r).expect("parse")).expect("insert");
        run(
            doc! {"createIndexes": "c", "indexes": [{"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60}]},
            exec::indexes::create_indexes,
        );
        assert_eq!(pass(&e.store, now).expect("pass"), 2);
        let coll = e.store.collection("db.c").expect("coll");
        let left: Vec<i32> = e
            .store
            .scan(&coll, Bound::Unbounded, Bound::Unbounded, false)
            .map(|kv| {
                bson::Document::from_reader(&mut &kv.expect("kv").1[..]).expect("doc").get_i32("_id").expect("id")
            })
            .collect();
        assert_eq!(left, vec![2, 3, 5]);
    }
}
