//! TLS on the router's client port (`--tlsMode`) and MONGODB-X509 authentication, through the
//! official Rust driver: requireTLS refuses plaintext and serves a client that trusts the CA;
//! allowTLS serves both; with a CA file, a client's certificate subject is its `$external` user.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::path::{Path, PathBuf};

use bson::{Document, doc};
use mongodb::Client;
use shoal_cluster::pki::{ClusterCa, DnType, write_private};
use shoal_tests::catalog_cluster::CatalogCluster;

struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    server: PathBuf,
    client: PathBuf,
}

/// A CA, a router certificate for 127.0.0.1 and a client certificate `CN=alice,OU=apps,O=Example`.
fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = ClusterCa::new("test CA").unwrap();
    let write = |name: &str, pem: String| -> PathBuf {
        let path = dir.path().join(name);
        write_private(&path, &pem).unwrap();
        path
    };
    let server = ca.issue_member("router", "cluster", &["127.0.0.1", "localhost"]).unwrap();
    let client = ca
        .issue_client(&[
            (DnType::OrganizationName, "Example"),
            (DnType::OrganizationalUnitName, "apps"),
            (DnType::CommonName, "alice"),
        ])
        .unwrap();
    Pki {
        ca: write("ca.pem", ca.certificate_pem()),
        server: write("server.pem", server.combined_pem()),
        client: write("client.pem", client.combined_pem()),
        _dir: dir,
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

async fn client(uri: String) -> Client {
    Client::with_uri_str(uri).await.unwrap()
}

async fn pings(client: &Client) -> bool {
    client.database("admin").run_command(doc! { "ping": 1 }).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_tls_refuses_plaintext_and_serves_tls() {
    let pki = pki();
    let args = ["--tlsMode", "requireTLS", "--tlsCertificateKeyFile", &path(&pki.server)];
    let cluster = CatalogCluster::start_with(&args).await.expect("cluster starts");
    let addr = cluster.router.addr();
    let plain = client(format!("mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=2000")).await;
    assert!(!pings(&plain).await, "a plaintext client got an answer under requireTLS");
    let tls = client(format!(
        "mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=5000&tls=true&tlsCAFile={}",
        path(&pki.ca)
    ))
    .await;
    assert!(pings(&tls).await, "a TLS client that trusts the CA is served");
    tls.database("app").collection::<Document>("c").insert_one(doc! { "x": 1 }).await.expect_err("no shard yet");
    // A client that does not trust the CA refuses the router.
    let untrusting =
        client(format!("mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=2000&tls=true")).await;
    assert!(!pings(&untrusting).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_tls_serves_both_on_one_port() {
    let pki = pki();
    let args = ["--tlsMode", "allowTLS", "--tlsCertificateKeyFile", &path(&pki.server)];
    let cluster = CatalogCluster::start_with(&args).await.expect("cluster starts");
    let addr = cluster.router.addr();
    let plain = client(format!("mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=5000")).await;
    assert!(pings(&plain).await);
    let tls = client(format!(
        "mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=5000&tls=true&tlsCAFile={}",
        path(&pki.ca)
    ))
    .await;
    assert!(pings(&tls).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_users_authenticate_with_their_certificate() {
    let pki = pki();
    let args = [
        "--auth",
        "--tlsMode",
        "requireTLS",
        "--tlsCertificateKeyFile",
        &path(&pki.server),
        "--tlsCAFile",
        &path(&pki.ca),
        "--tlsAllowConnectionsWithoutCertificates",
    ];
    let cluster = CatalogCluster::start_with(&args).await.expect("cluster starts");
    let addr = cluster.router.addr();
    let tls = |extra: &str| {
        format!(
            "mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=5000&tls=true&tlsCAFile={}{extra}",
            path(&pki.ca)
        )
    };
    // The localhost exception over TLS: an admin, who registers the certificate's subject.
    let anonymous = client(tls("")).await;
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": "pw", "roles": ["root"] })
        .await
        .expect("first user");
    let root = client(tls("").replace("mongodb://", "mongodb://root:pw@")).await;
    let subject = "CN=alice,OU=apps,O=Example";
    root.database("$external")
        .run_command(doc! { "createUser": subject, "roles": [{ "role": "clusterMonitor", "db": "admin" }] })
        .await
        .expect("an $external user");
    let alice = client(tls(&format!("&tlsCertificateKeyFile={}&authMechanism=MONGODB-X509", path(&pki.client)))).await;
    let status = alice.database("admin").run_command(doc! { "connectionStatus": 1 }).await.expect("authenticated");
    let users = status.get_document("authInfo").unwrap().get_array("authenticatedUsers").unwrap().clone();
    assert_eq!(users, vec![bson::Bson::Document(doc! { "user": subject, "db": "$external" })]);
    alice.database("admin").run_command(doc! { "serverStatus": 1 }).await.expect("clusterMonitor may serverStatus");
    let e = alice.database("app").run_command(doc! { "find": "c" }).await.expect_err("but not read app");
    assert_eq!(shoal_tests::expect::server_code(&e), Some(13));
    // Without a certificate, MONGODB-X509 has no subject to authenticate.
    let nobody = client(tls("")).await;
    let e = nobody
        .database("$external")
        .run_command(doc! { "authenticate": 1, "mechanism": "MONGODB-X509" })
        .await
        .expect_err("no certificate");
    assert_eq!(shoal_tests::expect::server_code(&e), Some(18));
}
