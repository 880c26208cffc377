//! `shoal up` with `security.authorization: enabled` and `net.tls.mode: requireTLS` in the spec:
//! it generates the cluster's key file and CA into its data directory (owner-only), its processes
//! authenticate each other with them, clients must use TLS and authenticate, the first user comes
//! through the localhost exception, and a restart reuses everything (same key, same CA, users kept).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Document, doc};
use mongodb::Client;
use shoal_tests::up::{LocalUp, stop};

const SETTINGS: &str = "security:\n  authorization: enabled\nnet:\n  tls:\n    mode: requireTLS\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_spec_generates_its_secrets_and_keeps_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::with_settings(dir.path(), SETTINGS).expect("spec");
    let data = dir.path().join("data");
    let port = cluster.router_port();
    let tls = format!("tls=true&tlsCAFile={}", data.join("pki/ca.pem").display());
    let anonymous_uri =
        format!("mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=5000&{tls}");
    let root_uri = anonymous_uri.replace("mongodb://", "mongodb://root:pw@");

    let launcher = cluster.start(1).await.expect("shoal up starts");
    let key_path = data.join("cluster.key");
    let key = std::fs::read_to_string(&key_path).expect("the key file was generated");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the key file is readable by its owner only");
        let ca_key = std::fs::metadata(data.join("pki/ca.key")).unwrap().permissions().mode() & 0o777;
        assert_eq!(ca_key, 0o600);
    }
    let ca = std::fs::read_to_string(data.join("pki/ca.pem")).expect("the CA was generated");
    let plain = Client::with_uri_str(format!(
        "mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=2000"
    ))
    .await
    .unwrap();
    assert!(plain.database("admin").run_command(doc! { "ping": 1 }).await.is_err(), "requireTLS refuses plaintext");

    let anonymous = Client::with_uri_str(&anonymous_uri).await.unwrap();
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": "pw", "roles": ["root"] })
        .await
        .expect("the localhost exception over TLS");
    let root = Client::with_uri_str(&root_uri).await.unwrap();
    let shards = root.database("admin").run_command(doc! { "listShards": 1 }).await.expect("listShards");
    assert_eq!(shards.get_array("shards").unwrap().len(), 1, "shoal up registered its shard with the cluster key");
    root.database("app").collection::<Document>("people").insert_one(doc! { "_id": 1 }).await.expect("insert");

    let status = std::process::Command::new(shoal_tests::shoal_bin().unwrap())
        .args(["status", "-f"])
        .arg(&cluster.spec)
        .arg("--data-dir")
        .arg(&data)
        .args(["-u", "root", "-p", "pw"])
        .output()
        .expect("shoal status runs");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "shoal status failed: {out}{}", String::from_utf8_lossy(&status.stderr));
    assert!(out.contains("PRIMARY") && out.contains("leader"), "{out}");
    stop(&launcher).await.expect("stops");

    let launcher = cluster.start(2).await.expect("shoal up starts again");
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), key, "a restart keeps the key");
    assert_eq!(std::fs::read_to_string(data.join("pki/ca.pem")).unwrap(), ca, "and the CA");
    let root = Client::with_uri_str(&root_uri).await.unwrap();
    let found =
        root.database("app").collection::<Document>("people").find_one(doc! {}).await.expect("root still exists");
    assert!(found.is_some());
    stop(&launcher).await.expect("stops");
}
