//! Read concerns on a replica-group member: what a read may return with respect to replication.
//!
//! - `local` / `available` (the default): whatever this member has applied.
//! - `majority`: nothing that could still roll back. There is no MVCC snapshot at the commit
//!   point here (fjall has sequence-number snapshots, but the store's reads, indexes and cursors
//!   are not built on one, and keeping one open at the commit point pins every version written
//!   since), so the read runs on current data and its reply is held back until this member's
//!   majority commit point covers the newest entry the data could contain (the store's position
//!   read after the batch was produced). A write that later rolls back is never majority
//!   committed, so a read that saw it never answers: it fails with MaxTimeMSExpired (50) at
//!   `maxTimeMS` (or [`MAJORITY_WAIT_DEFAULT`]), or with InterruptedDueToReplStateChange (11602)
//!   when the member's role or term changes meanwhile (the router then retries elsewhere).
//!   Cursors opened this way wait the same way on each `getMore` ([`MajorityCursors`]).
//! - `linearizable`: primary only (NotWritablePrimary elsewhere), read preference primary only;
//!   the read waits like `majority`, then confirms the member is still primary in the same term
//!   with an unexpired lease — the config service names no other primary before that lease
//!   lapses, so no newer write can exist elsewhere.
//! - `snapshot` (outside transactions) is refused; `afterClusterTime` is waited for (the member's
//!   applied optime reaching it, bounded like `majority`); `afterOpTime` is internal and refused.
//!
//! ```text
//!  read ─ parse(readConcern) ─ before(): linearizable on a primary? afterClusterTime reached?
//!       ─ run the query ─ position = store.position() ─ after(): commit point >= position? ─ reply
//! ```
//!
//! Must not: change data (even linearizable reads write nothing), or wait without a bound.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bson::raw::{RawBsonRef, RawDocument};
use shoal_proto::ErrorCode;

use super::{MemberState, Repl};
use crate::error::{ExecError, ExecResult};
use crate::store::Writability;
use crate::store::oplog::{OpTime, TsKey};

/// How long a `majority` / `linearizable` read (or an `afterClusterTime` wait) waits for the
/// commit point without a `maxTimeMS`.
pub const MAJORITY_WAIT_DEFAULT: Duration = Duration::from_secs(30);
/// Majority cursors remembered at once (ids of cursors closed by the shard's idle reaper are
/// dropped oldest first beyond it).
pub const MAJORITY_CURSORS_MAX: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Local,
    Available,
    Majority,
    Linearizable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadConcern {
    pub level: Level,
    pub after_cluster_time: Option<TsKey>,
    /// `maxTimeMS` of the command, bounding the waits.
    pub max_time: Option<Duration>,
}

impl ReadConcern {
    /// Whether the reply waits for the commit point.
    pub fn majority(&self) -> bool {
        matches!(self.level, Level::Majority | Level::Linearizable)
    }

    fn bound(&self) -> Duration {
        self.max_time.unwrap_or(MAJORITY_WAIT_DEFAULT)
    }
}

fn err(code: ErrorCode, msg: impl Into<String>) -> ExecError {
    ExecError::new(code, msg)
}

/// The `readConcern` and `maxTimeMS` of command `cmd` (its body, raw).
pub fn parse(body: &RawDocument, cmd: &str) -> ExecResult<ReadConcern> {
    let max_time = match body.get("maxTimeMS")? {
        None | Some(RawBsonRef::Null) => None,
        Some(RawBsonRef::Int32(n)) if n > 0 => Some(Duration::from_millis(n.unsigned_abs().into())),
        Some(RawBsonRef::Int64(n)) if n > 0 => Some(Duration::from_millis(n.unsigned_abs())),
        Some(RawBsonRef::Double(f)) if f >= 1.0 => Some(Duration::from_millis(f as u64)),
        // 0 means no limit; bad values are the command's own parser's to refuse.
        Some(_) => None,
    };
    let mut rc = ReadConcern { level: Level::Local, after_cluster_time: None, max_time };
    let d = match body.get("readConcern")? {
        None | Some(RawBsonRef::Null) => return Ok(rc),
        Some(RawBsonRef::Document(d)) => d,
        Some(_) => {
            return Err(err(ErrorCode::TypeMismatch, "BSON field 'readConcern' is the wrong type, expected object"));
        }
    };
    for entry in d {
        let (key, value) = entry?;
        match (key.as_str(), value) {
            ("level", RawBsonRef::String(level)) => {
                rc.level = match level {
                    "local" => Level::Local,
                    "available" => Level::Available,
                    "majority" => Level::Majority,
                    "linearizable" => Level::Linearizable,
                    "snapshot" if matches!(cmd, "find" | "aggregate" | "distinct") => {
                        return Err(err(
                            ErrorCode::NotImplemented,
                            "readConcern level 'snapshot' is not supported by Shoal (it keeps no snapshots); \
                             use 'majority' for reads that cannot roll back",
                        ));
                    }
                    "snapshot" => {
                        return Err(err(
                            ErrorCode::InvalidOptions,
                            format!("Command {cmd} does not support {{ readConcern: {{ level: \"snapshot\" }} }}"),
                        ));
                    }
                    other => {
                        return Err(err(
                            ErrorCode::BadValue,
                            format!("Enumeration value '{other}' for field 'readConcern.level' is not a valid value."),
                        ));
                    }
                }
            }
            ("level", _) => {
                return Err(err(ErrorCode::TypeMismatch, "BSON field 'readConcern.level' is the wrong type"));
            }
            ("afterClusterTime", RawBsonRef::Timestamp(t)) => rc.after_cluster_time = Some(t.into()),
            ("afterClusterTime", _) => {
                return Err(err(
                    ErrorCode::TypeMismatch,
                    "BSON field 'readConcern.afterClusterTime' is the wrong type, expected timestamp",
                ));
            }
            ("afterOpTime", _) => {
                return Err(err(ErrorCode::InvalidOptions, "readConcern.afterOpTime is internal and not accepted"));
            }
            ("provenance", _) => {}
            (other, _) => {
                return Err(err(
                    ErrorCode::Location40415,
                    format!("BSON field 'readConcern.{other}' is an unknown field."),
                ));
            }
        }
    }
    if rc.level == Level::Linearizable && rc.after_cluster_time.is_some() {
        return Err(err(ErrorCode::InvalidOptions, "afterClusterTime is not allowed with readConcern linearizable"));
    }
    Ok(rc)
}

