//! `shoal up` as a user runs it: a spec with config servers, a shard and a router on free loopback
//! ports; the cluster answers through the driver, keeps its catalog and data across a restart on
//! the same data dir, and stops cleanly on SIGINT.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use bson::{Document, doc};
use mongodb::Client;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use shoal_tests::process::{Process, ProcessSpec};

/// Bound on waiting for the launcher to stop its cluster after SIGINT.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind")).collect();
    listeners.iter().map(|l| l.local_addr().expect("addr").port()).collect()
}

fn write_spec(path: &Path, ports: &[u16]) {
    let spec = format!(
        "name: test\nbind_ip: 127.0.0.1\nconfig_servers:\n  - name: cfg1\n    port: {}\n  - name: cfg2\n    port: {}\n  - name: cfg3\n    port: {}\nrouters:\n  - name: router0\n    port: {}\nshards:\n  - name: shard0\n    members:\n      - port: {}\n",
        ports[0], ports[1], ports[2], ports[3], ports[4]
    );
    std::fs::write(path, spec).expect("write spec");
}

async fn up(dir: &Path, spec: &Path, run: u32) -> Process {
    Process::start(ProcessSpec {
        name: format!("up{run}"),
        role: "cluster".into(),
        args: vec![
            "up".into(),
            "-f".into(),
            spec.display().to_string(),
            "--data-dir".into(),
            dir.join("data").display().to_string(),
        ],
        log_path: dir.join(format!("up{run}.log")),
    })
    .await
    .expect("shoal up starts")
}

async fn stop(launcher: &Process) {
    kill(Pid::from_raw(launcher.pid() as i32), Signal::SIGINT).expect("SIGINT");
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    while launcher.exit_status().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "shoal up did not stop after SIGINT:\n{}",
            launcher.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(launcher.exit_status().is_some_and(|s| s.success()), "shoal up exit status: {:?}", launcher.exit_status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_keeps_its_catalog_across_restarts_and_stops_on_sigint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = free_ports(5);
    let spec = dir.path().join("spec.yaml");
    write_spec(&spec, &ports);
    let uri = format!("mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=5000", ports[3]);

    let launcher = up(dir.path(), &spec, 1).await;
    {
        let client = Client::with_uri_str(&uri).await.expect("client");
        let shards = client.database("admin").run_command(doc! { "listShards": 1 }).await.expect("listShards");
        let ids: Vec<&str> = shards
            .get_array("shards")
            .expect("shards")
            .iter()
            .filter_map(|s| s.as_document().and_then(|d| d.get_str("_id").ok()))
            .collect();
        assert_eq!(ids, vec!["shard0"], "shoal up registers its shard in the catalog");
        client
            .database("app")
            .collection::<Document>("people")
            .insert_one(doc! { "_id": 1, "name": "Ada" })
            .await
            .expect("insert");
    }
    stop(&launcher).await;

    let launcher = up(dir.path(), &spec, 2).await;
    {
        let client = Client::with_uri_str(&uri).await.expect("client");
        let shards = client.database("admin").run_command(doc! { "listShards": 1 }).await.expect("listShards");
        assert_eq!(shards.get_array("shards").map(Vec::len).ok(), Some(1), "a restart does not add the shard twice");
        let ada =
            client.database("app").collection::<Document>("people").find_one(doc! { "_id": 1 }).await.expect("find");
        assert_eq!(ada.and_then(|d| d.get_str("name").ok().map(str::to_owned)).as_deref(), Some("Ada"));
    }
    stop(&launcher).await;
}
