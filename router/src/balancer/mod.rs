//! The balancer: keeps every sharded collection's chunks split to size, spread by data and by
//! load, inside their zones and off draining shards, without anyone calling `moveChunk`.
//!
//! Two halves, a pure decision core and the runtime that does its I/O:
//! - [`policy`]: the decision core. Given a catalog snapshot, chunk statistics from the shards and
//!   the balancer's memory, it returns a [`policy::Plan`] of actions, each with its reason. No I/O,
//!   no clock (the caller passes `now`), deterministic: unit-tested on hand-built catalogs.
//! - the runtime: [`lease`] holds the `balancer` lease from the config service, [`stats`] gathers
//!   chunk statistics from the shards, [`runtime`] runs the rounds (asks the policy, records every
//!   round and decision in `config.actionlog`), [`execute`] carries actions out fenced by the
//!   lease token, [`metrics`] counts what the rounds did and keeps the last moves for the status
//!   page.
//!
//! Must not: move a chunk without the lease's fencing token, run two migrations on one shard at a
//! time, or retry a chunk that cannot be split forever (it is marked jumbo instead).

pub mod execute;
pub mod lease;
pub mod metrics;
pub mod policy;
pub mod runtime;
pub mod stats;
