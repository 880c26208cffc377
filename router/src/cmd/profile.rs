//! The profiler through the router, and the router's own slow-operation log.
//!
//! `profile` (`db.setProfilingLevel(level, {slowms, sampleRate, filter})`) goes to every shard's
//! primary, where operations run and are profiled into `<db>.system.profile`; its reply is the
//! first shard's (`was`, `slowms`, `sampleRate`, `filter`, `note`). The router keeps the same
//! `slowms` and `sampleRate` for its slow-operation log lines ([`Slow`]). A real mongos refuses
//! levels 1 and 2 (it has no collection to profile into); Shoal's router passes them to the
//! shards instead, so an operator can profile the whole cluster from one connection.
//!
//! Reads of `<db>.system.profile` gather every shard's entries ([`documents`], oldest first,
//! each with the `shard` it came from); `config_db` runs the client's find, count or pipeline
//! over them.
//!
//! Must not: profile anything itself (the shards do), or keep entries.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::commands::Kind;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::exec::call::broadcast;
use crate::routing::{Placement, every_shard};
use crate::state::{ConnContext, RouterState};

/// The collection profiled operations are read from, in every database.
pub const PROFILE_COLLECTION: &str = "system.profile";

/// MongoDB's default `slowms`.
const DEFAULT_SLOW_MS: i64 = 100;

/// Entries asked of one shard at most (its ring holds 1 MiB of them per database).
const ENTRIES_PER_SHARD_MAX: i32 = 100_000;

/// The router's slow-operation threshold and sampling, as the last `profile` set them.
#[derive(Debug)]
pub struct Slow {
    slow_ms: AtomicI64,
    /// `sampleRate` as f64 bits.
    sample_rate: AtomicU64,
}

impl Default for Slow {
    fn default() -> Self {
        Self { slow_ms: AtomicI64::new(DEFAULT_SLOW_MS), sample_rate: AtomicU64::new(1.0_f64.to_bits()) }
    }
}

impl Slow {
    /// Whether a command that took `elapsed` is logged: slower than `slowms` and sampled in.
    fn logs(&self, elapsed: Duration) -> bool {
        let slow_ms = self.slow_ms.load(Ordering::Relaxed);
        if i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX) <= slow_ms && slow_ms >= 0 {
            return false;
        }
        let rate = f64::from_bits(self.sample_rate.load(Ordering::Relaxed));
        rate >= 1.0 || rand::random::<f64>() < rate
    }

    fn set(&self, slow_ms: Option<i64>, sample_rate: Option<f64>) {
        if let Some(ms) = slow_ms {
            self.slow_ms.store(ms, Ordering::Relaxed);
        }
        if let Some(rate) = sample_rate {
            self.sample_rate.store(rate.to_bits(), Ordering::Relaxed);
        }
    }
}

/// Writes the router's "Slow query" line for `cmd` if it was slow: what the client sent, for how
/// long, and how it ended. Handshakes and other informational commands (an awaitable `hello`
/// waits by design) are not logged.
pub fn log_if_slow(
    state: &RouterState,
    conn: &ConnContext,
    cmd: &Command,
    elapsed: Duration,
    reply_len: usize,
    error: Option<&CommandError>,
) {
    if cmd.spec.is_none_or(|s| s.kind == Kind::Info) || !state.slow.logs(elapsed) {
        return;
    }
    let ns = match cmd.collection() {
        Ok(coll) => format!("{}.{coll}", cmd.db),
        Err(_) => format!("{}.$cmd", cmd.db),
    };
    let mut attr = doc! {
        "type": "command",
        "ns": ns,
        "command": crate::cmd::operations::truncated_command(&cmd.body),
        "numYields": 0,
        "reslen": i64::try_from(reply_len).unwrap_or(i64::MAX),
        "remote": conn.peer.to_string(),
        "protocol": "op_msg",
        "durationMillis": i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
    };
    if let Some(app) = conn.app_name.get() {
        attr.insert("appName", app.as_str());
    }
    if let Some(e) = error {
        attr.insert("ok", 0);
        attr.insert("errMsg", e.errmsg.as_str());
        attr.insert("errName", e.code_name.as_str());
        attr.insert("errCode", e.code);
    }
    shoal_telemetry::log::slow_query(&format!("conn{}", conn.id), attr);
}