/// What a read checks before it runs: a linearizable read needs the primary and read preference
/// primary (`secondary_ok` false); `afterClusterTime` waits until this member applied that far
/// (a primary has every write of its group already).
pub async fn before(repl: &Repl, rc: &ReadConcern, secondary_ok: bool) -> ExecResult<()> {
    let role = repl.role();
    let primary = matches!(role.state, MemberState::Primary | MemberState::Standalone);
    if rc.level == Level::Linearizable {
        if secondary_ok {
            return Err(err(ErrorCode::BadValue, "readConcern level linearizable requires read preference primary"));
        }
        if !primary {
            return Err(err(
                ErrorCode::NotWritablePrimary,
                format!("cannot satisfy linearizable read concern on non-primary node {}", repl.me),
            ));
        }
    }
    let Some(after) = rc.after_cluster_time else { return Ok(()) };
    if primary {
        return Ok(());
    }
    let deadline = Instant::now() + rc.bound();
    let mut rx = repl.store.subscribe();
    loop {
        if rx.borrow_and_update().optime.ts >= after {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline.into(), rx.changed()).await.is_err() {
            return Err(err(
                ErrorCode::MaxTimeMSExpired,
                format!("operation exceeded time limit waiting for afterClusterTime {after:?} on {}", repl.me),
            ));
        }
    }
}

/// What a read waits for after producing its batch: for `majority` and `linearizable`, the
/// commit point at or past `read_at` (the store's position taken after the batch).
pub async fn after(repl: &Repl, rc: &ReadConcern, read_at: OpTime) -> ExecResult<()> {
    if !rc.majority() || repl.is_standalone() {
        return Ok(());
    }
    let start = repl.role();
    let deadline = Instant::now() + rc.bound();
    let mut commits = repl.subscribe_commit_point();
    let mut roles = repl.subscribe_role();
    loop {
        if *commits.borrow_and_update() >= read_at {
            break;
        }
        let role = roles.borrow_and_update().clone();
        if role.term != start.term || role.state != start.state {
            return Err(interrupted(repl));
        }
        let timeout = tokio::time::sleep_until(deadline.into());
        tokio::select! {
            _ = commits.changed() => {}
            _ = roles.changed() => {}
            _ = timeout => {
                return Err(err(
                    ErrorCode::MaxTimeMSExpired,
                    format!(
                        "operation exceeded time limit: the data read on {} (up to {read_at}) was not majority \
                         committed within {:?}",
                        repl.me,
                        rc.bound()
                    ),
                ));
            }
        }
    }
    if rc.level == Level::Linearizable {
        let role = repl.role();
        let (_, writable) = repl.store.writability();
        let leased = match writable {
            Writability::Always => true,
            Writability::Until(t) => Instant::now() < t,
            Writability::Never => false,
        };
        if role.term != start.term || role.state != MemberState::Primary || !leased {
            return Err(interrupted(repl));
        }
    }
    Ok(())
}

fn interrupted(repl: &Repl) -> ExecError {
    err(
        ErrorCode::InterruptedDueToReplStateChange,
        format!("{} changed role or term while a majority read waited for its data to commit", repl.me),
    )
}

/// Cursors opened by `majority` / `linearizable` reads, so their `getMore`s wait the same way
/// (a `getMore` carries no read concern). Bounded: [`MAJORITY_CURSORS_MAX`], oldest dropped.
#[derive(Default)]
pub struct MajorityCursors {
    open: Mutex<HashMap<i64, (ReadConcern, Instant)>>,
}

