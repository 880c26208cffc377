//! The I/O that settles a migration once the donor decides to commit: the catalog
//! compare-and-set and, when its answer is lost, who owns the range per the catalog; the donor's
//! metadata refresh; the range deletion; the recipient's notification; the changelog entries.
//! Shared by the donor's run, recovery and movePrimary; what to make of each answer is the
//! machines' ([`super::donor_machine::verify`] is the write-then-verify rule).
//!
//! Must not: undo a commit (a committed range is only ever finished, never rolled back).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shoal_cluster::config_client::ConfigClient;
use shoal_proto::catalog::{Command, Detail, Fencing, RoutingAnswer, ShardId};
use shoal_proto::shard::ReceiveEndRequest;
use shoal_proto::shard::migration_client::MigrationClient;
use tonic::transport::Channel;

pub use super::donor_machine::{Commit, CommitAnswer, verify};
use super::record::{Record, Side};
use super::{CATALOG_ATTEMPTS_MAX, MigrationError, Migrations, backoff};
use crate::sharding::RangeDeletion;

/// After the commit: schedule the donor's range deletion, then drop the record.
pub async fn finish_committed(mig: &Migrations, record: &Record) -> Result<(), MigrationError> {
    let node = &mig.node;
    let task = RangeDeletion {
        ns: record.ns.clone(),
        uuid: record.uuid,
        key: record.key_fields(),
        min: record.min.clone(),
        max: record.max.clone(),
    };
    node.sharding.schedule_range_deletion(&node.store, &node.cursors, task).await?;
    let (store, id) = (Arc::clone(&node.store), record.id.clone());
    tokio::task::spawn_blocking(move || Record::remove(&store, Side::Donor, &id)).await??;
    Ok(())
}

/// How long a donor tries to refresh its metadata after a commit. It runs inside the critical
/// section (writes wait), so a slow config service must not stretch it: past this the donor
/// forgets the metadata instead, and the next request refreshes them itself, as MongoDB's donor
/// clears its filtering metadata when the refresh fails.
pub const REFRESH_AFTER_COMMIT_MAX: Duration = Duration::from_secs(3);

/// Refreshes `ns` within [`REFRESH_AFTER_COMMIT_MAX`]; if the catalog does not answer in time,
/// drops the cached metadata so no request is admitted with the old version.
pub async fn refresh_or_forget(mig: &Migrations, ns: &str) {
    let retrying = async {
        for attempt in 0..CATALOG_ATTEMPTS_MAX {
            match mig.node.sharding.refresh(ns).await {
                Ok(()) => return true,
                Err(e) => tracing::warn!(attempt, error = %e, "refresh after commit failed"),
            }
            tokio::time::sleep(backoff(attempt)).await;
        }
        false
    };
    if !tokio::time::timeout(REFRESH_AFTER_COMMIT_MAX, retrying).await.unwrap_or(false) {
        tracing::warn!(%ns, "no refresh after the commit; the metadata are forgotten until the next request");
        mig.node.sharding.forget(ns);
    }
}

/// Proposes `cmd` to the catalog. A call that failed is a lost answer: the write may have been
/// applied all the same.
pub async fn propose(catalog: &ConfigClient, cmd: &Command) -> CommitAnswer {
    match catalog.write(cmd).await {
        Ok(w) => match w.outcome {
            Ok(_) => CommitAnswer::Applied,
            Err(e) => CommitAnswer::Refused(MigrationError::refused(e.code(), e.to_string())),
        },
        Err(e) => CommitAnswer::Lost(e.to_string()),
    }
}

