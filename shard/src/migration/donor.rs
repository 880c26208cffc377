//! The donor's run of one migration (see the protocol diagram in [`super`]): clone, catch up,
//! critical section, catalog commit, then the range deletion; on a failure before the commit,
//! the abort. Runs in its own task, so a router that goes away does not interrupt it.
//!
//! Must not: leave the critical section before the commit's outcome is known and this shard's
//! metadata reflects it (or is dropped), or commit before the final catch-up was acked.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_cluster::config_client::ConfigClient;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkBound, ChunkVersion, Detail, Epoch, Fencing};
use shoal_proto::shard::ReceiveStartRequest;
use shoal_proto::shard::migration_client::MigrationClient;
use tonic::transport::Channel;

use super::outcome::{Commit, commit, finish_committed, log_change, notify, refresh_or_forget};
use super::record::{Phase, Record, Side};
use super::throttle::Throttle;
use super::transfer::{catch_up, clone_batch, peer_err, ping, reply_ok, send, task_err};
use super::*;
use crate::sharding::CollectionMetadata;

/// How long `_waitForDelete` waits for the donor's range deletion.
pub const WAIT_FOR_DELETE_MAX_MS: u64 = 600_000;

/// What the router asked for.
#[derive(Debug, Clone)]
pub struct MoveRequest {
    pub request_id: String,
    pub ns: String,
    pub min: ChunkBound,
    pub max: ChunkBound,
    pub to: String,
    pub epoch: Epoch,
    pub expected_version: ChunkVersion,
    pub wait_for_delete: bool,
    /// The balancer's lease and token, passed to the catalog's commit (None: not fenced).
    pub fencing: Option<Fencing>,
    /// Admission control: pause while the foreground p99 is above this (0: off).
    pub latency_target_ms: u32,
}

/// Moves the range; answers the milliseconds it took.
pub async fn move_range(mig: Arc<Migrations>, req: MoveRequest) -> Result<u64, MigrationError> {
    let started = Instant::now();
    let sharding = &mig.node.sharding;
    let me = sharding.shard_id().to_owned();
    let catalog = sharding
        .catalog()
        .ok_or_else(|| MigrationError::refused(ErrorCode::IllegalOperation, "this shard is not in a cluster"))?;
    if req.to == me {
        return Err(MigrationError::refused(ErrorCode::IllegalOperation, format!("{me} already owns the range")));
    }
    sharding.refresh(&req.ns).await?;
    let Some(CollectionMetadata::Sharded(meta)) = sharding.metadata(&req.ns) else {
        return Err(MigrationError::refused(ErrorCode::NamespaceNotSharded, format!("{} is not sharded", req.ns)));
    };
    if meta.table.epoch != req.epoch {
        return Err(MigrationError::refused(ErrorCode::StaleEpoch, format!("{} was re-sharded", req.ns)));
    }
    let chunk = meta.table.chunks.iter().find(|c| c.min == req.min && c.max == req.max).ok_or_else(|| {
        MigrationError::refused(ErrorCode::StaleConfig, format!("no chunk [{}, {}) of {}", req.min, req.max, req.ns))
    })?;
    if chunk.shard != me || chunk.version != req.expected_version {
        return Err(MigrationError::refused(
            ErrorCode::StaleConfig,
            format!(
                "chunk [{}, {}) is {} on {}, not {} on {me}",
                req.min, req.max, chunk.version, chunk.shard, req.expected_version
            ),
        ));
    }
    let to = catalog
        .shard(&req.to, false)
        .await
        .map_err(|e| MigrationError::refused(ErrorCode::HostUnreachable, e.to_string()))?;
    let endpoint = shard_endpoint(to.as_ref(), &req.to)?;
    let record = Record {
        id: uuid::Uuid::new_v4().to_string(),
        ns: req.ns.clone(),
        uuid: meta.table.uuid,
        key: meta.ownership.key.iter().map(|f| (f.name.clone(), f.hashed)).collect(),
        min: req.min.clone(),
        max: req.max.clone(),
        from: me,
        to: req.to.clone(),
        epoch: req.epoch,
        expected_version: req.expected_version,
        phase: Phase::Cloning,
    };
    mig.claim(Side::Donor, &record)?;
    let span = tracing::info_span!("migration", id = %record.id, request_id = %req.request_id, ns = %record.ns);
    let result = tracing::Instrument::instrument(run(&mig, catalog, record.clone(), &endpoint, &req), span).await;
    mig.release(&record.id);
    result.map(|()| started.elapsed().as_millis() as u64)
}

/// Counters for logs and the changelog.
#[derive(Default, Debug)]
struct Stats {
    cloned_docs: u64,
    cloned_bytes: u64,
    catch_up_passes: u64,
    catch_up_mods: u64,
    critical_section_ms: u64,
    throttled_ms: u64,
}

enum Failure {
    /// Before the commit: abort (recipient deletes, record removed).
    Abort(MigrationError),
    /// The commit's outcome is unknown: recovery settles it later; nothing is undone here.
    Unresolved(MigrationError),
}

