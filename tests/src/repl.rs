//! Replica-group helpers: a member's own view of its state (`replSetGetStatus` sent straight to
//! the member over gRPC), and bounded waits for a member to become primary or reach a state.

use std::time::Duration;

use bson::{Document, doc};
use shoal_proto::shard::CommandRequest;

/// One gRPC call to a member.
pub const MEMBER_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a member may take to be promoted after its shard is registered or restarted.
pub const PRIMARY_WAIT: Duration = Duration::from_secs(30);

/// A command sent straight to the member at `addr`; `secondary_ok` lets a secondary answer reads.
pub async fn member_command(addr: &str, db: &str, body: Document, secondary_ok: bool) -> anyhow::Result<Document> {
    let connect = crate::grpc::shard(addr);
    let mut client = tokio::time::timeout(MEMBER_CALL_TIMEOUT, connect).await??.max_decoding_message_size(usize::MAX);
    let request = CommandRequest {
        request_id: "repl-test".into(),
        db: db.into(),
        body: body.to_vec()?.into(),
        secondary_ok,
        ..Default::default()
    };
    let reply = tokio::time::timeout(MEMBER_CALL_TIMEOUT, client.command(request)).await??.into_inner();
    if let Some(e) = reply.error {
        anyhow::bail!("{body} on {addr}: {} ({})", e.errmsg, e.code);
    }
    Ok(Document::from_reader(&mut &reply.body[..])?)
}

/// The member's own status: `stateStr`, `term`, `primary`, `optime`, `commitPoint`, ...
pub async fn member_status(addr: &str) -> anyhow::Result<Document> {
    member_command(addr, "admin", doc! { "replSetGetStatus": 1 }, true).await
}

/// Waits until the member at `addr` reports `state` (e.g. "PRIMARY", "SECONDARY").
pub async fn wait_state(addr: &str, state: &str, within: Duration) -> anyhow::Result<Document> {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = String::from("no answer");
    while tokio::time::Instant::now() < deadline {
        match member_status(addr).await {
            Ok(s) if s.get_str("stateStr").is_ok_and(|v| v == state) => return Ok(s),
            Ok(s) => last = s.to_string(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("{addr} did not become {state} within {within:?}; last: {last}")
}

/// Documents of `db.coll` on the member at `addr` (a secondary answers too), orphans included.
pub async fn count_on_member(addr: &str, db: &str, coll: &str) -> anyhow::Result<u64> {
    let reply = member_command(addr, db, doc! { "count": coll, "query": {} }, true).await?;
    Ok(match reply.get("n") {
        Some(bson::Bson::Int32(n)) => *n as u64,
        Some(bson::Bson::Int64(n)) => *n as u64,
        Some(bson::Bson::Double(n)) => *n as u64,
        other => anyhow::bail!("count on {addr}: unexpected n {other:?}"),
    })
}
