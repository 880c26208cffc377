//! The balancer's admin surface through the router: balancerStart/Stop/Status, the zone commands
//! and their errors, balancerCollectionStatus, configureCollectionBalancing, and the rounds the
//! balancer records in `config.actionlog`. Two shards, three config servers, real processes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use mongodb::Database;
use shoal_tests::expect::command_error;
use shoal_tests::sharded_cluster::{ClusterOptions, ShardedCluster};

/// Bound on waiting for the balancer to record something (its round count is reported at most
/// every 5 s, the lease is taken within a renewal period).
const RECORD_WAIT: Duration = Duration::from_secs(40);
const POLL: Duration = Duration::from_millis(200);

async fn status(admin: &Database) -> Document {
    admin.run_command(doc! { "balancerStatus": 1 }).await.expect("balancerStatus")
}

fn rounds(status: &Document) -> i64 {
    status.get_i64("numBalancerRounds").expect("numBalancerRounds is a long")
}

async fn actionlog(client: &mongodb::Client, filter: Document) -> Vec<Document> {
    let coll = client.database("config").collection::<Document>("actionlog");
    let mut cursor = coll.find(filter).await.expect("find config.actionlog");
    let mut out = Vec::new();
    while cursor.advance().await.expect("advance") {
        out.push(Document::try_from(cursor.current()).expect("doc"));
    }
    out
}

