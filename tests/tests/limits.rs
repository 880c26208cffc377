//! The router's limits on hostile or greedy clients: `--maxConns` closes connections beyond it at
//! once (and takes new ones when others leave), and a client that stops in the middle of a message
//! is disconnected while idle connections stay open.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::doc;
use shoal_tests::catalog_cluster::CatalogCluster;
use shoal_tests::wire::WireConn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_conns_are_closed_at_once() {
    let cluster = CatalogCluster::start_with(&["--maxConns", "2"]).await.expect("cluster starts");
    let addr = cluster.router.addr();
    let mut first = WireConn::connect(addr).await.unwrap();
    let mut second = WireConn::connect(addr).await.unwrap();
    first.command(&doc! { "ping": 1, "$db": "admin" }).await.expect("first served");
    second.command(&doc! { "ping": 1, "$db": "admin" }).await.expect("second served");
    let mut third = WireConn::connect(addr).await.unwrap();
    assert!(third.command(&doc! { "ping": 1, "$db": "admin" }).await.is_err(), "a third connection is refused");
    drop(first);
    // The slot frees when the router sees the close; a new connection is served then.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut next = WireConn::connect(addr).await.unwrap();
        if next.command(&doc! { "ping": 1, "$db": "admin" }).await.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    second.command(&doc! { "ping": 1, "$db": "admin" }).await.expect("the second is still served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_message_is_cut_off_but_idle_connections_stay() {
    let cluster = CatalogCluster::start_with(&["--message-stall-timeout-ms", "300"]).await.expect("cluster starts");
    let addr = cluster.router.addr();
    let mut idle = WireConn::connect(addr).await.unwrap();
    let mut stalled = WireConn::connect(addr).await.unwrap();
    // A header promising 1000 bytes, then 20 of them, then nothing.
    let mut half = 1000i32.to_le_bytes().to_vec();
    half.extend_from_slice(&[0u8; 16]);
    stalled.send_raw(&half).await.unwrap();
    stalled.expect_closed().await.expect("the stalled connection is closed");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    idle.command(&doc! { "ping": 1, "$db": "admin" }).await.expect("an idle connection is never closed");
}
