//! Retryable writes: a write sent with a session (`lsid`) and a `txnNumber` runs each of its
//! statements at most once, however often the driver (or the router) resends it.
//!
//! ```text
//! Meta: "retryhead/" ‖ lsid (16)             -> {txnNumber, lastUse}
//!       "retry/" ‖ lsid (16) ‖ stmtId (u32 BE) -> {txnNumber, ns, r: result}
//! ```
//! A statement's record is written in the same atomic batch as its documents and logged with them
//! ([`WriteTxn::put_meta`]), so members apply it, a new primary has it, rollback removes it with
//! the write it belongs to, and initial sync copies it. A retried statement with a record returns
//! the recorded result instead of running again. Only the newest `txnNumber` of a session counts:
//! a record of an older one is stale (it is overwritten when its statement id is used again, never
//! scanned for or deleted on the write path, so sessions that write for hours leave no trail of
//! tombstones), and an older `txnNumber` is refused (TransactionTooOld 225), as MongoDB does. Records of sessions idle longer than the session timeout are reaped on the
//! primary ([`reap_idle`]). A migration copies the records of the collection it moves
//! ([`records_of`], [`merge`]).
//!
//! Only statements that succeed are recorded (a failed statement is run again on retry, as in
//! MongoDB). Multi-document updates and deletes cannot be retried (InvalidOptions 72).
//!
//! Must not: decide anything about routing, or keep records outside the store.

use bson::{Bson, DateTime, Document, doc};
use bytes::Bytes;
use shoal_proto::ErrorCode;

use crate::error::{ExecError, ExecResult};
use crate::storage::StorageError;
use crate::store::{Store, WriteTxn};

pub use crate::store::keys::{RETRY_HEAD_PREFIX as HEAD_PREFIX, RETRY_RECORD_PREFIX as RECORD_PREFIX};
/// How long a session's records are kept after its last write: MongoDB's default
/// `localLogicalSessionTimeoutMinutes`, which routers advertise as `logicalSessionTimeoutMinutes`.
pub const SESSION_IDLE_MAX: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// Records removed per reaping transaction.
const REAP_BATCH_MAX: usize = 1000;

/// The session and transaction number of a retryable write, and its statements' ids.
#[derive(Debug, Clone, PartialEq)]
pub struct Retryable {
    pub lsid: [u8; 16],
    pub txn_number: i64,
    /// Ids of the statements in the order sent (`stmtIds`, or `stmtId` for findAndModify);
    /// absent: statement `i` has id `i`.
    stmt_ids: Option<Vec<i32>>,
}

/// Set by a router on a statement it must target afresh (a single-document write whose filter
/// lacks the shard key): answer from the record if the statement ran here, else
/// NoSuchTransaction (251), without running it.
pub const PROBE_FIELD: &str = "$shoalRetryProbe";

pub fn is_probe(body: &Document) -> bool {
    matches!(body.get(PROBE_FIELD), Some(Bson::Boolean(true)))
}

/// The answer to a probe ([`PROBE_FIELD`]), or `None` when the request is not one.
pub fn answer_probe(store: &Store, body: &Document, retry: Option<&Retryable>) -> Option<ExecResult<Outcome>> {
    if !is_probe(body) {
        return None;
    }
    Some(match retry {
        Some(r) => r.probe(store),
        None => Err(bad(ErrorCode::BadValue, format!("{PROBE_FIELD} needs lsid and txnNumber"))),
    })
}

/// What a recorded statement did, enough to answer its retry as the first run was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Inserted,
    Updated {
        matched: i64,
        modified: i64,
        upserted: Option<Bson>,
    },
    Deleted {
        n: i64,
    },
    /// findAndModify's whole reply (`lastErrorObject`, `value`).
    Reply(Document),
}

impl Outcome {
    /// A write command's counts for this statement (a probe's answer).
    pub fn to_write_outcome(&self) -> crate::exec::WriteOutcome {
        let mut out = crate::exec::WriteOutcome::default();
        match self {
            Outcome::Inserted => out.n = 1,
            Outcome::Updated { matched, modified, upserted } => {
                out.n = matched + i64::from(upserted.is_some());
                out.n_modified = *modified;
                out.upserted.extend(upserted.clone().map(|id| (0, id)));
            }
            Outcome::Deleted { n } => out.n = *n,
            Outcome::Reply(_) => {}
        }
        out
    }

    fn to_document(&self) -> Document {
        match self {
            Outcome::Inserted => doc! { "k": "i" },
            Outcome::Updated { matched, modified, upserted } => {
                let mut d = doc! { "k": "u", "n": matched, "m": modified };
                if let Some(id) = upserted {
                    d.insert("u", id.clone());
                }
                d
            }
            Outcome::Deleted { n } => doc! { "k": "d", "n": n },
            Outcome::Reply(r) => doc! { "k": "r", "r": r.clone() },
        }
    }

