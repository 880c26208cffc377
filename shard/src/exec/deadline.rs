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
//! Must not: be consulted outside the blocking call that set it.

use std::cell::Cell;
use std::time::{Duration, Instant};

use bson::{Bson, Document};
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};

/// Documents a scan examines between two deadline checks.
pub const CHECK_EVERY: u64 = 128;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
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

/// MaxTimeMSExpired once the current operation's deadline has passed.
pub fn check() -> ExecResult<()> {
    match DEADLINE.with(Cell::get) {
        Some(at) if Instant::now() >= at => Err(expired()),
        _ => Ok(()),
    }
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
