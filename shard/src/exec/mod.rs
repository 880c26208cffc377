//! Command execution on one shard: the MongoDB commands a router forwards, run against the
//! [`Store`]. Each function here is synchronous (it may read and write storage, which can block on
//! I/O) and is called by [`crate::service`] on the blocking pool; waiting for durability happens
//! afterwards, asynchronously.
//!
//! Commands run against a [`Node`]: this member's store, open cursors, sharding state and place
//! in its replica group. It is called a node, not an engine, because it is the member's parts
//! bundled together, while "engine" names one thing only: the storage interface
//! [`crate::storage::Engine`] (fjall behind it) that the store writes through.

pub mod aggregate;
pub mod args;
pub mod chunk_stats;
pub mod coll_mod;
pub mod count;
pub mod ddl;
pub mod deadline;
pub mod delete;
pub mod explain;
pub mod find;
pub mod find_and_modify;
pub mod index_build;
#[cfg(test)]
mod index_tests;
pub mod indexes;
pub mod insert;
#[cfg(test)]
mod insert_tests;
pub mod plan;
pub mod retry;
#[cfg(test)]
mod retry_tests;
pub mod scan;
pub mod split_vector;
pub mod statements;
pub mod stats;
pub mod stored_doc;
#[cfg(test)]
mod stored_doc_tests;
#[cfg(test)]
mod tests;
pub mod ttl;
pub mod update;
pub mod write_concern;

use std::sync::Arc;

use bson::Document;
use shoal_proto::shard::{CommandRequest, WriteError};

use crate::cursors::CursorManager;
use crate::error::{ExecError, ExecResult};
use crate::sharding::{Ownership, ShardingState};
use crate::store::Store;
pub use write_concern::WriteConcern;

/// One shard member as command execution sees it: the store, the open cursors, the sharding
/// state, foreground latencies, the member's replica-group role, the process's metrics and the
/// operations in progress. Built
/// once per process by [`crate::open_node`]; shared (`Arc`) by the services and background tasks.
pub struct Node {
    pub store: Arc<Store>,
    pub cursors: CursorManager,
    pub sharding: ShardingState,
    /// Foreground command latencies (migrations throttle themselves on their p99).
    pub latency: crate::migration::throttle::LatencyMonitor,
    /// This member's place in its replica group.
    pub repl: Arc<crate::repl::Repl>,
    /// The process's Prometheus registry and the handles counted in it.
    pub metrics: crate::metrics::ShardMetrics,
    /// The operations in progress, `top`'s totals and the profiler ([`crate::ops`]).
    pub ops: crate::ops::Ops,
}

/// A parsed request: the command body as a document plus its statements' source.
pub struct Request<'a> {
    pub db: &'a str,
    pub body: Document,
    pub raw: &'a CommandRequest,
    /// Set for a versioned request on a sharded collection (by the service, after the version
    /// check): reads and writes skip documents outside it. `None`: no filtering.
    pub ownership: Option<Arc<Ownership>>,
    /// The number of the read pin the service took for this request (see `cursors`): a cursor it
    /// opens holds range deletions back from then on.
    pub read_pin_seq: Option<u64>,
}

impl<'a> Request<'a> {
    pub fn parse(raw: &'a CommandRequest) -> ExecResult<Self> {
        let body = Document::from_reader(&mut &raw.body[..])?;
        Ok(Self { db: &raw.db, body, raw, ownership: None, read_pin_seq: None })
    }

    /// The ownership filter, if any (see [`Request::ownership`]).
    pub fn owned(&self) -> Option<&Ownership> {
        self.ownership.as_deref()
    }

    pub fn name(&self) -> &str {
        self.body.keys().next().map(String::as_str).unwrap_or("")
    }
}

/// The outcome of a write command before durability and reply shaping.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    pub n: i64,
    pub n_modified: i64,
    pub upserted: Vec<(i32, bson::Bson)>,
    pub write_errors: Vec<WriteError>,
}

/// A write statement's failure: its own (reported in `writeErrors`, others may go on; the
/// document holds extra reply fields, boxed as rare), or the store's (the command fails).
pub enum StatementError {
    Exec(ExecError, Option<Box<Document>>),
    Storage(crate::storage::StorageError),
}

impl From<ExecError> for StatementError {
    fn from(e: ExecError) -> Self {
        StatementError::Exec(e, None)
    }
}

impl From<shoal_query::QueryError> for StatementError {
    fn from(e: shoal_query::QueryError) -> Self {
        StatementError::Exec(e.into(), None)
    }
}

/// Records statement `index`'s outcome; `Break` when an ordered batch must stop after it.
pub fn record(
    out: &mut WriteOutcome,
    index: usize,
    result: Result<(), StatementError>,
    ordered: bool,
) -> Result<std::ops::ControlFlow<()>, crate::storage::StorageError> {
    match result {
        Ok(()) => Ok(std::ops::ControlFlow::Continue(())),
        Err(StatementError::Exec(e, extra)) => {
            out.write_errors.push(write_error(index, &e, extra.map(|d| *d)));
            Ok(if ordered { std::ops::ControlFlow::Break(()) } else { std::ops::ControlFlow::Continue(()) })
        }
        Err(StatementError::Storage(crate::storage::StorageError::Rejected { code, message, info })) => {
            out.write_errors.push(write_error(index, &ExecError::new(code, message), info));
            Ok(if ordered { std::ops::ControlFlow::Break(()) } else { std::ops::ControlFlow::Continue(()) })
        }
        Err(StatementError::Storage(e)) => Err(e),
    }
}

pub fn write_error(index: usize, e: &ExecError, extra: Option<Document>) -> WriteError {
    WriteError {
        index: index as i32,
        code: e.code.code(),
        code_name: e.code.name().to_owned(),
        errmsg: e.message.clone(),
        err_info: extra.and_then(|d| d.to_vec().ok()).map(Into::into).unwrap_or_default(),
    }
}
