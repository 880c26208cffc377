//! Authentication between the cluster's processes (`--keyFile`, `--clusterAuthMode x509`): a
//! cluster whose members hold the credentials works end to end, and a process without them is
//! refused by the config servers and the shards before it can send one request (and cannot
//! impersonate a server either).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bson::{Document, doc};
use mongodb::Client;
use mongodb::options::{ClientOptions, Credential};
use shoal_cluster::net::keyfile::{self, ClusterKey, HandshakeError};
use shoal_cluster::pki::{ClusterCa, new_key_file_text, write_private};
use shoal_proto::config::config_client::ConfigClient;
use shoal_proto::config::{All, CatalogQuery, QueryRequest, catalog_query::What};
use shoal_proto::shard::CommandRequest;
use shoal_proto::shard::shard_client::ShardClient;
use shoal_tests::catalog_cluster::CatalogCluster;

async fn root_client(addr: SocketAddr) -> Client {
    let uri = format!("mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=5000");
    let mut options = ClientOptions::parse(&uri).await.expect("uri");
    options.credential = Some(
        Credential::builder().username("root".to_owned()).password("pw".to_owned()).source("admin".to_owned()).build(),
    );
    Client::with_options(options).expect("client")
}

/// The first user (localhost exception), the shard registered, and a write and read through it
/// all: router ↔ config, router ↔ shard and shard ↔ config channels authenticate.
async fn use_cluster(cluster: &CatalogCluster) {
    let anonymous = cluster.client().await.expect("client");
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": "pw", "roles": ["root"] })
        .await
        .expect("first user");
    let root = root_client(cluster.router.addr()).await;
    root.database("admin")
        .run_command(doc! { "addShard": format!("shard0/{}", cluster.shard.addr()) })
        .await
        .expect("addShard");
    let c = root.database("app").collection::<Document>("c");
    c.insert_one(doc! { "_id": 1, "v": "x" }).await.expect("insert");
    assert_eq!(
        c.find_one(doc! { "_id": 1 })
            .await
            .expect("find")
            .and_then(|d| d.get_str("v").ok().map(str::to_owned))
            .as_deref(),
        Some("x")
    );
}

/// A plain gRPC client, as any process without the cluster's credentials would open.
async fn rogue_calls_fail(cluster: &CatalogCluster) {
    let config_addr = &cluster.config_addrs[0];
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{config_addr}"))
        .unwrap()
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(10))
        .connect_lazy();
    let query = QueryRequest {
        queries: vec![CatalogQuery { what: Some(What::Shards(All {})) }],
        linearizable: false,
        forwarded: false,
    };
    let refused = ConfigClient::new(channel).query(query).await;
    assert!(refused.is_err(), "a config server answered a client without the cluster's credentials");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.shard.addr()))
        .unwrap()
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(10))
        .connect_lazy();
    let find = CommandRequest {
        db: "app".into(),
        body: bson::RawDocumentBuf::try_from(&doc! { "find": "c" }).unwrap().into_bytes().into(),
        ..Default::default()
    };
    assert!(ShardClient::new(channel).find(find).await.is_err(), "a shard answered a client without credentials");
}

fn key_file(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    write_private(&path, &new_key_file_text()).expect("key file");
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_file_clusters_work_and_refuse_processes_without_the_key() {
    let secrets = tempfile::tempdir().expect("temp dir");
    let key = key_file(secrets.path(), "cluster.key");
    let cluster = CatalogCluster::start_secured(&["--keyFile".into(), key.clone()], &[]).await.expect("cluster starts");
    use_cluster(&cluster).await;
    rogue_calls_fail(&cluster).await;

    // A process holding another key fails the handshake, on either side.
    let other = ClusterKey::from_text(&new_key_file_text()).unwrap();
    let mut tcp = tokio::net::TcpStream::connect(&cluster.config_addrs[0]).await.expect("connect");
    assert!(matches!(keyfile::client(&mut tcp, &other).await, Err(HandshakeError::Refused)));
    // The router required authentication of clients as soon as it had a key (as mongos does).
    let anonymous = cluster.client().await.expect("client");
    let e = anonymous.database("app").run_command(doc! { "find": "c" }).await.expect_err("unauthenticated");
    assert_eq!(shoal_tests::expect::server_code(&e), Some(13));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_clusters_work_and_refuse_certificates_of_another_ca() {
    let secrets = tempfile::tempdir().expect("temp dir");
    let ca = ClusterCa::new("cluster CA").expect("CA");
    let ca_path = secrets.path().join("ca.pem");
    std::fs::write(&ca_path, ca.certificate_pem()).expect("write CA");
    // One certificate for every process here (all on 127.0.0.1); `shoal up` issues one each.
    let member = ca.issue_member("member", "cluster", &["127.0.0.1", "localhost"]).expect("issue");
    let member_path = secrets.path().join("member.pem");
    write_private(&member_path, &member.combined_pem()).expect("write member");
    let args = vec![
        "--clusterAuthMode".to_owned(),
        "x509".into(),
        "--tlsCertificateKeyFile".into(),
        member_path.display().to_string(),
        "--tlsCAFile".into(),
        ca_path.display().to_string(),
    ];
    let cluster = CatalogCluster::start_secured(&args, &[]).await.expect("cluster starts");
    use_cluster(&cluster).await;
    rogue_calls_fail(&cluster).await;

    // A client certificate from another CA does not get through the TLS handshake.
    let rogue_ca = ClusterCa::new("rogue CA").expect("CA");
    let rogue = rogue_ca.issue_member("rogue", "cluster", &["127.0.0.1"]).expect("issue");
    let rogue_path = secrets.path().join("rogue.pem");
    write_private(&rogue_path, &rogue.combined_pem()).expect("write");
    let files = shoal_cluster::net::TlsFiles { certificate_key_file: rogue_path, ca_file: Some(ca_path) };
    let config = shoal_cluster::net::tls::client_config(&files).expect("client config");
    let tcp = tokio::net::TcpStream::connect(&cluster.config_addrs[0]).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::clone(&config)).connect(name, tcp).await;
    // TLS 1.3 reports a refused client certificate on the first read, not in the handshake.
    if let Ok(stream) = tls.as_mut() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
        let mut buf = [0u8; 16];
        let read = stream.read(&mut buf).await;
        assert!(matches!(read, Err(_) | Ok(0)), "a certificate of another CA was accepted: {read:?}");
    }
}
