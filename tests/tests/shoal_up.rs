//! `shoal up` as a user runs it: a spec with config servers, a shard and a router on free loopback
//! ports; the cluster answers through the driver, keeps its catalog and data across a restart on
//! the same data dir, and stops cleanly on SIGINT.

use bson::{Document, doc};
use mongodb::Client;
use shoal_tests::up::{LocalUp, stop};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_keeps_its_catalog_across_restarts_and_stops_on_sigint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = LocalUp::new(dir.path()).expect("spec");
    let uri = cluster.uri("");

    let launcher = cluster.start(1).await.expect("shoal up starts");
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
    stop(&launcher).await.expect("shoal up stops on SIGINT");

    let launcher = cluster.start(2).await.expect("shoal up starts again");
    {
        let client = Client::with_uri_str(&uri).await.expect("client");
        let shards = client.database("admin").run_command(doc! { "listShards": 1 }).await.expect("listShards");
        assert_eq!(shards.get_array("shards").map(Vec::len).ok(), Some(1), "a restart does not add the shard twice");
        let ada =
            client.database("app").collection::<Document>("people").find_one(doc! { "_id": 1 }).await.expect("find");
        assert_eq!(ada.and_then(|d| d.get_str("name").ok().map(str::to_owned)).as_deref(), Some("Ada"));
    }
    stop(&launcher).await.expect("shoal up stops on SIGINT");
}
