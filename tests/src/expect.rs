//! Assertions on the MongoDB errors the driver surfaces, by exact server error code.
//!
//! The driver reports a server error in one of three shapes:
//! - `ErrorKind::Command(CommandError { code, code_name, message })` for `ok: 0` replies;
//! - `ErrorKind::Write(WriteFailure::WriteError(..))` for a single-document write's `writeErrors`;
//! - `ErrorKind::InsertMany(InsertManyError { write_errors, .. })` for `insert_many`.
//!
//! Anything else (client-side refusal, I/O, server selection) is never a server answer, so these
//! helpers fail the test with the whole error when they meet it.

use mongodb::error::{CommandError, Error, ErrorKind, IndexedWriteError, WriteError, WriteFailure};

/// The server error code carried by `err`, if it is a server error of any of the three shapes
/// (for `insert_many`, the first write error's code).
pub fn server_code(err: &Error) -> Option<i32> {
    match err.kind.as_ref() {
        ErrorKind::Command(CommandError { code, .. }) => Some(*code),
        ErrorKind::Write(WriteFailure::WriteError(WriteError { code, .. })) => Some(*code),
        ErrorKind::Write(WriteFailure::WriteConcernError(wc)) => Some(wc.code),
        ErrorKind::InsertMany(e) => e.write_errors.as_ref().and_then(|w| w.first()).map(|w| w.code),
        _ => None,
    }
}

/// Asserts `result` is an `ok: 0` command error with `code`, a non-empty `errmsg` and a
/// non-empty `codeName`. Returns the error for further checks.
#[track_caller]
pub fn command_error<T: std::fmt::Debug>(result: Result<T, Error>, code: i32) -> CommandError {
    let err = match result {
        Ok(v) => panic!("expected command error {code}, got success: {v:?}"),
        Err(e) => e,
    };
    match err.kind.as_ref() {
        ErrorKind::Command(ce) => {
            assert_eq!(ce.code, code, "wrong error code in {ce:?}");
            assert!(!ce.message.is_empty(), "ok:0 without errmsg: {ce:?}");
            assert!(!ce.code_name.is_empty(), "ok:0 without codeName: {ce:?}");
            ce.clone()
        }
        _ => panic!("expected command error {code}, got {err:?}"),
    }
}

/// Asserts `result` failed with a single write error (from `insert_one`, `update_*`,
/// `replace_one`, `delete_*`) with `code`.
#[track_caller]
pub fn write_error<T: std::fmt::Debug>(result: Result<T, Error>, code: i32) -> WriteError {
    let err = match result {
        Ok(v) => panic!("expected write error {code}, got success: {v:?}"),
        Err(e) => e,
    };
    match err.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(we)) => {
            assert_eq!(we.code, code, "wrong write error code in {we:?}");
            assert!(!we.message.is_empty(), "write error without errmsg: {we:?}");
            we.clone()
        }
        _ => panic!("expected write error {code}, got {err:?}"),
    }
}

/// Asserts `result` failed with a server error of `code`, whichever of the three shapes carries
/// it (some operations, e.g. findAndModify, report write failures as command errors).
#[track_caller]
pub fn server_error<T: std::fmt::Debug>(result: Result<T, Error>, code: i32) -> Error {
    let err = match result {
        Ok(v) => panic!("expected server error {code}, got success: {v:?}"),
        Err(e) => e,
    };
    assert_eq!(server_code(&err), Some(code), "wrong or no server code in {err:?}");
    err
}

/// Asserts `result` is an `insert_many` failure and returns its write errors as
/// `(index, code)` pairs, in the order the server listed them.
#[track_caller]
pub fn insert_many_errors<T: std::fmt::Debug>(result: Result<T, Error>) -> Vec<(usize, i32)> {
    let err = match result {
        Ok(v) => panic!("expected insert_many write errors, got success: {v:?}"),
        Err(e) => e,
    };
    match err.kind.as_ref() {
        ErrorKind::InsertMany(e) => {
            let errors: &[IndexedWriteError] = e.write_errors.as_deref().unwrap_or_default();
            assert!(!errors.is_empty(), "InsertMany error without write errors: {err:?}");
            errors.iter().map(|w| (w.index, w.code)).collect()
        }
        _ => panic!("expected an InsertMany error, got {err:?}"),
    }
}

/// Asserts `result` is an `ok: 0` command error of any code, in MongoDB's shape (non-zero code,
/// `errmsg`, `codeName`); for cases where MongoDB's exact code is version-dependent.
#[track_caller]
pub fn any_command_error<T: std::fmt::Debug>(result: Result<T, Error>) -> CommandError {
    let err = match result {
        Ok(v) => panic!("expected a command error, got success: {v:?}"),
        Err(e) => e,
    };
    match err.kind.as_ref() {
        ErrorKind::Command(ce) => {
            assert_ne!(ce.code, 0, "ok:0 with code 0: {ce:?}");
            assert!(!ce.message.is_empty(), "ok:0 without errmsg: {ce:?}");
            assert!(!ce.code_name.is_empty(), "ok:0 without codeName: {ce:?}");
            ce.clone()
        }
        _ => panic!("expected a command error, got {err:?}"),
    }
}
