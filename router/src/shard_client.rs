//! (being written) Pool of gRPC channels to the shard(s).

pub struct ShardPool {}
