//! `replSetStepDown` on the primary: stop taking writes, wait (up to `secondaryCatchUpPeriodSecs`)
//! for a secondary to have everything, then give the lease up (`resign` in the next heartbeat,
//! so the config service opens a new term without waiting the lease out) and stay unelectable for
//! `stepDownSecs`. As in MongoDB, with no caught-up secondary the primary stays primary and the
//! command fails (ExceededTimeLimit, 262) unless `force`.

use std::time::{Duration, Instant};

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use super::Repl;
use super::state::MemberState;
use crate::error::ExecError;
use crate::exec::args::as_f64;

/// MongoDB's defaults.
pub const STEP_DOWN_SECS_DEFAULT: u64 = 60;
pub const CATCH_UP_SECS_DEFAULT: u64 = 10;
/// How long the command waits for the config service to open the new term.
pub const NEW_TERM_WAIT: Duration = Duration::from_secs(10);

fn secs(body: &Document, field: &str, default: u64) -> Result<u64, ExecError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(default),
        Some(v) => match as_f64(v) {
            Some(x) if x >= 0.0 && x.is_finite() => Ok(x as u64),
            _ => Err(ExecError::bad_value(format!("{field} must be a non-negative number"))),
        },
    }
}

pub async fn step_down(repl: &Repl, body: &Document) -> Result<Document, ExecError> {
    let step_down_secs = secs(body, "replSetStepDown", STEP_DOWN_SECS_DEFAULT)?;
    let catch_up_secs = secs(body, "secondaryCatchUpPeriodSecs", CATCH_UP_SECS_DEFAULT)?;
    let force = body.get_bool("force").unwrap_or(false);
    if catch_up_secs > step_down_secs {
        return Err(ExecError::bad_value("secondaryCatchUpPeriodSecs must be at most replSetStepDown's period"));
    }
    let (term, lease_until) = {
        let inner = repl.lock();
        if inner.state != MemberState::Primary {
            return Err(ExecError::new(ErrorCode::NotWritablePrimary, "not primary so can't step down"));
        }
        (inner.term, inner.lease_until)
    };
    // Stopped first, then read: no write of this lease commits after set_not_writable returns.
    repl.store.set_not_writable();
    let target = repl.store.position().optime;
    let deadline = Instant::now() + Duration::from_secs(catch_up_secs);
    let mut progress = repl.subscribe_progress();
    while !force && !repl.secondary_caught_up(target) {
        if Instant::now() >= deadline {
            if let Some(until) = lease_until {
                repl.store.set_writable_until(term as i64, until);
            }
            return Err(ExecError::new(ErrorCode::ExceededTimeLimit, "No electable secondaries caught up"));
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), progress.changed()).await;
    }
    {
        let mut inner = repl.lock();
        inner.resigning = true;
        inner.unelectable_until = Some(Instant::now() + Duration::from_secs(step_down_secs));
    }
    repl.heartbeat_now.notify_one();
    let mut roles = repl.subscribe_role();
    let waited = tokio::time::timeout(NEW_TERM_WAIT, roles.wait_for(|r| r.term > term)).await;
    match waited {
        Ok(Ok(_)) => Ok(Document::new()),
        _ => Err(ExecError::new(
            ErrorCode::ExceededTimeLimit,
            format!("stepped down, but the config service has not opened a new term within {NEW_TERM_WAIT:?}"),
        )),
    }
}