    fn from_document(d: &Document) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupt { space: "meta", detail: format!("retryable-write record {d}") };
        Ok(match d.get_str("k").map_err(|_| corrupt())? {
            "i" => Outcome::Inserted,
            "u" => Outcome::Updated {
                matched: d.get_i64("n").map_err(|_| corrupt())?,
                modified: d.get_i64("m").map_err(|_| corrupt())?,
                upserted: d.get("u").cloned(),
            },
            "d" => Outcome::Deleted { n: d.get_i64("n").map_err(|_| corrupt())? },
            "r" => Outcome::Reply(d.get_document("r").map_err(|_| corrupt())?.clone()),
            _ => return Err(corrupt()),
        })
    }
}

fn bad(code: ErrorCode, msg: impl Into<String>) -> ExecError {
    ExecError::new(code, msg)
}

impl Retryable {
    /// The command's retryable-write fields, if it has them. `statements`: how many statements
    /// the command carries (`stmtIds` must name each).
    pub fn parse(body: &Document, statements: usize) -> ExecResult<Option<Self>> {
        let txn_number = match body.get("txnNumber") {
            None => return Ok(None),
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(other) => {
                return Err(bad(
                    ErrorCode::TypeMismatch,
                    format!("BSON field 'txnNumber' is the wrong type '{}', expected type 'long'", type_name(other)),
                ));
            }
        };
        if txn_number < 0 {
            return Err(bad(ErrorCode::BadValue, format!("txnNumber ({txn_number}) must be non-negative")));
        }
        if matches!(body.get("autocommit"), Some(Bson::Boolean(false))) || body.contains_key("startTransaction") {
            return Err(bad(ErrorCode::IllegalOperation, "multi-document transactions are not supported"));
        }
        let lsid = match body.get("lsid") {
            Some(Bson::Document(l)) => match l.get("id") {
                Some(Bson::Binary(b)) if b.bytes.len() == 16 => {
                    let mut id = [0u8; 16];
                    id.copy_from_slice(&b.bytes);
                    id
                }
                _ => return Err(bad(ErrorCode::BadValue, "lsid.id must be a UUID")),
            },
            Some(_) => return Err(bad(ErrorCode::TypeMismatch, "lsid must be an object")),
            None => {
                return Err(bad(
                    ErrorCode::InvalidOptions,
                    "Transaction number requires a session ID to also be specified",
                ));
            }
        };
        let stmt_ids = match (body.get("stmtIds"), body.get("stmtId")) {
            (Some(Bson::Array(ids)), _) => {
                let ids: Option<Vec<i32>> = ids
                    .iter()
                    .map(|v| match v {
                        Bson::Int32(i) if *i >= 0 => Some(*i),
                        Bson::Int64(i) => i32::try_from(*i).ok().filter(|i| *i >= 0),
                        _ => None,
                    })
                    .collect();
                match ids {
                    Some(ids) if ids.len() == statements => Some(ids),
                    _ => return Err(bad(ErrorCode::BadValue, "stmtIds must hold one non-negative id per statement")),
                }
            }
            (None, Some(Bson::Int32(i))) if *i >= 0 && statements == 1 => Some(vec![*i]),
            (None, Some(_)) => return Err(bad(ErrorCode::BadValue, "stmtId must be a non-negative int")),
            (Some(_), _) => return Err(bad(ErrorCode::TypeMismatch, "stmtIds must be an array")),
            (None, None) => None,
        };
        Ok(Some(Self { lsid, txn_number, stmt_ids }))
    }

    pub fn stmt_id(&self, index: usize) -> i32 {
        self.stmt_ids.as_ref().and_then(|ids| ids.get(index).copied()).unwrap_or(index as i32)
    }

