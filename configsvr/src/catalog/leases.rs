//! Leases with fencing tokens: how one balancer (or any singleton job) at a time is chosen, and
//! how its late writes are refused after it lost the lease.
//!
//! ```text
//!  balancer A: AcquireLease --> token 7 ... CommitMigration{fencing: (balancer, 7)} --> ok
//!  (A stalls; its lease expires)
//!  balancer B: AcquireLease --> token 8
//!  balancer A: CommitMigration{fencing: (balancer, 7)} --> StaleFencingToken
//! ```
//!
//! Invariants: tokens come from one counter for all leases and strictly increase; a lease's token
//! changes exactly when it is granted afresh (free, expired or released before), never on renewal.
//! Time is the log entry's time (`now_ms`), never a local clock, so every replica decides alike.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::CatalogError;
use super::Reply;
use super::changelog::LogDraft;
use super::{ClusterCatalog, Fencing, Lease, Outcome};

/// Longest lease: a holder that vanishes blocks others for at most this long.
pub const LEASE_TTL_MS_MAX: u64 = 5 * 60 * 1000;
/// Distinct lease names kept; expired leases are evicted to make room.
pub const LEASES_MAX: usize = 1024;
/// Longest lease name or holder.
pub const LEASE_NAME_BYTES_MAX: usize = 256;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Leases {
    leases: BTreeMap<String, Lease>,
    /// The last token handed out, by any lease.
    last_token: u64,
}

impl Leases {
    pub fn get(&self, name: &str) -> Option<&Lease> {
        self.leases.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Lease)> {
        self.leases.iter()
    }

    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Refuses unless `fencing` names a live lease whose current token it carries.
    pub(crate) fn check(&self, fencing: &Fencing, now_ms: u64) -> Result<(), CatalogError> {
        match self.leases.get(&fencing.lease) {
            Some(l) if l.token == fencing.token && l.is_live(now_ms) => Ok(()),
            other => Err(CatalogError::StaleFencingToken {
                lease: fencing.lease.clone(),
                presented: fencing.token,
                current: other.filter(|l| l.is_live(now_ms)).map(|l| l.token),
            }),
        }
    }
}

fn check_names(name: &str, holder: &str) -> Result<(), CatalogError> {
    for (what, s) in [("lease name", name), ("lease holder", holder)] {
        if s.is_empty() || s.len() > LEASE_NAME_BYTES_MAX {
            return Err(CatalogError::bad_value(what, format!("must be 1..={LEASE_NAME_BYTES_MAX} bytes")));
        }
    }
    Ok(())
}

fn check_ttl(ttl_ms: u64) -> Result<(), CatalogError> {
    if ttl_ms == 0 || ttl_ms > LEASE_TTL_MS_MAX {
        return Err(CatalogError::bad_value("lease ttl", format!("{ttl_ms} ms is outside 1..={LEASE_TTL_MS_MAX}")));
    }
    Ok(())
}

impl ClusterCatalog {
    pub(super) fn acquire_lease(
        &mut self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Outcome, CatalogError> {
        check_names(name, holder)?;
        check_ttl(ttl_ms)?;
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        let leases = &mut self.leases;
        match leases.leases.get(name) {
            Some(l) if l.is_live(now_ms) && l.holder != holder => {
                return Err(CatalogError::LeaseBusy {
                    lease: name.to_owned(),
                    holder: l.holder.clone(),
                    expires_at_ms: l.expires_at_ms,
                });
            }
            Some(l) if l.is_live(now_ms) => {
                // Re-acquiring a live lease renews it: the holder never lost it, so its token stays.
                let (token, acquired_at_ms) = (l.token, l.acquired_at_ms);
                let expires_at_ms = expires_at_ms.max(l.expires_at_ms);
                let lease = Lease { holder: holder.to_owned(), expires_at_ms, token, acquired_at_ms };
                leases.leases.insert(name.to_owned(), lease);
                return Ok(Outcome::silent(Reply::Lease { token, expires_at_ms }));
            }
            Some(_) => {}
            None => {
                if leases.leases.len() >= LEASES_MAX && leases.leases.values().all(|l| l.is_live(now_ms)) {
                    return Err(CatalogError::limit("number of leases", LEASES_MAX));
                }
            }
        }
        // Validated; from here on the command succeeds.
        let Some(token) = leases.last_token.checked_add(1) else {
            return Err(CatalogError::limit("fencing tokens", usize::MAX));
        };
        if leases.leases.len() >= LEASES_MAX && !leases.leases.contains_key(name) {
            leases.leases.retain(|_, l| l.is_live(now_ms));
        }
        leases.last_token = token;
        let lease = Lease { holder: holder.to_owned(), expires_at_ms, token, acquired_at_ms: now_ms };
        leases.leases.insert(name.to_owned(), lease);
        let log = LogDraft::new("lease.acquire", name).with("holder", holder).with("token", token);
        Ok(Outcome::logged(Reply::Lease { token, expires_at_ms }, log))
    }

    pub(super) fn renew_lease(
        &mut self,
        name: &str,
        holder: &str,
        token: u64,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Outcome, CatalogError> {
        check_ttl(ttl_ms)?;
        let Some(lease) = self.leases.leases.get_mut(name) else {
            return Err(CatalogError::LeaseNotHeld { lease: name.to_owned(), holder: holder.to_owned() });
        };
        // An expired lease is not renewed even if nobody took it: its holder must assume it lost
        // it, so it acquires again and gets a new token.
        if lease.holder != holder || lease.token != token || !lease.is_live(now_ms) {
            return Err(CatalogError::LeaseNotHeld { lease: name.to_owned(), holder: holder.to_owned() });
        }
        lease.expires_at_ms = lease.expires_at_ms.max(now_ms.saturating_add(ttl_ms));
        Ok(Outcome::silent(Reply::Lease { token, expires_at_ms: lease.expires_at_ms }))
    }

    pub(super) fn release_lease(&mut self, name: &str, holder: &str, token: u64) -> Result<Outcome, CatalogError> {
        match self.leases.leases.get(name) {
            // Already gone: releasing twice is harmless.
            None => Ok(Outcome::unchanged(Reply::Done)),
            Some(l) if l.holder == holder && l.token == token => {
                self.leases.leases.remove(name);
                Ok(Outcome::logged(Reply::Done, LogDraft::new("lease.release", name).with("holder", holder)))
            }
            Some(_) => Err(CatalogError::LeaseNotHeld { lease: name.to_owned(), holder: holder.to_owned() }),
        }
    }
}