/// `{profile: <level>, slowms?, sampleRate?, filter?}` on any database.
pub async fn profile(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let (slow_ms, sample_rate) = parse(&body)?;
    let shards = every_shard(state).await?;
    let mut replies = broadcast(state, cmd, &Placement::NoDatabase, &shards).await.into_iter();
    let first = replies.next().unwrap_or_else(|| Err(CommandError::new(ErrorCode::ShardNotFound, "no shards")))?;
    // Every shard answers the same way to the same arguments; one failing is the reply.
    for r in replies {
        r?;
    }
    state.slow.set(slow_ms, sample_rate);
    let mut out = Document::new();
    for key in ["was", "slowms", "sampleRate", "filter", "note"] {
        if let Some(v) = first.get(key) {
            out.insert(key, v.clone());
        }
    }
    Ok(RawDocumentBuf::try_from(&out)?)
}

/// The router's own checks of `slowms` and `sampleRate` (the shards check the rest).
fn parse(body: &Document) -> Result<(Option<i64>, Option<f64>), CommandError> {
    let slow_ms = match body.get("slowms") {
        None => None,
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Double(f)) if f.fract() == 0.0 => Some(*f as i64),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'profile.slowms' is the wrong type, expected type 'int'",
            ));
        }
    };
    let sample_rate = match body.get("sampleRate") {
        None => None,
        Some(Bson::Double(f)) if (0.0..=1.0).contains(f) => Some(*f),
        Some(Bson::Int32(n)) if (0..=1).contains(n) => Some(f64::from(*n)),
        Some(Bson::Double(_) | Bson::Int32(_)) => {
            return Err(CommandError::bad_value("'sampleRate' must be between 0.0 and 1.0 inclusive"));
        }
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'profile.sampleRate' is the wrong type, expected type 'double'",
            ));
        }
    };
    Ok((slow_ms, sample_rate))
}

/// Every shard's `<db>.system.profile` entries, oldest first, each naming its `shard`.
pub async fn documents(state: &RouterState, db: &str) -> Result<Vec<Document>, CommandError> {
    let body = doc! { "find": PROFILE_COLLECTION, "batchSize": ENTRIES_PER_SHARD_MAX, "$db": db };
    let cmd = Command::internal(RawDocumentBuf::try_from(&body)?, db, 0);
    let shards: std::collections::BTreeSet<String> = every_shard(state).await?.into_iter().collect();
    let per_shard = crate::exec::call::read::gather(state, &cmd, &Placement::NoDatabase, &shards, &body, false).await?;
    let mut docs = Vec::new();
    for (shard, entries) in shards.iter().zip(per_shard) {
        for mut d in entries {
            d.insert("shard", shard.as_str());
            docs.push(d);
        }
    }
    docs.sort_by_key(|d| d.get_datetime("ts").map(|t| t.timestamp_millis()).unwrap_or(0));
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowms_and_sample_rate_decide_what_is_logged() {
        let slow = Slow::default();
        assert!(!slow.logs(Duration::from_millis(100)));
        assert!(slow.logs(Duration::from_millis(101)));
        slow.set(Some(0), None);
        assert!(slow.logs(Duration::from_millis(1)));
        slow.set(None, Some(0.0));
        assert!(!slow.logs(Duration::from_secs(5)), "a sample rate of 0 logs nothing");
    }

    #[test]
    fn arguments_are_checked_as_mongodb_does() {
        assert_eq!(parse(&doc! { "profile": 1, "slowms": 5, "sampleRate": 0.5 }).expect("ok"), (Some(5), Some(0.5)));
        assert_eq!(parse(&doc! { "profile": 1, "sampleRate": 1.5 }).expect_err("range").code, 2);
        assert_eq!(parse(&doc! { "profile": 1, "slowms": "x" }).expect_err("type").code, 14);
    }
}
