//! Retryable writes at the router: what MongoDB's mongos tells drivers about them.
//!
//! A write sent with a session (`lsid`) and a `txnNumber` is executed at most once per statement
//! by the shards (they record each statement with its write; see the shard's `exec::retry`), so
//! the router may resend it after a broken connection or a failover, and the driver may too. The
//! router labels the errors a driver should retry after with `RetryableWriteError`, as mongos does
//! (the retryable-writes specification's list of codes), on the top-level error and for a
//! `writeConcernError`. Split batches name each statement by its client index (`stmtIds`), so a
//! statement has the same id whichever shard runs it and however the batch was split.
//!
//! Multi-document transactions are not supported: a command that starts or continues one is
//! refused instead of being run outside a transaction.
//!
//! Must not: retry anything itself (`exec::call` does, bounded), or touch statements.

use bson::raw::{RawArrayBuf, RawDocument};
use bson::{RawBsonRef, RawDocumentBuf, cstr};
use shoal_proto::ErrorCode;

use crate::command::Command;
use crate::error::CommandError;

/// The label drivers look for (MongoDB 4.4+).
pub const RETRYABLE_WRITE_ERROR: &str = "RetryableWriteError";

/// Codes after which a retryable write may be sent again (the retryable-writes specification).
const RETRYABLE_CODES: &[ErrorCode] = &[
    ErrorCode::InterruptedAtShutdown,
    ErrorCode::InterruptedDueToReplStateChange,
    ErrorCode::NotWritablePrimary,
    ErrorCode::NotPrimaryNoSecondaryOk,
    ErrorCode::NotPrimaryOrSecondary,
    ErrorCode::PrimarySteppedDown,
    ErrorCode::ShutdownInProgress,
    ErrorCode::HostNotFound,
    ErrorCode::HostUnreachable,
    ErrorCode::NetworkTimeout,
    ErrorCode::SocketException,
    ErrorCode::ExceededTimeLimit,
];

/// Whether a retryable write that failed with `code` may be sent again.
pub fn is_retryable(code: ErrorCode) -> bool {
    RETRYABLE_CODES.contains(&code)
}

/// Whether the command body carries a `txnNumber` (a retryable write, since transactions are
/// refused before this matters).
pub fn has_txn_number(body: &RawDocument) -> bool {
    matches!(body.get("txnNumber"), Ok(Some(_)))
}

/// Whether `cmd` is a retryable write (a write command with a session and a transaction number).
pub fn is_retryable_write(cmd: &Command) -> bool {
    cmd.spec.is_some_and(|s| s.retryable) && has_txn_number(&cmd.body)
}

/// Refuses commands of multi-document transactions (`startTransaction`, `autocommit: false`,
/// `commitTransaction`, `abortTransaction`).
pub fn refuse_transactions(cmd: &Command) -> Result<(), CommandError> {
    let in_transaction = matches!(cmd.body.get("autocommit"), Ok(Some(RawBsonRef::Boolean(false))))
        || matches!(cmd.body.get("startTransaction"), Ok(Some(_)))
        || matches!(cmd.name.as_str(), "commitTransaction" | "abortTransaction");
    if in_transaction {
        return Err(CommandError::new(
            ErrorCode::IllegalOperation,
            "multi-document transactions are not supported by Shoal; run the writes without a transaction",
        ));
    }
    Ok(())
}

/// Adds `errorLabels: ["RetryableWriteError"]` to `reply` (an error reply, or a reply with a
/// `writeConcernError`) when the code calls for it.
pub fn label(cmd: &Command, reply: &mut RawDocumentBuf) {
    if !is_retryable_write(cmd) {
        return;
    }
    let code = match reply.get("ok") {
        Ok(Some(RawBsonRef::Double(0.0))) => reply.get_i32("code").ok(),
        _ => reply.get_document("writeConcernError").ok().and_then(|w| w.get_i32("code").ok()),
    };
    // The reply's number is the edge: a code Shoal does not name is not a retryable one.
    if code.and_then(ErrorCode::from_code).is_some_and(is_retryable) {
        let mut labels = RawArrayBuf::new();
        labels.push(RETRYABLE_WRITE_ERROR);
        reply.append(cstr!("errorLabels"), labels);
    }
}

/// `stmtIds` for a shard request carrying the client's statements `indexes` of a retryable write
/// (nothing for other writes).
pub fn stmt_ids(template: &RawDocumentBuf, indexes: &[usize]) -> Option<RawArrayBuf> {
    if !has_txn_number(template) {
        return None;
    }
    let mut ids = RawArrayBuf::new();
    for i in indexes {
        ids.push(*i as i32);
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn command(body: RawDocumentBuf) -> Command {
        Command::internal(body, "db", 1)
    }

    #[test]
    fn labels_only_retryable_codes_of_retryable_writes() {
        let retryable = command(rawdoc! { "insert": "c", "lsid": { "id": 1 }, "txnNumber": 3_i64 });
        let plain = command(rawdoc! { "insert": "c" });
        let mut reply = rawdoc! { "ok": 0.0, "code": 10107, "codeName": "NotWritablePrimary" };
        label(&retryable, &mut reply);
        assert!(reply.get_array("errorLabels").is_ok());
        let mut reply = rawdoc! { "ok": 0.0, "code": 11000 };
        label(&retryable, &mut reply);
        assert!(reply.get_array("errorLabels").is_err(), "a duplicate key is not retryable");
        let mut reply = rawdoc! { "ok": 0.0, "code": 10107 };
        label(&plain, &mut reply);
        assert!(reply.get_array("errorLabels").is_err(), "no txnNumber, no label");
        let mut reply = rawdoc! { "n": 1, "writeConcernError": { "code": 189 }, "ok": 1.0 };
        label(&retryable, &mut reply);
        assert!(reply.get_array("errorLabels").is_ok());
        let mut reply = rawdoc! { "n": 1, "writeConcernError": { "code": 64 }, "ok": 1.0 };
        label(&retryable, &mut reply);
        assert!(reply.get_array("errorLabels").is_err(), "a write-concern timeout is not retryable");
    }

    #[test]
    fn transactions_are_refused() {
        let start =
            command(rawdoc! { "insert": "c", "txnNumber": 1_i64, "startTransaction": true, "autocommit": false });
        assert_eq!(refuse_transactions(&start).map_err(|e| e.code), Err(ErrorCode::IllegalOperation.code()));
        let commit = command(rawdoc! { "commitTransaction": 1, "txnNumber": 1_i64, "autocommit": false });
        assert!(refuse_transactions(&commit).is_err());
        assert!(refuse_transactions(&command(rawdoc! { "insert": "c", "txnNumber": 1_i64 })).is_ok());
    }
}
