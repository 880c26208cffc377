//! Test harness: starts real `shoal` processes on ephemeral loopback ports in temp dirs and drives
//! them with the official `mongodb` driver (or, for malformed input, a hand-rolled wire client).
//!
//! ```text
//!   tests/tests/<topic>.rs ──TestContext──> Cluster ──> Process(shard0), Process(router)
//!                          ──Client (mongodb driver)──────────> router ──gRPC──> shard0
//!                          ──WireConn (raw bytes)─────────────> router
//! ```
//!
//! Modules: [`process`] (one child: spawn, readiness line, logs, SIGKILL), [`cluster`] (shard +
//! router in a temp dir, kill and restart), [`catalog_cluster`] (3 config servers + shard +
//! router), [`sharded_cluster`] (3 config servers + 2 shards on fixed ports + routers routing by chunk, for
//! migrations and shard restarts), [`context`] (per-test client, shared cluster, watchdog), [`expect`] (asserting exact
//! MongoDB error codes), [`fixtures`] (seeding and reading back small datasets), [`wire`] (raw
//! OP_MSG), [`up`] (a whole `shoal up` cluster from a spec), [`ports`] (loopback ports outside
//! the kernel's ephemeral range, claimed per test process), [`netns`] (hosts as network namespaces
//! on a bridge, and network faults), [`netns_cluster`] (a five-host cluster on them), [`unified`] (a
//! runner of MongoDB's unified-format driver specification tests, vendored in `tests/spec/`).

// A harness that cannot start or drive a cluster has nothing better to do than fail the test that
// asked: its panics are test failures with a message, not server crashes. Replies from the server
// under test are parsed with errors, though (`wire`).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test harness: a panic fails the calling test")]

pub mod balance;
pub mod catalog_cluster;
pub mod cluster;
pub mod command_fuzz;
pub mod context;
pub mod expect;
pub mod fixtures;
pub mod grpc;
pub mod http;
pub mod knobs;
pub mod netns;
pub mod netns_cluster;
pub mod ports;
pub mod process;
pub mod prometheus;
pub mod repl;
pub mod replica_cluster;
pub mod security;
pub mod sharded_cluster;
pub mod unified;
pub mod up;
pub mod wire;
pub mod writer;

pub use cluster::Cluster;
pub use context::TestContext;
pub use process::{Process, ProcessSpec, shoal_bin};
