//! Tests of the server over real sockets on 127.0.0.1, spoken to in raw bytes.

use super::*;
use bson::{RawDocument, RawDocumentBuf, rawdoc};
use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use crate::wire::{OpMsg, op_code, op_query};

struct TestServer {
    addr: SocketAddr,
    state: Arc<RouterState>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<io::Result<()>>,
}

async fn start_server(max_connections: usize) -> TestServer {
    let mut settings = RouterSettings::new(SocketAddr::from(([127, 0, 0, 1], 0)), "http://127.0.0.1:9");
    settings.max_connections = max_connections;
    let (listener, metrics, state) = start(settings).await.expect("router starts without a shard");
    let addr = listener.local_addr().expect("bound");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, metrics, Arc::clone(&state), async {
        let _ = stopped.await;
    }));
    TestServer { addr, state, stop, task }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connects")
}

/// The next frame, or `None` once the server closed the connection.
async fn read_frame(s: &mut TcpStream) -> Option<Frame> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.ok()?;
    let mut buf = vec![0u8; usize::try_from(i32::from_le_bytes(len)).ok()?];
    buf[..4].copy_from_slice(&len);
    s.read_exact(&mut buf[4..]).await.ok()?;
    Frame::from_bytes(Bytes::from(buf))
}

async fn msg(s: &mut TcpStream, request_id: i32, body: &RawDocument) -> RawDocumentBuf {
    s.write_all(&op_msg::encode_request(request_id, 0, body, &[])).await.expect("sent");
    let reply = read_frame(s).await.expect("a reply");
    assert_eq!((reply.header.op_code, reply.header.response_to), (op_code::OP_MSG, request_id));
    OpMsg::parse(&reply).expect("a well-formed OP_MSG reply").body
}

async fn query(s: &mut TcpStream, request_id: i32, cmd: &RawDocument) -> RawDocumentBuf {
    s.write_all(&op_query::encode_request(request_id, "admin.$cmd", -1, cmd)).await.expect("sent");
    let reply = read_frame(s).await.expect("a reply");
    assert_eq!(reply.header.response_to, request_id);
    op_query::parse_reply(&reply).expect("a well-formed OP_REPLY").document
}

async fn assert_closed(s: &mut TcpStream) {
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte)).await.expect("closed promptly");
    assert!(matches!(n, Ok(0) | Err(_)), "expected the server to close the connection");
}

fn code(reply: &RawDocument) -> i32 {
    reply.get_i32("code").expect("an error reply")
}

#[tokio::test]
async fn java_style_handshake_then_op_msg() {
    let server = start_server(100).await;
    let mut s = connect(server.addr).await;
    let client = rawdoc! { "driver": { "name": "mongo-java-driver", "version": "3.6.2" }, "os": { "type": "Linux" } };
    let hello = query(&mut s, 1, &rawdoc! { "ismaster": 1, "client": client }).await;
    assert!(hello.get_bool("ismaster").expect("ismaster"));
    assert_eq!(hello.get_str("msg").expect("msg"), "isdbgrid");
    assert_eq!(hello.get_f64("ok").expect("ok"), 1.0);
    assert_eq!(hello.get_i32("connectionId").expect("id"), 1);
    let build = query(&mut s, 2, &rawdoc! { "buildinfo": 1 }).await;
    assert_eq!(build.get_str("version").expect("version"), "7.0.0");
    let gle = query(&mut s, 3, &rawdoc! { "getlasterror": 1 }).await;
    assert_eq!((gle.get_i32("connectionId").expect("id"), gle.get_f64("ok").expect("ok")), (1, 1.0));
    assert_eq!(code(&query(&mut s, 4, &rawdoc! { "find": "c" }).await), 352);
    let wrapped = rawdoc! { "$query": { "isMaster": 1, "helloOk": true }, "$readPreference": { "mode": "primary" } };
    assert!(query(&mut s, 5, &wrapped).await.get_bool("helloOk").expect("helloOk echoed"));
    let ping = msg(&mut s, 6, &rawdoc! { "ping": 1, "$db": "admin" }).await;
    assert_eq!(ping, rawdoc! { "ok": 1.0 });
    let hello = msg(&mut s, 7, &rawdoc! { "hello": 1, "$db": "admin" }).await;
    assert!(hello.get_bool("isWritablePrimary").expect("new name"));
    let _ = server.stop.send(());
    server.task.await.expect("joined").expect("clean shutdown");
}

#[tokio::test]
async fn more_to_come_gets_no_reply() {
    let server = start_server(100).await;
    let mut s = connect(server.addr).await;
    let ping = rawdoc! { "ping": 1, "$db": "admin" };
    s.write_all(&op_msg::encode_request(1, flags::MORE_TO_COME, &ping, &[])).await.expect("sent");
    // Even a malformed fire-and-forget message gets no reply.
    s.write_all(&op_msg::encode_request(2, flags::MORE_TO_COME, &rawdoc! { "ping": 1 }, &[])).await.expect("sent");
    msg(&mut s, 3, &ping).await; // asserts responseTo == 3: nothing came for 1 or 2
}

