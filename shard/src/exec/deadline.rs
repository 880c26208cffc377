//! `maxTimeMS` on a shard: the operation's deadline, set for the blocking call that runs the
//! command ([`set`]) and checked by the loops that can run long — the document scans of every
//! read and write ([`check`], every [`CHECK_EVERY`] documents) — so an operation past its time
//! stops with MaxTimeMSExpired (50) instead of running to completion.
//!
//! The deadline lives in a thread-local because the blocking call runs on one thread from start
//! to end and the scans sit several layers below the command; a guard restores the previous
//! value, so nested or later calls on that thread never inherit it. A cursor's `getMore` runs
//! without the original deadline (MongoDB bounds a `getMore` only by its own `maxTimeMS`).
//!
//! The same thread-local holds the operation the call runs for ([`enter`], an entry of
//! [`crate::ops`]): each [`check`] fails with Interrupted (11601) once `killOp` or `killSessions`
//! marked it killed, and publishes the keys and documents the call's scans examined so far
//! (`scan::counters`, plain thread-local adds) to the operation, so `currentOp` sees them move
//! at one atomic store per [`CHECK_EVERY`] documents. [`planned`] records the plan a read chose
//! (`planSummary`). A killed operation that is waiting (for a write concern, the commit point)
//! is not woken: it notices at its next check, if any.
//!
//! Must not: be consulted outside the blocking call that set it.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::exec::scan::counters;
use crate::ops::Op;

/// Documents a scan examines between two deadline checks.
pub const CHECK_EVERY: u64 = 128;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// The operation this thread's blocking call runs for, and the scan counters when it began.
struct Current {
    op: Arc<Op>,
    base: (u64, u64),
}

impl Current {
    fn publish(&self) {
        let (keys, docs) = counters::since(self.base);
        self.op.examined(keys, docs);
    }
}

/// Restores the thread's previous operation when dropped, after publishing the final counters.
pub struct OpGuard(Option<Current>);

impl Drop for OpGuard {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with_borrow_mut(|c| {
            if let Some(current) = c.as_ref() {
                current.publish();
            }
            *c = previous;
        });
    }
}

/// Makes `op` the operation this thread's blocking call runs for until the guard drops.
pub fn enter(op: Arc<Op>) -> OpGuard {
    let current = Current { op, base: counters::read() };
    OpGuard(CURRENT.with_borrow_mut(|c| c.replace(current)))
}

/// The opid of the operation this thread runs for, if any.
pub fn current_opid() -> Option<i32> {
    CURRENT.with_borrow(|c| c.as_ref().map(|c| c.op.opid))
}

/// Records the plan the current operation's read chose (its `planSummary`).
pub fn planned(plan: &crate::exec::plan::Plan) {
    CURRENT.with_borrow(|c| {
        if let Some(c) = c {
            c.op.set_plan_summary(crate::exec::plan::explain::summary(plan));
        }
    });
}

/// Restores the thread's previous deadline when dropped.
pub struct Guard(Option<Instant>);

impl Drop for Guard {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.0));
    }
}

/// Makes `deadline` the current operation's deadline on this thread until the guard drops.
pub fn set(deadline: Option<Instant>) -> Guard {
    Guard(DEADLINE.with(|d| d.replace(deadline)))
}

/// Interrupted once the current operation was killed, MaxTimeMSExpired once its deadline has
/// passed; publishes its scan counters.
pub fn check() -> ExecResult<()> {
    let killed = CURRENT.with_borrow(|c| {
        c.as_ref().is_some_and(|c| {
            c.publish();
            c.op.is_killed()
        })
    });
    if killed {
        return Err(interrupted());
    }
    match DEADLINE.with(Cell::get) {
        Some(at) if Instant::now() >= at => Err(expired()),
        _ => Ok(()),
    }
}

pub fn interrupted() -> ExecError {
    ExecError::new(ErrorCode::Interrupted, "operation was interrupted")
}

pub fn expired() -> ExecError {
    ExecError::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
}

/// The command's `maxTimeMS` (absent or 0: no limit), validated as MongoDB does: a non-negative
/// integer that fits in 32 bits.
pub fn parse(body: &Document) -> ExecResult<Option<Duration>> {
    let ms = match body.get("maxTimeMS") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) if f.fract() == 0.0 && f.abs() <= i32::MAX as f64 => *f as i64,
        Some(other) => {
            return Err(ExecError::bad_value(format!("maxTimeMS must be a non-negative integer, not {other}")));
        }
    };
    if !(0..=i64::from(i32::MAX)).contains(&ms) {
        return Err(ExecError::bad_value(format!("{ms} value for maxTimeMS is out of range [0, {}]", i32::MAX)));
    }
    Ok((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn parses_and_expires() {
        assert_eq!(parse(&doc! {"find": "c"}).expect("absent"), None);
        assert_eq!(parse(&doc! {"maxTimeMS": 0}).expect("zero"), None);
        assert_eq!(parse(&doc! {"maxTimeMS": 250_i64}).expect("ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse(&doc! {"maxTimeMS": -1}).map_err(|e| e.code), Err(ErrorCode::BadValue));
        assert_eq!(parse(&doc! {"maxTimeMS": "x"}).map_err(|e| e.code), Err(ErrorCode::BadValue));
        assert!(check().is_ok(), "no deadline, no expiry");
        {
            let _g = set(Some(Instant::now() - Duration::from_millis(1)));
            assert_eq!(check().map_err(|e| e.code), Err(ErrorCode::MaxTimeMSExpired));
        }
        assert!(check().is_ok(), "the guard restored the previous deadline");
    }
}