async fn run(
    mig: &Arc<Migrations>,
    catalog: &ConfigClient,
    record: Record,
    endpoint: &str,
    req: &MoveRequest,
) -> Result<(), MigrationError> {
    let started = Instant::now();
    let mut peer = peer_client(endpoint)?;
    let mut stats = Stats::default();
    let mut base = BTreeMap::new();
    base.insert("min".to_owned(), Detail::Bound(record.min.clone()));
    base.insert("max".to_owned(), Detail::Bound(record.max.clone()));
    base.insert("from".to_owned(), Detail::Str(record.from.clone()));
    base.insert("to".to_owned(), Detail::Str(record.to.clone()));
    log_change(catalog, "moveChunk.start", &record.ns, base.clone()).await;
    match phases(mig, catalog, &mut peer, record.clone(), req, &mut stats).await {
        Ok(()) => {
            let secs = started.elapsed().as_secs_f64().max(1e-6);
            let mbps = stats.cloned_bytes as f64 / (1 << 20) as f64 / secs;
            tracing::info!(
                ?stats,
                millis = started.elapsed().as_millis() as u64,
                clone_mb_per_s = format!("{mbps:.1}"),
                "migration committed"
            );
            let mut d = base;
            for (k, v) in [
                ("clonedDocs", stats.cloned_docs),
                ("clonedBytes", stats.cloned_bytes),
                ("catchUpPasses", stats.catch_up_passes),
                ("catchUpMods", stats.catch_up_mods),
                ("criticalSectionMillis", stats.critical_section_ms),
                ("throttledMillis", stats.throttled_ms),
                ("totalMillis", started.elapsed().as_millis() as u64),
            ] {
                d.insert(k.to_owned(), Detail::from(v));
            }
            // mongosh's sh.status() counts `moveChunk.from` entries by `note` (and `errmsg`).
            d.insert("note".to_owned(), Detail::Str("success".into()));
            log_change(catalog, "moveChunk.from", &record.ns, d).await;
            if req.wait_for_delete {
                let sharding = &mig.node.sharding;
                let wait = Duration::from_millis(WAIT_FOR_DELETE_MAX_MS);
                if tokio::time::timeout(wait, sharding.wait_for_range_deletion(&record.ns, &record.min, &record.max))
                    .await
                    .is_err()
                {
                    tracing::warn!("_waitForDelete: the range deletion did not finish in time");
                }
            }
            Ok(())
        }
        Err(Failure::Abort(e)) => {
            tracing::warn!(error = %e, "migration failed before its commit; aborting");
            notify(&mut peer, &record.id, false).await;
            let (store, id) = (Arc::clone(&mig.node.store), record.id.clone());
            match tokio::task::spawn_blocking(move || Record::remove(&store, Side::Donor, &id)).await {
                Ok(Ok(())) => {}
                other => tracing::error!(?other, "could not remove the migration record; recovery will abort it"),
            }
            let mut d = base;
            d.insert("error".to_owned(), Detail::Str(e.to_string()));
            log_change(catalog, "moveChunk.error", &record.ns, d.clone()).await;
            // As MongoDB records a failed move, so sh.status() reports it with its cause.
            d.remove("error");
            d.insert("note".to_owned(), Detail::Str("aborted".into()));
            d.insert("errmsg".to_owned(), Detail::Str(e.to_string()));
            d.insert("throttledMillis".to_owned(), Detail::from(stats.throttled_ms));
            log_change(catalog, "moveChunk.from", &record.ns, d).await;
            Err(e)
        }
        Err(Failure::Unresolved(e)) => {
            tracing::error!(error = %e, "the commit's outcome is unknown; recovery will settle it");
            let m = Arc::clone(mig);
            tokio::spawn(async move { super::recovery::settle_donor(&m, record).await });
            Err(e)
        }
    }
}

