//! What the balancer tests observe: who owns which chunks (the catalog), how many documents each
//! shard really holds (asked of the shard directly, unversioned, so orphans count), and bounded
//! waits for a condition over them.
//!
//! Every wait polls with a fixed period and gives up after a named bound, returning the last
//! reason so a failing test says what was still wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{Document, doc};
use shoal_cluster::config_client::ConfigClient;
use shoal_proto::catalog::{ClusterCatalogView, Collection, Parts};
use shoal_proto::shard::CommandRequest;

/// How long one direct shard call may take.
pub const SHARD_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a wait polls.
pub const POLL_PERIOD: Duration = Duration::from_millis(500);

/// The catalog as the config service's leader has it.
pub async fn catalog(client: &ConfigClient) -> anyhow::Result<ClusterCatalogView> {
    Ok(client.view(Parts::ALL, true).await?.0)
}

/// Chunks per shard of `ns` (shards owning none are absent).
pub fn chunks_per_shard(coll: &Collection) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in coll.chunks.values() {
        *out.entry(c.shard.clone()).or_insert(0) += 1;
    }
    out
}

/// One command on a shard over gRPC (the shard's `command` RPC), its reply as a document.
pub async fn shard_command(addr: &str, db: &str, body: Document) -> anyhow::Result<Document> {
    let mut client = crate::grpc::shard(addr).await?.max_decoding_message_size(usize::MAX);
    let request = CommandRequest {
        request_id: "balance-test".into(),
        db: db.into(),
        body: body.to_vec()?.into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: true,
        client: None,
        traceparent: String::new(),
    };
    let reply = tokio::time::timeout(SHARD_CALL_TIMEOUT, client.command(request)).await??.into_inner();
    if let Some(e) = reply.error {
        anyhow::bail!("{} on {addr}: {} ({})", body, e.errmsg, e.code);
    }
    Ok(Document::from_reader(&mut &reply.body[..])?)
}

/// Documents of `db.coll` stored on the shard at `addr`, orphans included (0 if it has none).
pub async fn docs_on(addr: &str, db: &str, coll: &str) -> anyhow::Result<u64> {
    let reply = shard_command(addr, db, doc! { "count": coll, "query": {} }).await?;
    let n = match reply.get("n") {
        Some(bson::Bson::Int32(n)) => i64::from(*n),
        Some(bson::Bson::Int64(n)) => *n,
        Some(bson::Bson::Double(n)) => *n as i64,
        other => anyhow::bail!("count on {addr} answered n = {other:?}"),
    };
    Ok(u64::try_from(n)?)
}

/// Polls `check` every [`POLL_PERIOD`] until it returns `Ok`, for at most `within`; the error is
/// the last reason it gave.
pub async fn wait_until<F, Fut>(within: Duration, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let why = match check().await {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(why);
        }
        tokio::time::sleep(POLL_PERIOD).await;
    }
}

/// Whether the documents are spread as the balancer spreads them: the fullest and the emptiest
/// shard differ by at most `max_gap` documents (by direct counts). The balancer moves while two
/// shards differ by more than 3 chunk sizes of data (MongoDB 7's rule), so callers pass that in
/// documents plus a chunk of slack for its size estimates; an absent or empty shard shows up as a
/// gap of a whole share.
pub fn spread_problem(counts: &BTreeMap<String, u64>, max_gap: u64) -> Option<String> {
    let (emptiest, least) = counts.iter().min_by_key(|(_, c)| **c)?;
    let most = counts.values().max().copied().unwrap_or(0);
    (most - least > max_gap).then(|| {
        format!("{emptiest} holds {least}, {} fewer than the fullest (> {max_gap}); counts {counts:?}", most - least)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread() {
        let counts: BTreeMap<String, u64> = [("a".into(), 50), ("b".into(), 30), ("c".into(), 20)].into();
        assert_eq!(spread_problem(&counts, 30), None);
        assert!(spread_problem(&counts, 29).is_some_and(|p| p.starts_with("c holds 20, 30 fewer")));
        let counts: BTreeMap<String, u64> = [("a".into(), 90), ("b".into(), 10), ("c".into(), 0)].into();
        assert!(spread_problem(&counts, 50).is_some_and(|p| p.starts_with("c holds 0")));
    }
}
