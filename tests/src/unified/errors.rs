//! Operation errors as the runner sees them ([`OpError`], from a driver error or from the
//! runner's own bulk write), and `expectError`: isError, isClientError, errorContains,
//! errorCode, errorCodeName, errorLabelsContain/Omit, errorResponse and `expectResult` on a
//! bulk write exception's partial result.

use bson::{Bson, Document};
use mongodb::error::{ErrorKind, WriteFailure};

use crate::unified::matching::{Saved, matches};

#[derive(Debug, Default)]
pub struct OpError {
    pub client: bool,
    pub code: Option<i32>,
    pub code_name: Option<String>,
    pub message: String,
    pub labels: Vec<String>,
    pub response: Option<Document>,
    /// The partial result of a bulk write that failed.
    pub partial: Option<Bson>,
}

impl From<mongodb::error::Error> for OpError {
    fn from(e: mongodb::error::Error) -> Self {
        let labels = e.labels().iter().cloned().collect();
        let response = e.server_response().and_then(|r| Document::try_from(r.to_owned()).ok());
        // The server's (or the driver's) message, without the Display's debug dump of the reply.
        let message = match e.kind.as_ref() {
            ErrorKind::Command(c) => c.message.clone(),
            ErrorKind::Write(WriteFailure::WriteError(w)) => w.message.clone(),
            ErrorKind::Write(WriteFailure::WriteConcernError(w)) => w.message.clone(),
            ErrorKind::InsertMany(m) => {
                let mut parts: Vec<String> = m.write_errors.iter().flatten().map(|w| w.message.clone()).collect();
                parts.extend(m.write_concern_error.iter().map(|w| w.message.clone()));
                parts.join("; ")
            }
            _ => e.to_string(),
        };
        let (client, code, code_name) = match e.kind.as_ref() {
            ErrorKind::Command(c) => (false, Some(c.code), Some(c.code_name.clone())),
            ErrorKind::Write(WriteFailure::WriteError(w)) => (false, Some(w.code), w.code_name.clone()),
            ErrorKind::Write(WriteFailure::WriteConcernError(w)) => (false, Some(w.code), Some(w.code_name.clone())),
            ErrorKind::InsertMany(m) => {
                let first = m.write_errors.as_ref().and_then(|w| w.first());
                match (first, &m.write_concern_error) {
                    (Some(w), _) => (false, Some(w.code), w.code_name.clone()),
                    (None, Some(w)) => (false, Some(w.code), Some(w.code_name.clone())),
                    (None, None) => (false, None, None),
                }
            }
            ErrorKind::BulkWrite(b) => {
                let first = b.write_errors.values().next();
                (false, first.map(|w| w.code), first.and_then(|w| w.code_name.clone()))
            }
            ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } | ErrorKind::ServerSelection { .. } => {
                (false, None, None)
            }
            _ => (true, None, None),
        };
        OpError { client, code, code_name, message, labels, response, partial: None }
    }
}

impl OpError {
    pub fn client(message: impl Into<String>) -> OpError {
        OpError { client: true, message: message.into(), ..OpError::default() }
    }
}

/// Checks `error` against an `expectError` document.
pub fn check(expected: &Document, error: &OpError, saved: &Saved) -> Result<(), String> {
    let ctx = || format!("error {error:?}");
    if let Ok(client) = expected.get_bool("isClientError")
        && client != error.client
    {
        return Err(format!("isClientError {client}, got {}", ctx()));
    }
    if let Ok(s) = expected.get_str("errorContains")
        && !error.message.to_lowercase().contains(&s.to_lowercase())
    {
        return Err(format!("errorContains {s:?}, got {}", ctx()));
    }
    if let Some(code) = expected.get("errorCode").and_then(Bson::as_i32)
        && error.code != Some(code)
    {
        return Err(format!("errorCode {code}, got {}", ctx()));
    }
    if let Ok(name) = expected.get_str("errorCodeName")
        && !error.code_name.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(name))
    {
        return Err(format!("errorCodeName {name}, got {}", ctx()));
    }
    for label in expected.get_array("errorLabelsContain").into_iter().flatten().filter_map(Bson::as_str) {
        if !error.labels.iter().any(|l| l == label) {
            return Err(format!("errorLabelsContain {label}, got {}", ctx()));
        }
    }
    for label in expected.get_array("errorLabelsOmit").into_iter().flatten().filter_map(Bson::as_str) {
        if error.labels.iter().any(|l| l == label) {
            return Err(format!("errorLabelsOmit {label}, got {}", ctx()));
        }
    }
    if let Some(resp) = expected.get("errorResponse") {
        let actual = error.response.clone().map(Bson::Document);
        matches(resp, actual.as_ref(), true, saved, "errorResponse")?;
    }
    if let Some(result) = expected.get("expectResult") {
        matches(result, error.partial.as_ref(), true, saved, "expectError.expectResult")?;
    }
    for key in ["writeErrors", "writeConcernErrors"] {
        if expected.contains_key(key) {
            return Err(format!("expectError.{key} not supported by the runner"));
        }
    }
    Ok(())
}
