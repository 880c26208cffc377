//! The shard's `Exchange` stream, called directly as a router calls it: many calls with ids on
//! one stream, answered by id with what the unary method of each call's kind answers (writes,
//! finds, commands, errors), a call without an operation refused, and the stream closing once
//! the caller ends it. Routers use it for every small write and point read, so the rest of the
//! suite drives it through the router too (restarts and kills included).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::collections::HashMap;
use std::time::Duration;

use bson::{Document, doc};
use futures::StreamExt;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_proto::shard::{Call, CallReply, CommandRequest, call, call_reply};
use shoal_tests::grpc;
use shoal_tests::sharded_cluster::ShardedCluster;
use tonic::transport::Channel;

const RPC_TIMEOUT: Duration = Duration::from_secs(30);
const DOCS: i32 = 64;

fn request(body: Document, sequence: Vec<Document>) -> CommandRequest {
    CommandRequest {
        request_id: "exchange-test".into(),
        db: "app".into(),
        body: body.to_vec().expect("encode").into(),
        sequence_id: if sequence.is_empty() { String::new() } else { "documents".into() },
        sequence: sequence.iter().map(|d| d.to_vec().expect("encode").into()).collect(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    }
}

/// Sends `calls` on one stream, closes it, and returns every reply by id (the stream must end).
async fn exchange(shard: &mut ShardClient<Channel>, calls: Vec<Call>) -> HashMap<u64, call_reply::Reply> {
    let expected = calls.len();
    let replies = tokio::time::timeout(RPC_TIMEOUT, async {
        let mut stream = shard.exchange(futures::stream::iter(calls)).await.expect("exchange opens").into_inner();
        let mut replies = HashMap::new();
        while let Some(reply) = stream.next().await {
            let CallReply { id, reply } = reply.expect("reply");
            assert!(replies.insert(id, reply.expect("a result")).is_none(), "call {id} answered twice");
        }
        replies
    })
    .await
    .expect("the stream ends once every call is answered");
    assert_eq!(replies.len(), expected, "every call answered");
    replies
}

fn insert(i: i32) -> call::Op {
    call::Op::Insert(request(doc! {"insert": "items"}, vec![doc! {"_id": i, "v": i * 10}]))
}

fn find_one(i: i32) -> CommandRequest {
    request(doc! {"find": "items", "filter": {"_id": i}}, Vec::new())
}

fn documents(reply: &shoal_proto::shard::CursorReply) -> Vec<Document> {
    reply.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_one_stream_answer_as_their_unary_methods() {
    // A cluster with a catalog, so the suite's secured run (`SHOAL_TEST_SECURITY`) opens the
    // stream through the cluster's authentication as routers do.
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let mut shard = grpc::shard(cluster.shard_addr(0)).await.expect("shard client");

    // Writes, all in flight at once.
    let calls = (0..DOCS).map(|i| Call { id: 1000 + i as u64, op: Some(insert(i)) }).collect();
    for (id, reply) in exchange(&mut shard, calls).await {
        let call_reply::Reply::Write(w) = reply else { panic!("call {id}: not a write reply: {reply:?}") };
        assert!(w.error.is_none() && w.write_errors.is_empty(), "call {id}: {w:?}");
        assert_eq!(w.n, 1, "call {id}");
    }

    // Point reads, a duplicate insert, a command, and a call without an operation.
    let mut calls: Vec<Call> =
        (0..DOCS).map(|i| Call { id: i as u64, op: Some(call::Op::Find(find_one(i))) }).collect();
    calls.push(Call { id: 500, op: Some(insert(7)) });
    calls.push(Call { id: 501, op: Some(call::Op::Command(request(doc! {"count": "items"}, Vec::new()))) });
    calls.push(Call { id: 502, op: None });
    let mut replies = exchange(&mut shard, calls).await;

    for i in 0..DOCS {
        let Some(call_reply::Reply::Cursor(c)) = replies.remove(&(i as u64)) else { panic!("find {i}: no cursor") };
        assert!(c.error.is_none(), "find {i}: {c:?}");
        assert_eq!(documents(&c), vec![doc! {"_id": i, "v": i * 10}], "find {i}");
        // The same request unary: the same documents.
        let unary = shard.find(find_one(i)).await.expect("unary find").into_inner();
        assert_eq!(documents(&unary), documents(&c), "find {i}: stream and unary agree");
    }
    let Some(call_reply::Reply::Write(dup)) = replies.remove(&500) else { panic!("duplicate insert: no write reply") };
    assert_eq!(dup.n, 0);
    assert_eq!(dup.write_errors.iter().map(|e| e.code).collect::<Vec<_>>(), vec![11000], "DuplicateKey: {dup:?}");
    let Some(call_reply::Reply::Command(count)) = replies.remove(&501) else { panic!("count: no command reply") };
    assert!(count.error.is_none(), "count: {count:?}");
    let body = Document::from_reader(&mut &count.body[..]).expect("count body");
    let n = body.get_i64("n").ok().or_else(|| body.get_i32("n").ok().map(i64::from));
    assert_eq!(n, Some(i64::from(DOCS)), "count: {body}");
    let Some(call_reply::Reply::Failed(none)) = replies.remove(&502) else { panic!("empty call: not refused") };
    assert_eq!(none.code, tonic::Code::InvalidArgument as i32, "empty call: {none:?}");
}