impl MajorityCursors {
    pub fn remember(&self, cursor_id: i64, rc: ReadConcern) {
        if cursor_id == 0 || !rc.majority() {
            return;
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= MAJORITY_CURSORS_MAX
            && let Some(oldest) = open.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| *id)
        {
            open.remove(&oldest);
        }
        open.insert(cursor_id, (rc, Instant::now()));
    }

    /// The read concern a `getMore` on `cursor_id` waits for, if it was opened by a majority read.
    pub fn get(&self, cursor_id: i64) -> Option<ReadConcern> {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).get(&cursor_id).map(|(rc, _)| *rc)
    }

    pub fn forget(&self, cursor_id: i64) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&cursor_id);
    }
}

#[cfg(test)]
mod tests {
    use bson::rawdoc;

    use super::*;

    #[test]
    fn parses_levels_and_refuses_the_rest() {
        let rc = parse(&rawdoc! { "find": "c", "readConcern": { "level": "majority" }, "maxTimeMS": 500 }, "find")
            .expect("valid");
        assert_eq!((rc.level, rc.max_time), (Level::Majority, Some(Duration::from_millis(500))));
        assert!(rc.majority());
        assert_eq!(parse(&rawdoc! { "find": "c" }, "find").expect("absent").level, Level::Local);
        let code = |d: bson::RawDocumentBuf, cmd: &str| parse(&d, cmd).expect_err("invalid").code.code();
        assert_eq!(code(rawdoc! { "find": "c", "readConcern": { "level": "bogus" } }, "find"), 2);
        assert_eq!(code(rawdoc! { "count": "c", "readConcern": { "level": "snapshot" } }, "count"), 72);
        assert_eq!(code(rawdoc! { "find": "c", "readConcern": { "level": "snapshot" } }, "find"), 238);
        assert_eq!(code(rawdoc! { "find": "c", "readConcern": 1 }, "find"), 14);
        assert_eq!(code(rawdoc! { "find": "c", "readConcern": { "afterOpTime": {} } }, "find"), 72);
        let t = bson::Timestamp { time: 5, increment: 1 };
        let rc = parse(&rawdoc! { "find": "c", "readConcern": { "afterClusterTime": t } }, "find").expect("valid");
        assert_eq!(rc.after_cluster_time, Some(t.into()));
    }

    fn member(dir: &std::path::Path) -> std::sync::Arc<Repl> {
        let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
        let node = crate::open_node(&config).expect("open");
        Repl::new(
            "rs".into(),
            "m:1".into(),
            node.store.clone(),
            Default::default(),
            dir.join("rb"),
            false,
            node.metrics.repl.clone(),
        )
    }

    #[tokio::test]
    async fn majority_reads_wait_for_the_commit_point_or_fail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repl = member(dir.path());
        let at = OpTime { term: 1, ts: TsKey { time: 10, increment: 1 } };
        let short =
            ReadConcern { level: Level::Majority, after_cluster_time: None, max_time: Some(Duration::from_millis(30)) };
        assert_eq!(after(&repl, &short, at).await.expect_err("not committed").code.code(), 50);
        let local = ReadConcern { level: Level::Local, ..short };
        assert!(after(&repl, &local, at).await.is_ok(), "local reads never wait");
        // The commit point reaching the read's position releases it.
        let long = ReadConcern { max_time: Some(Duration::from_secs(30)), ..short };
        let waiting = {
            let repl = repl.clone();
            tokio::spawn(async move { after(&repl, &long, at).await })
        };
        tokio::task::yield_now().await;
        repl.advance_commit_point(at);
        assert!(waiting.await.expect("task").is_ok());
        // A role change while waiting interrupts the read (it may have seen entries that roll back).
        let later = OpTime { term: 1, ts: TsKey { time: 11, increment: 0 } };
        let waiting = {
            let repl = repl.clone();
            tokio::spawn(async move { after(&repl, &long, later).await })
        };
        tokio::task::yield_now().await;
        repl.set_state(MemberState::Rollback, "rolling back".into());
        assert_eq!(waiting.await.expect("task").expect_err("interrupted").code.code(), 11602);
    }

    #[tokio::test]
    async fn linearizable_reads_need_the_primary_and_read_preference_primary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repl = member(dir.path());
        let rc = ReadConcern { level: Level::Linearizable, after_cluster_time: None, max_time: None };
        assert_eq!(before(&repl, &rc, false).await.expect_err("not primary").code.code(), 10107);
        assert_eq!(before(&repl, &rc, true).await.expect_err("secondary ok").code.code(), 2);
    }

    #[test]
    fn majority_cursors_are_remembered_until_forgotten() {
        let cursors = MajorityCursors::default();
        let majority = ReadConcern { level: Level::Majority, after_cluster_time: None, max_time: None };
        cursors.remember(7, majority);
        cursors.remember(8, ReadConcern { level: Level::Local, ..majority });
        assert_eq!(cursors.get(7), Some(majority));
        assert_eq!(cursors.get(8), None);
        cursors.forget(7);
        assert_eq!(cursors.get(7), None);
    }
}