    /// Makes this transaction number the session's current one or refuses an older one. Runs
    /// inside the write, before any statement. A transaction number new to this shard has no
    /// statement records here (a record is only ever written with, or after, its session head:
    /// in the statement's own batch, or by a migration's [`merge`]; [`reap_idle`] removes both
    /// at once), so its statements are not looked up.
    pub fn begin(&self, txn: &mut WriteTxn<'_>) -> Result<Result<Begun<'_>, ExecError>, StorageError> {
        let head_key = head_key(&self.lsid);
        if let Some(raw) = txn.get_meta(&head_key)? {
            match head_txn_number(&raw)? {
                n if n > self.txn_number => {
                    return Ok(Err(bad(
                        ErrorCode::TransactionTooOld,
                        format!(
                            "Retryable write with txnNumber {} is prohibited on session because a newer retryable \
                             write with txnNumber {n} has already started on this session.",
                            self.txn_number
                        ),
                    )));
                }
                n if n == self.txn_number => return Ok(Ok(Begun { retry: self, seen_before: true })),
                _ => {}
            }
        }
        let head = doc! { "txnNumber": self.txn_number, "lastUse": txn.now() };
        txn.put_meta(head_key, Some(encode(&head)?))?;
        Ok(Ok(Begun { retry: self, seen_before: false }))
    }

    /// The outcome a stored record holds for this transaction (`None`: absent, or of another one).
    fn outcome_of(&self, raw: Option<&[u8]>) -> Result<Option<Outcome>, StorageError> {
        let Some(raw) = raw else { return Ok(None) };
        if record_txn_number(raw) != Some(self.txn_number) {
            return Ok(None);
        }
        let d = Document::from_reader(&mut &raw[..])
            .map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })?;
        let r = d.get_document("r").map_err(|_| StorageError::Corrupt {
            space: "meta",
            detail: "retryable-write record without a result".into(),
        })?;
        Outcome::from_document(r).map(Some)
    }

    /// A probe ([`PROBE_FIELD`]) of statement 0: its recorded outcome, NoSuchTransaction if it
    /// did not run here, TransactionTooOld if the session moved on. Writes nothing.
    pub fn probe(&self, store: &Store) -> ExecResult<Outcome> {
        if let Some(raw) = store.meta_get(&head_key(&self.lsid))? {
            let n = head_txn_number(&raw)?;
            if n > self.txn_number {
                return Err(bad(
                    ErrorCode::TransactionTooOld,
                    format!("txnNumber {} is older than {n}", self.txn_number),
                ));
            }
        }
        let raw = store.meta_get(&record_key(&self.lsid, self.stmt_id(0)))?;
        self.outcome_of(raw.as_deref())?
            .ok_or_else(|| bad(ErrorCode::NoSuchTransaction, "the statement did not run on this shard"))
    }
}

/// A retryable write begun in a write transaction ([`Retryable::begin`]): what each statement did
/// before, and the record of what it does now.
#[derive(Debug, Clone, Copy)]
pub struct Begun<'r> {
    retry: &'r Retryable,
    /// The session's head already held this transaction number: some statements may have run.
    seen_before: bool,
}

/// Begins the command's retryable write if it is one (`Ok(Err(..))`: refused, TransactionTooOld).
pub fn begin<'r>(
    retry: Option<&'r Retryable>,
    txn: &mut WriteTxn<'_>,
) -> Result<Result<Option<Begun<'r>>, ExecError>, StorageError> {
    match retry {
        Some(r) => Ok(r.begin(txn)?.map(Some)),
        None => Ok(Ok(None)),
    }
}

impl Begun<'_> {
    /// What statement `index` did the first time, if it ran.
    pub fn executed(&self, txn: &WriteTxn<'_>, index: usize) -> Result<Option<Outcome>, StorageError> {
        if !self.seen_before {
            return Ok(None);
        }
        let r = self.retry;
        let raw = txn.get_meta(&record_key(&r.lsid, r.stmt_id(index)))?;
        r.outcome_of(raw.as_deref())
    }

    /// Records what statement `index` did, in the transaction that did it.
    pub fn record(
        &self,
        txn: &mut WriteTxn<'_>,
        index: usize,
        ns: &str,
        outcome: &Outcome,
    ) -> Result<(), StorageError> {
        let r = self.retry;
        let value = doc! { "txnNumber": r.txn_number, "ns": ns, "r": outcome.to_document() };
        txn.put_meta(record_key(&r.lsid, r.stmt_id(index)), Some(encode(&value)?))
    }
}

fn type_name(v: &Bson) -> &'static str {
    match v.element_type() {
        bson::spec::ElementType::String => "string",
        bson::spec::ElementType::Double => "double",
        bson::spec::ElementType::Boolean => "bool",
        bson::spec::ElementType::EmbeddedDocument => "object",
        bson::spec::ElementType::Array => "array",
        _ => "other",
    }
}

fn encode(d: &Document) -> Result<Vec<u8>, StorageError> {
    d.to_vec().map_err(|e| StorageError::Corrupt { space: "meta", detail: e.to_string() })
}

fn head_txn_number(raw: &[u8]) -> Result<i64, StorageError> {
    record_txn_number(raw)
        .ok_or_else(|| StorageError::Corrupt { space: "meta", detail: "retryable-write session head".into() })
}

pub fn head_key(lsid: &[u8; 16]) -> Vec<u8> {
    [HEAD_PREFIX, &lsid[..]].concat()
}

fn session_prefix(lsid: &[u8; 16]) -> Vec<u8> {
    [RECORD_PREFIX, &lsid[..]].concat()
}

