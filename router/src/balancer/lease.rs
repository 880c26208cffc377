//! The balancer lease as this router sees it: whether it holds `BALANCER_LEASE`, with which
//! fencing token, and until when it may still act on it.
//!
//! ```text
//!  keeper task, every LEASE_RENEW_INTERVAL:           round loop, before every action:
//!    no token  -> AcquireLease(holder, TTL)             book.token(now) -> Some(t): act fenced by t
//!    token t   -> RenewLease(holder, t, TTL)                            -> None: stop the round
//!    granted   -> held until sent_at + TTL - margin
//!    refused   -> lost (another holder, or expired)
//!    no answer -> keep t until its local deadline, then lost
//! ```
//!
//! Invariant: the local deadline is measured from when the request was *sent*, never from when the
//! reply arrived, and shortened by [`LEASE_SAFETY_MARGIN`], so this router stops acting before the
//! catalog could grant the lease to another router (the catalog measures from the later log
//! time). The fencing token makes the catalog refuse a late write anyway; the deadline keeps us
//! from starting work that would be refused.
//!
//! [`LeaseBook`] is the pure bookkeeping (unit-tested with hand-made instants); [`keep`] is the
//! task that talks to the catalog.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal_proto::ErrorCode;
use shoal_proto::catalog::{BALANCER_LEASE, Command, Reply};
use tokio::sync::watch;

use crate::state::RouterState;

/// How long a grant lasts: a router that dies blocks balancing for at most this long.
pub const LEASE_TTL: Duration = Duration::from_secs(15);
/// Renewal period: three chances to renew before the lease runs out.
pub const LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(5);
/// Stop acting this long before the local deadline (clock drift, a slow commit).
pub const LEASE_SAFETY_MARGIN: Duration = Duration::from_secs(2);

/// What the keeper asks the catalog next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseRequest {
    Acquire,
    Renew { token: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    token: u64,
    /// Local instant after which the token must not be used.
    usable_until: Instant,
}

/// Whether this router holds the lease, decided only from the catalog's answers and local time.
#[derive(Debug, Default)]
pub struct LeaseBook {
    held: Option<Held>,
    /// Grants received (a new token each time the lease was taken afresh), for logs.
    grants: u64,
}

impl LeaseBook {
    pub fn next_request(&self, now: Instant) -> LeaseRequest {
        match self.token(now) {
            Some(token) => LeaseRequest::Renew { token },
            None => LeaseRequest::Acquire,
        }
    }

    /// The token to fence actions with, while it is still safely ours.
    pub fn token(&self, now: Instant) -> Option<u64> {
        self.held.filter(|h| now < h.usable_until).map(|h| h.token)
    }

    /// The catalog granted or renewed `token`; the request left at `sent_at`. Returns whether the
    /// token is new (a fresh grant rather than a renewal).
    pub fn granted(&mut self, token: u64, sent_at: Instant) -> bool {
        let usable_until = sent_at + LEASE_TTL.saturating_sub(LEASE_SAFETY_MARGIN);
        let fresh = self.held.is_none_or(|h| h.token != token);
        if fresh {
            self.grants += 1;
        }
        self.held = Some(Held { token, usable_until });
        fresh
    }

    /// The catalog refused (held by another router, or our lease expired): drop it at once.
    pub fn refused(&mut self) {
        self.held = None;
    }

    /// No answer: the token stays usable until its deadline, which [`Self::token`] enforces.
    pub fn unanswered(&mut self, now: Instant) {
        if self.token(now).is_none() {
            self.held = None;
        }
    }

    pub fn grants(&self) -> u64 {
        self.grants
    }
}

/// The book shared by the keeper task and the round loop (a std mutex: held for a few
/// instructions, never across an await).
pub type SharedBook = Arc<Mutex<LeaseBook>>;

pub fn token(book: &SharedBook) -> Option<u64> {
    book.lock().map(|b| b.token(Instant::now())).unwrap_or(None)
}