/// Proposes `cmd`; when its answer is lost, asks `applied` whether the catalog shows it took
/// effect and settles by [`verify`] (movePrimary's run; a chunk migration's machine does the
/// same step by step).
pub async fn write_then_verify<F, Fut>(catalog: &ConfigClient, cmd: &Command, what: &'static str, applied: F) -> Commit
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<bool, MigrationError>>,
{
    match propose(catalog, cmd).await {
        CommitAnswer::Applied => Commit::Committed,
        CommitAnswer::Refused(e) => Commit::Refused(e),
        CommitAnswer::Lost(cause) => {
            tracing::warn!(what, error = %cause, "commit outcome unknown; asking the catalog");
            verify(what, cause, applied().await)
        }
    }
}

/// The catalog commit of `record`; `fencing` (the balancer's lease) makes a stale balancer's
/// move refused (LockBusy), which the donor treats as any refusal: it aborts, nothing changed.
pub fn commit_command(record: &Record, fencing: Option<Fencing>) -> Command {
    Command::CommitMigration {
        ns: record.ns.clone(),
        epoch: record.epoch,
        min: record.min.clone(),
        max: record.max.clone(),
        from: record.from.clone(),
        to: record.to.clone(),
        expected_version: record.expected_version,
        fencing,
    }
}

/// Who owns `record.min` per the catalog (linearizable read, bounded retries). `Ok(None)`: the
/// collection is gone or re-sharded (nothing of this migration can be committed any more).
pub async fn owner(catalog: &ConfigClient, record: &Record) -> Result<Option<ShardId>, MigrationError> {
    let mut last = String::new();
    for attempt in 0..CATALOG_ATTEMPTS_MAX {
        match catalog.routing_table(&record.ns, None, true).await {
            Ok((RoutingAnswer::Full(Some(t)), _)) if t.epoch == record.epoch => {
                let chunk = t.chunks.iter().find(|c| c.min <= record.min && record.min < c.max);
                return Ok(chunk.map(|c| c.shard.clone()));
            }
            Ok((RoutingAnswer::Full(_), _)) => return Ok(None),
            Ok((other, _)) => last = format!("unexpected answer {other:?}"),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(backoff(attempt)).await;
    }
    Err(MigrationError::CatalogUnreachable(last))
}

/// How long a donor waits for the recipient to take the outcome. A commit's notice is sent inside
/// the critical section, so a slow recipient must not stretch it; the recipient's recovery asks
/// for the outcome itself when the notice did not arrive.
pub const NOTIFY_MAX: Duration = Duration::from_secs(5);

/// Best-effort `ReceiveCommit` / `ReceiveAbort` (the recipient's recovery settles it otherwise).
pub async fn notify(peer: &mut MigrationClient<Channel>, id: &str, committed: bool) {
    let req = ReceiveEndRequest { request_id: id.to_owned(), migration_id: id.to_owned() };
    let call = async { if committed { peer.receive_commit(req).await } else { peer.receive_abort(req).await } };
    match tokio::time::timeout(NOTIFY_MAX, call).await.map(|r| r.map(|r| r.into_inner().error)) {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(e))) => tracing::warn!(committed, error = %e.errmsg, "recipient refused the outcome"),
        Ok(Err(e)) => tracing::warn!(committed, error = %e, "recipient unreachable for the outcome"),
        Err(_) => tracing::warn!(committed, "recipient did not take the outcome in time; its recovery will"),
    }
}

/// The changelog details every migration entry carries.
pub fn change_details(record: &Record) -> BTreeMap<String, Detail> {
    BTreeMap::from([
        ("min".to_owned(), Detail::Bound(record.min.clone())),
        ("max".to_owned(), Detail::Bound(record.max.clone())),
        ("from".to_owned(), Detail::Str(record.from.clone())),
        ("to".to_owned(), Detail::Str(record.to.clone())),
    ])
}

/// Best-effort changelog entry.
pub async fn log_change(catalog: &ConfigClient, what: &str, ns: &str, details: BTreeMap<String, Detail>) {
    let cmd = Command::LogChange { what: what.to_owned(), ns: ns.to_owned(), details };
    match catalog.write(&cmd).await.map(|w| w.outcome) {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(what, error = %e, "changelog entry refused"),
        Err(e) => tracing::warn!(what, error = %e, "changelog entry not recorded"),
    }
}
