//! [`OpTime`] to and from its two protobuf twins (the shard's stream and the config service's
//! heartbeat), which prost generates as distinct types.

use bson::Timestamp;
use shoal_proto::{config, shard};

use crate::store::oplog::OpTime;

pub fn to_shard(o: OpTime) -> shard::OpTime {
    shard::OpTime { ts_secs: o.ts.time, ts_inc: o.ts.increment, term: o.term }
}

pub fn from_shard(o: Option<&shard::OpTime>) -> OpTime {
    o.map_or(OpTime::ZERO, |o| OpTime::new(o.term, Timestamp { time: o.ts_secs, increment: o.ts_inc }))
}

pub fn to_config(o: OpTime) -> config::OpTime {
    config::OpTime { ts_secs: o.ts.time, ts_inc: o.ts.increment, term: o.term }
}

pub fn from_config(o: Option<&config::OpTime>) -> OpTime {
    o.map_or(OpTime::ZERO, |o| OpTime::new(o.term, Timestamp { time: o.ts_secs, increment: o.ts_inc }))
}
