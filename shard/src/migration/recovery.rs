//! Settling migrations a restart or a failover interrupted (and a donor commit whose outcome was
//! unknown). Runs when a member becomes primary (`crate::primary_only`): the records came through
//! the oplog, so a new primary settles what its predecessor left.
//!
//! For each persisted record the catalog decides (linearizable read of who owns the range):
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
//! Must not: settle anything without the catalog's answer (it retries, bounded, instead).

use std::collections::BTreeMap;
use std::sync::Arc;

use shoal_proto::catalog::Detail;
use tracing::Instrument;

use super::outcome::{finish_committed, log_change, notify, owner, refresh_or_forget};
use super::recipient::abort_record;
use super::record::{Record, Side};
use super::{MigrationError, Migrations, backoff, peer_client, shard_endpoint};

/// Rounds of asking the catalog (each itself a bounded retry) before a record is left for the
/// next restart.
pub const SETTLE_ROUNDS_MAX: u32 = 60;

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
    settle_donor_in_span(mig, record).instrument(span).await
}

async fn settle_donor_in_span(mig: &Migrations, record: Record) {
    let Some(catalog) = mig.node.sharding.catalog() else { return };
    for round in 0..SETTLE_ROUNDS_MAX {
        let result: Result<(), MigrationError> = async {
            let owner = owner(catalog, &record)
                .await
                .map_err(|why| MigrationError::Peer { peer: "catalog".into(), message: why })?;
            let committed = owner.as_deref().is_some_and(|o| o != record.from);
            let peer = match catalog.shard(&record.to, false).await {
                Ok(to) => shard_endpoint(to.as_ref(), &record.to).and_then(|e| peer_client(&e)).ok(),
                Err(_) => None,
            };
            let mut details = BTreeMap::new();
            details.insert("min".to_owned(), Detail::Bound(record.min.clone()));
            details.insert("max".to_owned(), Detail::Bound(record.max.clone()));
            details.insert("from".to_owned(), Detail::Str(record.from.clone()));
            details.insert("to".to_owned(), Detail::Str(record.to.clone()));
            details.insert("recovered".to_owned(), Detail::Bool(true));
            if committed {
                refresh_or_forget(mig, &record.ns).await;
                if let Some(mut p) = peer {
                    notify(&mut p, &record.id, true).await;
                }
                finish_committed(mig, &record).await?;
                tracing::info!("interrupted migration had committed: range deletion scheduled");
                details.insert("note".to_owned(), Detail::Str("success".into()));
                log_change(catalog, "moveChunk.from", &record.ns, details).await;
            } else {
                if let Some(mut p) = peer {
                    notify(&mut p, &record.id, false).await;
                }
                let (store, id) = (Arc::clone(&mig.node.store), record.id.clone());
                tokio::task::spawn_blocking(move || Record::remove(&store, Side::Donor, &id))
                    .await
                    .map_err(|e| MigrationError::Peer { peer: "local".into(), message: e.to_string() })??;
                tracing::info!("interrupted migration had not committed: aborted");
                details.insert("error".to_owned(), Detail::Str("donor restarted before the commit".into()));
                log_change(catalog, "moveChunk.error", &record.ns, details).await;
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => return,
            Err(e) => tracing::warn!(round, error = %e, "could not settle the migration yet"),
        }
        tokio::time::sleep(backoff(round)).await;
    }
    tracing::error!("migration left unsettled; the next restart retries");
}

/// Settles a recipient record: keep the range if the catalog gave it to us, else delete it.
pub async fn settle_recipient(mig: &Migrations, record: Record) {
    let span = tracing::info_span!("migration_recovery", id = %record.id, ns = %record.ns, side = "recipient");
    settle_recipient_in_span(mig, record).instrument(span).await
}

async fn settle_recipient_in_span(mig: &Migrations, record: Record) {
    let Some(catalog) = mig.node.sharding.catalog() else { return };
    for round in 0..SETTLE_ROUNDS_MAX {
        let result: Result<(), MigrationError> = async {
            let owner = owner(catalog, &record)
                .await
                .map_err(|why| MigrationError::Peer { peer: "catalog".into(), message: why })?;
            // Not ours (yet): only a donor that can no longer commit makes that final.
            let owner = if owner.as_deref() == Some(record.to.as_str()) {
                owner
            } else {
                donor_decided(catalog, &record).await?;
                super::outcome::owner(catalog, &record)
                    .await
                    .map_err(|why| MigrationError::Peer { peer: "catalog".into(), message: why })?
            };
            if owner.as_deref() == Some(record.to.as_str()) {
                refresh_or_forget(mig, &record.ns).await;
                let (store, id) = (Arc::clone(&mig.node.store), record.id.clone());
                tokio::task::spawn_blocking(move || Record::remove(&store, Side::Recipient, &id))
                    .await
                    .map_err(|e| MigrationError::Peer { peer: "local".into(), message: e.to_string() })??;
                tracing::info!("received range is ours: kept");
            } else {
                abort_record(mig, &record).await?;
                tracing::info!("received range is not ours: deletion scheduled");
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => return,
            Err(e) => tracing::warn!(round, error = %e, "could not settle the received range yet"),
        }
        tokio::time::sleep(backoff(round)).await;
    }
    tracing::error!("received range left unsettled; the next restart retries");
}

/// Waits for nothing: asks `record.from` once whether the migration can still commit; an error
/// (pending, unreachable) makes the caller retry later. A donor shard gone from the catalog can
/// commit nothing.
async fn donor_decided(
    catalog: &shoal_cluster::config_client::ConfigClient,
    record: &Record,
) -> Result<(), MigrationError> {
    let peer_err = |message: String| MigrationError::Peer { peer: record.from.clone(), message };
    let from = catalog.shard(&record.from, true).await.map_err(|e| peer_err(format!("catalog: {e}")))?;
    if from.is_none() {
        return Ok(());
    }
    let mut peer = shard_endpoint(from.as_ref(), &record.from).and_then(|e| peer_client(&e))?;
    let reply = peer
        .migration_fate(shoal_proto::shard::MigrationFateRequest { migration_id: record.id.clone() })
        .await
        .map_err(|s| peer_err(format!("asking the donor: {}", s.message())))?
        .into_inner();
    if reply.decided {
        Ok(())
    } else {
        Err(peer_err("the donor is still committing or settling this migration".into()))
    }
}