#[tokio::test]
async fn bad_requests_are_answered_and_the_connection_survives() {
    let server = start_server(100).await;
    let mut s = connect(server.addr).await;
    let mut bytes = op_msg::encode_request(1, 0, &rawdoc! { "ping": 1, "$db": "admin" }, &[]);
    bytes[16 + 4 + 1 + 4] = 0x7A; // the body's first element type
    s.write_all(&bytes).await.expect("sent");
    let reply = OpMsg::parse(&read_frame(&mut s).await.expect("reply")).expect("valid").body;
    assert_eq!((code(&reply), reply.get_f64("ok").expect("ok")), (22, 0.0));
    assert!(reply.get_str("errmsg").is_ok() && reply.get_str("codeName").is_ok());
    assert_eq!(code(&msg(&mut s, 2, &rawdoc! { "ping": 1 }).await), 40571);
    assert_eq!(code(&msg(&mut s, 3, &rawdoc! { "atlasVersion": 1, "$db": "admin" }).await), 59);
    assert_eq!(msg(&mut s, 4, &rawdoc! { "ping": 1, "$db": "admin" }).await, rawdoc! { "ok": 1.0 });
}

#[tokio::test]
async fn protocol_errors_close_only_their_connection() {
    let server = start_server(100).await;
    let mut healthy = connect(server.addr).await;
    let ping = rawdoc! { "ping": 1, "$db": "admin" };
    msg(&mut healthy, 1, &ping).await;

    let bad_length = {
        let mut b = op_msg::encode_request(1, 0, &ping, &[]);
        b[..4].copy_from_slice(&5i32.to_le_bytes());
        b
    };
    let illegal_flag = op_msg::encode_request(1, 1 << 3, &ping, &[]);
    let compressed = {
        let mut b = op_msg::encode_request(1, 0, &ping, &[]);
        b[12..16].copy_from_slice(&op_code::OP_COMPRESSED.to_le_bytes());
        b
    };
    let huge = (48_000_001i32).to_le_bytes().to_vec();
    for garbage in [bad_length, illegal_flag, compressed, huge] {
        let mut s = connect(server.addr).await;
        s.write_all(&garbage).await.expect("sent");
        assert_closed(&mut s).await;
    }
    // A truncated message followed by the client hanging up.
    let mut s = connect(server.addr).await;
    let full = op_msg::encode_request(1, 0, &ping, &[]);
    s.write_all(&full[..full.len() - 3]).await.expect("sent");
    s.shutdown().await.expect("half-closed");
    assert_closed(&mut s).await;

    assert_eq!(msg(&mut healthy, 2, &ping).await, rawdoc! { "ok": 1.0 });
}

#[tokio::test]
async fn connections_above_the_limit_are_closed_at_once() {
    let server = start_server(2).await;
    let ping = rawdoc! { "ping": 1, "$db": "admin" };
    let mut a = connect(server.addr).await;
    let mut b = connect(server.addr).await;
    msg(&mut a, 1, &ping).await;
    msg(&mut b, 1, &ping).await;
    let mut c = connect(server.addr).await;
    assert_closed(&mut c).await;
    drop(a);
    // The slot frees once the server has seen the close; retry until it has.
    for attempt in 0.. {
        let mut d = connect(server.addr).await;
        d.write_all(&op_msg::encode_request(1, 0, &ping, &[])).await.expect("sent");
        if read_frame(&mut d).await.is_some() {
            break;
        }
        assert!(attempt < 50, "slot never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serves_well_over_a_thousand_concurrent_connections() {
    const CLIENTS: usize = 1_200;
    let server = start_server(20_000).await;
    let mut clients = JoinSet::new();
    let (release, released) = watch::channel(false);
    for i in 0..CLIENTS {
        let (addr, mut released) = (server.addr, released.clone());
        clients.spawn(async move {
            let mut s = connect(addr).await;
            let reply = msg(&mut s, i as i32, &rawdoc! { "ping": 1, "$db": "admin" }).await;
            assert_eq!(reply, rawdoc! { "ok": 1.0 });
            // Hold the connection open until every client has been served.
            let _ = released.wait_for(|&r| r).await;
        });
    }
    let counters = &server.state.counters;
    for _ in 0..500 {
        if counters.connections_current.get() == CLIENTS as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counters.connections_current.get(), CLIENTS as i64);
    assert_eq!(counters.connections_total.get(), CLIENTS as u64);
    release.send_replace(true);
    while let Some(done) = clients.join_next().await {
        done.expect("client succeeded");
    }
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_returns() {
    let server = start_server(100).await;
    let mut idle = connect(server.addr).await;
    msg(&mut idle, 1, &rawdoc! { "ping": 1, "$db": "admin" }).await;
    let _ = server.stop.send(());
    tokio::time::timeout(Duration::from_secs(2), server.task)
        .await
        .expect("returns well within the grace period")
        .expect("joined")
        .expect("ok");
    assert_closed(&mut idle).await;
    assert_eq!(server.state.counters.connections_current.get(), 0);
}
