//! Settling migrations a restart or a failover interrupted (and a donor commit whose outcome was
//! unknown). Runs when a member becomes primary (`crate::primary_only`): the records came through
//! the oplog, so a new primary settles what its predecessor left.
//!
//! For each persisted record the catalog decides (linearizable read of who owns the range), by
//! the rules of [`super::recovery_machine`]; this module is its runtime: it loops — ask the
//! machine, perform the action, feed back the event — and logs the outcome:
//!
//! ```text
//!  donor record:      owner != donor → committed: refresh, ReceiveCommit (best effort),
//!                                       schedule the donor's range deletion, drop the record
//!                     owner == donor → aborted:   ReceiveAbort (best effort), drop the record
//!  recipient record:  owner == us    → keep the data, refresh, drop the record
//!                     otherwise      → ask the donor (MigrationFate) until it answers that the
//!                                       migration can no longer commit, read the owner again:
//!                                       ours → keep; else schedule deletion, drop the record
//! ```
//!
//! Until every record is settled the shard refuses new migrations (117). A recipient that
//! restarted has no in-memory migration, so the donor's next call for it fails and it aborts.
//!
//! Must not: settle anything without the catalog's answer (it retries, bounded, instead), or
//! decide what the machine decides.

use std::sync::Arc;

use shoal_cluster::config_client::ConfigClient;
use shoal_proto::catalog::Detail;
use shoal_proto::shard::MigrationFateRequest;
use tracing::Instrument;

use super::outcome::{change_details, finish_committed, log_change, notify, owner, refresh_or_forget};
use super::recipient::abort_record;
use super::record::{Record, Side};
use super::recovery_machine::{Action, Event, Settle, Settled};
use super::{Fate, MigrationError, Migrations, backoff, peer_client, shard_endpoint};
use crate::metrics::MigrationEnd;

/// Loads the records (blocking) and marks the shard as recovering them.
pub fn load(mig: &Migrations) -> Result<(Vec<Record>, Vec<Record>), crate::storage::StorageError> {
    let donors = Record::load_all(&mig.node.store, Side::Donor)?;
    let recipients = Record::load_all(&mig.node.store, Side::Recipient)?;
    mig.set_recovering(donors.len() + recipients.len());
    Ok((donors, recipients))
}

/// Settles every loaded record, then lets new migrations in.
pub async fn recover(mig: Arc<Migrations>, donors: Vec<Record>, recipients: Vec<Record>) {
    if donors.is_empty() && recipients.is_empty() {
        mig.set_recovering(0);
        return;
    }
    tracing::info!(donors = donors.len(), recipients = recipients.len(), "recovering interrupted migrations");
    for record in donors {
        settle_donor(&mig, record).await;
    }
    for record in recipients {
        settle_recipient(&mig, record).await;
    }
    mig.set_recovering(0);
}

/// Settles a donor record: finish a committed migration, abort the rest.
pub async fn settle_donor(mig: &Migrations, record: Record) {
    let span = tracing::info_span!("migration_recovery", id = %record.id, ns = %record.ns, side = "donor");
    settle(mig, Side::Donor, record).instrument(span).await
}

/// Settles a recipient record: keep the range if the catalog gave it to us, else delete it.
pub async fn settle_recipient(mig: &Migrations, record: Record) {
    let span = tracing::info_span!("migration_recovery", id = %record.id, ns = %record.ns, side = "recipient");
    settle(mig, Side::Recipient, record).instrument(span).await
}

async fn settle(mig: &Migrations, side: Side, record: Record) {
    let Some(catalog) = mig.node.sharding.catalog() else { return };
    let (mut machine, mut action) = Settle::new(side, &record);
    let settled = loop {
        if let Action::Finish(settled) = action {
            break settled;
        }
        let event = perform(mig, catalog, side, &record, &action).await;
        action = machine.step(event);
    };
    let end = match settled {
        Settled::Committed | Settled::Kept => MigrationEnd::Committed,
        Settled::Aborted | Settled::Deleted => MigrationEnd::Aborted,
        Settled::Unsettled => MigrationEnd::Unresolved,
    };
    mig.node.metrics.migrations.ended(side, end);
    let mut details = change_details(&record);
    details.insert("recovered".to_owned(), Detail::Bool(true));
    match settled {
        Settled::Committed => {
            tracing::info!("interrupted migration had committed: range deletion scheduled");
            details.insert("note".to_owned(), Detail::Str("success".into()));
            log_change(catalog, "moveChunk.from", &record.ns, details).await;
        }
        Settled::Aborted => {
            tracing::info!("interrupted migration had not committed: aborted");
            details.insert("error".to_owned(), Detail::Str("donor restarted before the commit".into()));
            log_change(catalog, "moveChunk.error", &record.ns, details).await;
        }
        Settled::Kept => tracing::info!("received range is ours: kept"),
        Settled::Deleted => tracing::info!("received range is not ours: deletion scheduled"),
        Settled::Unsettled => tracing::error!("migration left unsettled; the next restart retries"),
    }
}

/// Performs `action`; answers what came of it.
async fn perform(mig: &Migrations, catalog: &ConfigClient, side: Side, record: &Record, action: &Action) -> Event {
    let done = |r: Result<(), MigrationError>| r.map_or_else(Event::Failed, |()| Event::Done);
    match action {
        Action::ReadOwner => owner(catalog, record).await.map_or_else(Event::Failed, Event::Owner),
        Action::RefreshMetadata => {
            refresh_or_forget(mig, &record.ns).await;
            Event::Done
        }
        Action::Notify { committed } => {
            // Best effort: a recipient the catalog cannot name settles by its own recovery.
            if let Ok(to) = catalog.shard(&record.to, false).await
                && let Ok(mut peer) = shard_endpoint(to.as_ref(), &record.to).and_then(|e| peer_client(&e))
            {
                notify(&mut peer, &record.id, *committed).await;
            }
            Event::Done
        }
        Action::FinishCommitted => done(finish_committed(mig, record).await),
        Action::RemoveRecord => {
            let (store, id) = (Arc::clone(&mig.node.store), record.id.clone());
            let removed = tokio::task::spawn_blocking(move || Record::remove(&store, side, &id)).await;
            done(removed.map_err(MigrationError::from).and_then(|r| r.map_err(MigrationError::from)))
        }
        Action::AskDonor => ask_donor(catalog, record).await.unwrap_or_else(Event::Failed),
        Action::DeleteReceived => done(abort_record(mig, record).await),
        Action::Retry { round, why } => {
            tracing::warn!(round, error = %why, "could not settle the migration yet");
            tokio::time::sleep(backoff(*round)).await;
            Event::Done
        }
        Action::Finish(_) => Event::Done,
    }
}

/// Asks `record.from` once whether the migration can still commit.
async fn ask_donor(catalog: &ConfigClient, record: &Record) -> Result<Event, MigrationError> {
    let peer_err = |message: String| MigrationError::Peer { peer: record.from.clone(), message };
    let from = catalog.shard(&record.from, true).await.map_err(|e| peer_err(format!("catalog: {e}")))?;
    if from.is_none() {
        return Ok(Event::DonorGone);
    }
    let mut peer = shard_endpoint(from.as_ref(), &record.from).and_then(|e| peer_client(&e))?;
    let reply = peer
        .migration_fate(MigrationFateRequest { migration_id: record.id.clone() })
        .await
        .map_err(|s| peer_err(format!("asking the donor: {}", s.message())))?
        .into_inner();
    Ok(Event::DonorFate(if reply.decided { Fate::Decided } else { Fate::Pending }))
}