async fn phases(
    mig: &Migrations,
    catalog: &ConfigClient,
    peer: &mut MigrationClient<Channel>,
    mut record: Record,
    req: &MoveRequest,
    stats: &mut Stats,
) -> Result<(), Failure> {
    use Failure::Abort;
    let node = &mig.node;
    let mut throttle = Throttle::new(req.latency_target_ms);
    let store = Arc::clone(&node.store);
    save(node, &record).await.map_err(Abort)?;
    let coll = store.collection(&record.ns);
    let options = coll.as_ref().map(|c| c.options.clone()).unwrap_or_default();
    let start = ReceiveStartRequest {
        request_id: record.id.clone(),
        migration_id: record.id.clone(),
        ns: record.ns.clone(),
        from_shard: record.from.clone(),
        uuid: record.uuid.as_bytes().to_vec().into(),
        options: options.to_vec().unwrap_or_default().into(),
        key_fields: record.key.iter().map(|(n, _)| n.clone()).collect(),
        key_hashed: record.key.iter().map(|(_, h)| *h).collect(),
        min: Some(bound_to_wire(&record.min)),
        max: Some(bound_to_wire(&record.max)),
        indexes: coll.as_ref().map(|c| crate::store::indexes::encode_listings(&c.indexes)).unwrap_or_default().into(),
    };
    let reply = peer.receive_start(start).await.map_err(|e| Abort(peer_err(&record.to, e)))?.into_inner();
    reply_ok(&record.to, reply.error).map_err(Abort)?;
    failpoint::hit("migration.after_start");

    // Clone: everything at or before `pos` is in the scan, everything after in the oplog.
    let s = Arc::clone(&store);
    let mut pos = tokio::task::spawn_blocking(move || s.oplog_last())
        .await
        .map_err(|e| Abort(task_err(e)))?
        .map_err(|e| Abort(e.into()))?;
    if let Some(coll) = coll {
        let mut after: Option<Bytes> = None;
        loop {
            throttle.wait(&node.latency).await;
            stats.throttled_ms = throttle.paused_ms;
            let (s, r, c) = (Arc::clone(&store), record.clone(), Arc::clone(&coll));
            let (mods, next) = tokio::task::spawn_blocking(move || clone_batch(&s, &c, &r, after))
                .await
                .map_err(|e| Abort(task_err(e)))?
                .map_err(Abort)?;
            stats.cloned_docs += mods.len() as u64;
            stats.cloned_bytes += mods.iter().map(|m| m.size_bytes() as u64).sum::<u64>();
            send(peer, &record, mods).await.map_err(Abort)?;
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
    }
    tracing::info!(docs = stats.cloned_docs, bytes = stats.cloned_bytes, "clone done");
    failpoint::hit("migration.after_clone");

    // Catch up until a pass is small enough to finish inside the critical section.
    let mut converged = false;
    for pass in 0..CATCH_UP_PASSES_MAX {
        throttle.wait(&node.latency).await;
        stats.throttled_ms = throttle.paused_ms;
        let (n, bytes, next) = catch_up(&store, peer, &record, pos).await.map_err(Abort)?;
        pos = next;
        stats.catch_up_passes += 1;
        stats.catch_up_mods += n as u64;
        tracing::info!(pass, mods = n, bytes, "catch-up pass");
        if pass == 0 {
            failpoint::hit("migration.in_catch_up");
        }
        if n < CATCH_UP_SMALL_MODS && bytes < CATCH_UP_SMALL_BYTES {
            converged = true;
            break;
        }
    }
    if !converged {
        return Err(Abort(MigrationError::refused(
            ErrorCode::OperationFailed,
            format!("catch-up did not converge in {CATCH_UP_PASSES_MAX} passes: writes outpace the migration"),
        )));
    }

    // Critical section: writes to the collection wait (bounded on their side too).
    let entered = Instant::now();
    let wait = Duration::from_millis(CRITICAL_SECTION_ENTER_WAIT_MS);
    let section = tokio::time::timeout(wait, node.sharding.gates.enter(&record.ns)).await.map_err(|_| {
        Abort(MigrationError::refused(ErrorCode::ExceededTimeLimit, "in-flight writes did not finish in time"))
    })?;
    let (n, _, _) = catch_up(&store, peer, &record, pos).await.map_err(Abort)?;
    stats.catch_up_mods += n as u64;
    let sessions = super::transfer::send_sessions(&store, peer, &record).await.map_err(Abort)?;
    tracing::debug!(sessions, "session records sent");
    ping(peer, &record).await.map_err(Abort)?;
    mig.begin_commit(&record.id).map_err(Abort)?;
    record.phase = Phase::Committing;
    save(node, &record).await.map_err(Abort)?;
    failpoint::hit("migration.in_critical_section");
    match commit(catalog, &record, req.fencing.clone()).await {
        Commit::Committed => {}
        Commit::Refused(e) => return Err(Abort(e)),
        Commit::Unknown(why) => {
            node.sharding.forget(&record.ns);
            return Err(Failure::Unresolved(MigrationError::refused(ErrorCode::OperationFailed, why)));
        }
    }
    failpoint::hit("migration.after_commit");
    tracing::info!("catalog committed the migration");
    refresh_or_forget(mig, &record.ns).await;
    notify(peer, &record.id, true).await;
    record.phase = Phase::Committed;
    if let Err(e) = save(node, &record).await {
        tracing::warn!(error = %e, "could not persist phase Committed; recovery will find the commit in the catalog");
    }
    drop(section);
    stats.critical_section_ms = entered.elapsed().as_millis() as u64;
    finish_committed(mig, &record).await.map_err(Failure::Unresolved)
}

/// Persists the donor record and waits until a majority of the group has it: a member promoted
/// after this one dies then finds the phase and settles the migration (`crate::primary_only`).
async fn save(node: &Node, record: &Record) -> Result<(), MigrationError> {
    let (s, r) = (Arc::clone(&node.store), record.clone());
    tokio::task::spawn_blocking(move || r.save(&s, Side::Donor)).await.map_err(task_err)??;
    super::majority_committed(node).await?;
    Ok(())
}
