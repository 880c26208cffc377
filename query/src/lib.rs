//! MongoDB's document language, pure and free of I/O.
//!
//! Owns: the BSON total order ([`order`]), the order-preserving byte encoding of values
//! ([`keystring`]), dotted-path lookup with MongoDB's array semantics ([`path`]), filter matching
//! ([`filter`]), update operators ([`update`]), projection ([`projection`]), sort ([`sort`]) and
//! the aggregation stages ([`aggregate`]).
//!
//! Must not: touch disks, sockets, clocks (callers pass the time in) or global state. Every
//! fallible function returns [`QueryError`], which carries the MongoDB error code that the wire
//! edge will report.

#![forbid(unsafe_code)]

pub mod aggregate;
pub mod args;
pub mod collation;
pub mod display;
pub mod error;
pub mod filter;
pub mod hash;
pub mod index_keys;
pub mod keystring;
pub mod order;
pub mod path;
pub mod projection;
pub mod shard_key;
pub mod sort;
pub mod update;
pub mod vars;

pub use error::QueryError;