/// Polls `f` until it returns `Some`, at most [`RECORD_WAIT`].
async fn eventually<T, F, Fut>(what: &str, cluster: &ShardedCluster, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + RECORD_WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {RECORD_WAIT:?}\n{}", cluster.log_tails(30));
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balancer_start_stop_status_and_the_action_log() {
    let cluster = ShardedCluster::start_with(ClusterOptions {
        router_args: vec!["--balancer-interval-ms".into(), "100".into()],
        ..Default::default()
    })
    .await
    .expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");

    let s = status(&admin).await;
    assert_eq!(s.get_str("mode").ok(), Some("full"), "{s}");
    assert!(s.get_bool("inBalancerRound").is_ok(), "{s}");
    eventually("a counted balancer round", &cluster, || {
        let admin = admin.clone();
        async move { (rounds(&status(&admin).await) > 0).then_some(()) }
    })
    .await;
    let first = eventually("a balancer.round entry", &cluster, || {
        let client = client.clone();
        async move { actionlog(&client, doc! { "what": "balancer.round" }).await.into_iter().next() }
    })
    .await;
    assert_eq!(first.get_str("server").ok(), Some("balancer"), "{first}");
    assert!(first.get_datetime("time").is_ok(), "{first}");
    let details = first.get_document("details").expect("details");
    assert!(details.get_bool("errorOccurred").is_ok() && details.get_str("why").is_ok(), "{first}");

    admin.run_command(doc! { "balancerStop": 1, "maxTimeMS": 30_000 }).await.expect("balancerStop");
    let s = status(&admin).await;
    assert_eq!(s.get_str("mode").ok(), Some("off"));
    assert_eq!(s.get_bool("inBalancerRound").ok(), Some(false), "stop waits for the round to end: {s}");
    let settings = client.database("config").collection::<Document>("settings");
    let balancer = settings.find_one(doc! { "_id": "balancer" }).await.expect("find").expect("balancer settings");
    assert_eq!(balancer.get_bool("stopped").ok(), Some(true));
    // The change of state is recorded (the idle reason changed), and the count keeps growing.
    eventually("a stopped round in the action log", &cluster, || {
        let client = client.clone();
        async move {
            let entries = actionlog(&client, doc! { "details.why": "the balancer is stopped" }).await;
            (!entries.is_empty()).then_some(())
        }
    })
    .await;
    let before = rounds(&status(&admin).await);
    eventually("more rounds while stopped", &cluster, || {
        let admin = admin.clone();
        async move { (rounds(&status(&admin).await) > before).then_some(()) }
    })
    .await;

    // Every router answers alike: the status lives in the catalog.
    let other = cluster.start_router_with("router2", &["--no-balancer".to_owned()]).await.expect("router2");
    let other = shoal_tests::sharded_cluster::client_of(&other).await.expect("client2");
    let s2 = status(&other.database("admin")).await;
    assert_eq!(s2.get_str("mode").ok(), Some("off"));
    assert!(rounds(&s2) >= before, "{s2}");

    admin.run_command(doc! { "balancerStart": 1, "maxTimeMS": 30_000 }).await.expect("balancerStart");
    assert_eq!(status(&other.database("admin")).await.get_str("mode").ok(), Some("full"));
    command_error(client.database("app").run_command(doc! { "balancerStatus": 1 }).await, 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_and_collection_balancing_commands() {
    let cluster =
        ShardedCluster::start_with(ClusterOptions { router_args: vec!["--no-balancer".into()], ..Default::default() })
            .await
            .expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "app" }).await.expect("enableSharding");
    admin.run_command(doc! { "shardCollection": "app.z", "key": { "k": 1 } }).await.expect("shardCollection");
    client.database("app").collection::<Document>("plain").insert_one(doc! { "k": 1 }).await.expect("insert");

    admin.run_command(doc! { "addShardToZone": "shard0", "zone": "A" }).await.expect("addShardToZone");
    command_error(admin.run_command(doc! { "addShardToZone": "nope", "zone": "A" }).await, 70);
    command_error(admin.run_command(doc! { "addShardToZone": "shard0" }).await, 4);
    let range = |min: i32, max: i32, zone: Bson| {
        doc! { "updateZoneKeyRange": "app.z", "min": { "k": min }, "max": { "k": max }, "zone": zone }
    };
    admin.run_command(range(0, 10, "A".into())).await.expect("updateZoneKeyRange");
    command_error(admin.run_command(range(5, 15, "A".into())).await, 178);
    command_error(admin.run_command(range(20, 30, "B".into())).await, 177);
    command_error(admin.run_command(range(30, 20, "A".into())).await, 2);
    let mut unsharded = range(0, 10, "A".into());
    unsharded.insert("updateZoneKeyRange", "app.plain");
    command_error(admin.run_command(unsharded).await, 118);
    command_error(
        admin
            .run_command(doc! { "updateZoneKeyRange": "app.z", "min": { "x": 1 }, "max": { "x": 2 }, "zone": "A" })
            .await,
        72,
    );

    let tags = client.database("config").collection::<Document>("tags");
    let tag = tags.find_one(doc! { "ns": "app.z" }).await.expect("find").expect("the range is in config.tags");
    assert_eq!(tag.get_str("tag").ok(), Some("A"), "{tag}");
    command_error(admin.run_command(doc! { "removeShardFromZone": "shard0", "zone": "A" }).await, 163);
    admin.run_command(range(0, 10, Bson::Null)).await.expect("remove the range");
    assert!(tags.find_one(doc! { "ns": "app.z" }).await.expect("find").is_none());
    admin.run_command(doc! { "removeShardFromZone": "shard0", "zone": "A" }).await.expect("removeShardFromZone");

    let compliant = admin.run_command(doc! { "balancerCollectionStatus": "app.z" }).await.expect("status");
    assert!(compliant.get_bool("balancerCompliant").is_ok(), "{compliant}");
    if compliant.get_bool("balancerCompliant").ok() == Some(false) {
        assert!(compliant.get_str("firstComplianceViolation").is_ok(), "{compliant}");
    }
    command_error(admin.run_command(doc! { "balancerCollectionStatus": "app.plain" }).await, 118);
    command_error(admin.run_command(doc! { "balancerCollectionStatus": "app" }).await, 73);

    admin
        .run_command(doc! { "configureCollectionBalancing": "app.z", "chunkSize": 64 })
        .await
        .expect("configureCollectionBalancing");
    let colls = client.database("config").collection::<Document>("collections");
    let coll = colls.find_one(doc! { "_id": "app.z" }).await.expect("find").expect("app.z");
    assert_eq!(coll.get_i64("maxChunkSizeBytes").ok(), Some(64 << 20), "{coll}");
    command_error(admin.run_command(doc! { "configureCollectionBalancing": "app.plain", "chunkSize": 64 }).await, 118);
    command_error(admin.run_command(doc! { "configureCollectionBalancing": "app.z", "chunkSize": -1 }).await, 2);

    // The auto-merger per collection: configureCollectionBalancing, or mongosh's
    // sh.disableAutoMerger / sh.enableAutoMerger, which write `enableAutoMerge` in config.collections.
    admin
        .run_command(doc! { "configureCollectionBalancing": "app.z", "enableAutoMerger": false })
        .await
        .expect("enableAutoMerger: false");
    let coll = colls.find_one(doc! { "_id": "app.z" }).await.expect("find").expect("app.z");
    assert_eq!(coll.get_bool("enableAutoMerge").ok(), Some(false), "{coll}");
    assert_eq!(coll.get_i64("maxChunkSizeBytes").ok(), Some(64 << 20), "the chunk size stays: {coll}");
    colls.update_one(doc! { "_id": "app.z" }, doc! { "$unset": { "enableAutoMerge": 1 } }).await.expect("$unset");
    let coll = colls.find_one(doc! { "_id": "app.z" }).await.expect("find").expect("app.z");
    assert!(!coll.contains_key("enableAutoMerge"), "{coll}");
    let off = colls
        .update_one(doc! { "_id": "app.z" }, doc! { "$set": { "enableAutoMerge": false } })
        .await
        .expect("$set enableAutoMerge");
    assert_eq!((off.matched_count, off.modified_count), (1, 1));
    command_error(admin.run_command(doc! { "configureCollectionBalancing": "app.z", "enableAutoMerger": 1 }).await, 14);
}