pub fn record_key(lsid: &[u8; 16], stmt_id: i32) -> Vec<u8> {
    let mut key = session_prefix(lsid);
    key.extend_from_slice(&(stmt_id as u32).to_be_bytes());
    key
}

/// The `txnNumber` of a session head or statement record, read off its bytes.
fn record_txn_number(raw: &[u8]) -> Option<i64> {
    bson::RawDocument::from_bytes(raw).ok()?.get_i64("txnNumber").ok()
}

/// The session records a migration of `ns` carries to the recipient: each session's head with
/// its current transaction's statement records of `ns` (a migration only; this scans them all).
pub fn records_of(store: &Store, ns: &str) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
    let mut out = Vec::new();
    let mut heads: Vec<(Bytes, Option<i64>)> = Vec::new();
    for (key, value) in store.meta_records(RECORD_PREFIX)? {
        let Some(lsid) = key.get(RECORD_PREFIX.len()..RECORD_PREFIX.len() + 16) else { continue };
        let record_ns =
            Document::from_reader(&mut &value[..]).ok().and_then(|d| d.get_str("ns").ok().map(str::to_owned));
        if record_ns.as_deref() != Some(ns) {
            continue;
        }
        let head = Bytes::from([HEAD_PREFIX, lsid].concat());
        let current = match heads.iter().find(|(h, _)| *h == head) {
            Some((_, n)) => *n,
            None => {
                let raw = store.meta_get(&head)?;
                let n = raw.as_deref().map(head_txn_number).transpose()?;
                if let Some(raw) = raw {
                    out.push((head.clone(), raw));
                }
                heads.push((head, n));
                n
            }
        };
        if current.is_some() && record_txn_number(&value) == current {
            out.push((key, value));
        }
    }
    Ok(out)
}

/// Merges session records copied from a migration's donor: a session's records are taken when
/// their transaction number is at least ours (a newer one becomes current); older ones are
/// dropped, since the client has moved past them.
pub fn merge(txn: &mut WriteTxn<'_>, records: &[(Bytes, Bytes)]) -> Result<usize, StorageError> {
    let mut taken = 0;
    for (key, value) in records.iter().filter(|(k, _)| k.starts_with(HEAD_PREFIX)) {
        let Ok(lsid) = <[u8; 16]>::try_from(&key[HEAD_PREFIX.len()..]) else { continue };
        let theirs = head_txn_number(value)?;
        let ours = txn.get_meta(key)?.as_deref().map(head_txn_number).transpose()?;
        if ours.is_some_and(|o| o > theirs) {
            continue;
        }
        if ours != Some(theirs) {
            txn.put_meta(key.to_vec(), Some(value.to_vec()))?;
        }
        let prefix = session_prefix(&lsid);
        for (rkey, rvalue) in
            records.iter().filter(|(k, v)| k.starts_with(&prefix) && record_txn_number(v) == Some(theirs))
        {
            txn.put_meta(rkey.to_vec(), Some(rvalue.to_vec()))?;
            taken += 1;
        }
    }
    Ok(taken)
}

/// Removes the records of sessions idle for longer than [`SESSION_IDLE_MAX`] (a bounded number
/// per call; the primary calls it periodically). Returns how many keys were removed.
pub fn reap_idle(store: &Store, now: DateTime) -> Result<usize, StorageError> {
    let cutoff = now.timestamp_millis() - SESSION_IDLE_MAX.as_millis() as i64;
    let mut idle = Vec::new();
    for (key, value) in store.meta_records(HEAD_PREFIX)? {
        let last_use =
            Document::from_reader(&mut &value[..]).ok().and_then(|d| d.get_datetime("lastUse").ok().copied());
        if last_use.is_some_and(|t| t.timestamp_millis() < cutoff) {
            idle.push(key);
        }
        if idle.len() >= REAP_BATCH_MAX {
            break;
        }
    }
    if idle.is_empty() {
        return Ok(0);
    }
    let (removed, _) = store.write(|txn| {
        let mut removed = 0;
        for head in &idle {
            let Ok(lsid) = <[u8; 16]>::try_from(&head[HEAD_PREFIX.len()..]) else { continue };
            // Used again since the scan: keep it.
            let Some(raw) = txn.get_meta(head)? else { continue };
            let still_idle = Document::from_reader(&mut &raw[..])
                .ok()
                .and_then(|d| d.get_datetime("lastUse").ok().copied())
                .is_some_and(|t| t.timestamp_millis() < cutoff);
            if !still_idle {
                continue;
            }
            for (key, _) in txn.meta_records(&session_prefix(&lsid))? {
                txn.put_meta(key.to_vec(), None)?;
                removed += 1;
            }
            txn.put_meta(head.to_vec(), None)?;
            removed += 1;
        }
        Ok(removed)
    })?;
    Ok(removed)
}