/// Acquires and renews the lease under `holder` until `stop` turns true, then releases it.
pub async fn keep(state: Arc<RouterState>, holder: String, book: SharedBook, mut stop: watch::Receiver<bool>) {
    let ttl_ms = u64::try_from(LEASE_TTL.as_millis()).unwrap_or(u64::MAX);
    loop {
        let sent_at = Instant::now();
        let request = match book.lock() {
            Ok(b) => b.next_request(sent_at),
            Err(_) => return,
        };
        let command = match &request {
            LeaseRequest::Acquire => {
                Command::AcquireLease { name: BALANCER_LEASE.into(), holder: holder.clone(), ttl_ms }
            }
            LeaseRequest::Renew { token } => {
                Command::RenewLease { name: BALANCER_LEASE.into(), holder: holder.clone(), token: *token, ttl_ms }
            }
        };
        let answer = tokio::time::timeout(LEASE_RENEW_INTERVAL, state.catalog.write(&command)).await;
        if let Ok(mut b) = book.lock() {
            match answer {
                Ok(Ok(Reply::Lease { token, .. })) => {
                    if b.granted(token, sent_at) {
                        tracing::info!(%holder, token, "balancer lease acquired");
                    }
                }
                Ok(Err(e)) if e.is(ErrorCode::LockBusy) => {
                    if b.token(Instant::now()).is_some() {
                        tracing::warn!(%holder, errmsg = %e.errmsg, "balancer lease lost");
                    }
                    b.refused();
                }
                Ok(Ok(other)) => {
                    tracing::warn!(?other, "unexpected reply to a lease request");
                    b.unanswered(Instant::now());
                }
                Ok(Err(e)) => {
                    tracing::warn!(errmsg = %e.errmsg, "balancer lease request failed");
                    b.unanswered(Instant::now());
                }
                Err(_) => {
                    tracing::warn!("balancer lease request timed out");
                    b.unanswered(Instant::now());
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(LEASE_RENEW_INTERVAL) => {}
            _ = stop.changed() => break,
        }
    }
    release(&state, &holder, &book).await;
}

/// Gives the lease back at shutdown so another router need not wait for it to expire.
async fn release(state: &RouterState, holder: &str, book: &SharedBook) {
    let Some(token) = token(book) else { return };
    if let Ok(mut b) = book.lock() {
        b.refused();
    }
    let command = Command::ReleaseLease { name: BALANCER_LEASE.into(), holder: holder.to_owned(), token };
    match tokio::time::timeout(LEASE_SAFETY_MARGIN, state.catalog.write(&command)).await {
        Ok(Ok(_)) => tracing::info!(%holder, "balancer lease released"),
        Ok(Err(e)) => tracing::warn!(errmsg = %e.errmsg, "releasing the balancer lease failed"),
        Err(_) => tracing::warn!("releasing the balancer lease timed out; it expires by itself"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_renew_and_expire_by_the_send_time() {
        let t0 = Instant::now();
        let mut book = LeaseBook::default();
        assert_eq!(book.next_request(t0), LeaseRequest::Acquire);
        assert!(book.granted(7, t0), "a first grant is fresh");
        assert_eq!(book.token(t0), Some(7));
        assert_eq!(book.next_request(t0), LeaseRequest::Renew { token: 7 });
        // Usable until sent_at + TTL - margin, never later.
        let edge = t0 + LEASE_TTL - LEASE_SAFETY_MARGIN;
        assert_eq!(book.token(edge - Duration::from_millis(1)), Some(7));
        assert_eq!(book.token(edge), None);
        // A renewal sent later moves the deadline and is not a fresh grant.
        let t1 = t0 + LEASE_RENEW_INTERVAL;
        assert!(!book.granted(7, t1));
        assert_eq!(book.token(edge), Some(7));
        assert_eq!(book.grants(), 1);
    }

    #[test]
    fn a_refusal_drops_the_token_at_once_and_silence_only_at_the_deadline() {
        let t0 = Instant::now();
        let mut book = LeaseBook::default();
        book.granted(3, t0);
        book.unanswered(t0 + Duration::from_secs(1));
        assert_eq!(book.token(t0 + Duration::from_secs(1)), Some(3), "one missed renewal keeps the lease");
        let late = t0 + LEASE_TTL;
        book.unanswered(late);
        assert_eq!(book.next_request(late), LeaseRequest::Acquire);
        book.granted(9, late);
        assert_eq!(book.grants(), 2, "a new token after expiry is a fresh grant");
        book.refused();
        assert_eq!(book.token(late), None);
        assert_eq!(book.next_request(late), LeaseRequest::Acquire);
    }
}
