//! The router under hostile bytes, over a raw `TcpStream`: malformed BSON in an OP_MSG body, a
//! truncated message then close, messageLength above 48 MB (and negative, and below a header),
//! garbage, unknown opCodes and flag bits, a missing `$db`, bad section sizes, documents and
//! filters nested thousands of levels deep (a recursive parser would overflow its stack). After each: the router either answers
//! with a MongoDB-style error (`ok: 0, code, codeName, errmsg`) or closes that one connection,
//! never hangs, and stays up; a fresh driver client can `ping` and read data.
//!
//! Also the well-formed corners drivers rely on: kind-1 document sequences, `moreToCome` (no
//! reply), OP_QUERY `isMaster` answered with OP_REPLY.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Document, doc};
use shoal_tests::TestContext;
use shoal_tests::wire::{
    self, HEADER_LEN, MORE_TO_COME, OP_MSG, OP_REPLY, Outcome, WireConn, deeply_nested, garbage, header, op_msg,
    op_query, with_raw_array, with_raw_field,
};

const DB: &str = "wire_robustness";

/// A document every test seeds and reads back after its abuse.
fn canary() -> Document {
    doc! {"_id": "canary", "v": 42}
}

async fn setup(coll: &str) -> TestContext {
    let ctx = TestContext::shared(DB).await;
    ctx.coll(coll).insert_one(canary()).await.unwrap();
    ctx
}

/// The router process is up, a fresh client pings, and the canary of `coll` reads back.
async fn assert_still_serving(ctx: &TestContext, coll: &str) {
    ctx.assert_cluster_serving().await;
    let client = ctx.new_client().await;
    let found = client
        .database(DB)
        .collection::<Document>(coll)
        .find_one(doc! {"_id": "canary"})
        .await
        .expect("reading through a fresh client");
    assert_eq!(found, Some(canary()));
}

/// After a complete but bad message `id`: either an error reply (`ok: 0`, or `writeErrors` for a
/// write), after which the connection may still serve or be closed, or a closed connection.
/// Never silence, never a success.
async fn expect_error_or_close(conn: &mut WireConn, id: i32, what: &str) {
    let message = match conn.next_message().await {
        Ok(None) => {
            eprintln!("{what}: connection closed");
            return;
        }
        Ok(Some(m)) => m,
        Err(e) => panic!("{what}: {e:#}"),
    };
    assert_eq!(message.response_to, id, "{what}: reply to the wrong request: {message:?}");
    let body = match message.op_code {
        OP_MSG => {
            wire::parse_op_msg_reply(&message.payload).unwrap_or_else(|e| panic!("{what}: bad OP_MSG reply: {e:#}"))
        }
        OP_REPLY => {
            let (_, docs) =
                wire::parse_op_reply(&message.payload).unwrap_or_else(|e| panic!("{what}: bad OP_REPLY: {e:#}"));
            docs.into_iter().next().unwrap_or_else(|| panic!("{what}: empty OP_REPLY"))
        }
        other => panic!("{what}: reply with opCode {other}"),
    };
    eprintln!("{what}: {body}");
    let write_errors = wire::ok_value(&body) == Some(1.0) && body.get_array("writeErrors").is_ok_and(|w| !w.is_empty());
    assert!(wire::is_error_reply(&body) || write_errors, "{what}: not an error reply: {body}");
    // If the connection stays open it must still work.
    let ping = doc! {"ping": 1, "$db": "admin"};
    let ping_id = conn.request_id();
    let _ = conn.send_raw(&op_msg(ping_id, 0, &ping.to_vec().unwrap(), &[])).await;
    match conn.next_outcome().await {
        Ok(Outcome::Closed) => {}
        Ok(Outcome::Reply { response_to, body }) => {
            assert_eq!(response_to, ping_id, "{what}: ping after error: {body}");
            assert_eq!(wire::ok_value(&body), Some(1.0), "{what}: ping after error: {body}");
        }
        Err(e) => panic!("{what}: ping after the error reply: {e:#}"),
    }
}

