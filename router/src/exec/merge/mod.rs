//! Combining several shards' answers: [`sorted`] merges whole streams (pure), [`cursor`] merges
//! open shard cursors as the client asks for batches.

pub mod cursor;
pub mod sorted;
