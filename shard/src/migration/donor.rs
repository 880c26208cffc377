//! The donor's runtime for one migration (see the protocol diagram in [`super`]): it checks the
//! request, then loops — ask the machine ([`super::donor_machine::Donor`]), perform the action
//! (record writes, RPCs, catalog calls, the critical-section gate), feed back the event — and
//! finally logs the outcome. Failpoints sit here, at action boundaries, where a crash would.
//! Runs in its own task, so a router that goes away does not interrupt it.
//!
//! Must not: decide anything the machine decides (what follows a failure, whether a catch-up
//! pass is small, what a lost commit answer means); drop the critical section's guard except
//! when the machine says to leave it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::Timestamp;
use bytes::Bytes;
use shoal_cluster::config_client::ConfigClient;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{ChunkBound, ChunkVersion, Detail, Epoch, Fencing};
use shoal_proto::shard::ReceiveStartRequest;
use shoal_proto::shard::migration_client::MigrationClient;
use tonic::transport::Channel;

use super::donor_machine::{Action, CommitAnswer, Donor, Event, Outcome};
use super::outcome::{
    change_details, commit_command, finish_committed, log_change, notify, owner, propose, refresh_or_forget,
};
use super::record::{Phase, Record, Side};
use super::throttle::Throttle;
use super::transfer::{catch_up, clone_batch, peer_err, ping, reply_ok, send, send_sessions};
use super::*;
use crate::metrics::MigrationEnd;
use crate::sharding::{CollectionMetadata, CriticalSection};
use crate::store::Store;
use crate::store::local_catalog::CollectionInfo;

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

/// Moves the range; answers the milliseconds it took. A request refused before the run starts
/// (checks, the slot taken) counts as `refused` in the migration metrics; a run counts its own end.
pub async fn move_range(mig: Arc<Migrations>, req: MoveRequest) -> Result<u64, MigrationError> {
    let started = Instant::now();
    let (catalog, record, endpoint) = match admit(&mig, &req).await {
        Ok(admitted) => admitted,
        Err(e) => {
            mig.node.metrics.migrations.ended(Side::Donor, MigrationEnd::Refused);
            return Err(e);
        }
    };
    let span = tracing::info_span!("migration", id = %record.id, request_id = %req.request_id, ns = %record.ns);
    let result = tracing::Instrument::instrument(run(&mig, catalog, record.clone(), &endpoint, &req), span).await;
    mig.release(&record.id);
    result.map(|()| started.elapsed().as_millis() as u64)
}

/// Checks the request against fresh metadata and claims the slot: the catalog, the record to run
/// and the recipient's endpoint.
async fn admit<'m>(
    mig: &'m Migrations,
    req: &MoveRequest,
) -> Result<(&'m ConfigClient, Record, String), MigrationError> {
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
    let to = catalog.shard(&req.to, false).await.map_err(|e| MigrationError::CatalogUnreachable(e.to_string()))?;
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
    Ok((catalog, record, endpoint))
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

/// What one run holds while the machine drives it.
struct Run<'a> {
    mig: &'a Arc<Migrations>,
    catalog: &'a ConfigClient,
    peer: MigrationClient<Channel>,
    record: Record,
    fencing: Option<Fencing>,
    store: Arc<Store>,
    coll: Option<Arc<CollectionInfo>>,
    throttle: Throttle,
    /// Clone position: at or before it in the scan, after it in the catch-up passes.
    pos: Timestamp,
    /// Where the next clone read starts.
    after: Option<Bytes>,
    section: Option<(CriticalSection, Instant)>,
    stats: Stats,
}