/// A BSON body `{ping: 1, $db: "admin"}` with its bytes damaged by `damage`.
fn damaged_body(damage: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = doc! {"ping": 1, "$db": "admin"}.to_vec().unwrap();
    damage(&mut bytes);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_op_msg_round_trip() {
    let ctx = setup("round_trip").await;
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let pong = conn.command(&doc! {"ping": 1, "$db": "admin"}).await.unwrap();
    assert_eq!(wire::ok_value(&pong), Some(1.0), "{pong}");
    let reply = conn.command(&doc! {"find": "round_trip", "filter": {"_id": "canary"}, "$db": DB}).await.unwrap();
    let batch = reply.get_document("cursor").unwrap().get_array("firstBatch").unwrap();
    assert_eq!(batch.len(), 1, "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_one_document_sequence_is_folded_into_the_command() {
    let ctx = setup("kind_one").await;
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let body = doc! {"insert": "kind_one", "$db": DB}.to_vec().unwrap();
    let docs = [doc! {"_id": 1, "x": "a"}.to_vec().unwrap(), doc! {"_id": 2, "x": "b"}.to_vec().unwrap()];
    let id = conn.request_id();
    conn.send_raw(&op_msg(id, 0, &body, &[("documents", &docs)])).await.unwrap();
    let Outcome::Reply { response_to, body } = conn.next_outcome().await.unwrap() else {
        panic!("closed instead of replying to an insert")
    };
    assert_eq!(response_to, id);
    assert_eq!(wire::ok_value(&body), Some(1.0), "{body}");
    assert_eq!(body.get_i32("n").unwrap(), 2, "{body}");
    let c = ctx.coll("kind_one");
    assert_eq!(c.count_documents(doc! {"x": {"$in": ["a", "b"]}}).await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_to_come_request_gets_no_reply() {
    let ctx = setup("more_to_come").await;
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let insert = doc! {
        "insert": "more_to_come", "documents": [{"_id": "fire-and-forget"}],
        "writeConcern": {"w": 0}, "$db": DB,
    };
    let insert_id = conn.request_id();
    conn.send_raw(&op_msg(insert_id, MORE_TO_COME, &insert.to_vec().unwrap(), &[])).await.unwrap();
    // The next reply on this connection answers the ping, not the insert.
    let ping_id = conn.request_id();
    conn.send_raw(&op_msg(ping_id, 0, &doc! {"ping": 1, "$db": "admin"}.to_vec().unwrap(), &[])).await.unwrap();
    let Outcome::Reply { response_to, body } = conn.next_outcome().await.unwrap() else {
        panic!("closed instead of answering the ping")
    };
    assert_eq!(response_to, ping_id, "a moreToCome request was answered: {body}");
    let reply =
        conn.command(&doc! {"count": "more_to_come", "query": {"_id": "fire-and-forget"}, "$db": DB}).await.unwrap();
    assert_eq!(wire::ok_value(&reply), Some(1.0), "{reply}");
    let n = reply.get("n").and_then(|n| n.as_i64().or(n.as_i32().map(i64::from)));
    assert_eq!(n, Some(1), "the moreToCome insert was applied: {reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bson_in_op_msg_body() {
    let ctx = setup("malformed_bson").await;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("document length larger than the section", damaged_body(|b| b[0..4].copy_from_slice(&1000i32.to_le_bytes()))),
        ("document length smaller than its elements", damaged_body(|b| b[0..4].copy_from_slice(&7i32.to_le_bytes()))),
        ("negative document length", damaged_body(|b| b[0..4].copy_from_slice(&(-5i32).to_le_bytes()))),
        ("unknown element type 0x7f", damaged_body(|b| b[4] = 0x7f)),
        ("missing final NUL", damaged_body(|b| *b.last_mut().unwrap() = 0x55)),
        ("string length past the end", {
            // {"$db": <string>} with the string length field inflated.
            let mut b = doc! {"ping": 1, "$db": "admin"}.to_vec().unwrap();
            let pos = b.windows(4).position(|w| w == b"$db\0").unwrap() + 4;
            b[pos..pos + 4].copy_from_slice(&10_000i32.to_le_bytes());
            b
        }),
        ("four bytes only", 5i32.to_le_bytes().to_vec()),
        ("empty body", Vec::new()),
    ];
    for (what, body) in cases {
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        let id = conn.request_id();
        conn.send_raw(&op_msg(id, 0, &body, &[])).await.unwrap();
        expect_error_or_close(&mut conn, id, what).await;
        assert!(ctx.cluster().router().is_alive(), "router died after: {what}");
    }
    // A malformed document inside a kind-1 sequence.
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let body = doc! {"insert": "malformed_bson", "$db": DB}.to_vec().unwrap();
    let bad_doc = {
        let mut b = doc! {"_id": 9}.to_vec().unwrap();
        b[4] = 0x7f;
        b
    };
    let id = conn.request_id();
    conn.send_raw(&op_msg(id, 0, &body, &[("documents", &[bad_doc])])).await.unwrap();
    expect_error_or_close(&mut conn, id, "malformed document in a sequence").await;
    assert_eq!(ctx.coll("malformed_bson").count_documents(doc! {"_id": 9}).await.unwrap(), 0);
    assert_still_serving(&ctx, "malformed_bson").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_message_then_close() {
    let ctx = setup("truncated").await;
    let full = op_msg(1, 0, &doc! {"ping": 1, "$db": "admin"}.to_vec().unwrap(), &[]);
    for cut in [3, HEADER_LEN - 1, HEADER_LEN, HEADER_LEN + 3, full.len() - 1] {
        // Abrupt close.
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        conn.send_raw(&full[..cut]).await.unwrap();
        drop(conn);
        // Half-close: the router sees EOF mid-message and must close its side.
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        conn.send_raw(&full[..cut]).await.unwrap();
        conn.shutdown_write().await.unwrap();
        let replies = conn.expect_closed().await.unwrap_or_else(|e| panic!("truncated at {cut} bytes: {e:#}"));
        assert!(replies.is_empty(), "replied to a truncated message: {replies:?}");
    }
    assert_still_serving(&ctx, "truncated").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_message_length_closes_the_connection() {
    let ctx = setup("oversized").await;
    for (what, len) in [
        ("64 MiB", 64 * 1024 * 1024),
        ("just above maxMessageSizeBytes", 48_000_001),
        ("i32::MAX", i32::MAX),
        ("negative", -1),
        ("shorter than a header", 10),
        ("zero", 0),
    ] {
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        // Only the header: a router that waits for the body (or allocates it) hangs here.
        conn.send_raw(&header(len, 1, 0, OP_MSG)).await.unwrap();
        let replies = conn.expect_closed().await.unwrap_or_else(|e| panic!("messageLength {what}: {e:#}"));
        for r in &replies {
            assert!(wire::is_error_reply(r), "messageLength {what}: {r}");
        }
        assert!(ctx.cluster().router().is_alive(), "router died after messageLength {what}");
    }
    assert_still_serving(&ctx, "oversized").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes() {
    let ctx = setup("garbage").await;
    for seed in 1..=8u64 {
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        let bytes = garbage(seed, 4096);
        // The peer may close before taking it all; that is a fine reaction.
        let _ = conn.send_raw(&bytes).await;
        let _ = conn.shutdown_write().await;
        let replies = conn.expect_closed().await.unwrap_or_else(|e| panic!("garbage seed {seed}: {e:#}"));
        for r in &replies {
            assert!(wire::is_error_reply(r), "garbage seed {seed}: {r}");
        }
        assert!(ctx.cluster().router().is_alive(), "router died on garbage seed {seed}");
    }
    // Plausible header, garbage payload.
    for seed in 10..=13u64 {
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        let mut payload = garbage(seed, 200);
        // flagBits 0: a moreToCome bit would rightly get no reply.
        payload[0..4].copy_from_slice(&[0; 4]);
        let mut msg = header((HEADER_LEN + payload.len()) as i32, 7, 0, OP_MSG).to_vec();
        msg.extend_from_slice(&payload);
        conn.send_raw(&msg).await.unwrap();
        expect_error_or_close(&mut conn, 7, &format!("garbage OP_MSG payload seed {seed}")).await;
    }
    assert_still_serving(&ctx, "garbage").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_op_code_and_flag_bits() {
    let ctx = setup("unknown_op").await;
    let body = doc! {"ping": 1, "$db": "admin"}.to_vec().unwrap();

    // An opCode that does not exist, with an OP_MSG-shaped payload.
    for op_code in [9999, -1] {
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        let mut msg = op_msg(3, 0, &body, &[]);
        msg[12..16].copy_from_slice(&i32::to_le_bytes(op_code));
        conn.send_raw(&msg).await.unwrap();
        expect_error_or_close(&mut conn, 3, &format!("opCode {op_code}")).await;
    }

    // Required flag bit 5 is unknown (IllegalOpMsgFlag); checksumPresent with a wrong checksum.
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    conn.send_raw(&op_msg(4, 1 << 5, &body, &[])).await.unwrap();
    expect_error_or_close(&mut conn, 4, "unknown required flag bit").await;

    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let mut msg = op_msg(5, 1, &body, &[]);
    msg.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
    let len = msg.len() as i32;
    msg[0..4].copy_from_slice(&len.to_le_bytes());
    conn.send_raw(&msg).await.unwrap();
    expect_error_or_close(&mut conn, 5, "wrong checksum").await;

    // Kind-2 section (not defined).
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let mut msg = op_msg(6, 0, &body, &[]);
    msg.push(2);
    msg.extend_from_slice(&body);
    let len = msg.len() as i32;
    msg[0..4].copy_from_slice(&len.to_le_bytes());
    conn.send_raw(&msg).await.unwrap();
    expect_error_or_close(&mut conn, 6, "section kind 2").await;

    assert_still_serving(&ctx, "unknown_op").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_db_is_an_error_reply() {
    let ctx = setup("missing_db").await;
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let id = conn.request_id();
    conn.send_raw(&op_msg(id, 0, &doc! {"ping": 1}.to_vec().unwrap(), &[])).await.unwrap();
    let Outcome::Reply { response_to, body } = conn.next_outcome().await.unwrap() else {
        panic!("closed instead of replying to a command without $db")
    };
    assert_eq!(response_to, id);
    assert!(wire::is_error_reply(&body), "{body}");
    // The same connection keeps serving.
    let pong = conn.command(&doc! {"ping": 1, "$db": "admin"}).await.unwrap();
    assert_eq!(wire::ok_value(&pong), Some(1.0), "{pong}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn op_query_is_master_gets_an_op_reply() {
    let ctx = setup("op_query").await;
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let query = doc! {"isMaster": 1, "helloOk": true}.to_vec().unwrap();
    conn.send_raw(&op_query(11, "admin.$cmd", &query)).await.unwrap();
    let message = conn.next_message().await.unwrap().expect("a reply to OP_QUERY isMaster");
    assert_eq!(message.op_code, OP_REPLY);
    assert_eq!(message.response_to, 11);
    let (_flags, docs) = wire::parse_op_reply(&message.payload).unwrap();
    assert_eq!(docs.len(), 1);
    let hello = &docs[0];
    assert_eq!(wire::ok_value(hello), Some(1.0), "{hello}");
    assert_eq!(hello.get_str("msg").unwrap(), "isdbgrid", "{hello}");
    assert!(hello.get_bool("ismaster").unwrap(), "{hello}");
    // The connection then speaks OP_MSG.
    let pong = conn.command(&doc! {"ping": 1, "$db": "admin"}).await.unwrap();
    assert_eq!(wire::ok_value(&pong), Some(1.0), "{pong}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_bad_connections_at_once() {
    let ctx = setup("many_bad").await;
    let addr = ctx.cluster().router_addr();
    let tasks: Vec<_> = (0..64u64)
        .map(|i| {
            tokio::spawn(async move {
                let mut conn = WireConn::connect(addr).await.unwrap();
                let _ = conn.send_raw(&garbage(100 + i, 64 + (i as usize) * 17)).await;
                if i % 2 == 0 {
                    let _ = conn.shutdown_write().await;
                    conn.expect_closed().await.map(|_| ())
                } else {
                    drop(conn);
                    Ok(())
                }
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        t.await.unwrap().unwrap_or_else(|e| panic!("bad connection {i}: {e:#}"));
    }
    assert_still_serving(&ctx, "many_bad").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_section_sizes_and_duplicate_sequences() {
    let ctx = setup("sections").await;
    let body = doc! {"insert": "sections", "$db": DB}.to_vec().unwrap();
    let one = doc! {"_id": "s1"}.to_vec().unwrap();

    // A kind-1 size larger than what is left of the message.
    let mut msg = op_msg(21, 0, &body, &[("documents", std::slice::from_ref(&one))]);
    let size_at = HEADER_LEN + 4 + 1 + body.len() + 1;
    msg[size_at..size_at + 4].copy_from_slice(&10_000i32.to_le_bytes());
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    conn.send_raw(&msg).await.unwrap();
    expect_error_or_close(&mut conn, 21, "kind-1 size past the end").await;

    // A kind-1 size smaller than its identifier.
    let mut msg = op_msg(22, 0, &body, &[("documents", std::slice::from_ref(&one))]);
    msg[size_at..size_at + 4].copy_from_slice(&2i32.to_le_bytes());
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    conn.send_raw(&msg).await.unwrap();
    expect_error_or_close(&mut conn, 22, "kind-1 size below its identifier").await;

    // The same identifier twice (TooManyDocumentSequences), and one that repeats a body field.
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let seqs: [(&str, &[Vec<u8>]); 2] =
        [("documents", std::slice::from_ref(&one)), ("documents", std::slice::from_ref(&one))];
    conn.send_raw(&op_msg(23, 0, &body, &seqs)).await.unwrap();
    expect_error_or_close(&mut conn, 23, "duplicate document sequence").await;
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let body_with_docs = doc! {"insert": "sections", "documents": [{"_id": "s2"}], "$db": DB};
    conn.send_raw(&op_msg(24, 0, &body_with_docs.to_vec().unwrap(), &[("documents", &[one])])).await.unwrap();
    expect_error_or_close(&mut conn, 24, "sequence repeating a body field").await;

    assert_eq!(
        ctx.coll("sections").count_documents(doc! {"_id": {"$in": ["s1", "s2"]}}).await.unwrap(),
        0,
        "nothing from a malformed message was applied"
    );
    assert_still_serving(&ctx, "sections").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_documents_and_filters() {
    const DEPTH: usize = 10_000;
    let ctx = setup("deep").await;
    // (what, OP_MSG body, kind-1 sequences)
    type Case = (&'static str, Vec<u8>, Vec<(&'static str, Vec<Vec<u8>>)>);
    let cases: Vec<Case> = vec![
        (
            "insert of a document nested 10,000 levels",
            doc! {"insert": "deep", "$db": DB}.to_vec().unwrap(),
            vec![("documents", vec![deeply_nested(DEPTH, &[(0x03, "a")])])],
        ),
        (
            "find with $and nested 10,000 levels",
            with_raw_field(
                &doc! {"find": "deep", "$db": DB},
                "filter",
                &deeply_nested(DEPTH, &[(0x04, "$and"), (0x03, "0")]),
            ),
            vec![],
        ),
        (
            "find with $elemMatch nested 10,000 levels",
            with_raw_field(
                &doc! {"find": "deep", "$db": DB},
                "filter",
                &deeply_nested(DEPTH, &[(0x03, "a"), (0x03, "$elemMatch")]),
            ),
            vec![],
        ),
        (
            "update with a $set value nested 10,000 levels",
            doc! {"update": "deep", "$db": DB}.to_vec().unwrap(),
            vec![(
                "updates",
                vec![with_raw_field(
                    &doc! {"q": {"_id": "canary"}},
                    "u",
                    &deeply_nested(DEPTH, &[(0x03, "$set"), (0x03, "a")]),
                )],
            )],
        ),
        (
            "aggregate with a $match nested 10,000 levels",
            with_raw_array(
                &doc! {"aggregate": "deep", "cursor": {}, "$db": DB},
                "pipeline",
                &[&with_raw_field(&doc! {}, "$match", &deeply_nested(DEPTH, &[(0x04, "$or"), (0x03, "0")]))],
            ),
            vec![],
        ),
    ];
    for (i, (what, body, sequences)) in cases.into_iter().enumerate() {
        let seqs: Vec<(&str, &[Vec<u8>])> = sequences.iter().map(|(n, d)| (*n, &d[..])).collect();
        let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
        let id = 100 + i as i32;
        conn.send_raw(&op_msg(id, 0, &body, &seqs)).await.unwrap();
        expect_error_or_close(&mut conn, id, what).await;
        assert!(ctx.cluster().router().is_alive(), "router died on: {what}");
        assert!(ctx.cluster().shard().is_alive(), "shard died on: {what}");
    }
    assert_still_serving(&ctx, "deep").await;
}
