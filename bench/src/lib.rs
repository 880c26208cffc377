//! Benchmark drivers for Shoal.
//!
//! Owns: the CRUD-path benchmark ([`crud`], `shoal bench crud`): single-document inserts/s and
//! finds-by-`_id`/s measured at four depths in one run — the bare storage engine, the shard's
//! executor in-process, the shard's gRPC service, and the router through the official MongoDB
//! driver — so the cost of each layer shows as a ratio; and the config catalog benchmark
//! ([`catalog`], `shoal bench catalog`): commits/s and linearizable reads/s of a 3-node config
//! cluster beside etcd ([`etcd`]) under the same load, and what a router's whole vs narrow catalog
//! reads cost ([`catalog_reads`]); and YCSB ([`ycsb`], `shoal bench load|run|matrix`):
//! CoreWorkload against Shoal, any MongoDB endpoint, or PostgreSQL with JSONB rows; and chunk
//! migration ([`migration`], `shoal bench migration`): MiB/s beside plain copies of the same bytes,
//! critical sections, and a foreground load with and without migrations; and the balancer
//! ([`balancer`], `shoal bench balancer`): time to spread N MiB, and the 80/20 load ([`load`])
//! while it fills a freshly added shard vs with the balancer off; and replica groups
//! ([`replication`], `shoal bench replication`): inserts/s by write concern, secondary apply rate,
//! failover time over repeated kill -9; and queries ([`query`], `shoal bench query`): an indexed
//! range query vs a collection scan on one shard, a `$group` over two shards vs one.
//!
//! Must not: be linked by the server crates; it is a client of them (it links `shoal-shard` only to
//! drive its storage and executor in-process). Timing lives here, never in tests.

pub mod balancer;
pub mod catalog;
pub mod catalog_reads;
pub mod crud;
pub mod etcd;
pub mod load;
pub mod measure;
pub mod migration;
pub mod procs;
pub mod query;
pub mod replication;
pub mod ycsb;