async fn run(
    mig: &Arc<Migrations>,
    catalog: &ConfigClient,
    record: Record,
    endpoint: &str,
    req: &MoveRequest,
) -> Result<(), MigrationError> {
    let started = Instant::now();
    let store = Arc::clone(&mig.node.store);
    let mut run = Run {
        mig,
        catalog,
        peer: peer_client(endpoint)?,
        coll: None,
        store,
        record: record.clone(),
        fencing: req.fencing.clone(),
        throttle: Throttle::new(req.latency_target_ms),
        pos: Timestamp { time: 0, increment: 0 },
        after: None,
        section: None,
        stats: Stats::default(),
    };
    let base = change_details(&record);
    log_change(catalog, "moveChunk.start", &record.ns, base.clone()).await;
    let (mut machine, mut action) = Donor::new(record.from.clone());
    let outcome = loop {
        if let Action::Finish(outcome) = action {
            break outcome;
        }
        let event = run.perform(&action).await;
        if let Event::Failed(e) = &event {
            tracing::warn!(?action, error = %e, "migration step failed");
        }
        crash_point(&action, &event, machine.passes());
        action = machine.step(event);
    };
    let stats = run.stats;
    let metrics = &mig.node.metrics.migrations;
    match outcome {
        Outcome::Committed => {
            metrics.ended(Side::Donor, MigrationEnd::Committed);
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
        Outcome::Aborted(e) => {
            metrics.ended(Side::Donor, MigrationEnd::Aborted);
            tracing::warn!(error = %e, "migration failed before its commit; aborted");
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
        Outcome::Unresolved(e) => {
            // Not counted here: recovery counts the outcome it settles.
            tracing::error!(error = %e, "the commit's outcome is unknown; recovery will settle it");
            let m = Arc::clone(mig);
            tokio::spawn(async move { super::recovery::settle_donor(&m, record).await });
            Err(e)
        }
    }
}

/// The failpoint (a simulated crash) at the boundary after `action` answered `event`.
fn crash_point(action: &Action, event: &Event, passes: usize) {
    let point = match (action, event) {
        (Action::StartRecipient, Event::Done) => "migration.after_start",
        (Action::CloneBatch, Event::CloneBatch { more: false }) => "migration.after_clone",
        (Action::CatchUpPass, Event::CatchUpPass { .. }) if passes == 0 => "migration.in_catch_up",
        (Action::Persist(Phase::Committing), Event::Done) => "migration.in_critical_section",
        _ => return,
    };
    failpoint::hit(point);
}

impl Run<'_> {
    /// Performs `action`; answers what came of it. Never decides what follows.
    async fn perform(&mut self, action: &Action) -> Event {
        let done = |r: Result<(), MigrationError>| r.map_or_else(Event::Failed, |()| Event::Done);
        let mig = self.mig;
        let node = &mig.node;
        match action {
            Action::Persist(phase) => {
                self.record.phase = *phase;
                done(save(node, &self.record).await)
            }
            Action::StartRecipient => done(self.start_recipient().await),
            Action::MarkClonePosition => {
                let s = Arc::clone(&self.store);
                match tokio::task::spawn_blocking(move || s.oplog_last()).await {
                    Ok(Ok(pos)) => {
                        self.pos = pos;
                        Event::Done
                    }
                    Ok(Err(e)) => Event::Failed(e.into()),
                    Err(e) => Event::Failed(e.into()),
                }
            }
            Action::CloneBatch => match self.clone_batch().await {
                Ok(more) => Event::CloneBatch { more },
                Err(e) => Event::Failed(e),
            },
            Action::CatchUpPass | Action::FinalCatchUp => {
                if *action == Action::CatchUpPass {
                    self.throttle.wait(&node.latency).await;
                    self.stats.throttled_ms = self.throttle.paused_ms;
                }
                match catch_up(&self.store, &mut self.peer, &self.record, self.pos).await {
                    Ok((mods, bytes, next)) => {
                        node.metrics.migrations.moved(Side::Donor, bytes as u64);
                        self.pos = next;
                        self.stats.catch_up_mods += mods as u64;
                        if *action == Action::CatchUpPass {
                            self.stats.catch_up_passes += 1;
                            tracing::info!(pass = self.stats.catch_up_passes - 1, mods, bytes, "catch-up pass");
                        }
                        Event::CatchUpPass { mods, bytes }
                    }
                    Err(e) => Event::Failed(e),
                }
            }
            Action::EnterCriticalSection => {
                // Writes to the collection wait (bounded on their side too).
                let wait = Duration::from_millis(CRITICAL_SECTION_ENTER_WAIT_MS);
                match tokio::time::timeout(wait, node.sharding.gates.enter(&self.record.ns)).await {
                    Ok(section) => {
                        self.section = Some((section, Instant::now()));
                        Event::Done
                    }
                    Err(_) => Event::Failed(MigrationError::SectionTimeout {
                        ns: self.record.ns.clone(),
                        ms: CRITICAL_SECTION_ENTER_WAIT_MS,
                    }),
                }
            }
            Action::SendSessions => match send_sessions(&self.store, &mut self.peer, &self.record).await {
                Ok(sessions) => {
                    tracing::debug!(sessions, "session records sent");
                    Event::Done
                }
                Err(e) => Event::Failed(e),
            },
            Action::CheckStillYours => done(ping(&mut self.peer, &self.record).await),
            Action::ClaimCommitPoint => done(mig.begin_commit(&self.record.id)),
            Action::Commit => match propose(self.catalog, &commit_command(&self.record, self.fencing.clone())).await {
                CommitAnswer::Lost(cause) => {
                    tracing::warn!(error = %cause, "commit outcome unknown; asking the catalog");
                    Event::CommitAnswer(CommitAnswer::Lost(cause))
                }
                answer => Event::CommitAnswer(answer),
            },
            Action::VerifyOwner => owner(self.catalog, &self.record).await.map_or_else(Event::Failed, Event::Owner),
            Action::RefreshAfterCommit => {
                failpoint::hit("migration.after_commit");
                tracing::info!("catalog committed the migration");
                refresh_or_forget(mig, &self.record.ns).await;
                Event::Done
            }
            Action::Notify { committed } => {
                notify(&mut self.peer, &self.record.id, *committed).await;
                Event::Done
            }
            Action::ForgetMetadata => {
                node.sharding.forget(&self.record.ns);
                Event::Done
            }
            Action::LeaveCriticalSection => {
                if let Some((section, entered)) = self.section.take() {
                    drop(section);
                    let held = entered.elapsed();
                    self.stats.critical_section_ms = held.as_millis() as u64;
                    node.metrics.migrations.critical_section(held);
                }
                Event::Done
            }
            Action::FinishCommitted => done(finish_committed(mig, &self.record).await),
            Action::RemoveRecord => {
                let (store, id) = (Arc::clone(&self.store), self.record.id.clone());
                let removed = tokio::task::spawn_blocking(move || Record::remove(&store, Side::Donor, &id)).await;
                match removed.map_err(MigrationError::from).and_then(|r| r.map_err(MigrationError::from)) {
                    Ok(()) => Event::Done,
                    Err(e) => {
                        tracing::error!(error = %e, "could not remove the migration record; recovery will abort it");
                        Event::Failed(e)
                    }
                }
            }
            Action::Finish(_) => Event::Done,
        }
    }

    async fn start_recipient(&mut self) -> Result<(), MigrationError> {
        self.coll = self.store.collection(&self.record.ns);
        let record = &self.record;
        let options = self.coll.as_ref().map(|c| c.options.clone()).unwrap_or_default();
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
            indexes: self
                .coll
                .as_ref()
                .map(|c| crate::store::indexes::encode_listings(&c.indexes))
                .unwrap_or_default()
                .into(),
        };
        let reply = self.peer.receive_start(start).await.map_err(|e| peer_err(&record.to, e))?.into_inner();
        reply_ok(&record.to, reply.error)
    }

    /// One clone batch, sent; answers whether the scan goes on. A collection this shard does not
    /// have has nothing to clone.
    async fn clone_batch(&mut self) -> Result<bool, MigrationError> {
        if let Some(coll) = &self.coll {
            self.throttle.wait(&self.mig.node.latency).await;
            self.stats.throttled_ms = self.throttle.paused_ms;
            let (s, r, c, after) = (Arc::clone(&self.store), self.record.clone(), Arc::clone(coll), self.after.take());
            let (mods, next) = tokio::task::spawn_blocking(move || clone_batch(&s, &c, &r, after)).await??;
            let bytes = mods.iter().map(|m| m.size_bytes() as u64).sum::<u64>();
            self.stats.cloned_docs += mods.len() as u64;
            self.stats.cloned_bytes += bytes;
            self.mig.node.metrics.migrations.moved(Side::Donor, bytes);
            send(&mut self.peer, &self.record, mods).await?;
            self.after = next;
        }
        let more = self.after.is_some();
        if !more {
            tracing::info!(docs = self.stats.cloned_docs, bytes = self.stats.cloned_bytes, "clone done");
        }
        Ok(more)
    }
}

/// Persists the donor record and waits until a majority of the group has it: a member promoted
/// after this one dies then finds the phase and settles the migration (`crate::primary_only`).
async fn save(node: &Node, record: &Record) -> Result<(), MigrationError> {
    let (s, r) = (Arc::clone(&node.store), record.clone());
    tokio::task::spawn_blocking(move || r.save(&s, Side::Donor)).await??;
    super::majority_committed(node).await?;
    Ok(())
}
