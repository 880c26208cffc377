//! The `config` database through the router, against a real catalog (3 config servers): a
//! collection sharded straight into the catalog with four chunks on two shards and a zone, then
//! read back as MongoDB's `config.collections`, `config.chunks` and `config.tags` documents with
//! filters, sorts, projections, counts and pipelines; the writes mongosh's helpers make
//! (`config.settings`, `noBalance`) land in the catalog; other writes are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Client;
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::{BalancerMode, ChunkBound, Command, Epoch, InitialChunks, KeyPattern};
use shoal_proto::catalog::Parts;
use shoal_query::keystring::encode_compound;
use shoal_tests::catalog_cluster::CatalogCluster;
use shoal_tests::expect::command_error;

const NS: &str = "app.users";

fn key(region: &str, n: Bson) -> Vec<u8> {
    encode_compound(&[&Bson::String(region.into()), &n], &[])
}

async fn write(catalog: &ConfigClient, command: Command) {
    let outcome = catalog.write(&command).await.expect("catalog reachable");
    outcome.outcome.unwrap_or_else(|e| panic!("{command}: {e}"));
}

/// Shards app.users on {region: 1, n: 1} into 4 chunks over shard0 and shard1 (a catalog-only
/// shard: nothing here contacts it), with zone EU on [{eu, MinKey}, {us, MinKey}).
async fn setup(cluster: &CatalogCluster, client: &Client, catalog: &ConfigClient) -> uuid::Uuid {
    let admin = client.database("admin");
    // The zone below does not follow chunk bounds: a balancer round would split and move chunks
    // while the test reads them.
    admin.run_command(doc! { "balancerStop": 1 }).await.expect("balancerStop");
    admin.run_command(doc! { "addShard": format!("shard0/{}", cluster.shard.addr()) }).await.expect("addShard");
    write(
        catalog,
        Command::AddShard { shard: "shard1".into(), replica_set: "shard1".into(), members: vec!["127.0.0.1:9".into()] },
    )
    .await;
    admin.run_command(doc! { "enableSharding": "app", "primaryShard": "shard0" }).await.expect("enableSharding");
    let uuid = uuid::Uuid::new_v4();
    let split_points = vec![key("eu", Bson::Int32(0)), key("eu", Bson::Int32(500)), key("us", Bson::Int32(0))];
    write(
        catalog,
        Command::ShardCollection {
            ns: NS.into(),
            uuid,
            epoch: Epoch(bson::oid::ObjectId::new().bytes()),
            key: KeyPattern::range(&["region", "n"]),
            unique: false,
            initial: InitialChunks::Distributed { split_points, shards: vec!["shard0".into(), "shard1".into()] },
        },
    )
    .await;
    write(catalog, Command::AddShardToZone { shard: "shard0".into(), zone: "EU".into() }).await;
    write(
        catalog,
        Command::UpdateZoneKeyRange {
            ns: NS.into(),
            min: ChunkBound::key(key("eu", Bson::MinKey)),
            max: ChunkBound::key(key("us", Bson::MinKey)),
            zone: Some("EU".into()),
        },
    )
    .await;
    uuid
}

async fn find(client: &Client, coll: &str, filter: Document) -> Vec<Document> {
    let c = client.database("config").collection::<Document>(coll);
    c.find(filter).await.expect("find").try_collect().await.expect("cursor")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_collections_chunks_and_tags_through_the_driver() {
    let cluster = CatalogCluster::start().await.expect("cluster");
    let client = cluster.client().await.expect("client");
    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    let uuid = setup(&cluster, &client, &catalog).await;
    let uuid_bin = bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: uuid.as_bytes().to_vec() };
    let config = client.database("config");

    // config.collections: the MongoDB 5+ shape; mongosh's sh.status() filter.
    let colls =
        find(&client, "collections", doc! { "dropped": { "$ne": true }, "unsplittable": { "$ne": true } }).await;
    assert_eq!(colls.len(), 1);
    let c = &colls[0];
    assert_eq!(c.get_str("_id").ok(), Some(NS));
    assert!(c.get_object_id("lastmodEpoch").is_ok() && c.get_datetime("lastmod").is_ok());
    assert!(c.get_timestamp("timestamp").is_ok());
    assert_eq!(c.get("uuid"), Some(&Bson::Binary(uuid_bin.clone())));
    assert_eq!(c.get_document("key").ok(), Some(&doc! { "region": 1, "n": 1 }));
    assert_eq!((c.get_bool("unique").ok(), c.get_bool("noBalance").ok()), (Some(false), Some(false)));

    // config.chunks: keyed by uuid, bounds decoded into shard-key values, sorted by min.
    let chunks = config.collection::<Document>("chunks");
    let sorted: Vec<Document> = chunks
        .find(doc! { "uuid": &uuid_bin })
        .sort(doc! { "min": 1 })
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("cursor");
    let mins: Vec<&Document> = sorted.iter().map(|d| d.get_document("min").expect("min")).collect();
    assert_eq!(
        mins,
        vec![
            &doc! { "region": Bson::MinKey, "n": Bson::MinKey },
            &doc! { "region": "eu", "n": 0 },
            &doc! { "region": "eu", "n": 500 },
            &doc! { "region": "us", "n": 0 },
        ]
    );
    assert_eq!(sorted[3].get_document("max").ok(), Some(&doc! { "region": Bson::MaxKey, "n": Bson::MaxKey }));
    let shards: Vec<&str> = sorted.iter().map(|d| d.get_str("shard").expect("shard")).collect();
    assert_eq!(shards, ["shard0", "shard1", "shard0", "shard1"]);
    for d in &sorted {
        assert!(d.get_object_id("_id").is_ok() && d.get_timestamp("lastmod").is_ok(), "{d}");
        assert!(d.get_timestamp("onCurrentShardSince").is_ok() && d.get_array("history").is_ok(), "{d}");
        assert!(!d.contains_key("jumbo"));
    }
    // Descending sort, skip, limit, projection.
    let page: Vec<Document> = chunks
        .find(doc! {})
        .sort(doc! { "min": -1 })
        .skip(1)
        .limit(2)
        .projection(doc! { "_id": 0, "min.n": 1, "shard": 1 })
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("cursor");
    assert_eq!(
        page,
        vec![doc! { "min": { "n": 500 }, "shard": "shard0" }, doc! { "min": { "n": 0 }, "shard": "shard1" }]
    );
    // Small batches come through router cursors and getMore; killCursors closes one early.
    let batched: Vec<Document> = chunks
        .find(doc! {})
        .sort(doc! { "min": 1 })
        .batch_size(1)
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("more");
    assert_eq!(batched, sorted);
    let aggregated: Vec<Document> = chunks
        .aggregate(vec![doc! { "$sort": { "min": 1 } }])
        .batch_size(3)
        .await
        .expect("agg")
        .try_collect()
        .await
        .expect("more");
    assert_eq!(aggregated, sorted);
    let first = config.run_command(doc! { "find": "chunks", "batchSize": 2 }).await.expect("find");
    let id = first.get_document("cursor").and_then(|c| c.get_i64("id")).expect("cursor id");
    assert_ne!(id, 0);
    let killed = config.run_command(doc! { "killCursors": "chunks", "cursors": [id] }).await.expect("killCursors");
    assert_eq!(killed.get_array("cursorsKilled").ok(), Some(&vec![Bson::Int64(id)]));
    command_error(config.run_command(doc! { "getMore": id, "collection": "chunks" }).await, 43);
    // Filters on decoded bounds and on shard; countDocuments (an aggregate) and count.
    assert_eq!(find(&client, "chunks", doc! { "min.region": "eu" }).await.len(), 2);
    assert_eq!(chunks.count_documents(doc! { "shard": "shard1" }).await.expect("countDocuments"), 2);
    assert_eq!(chunks.count_documents(doc! { "uuid": &uuid_bin }).await.expect("countDocuments"), 4);
    let count = config.run_command(doc! { "count": "chunks", "query": { "shard": "shard0" } }).await.expect("count");
    assert_eq!(count.get_i32("n").ok(), Some(2));
    let shard_names = chunks.distinct("shard", doc! {}).await.expect("distinct");
    assert_eq!(shard_names, vec![Bson::String("shard0".into()), Bson::String("shard1".into())]);
    // sh.status()'s per-shard chunk counts.
    let pipeline = vec![
        doc! { "$match": { "uuid": &uuid_bin } },
        doc! { "$group": { "_id": "$shard", "cnt": { "$sum": 1 } } },
        doc! { "$project": { "_id": 0, "shard": "$_id", "nChunks": "$cnt" } },
        doc! { "$sort": { "shard": 1 } },
    ];
    let by_shard: Vec<Document> =
        chunks.aggregate(pipeline).await.expect("aggregate").try_collect().await.expect("cursor");
    assert_eq!(by_shard, vec![doc! { "shard": "shard0", "nChunks": 2 }, doc! { "shard": "shard1", "nChunks": 2 }]);

    // config.tags: the zone with decoded bounds.
    let tags = find(&client, "tags", doc! { "ns": NS }).await;
    assert_eq!(tags.len(), 1);
    let t = &tags[0];
    assert_eq!(t.get_str("tag").ok(), Some("EU"));
    assert_eq!(t.get_document("min").ok(), Some(&doc! { "region": "eu", "n": Bson::MinKey }));
    assert_eq!(t.get_document("max").ok(), Some(&doc! { "region": "us", "n": Bson::MinKey }));
    assert_eq!(t.get_document("_id").ok(), Some(&doc! { "ns": NS, "min": { "region": "eu", "n": Bson::MinKey } }));

    // The rest sh.status() reads.
    let mongos = find(&client, "mongos", doc! {}).await;
    assert_eq!(mongos.len(), 1);
    assert!(mongos[0].get_str("_id").is_ok_and(|id| id.ends_with(&format!(":{}", cluster.router.addr().port()))));
    assert_eq!(mongos[0].get_str("mongoVersion").ok(), Some("7.0.0"));
    assert!(mongos[0].get_datetime("ping").is_ok() && mongos[0].get_i64("up").is_ok());
    let rounds = find(&client, "actionlog", doc! { "what": "balancer.round" }).await;
    // The stopped balancer's rounds (if one ran yet) are idle, in sh.status()'s shape.
    assert!(
        rounds.iter().all(|r| r.get_document("details").is_ok_and(|d| d.get_bool("errorOccurred").ok() == Some(false)
            && d.get_str("why").ok() == Some("the balancer is stopped"))),
        "{rounds:?}"
    );
    let changes = find(&client, "changelog", doc! { "what": "shardCollection", "ns": NS }).await;
    assert_eq!(changes.len(), 1, "{changes:?}");
    // The only lock held is the balancer's lease (the router's balancer holds it).
    let held = find(&client, "locks", doc! { "state": { "$eq": 2 } }).await;
    assert!(held.iter().all(|l| l.get_str("_id").ok() == Some("balancer")), "{held:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_no_balance_writes_reach_the_catalog_and_others_are_refused() {
    let cluster = CatalogCluster::start().await.expect("cluster");
    let client = cluster.client().await.expect("client");
    let catalog = ConfigClient::new(cluster.config_addrs.clone(), ClientSettings::default());
    setup(&cluster, &client, &catalog).await;
    let config = client.database("config");
    let settings = config.collection::<Document>("settings");

    // The tutorials' chunk size upsert and the balancer switch.
    let r = settings
        .update_one(doc! { "_id": "chunksize" }, doc! { "$set": { "value": 64 } })
        .upsert(true)
        .await
        .expect("chunksize");
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    settings
        .update_one(doc! { "_id": "balancer" }, doc! { "$set": { "stopped": true } })
        .upsert(true)
        .await
        .expect("stop");
    settings
        .replace_one(doc! { "_id": "autosplit" }, doc! { "_id": "autosplit", "enabled": false })
        .upsert(true)
        .await
        .expect("autosplit");
    let (snapshot, _) = catalog.view(Parts::ALL, true).await.expect("read");
    let s = snapshot.settings();
    assert_eq!((s.chunk_size_mib, s.balancer_mode, s.autosplit), (64, BalancerMode::Off, false));
    let chunksize = settings.find_one(doc! { "_id": "chunksize" }).await.expect("find").expect("doc");
    assert_eq!(chunksize.get_i32("value").ok(), Some(64));
    let balancer = settings.find_one(doc! { "_id": "balancer" }).await.expect("find").expect("doc");
    assert_eq!((balancer.get_bool("stopped").ok(), balancer.get_str("mode").ok()), (Some(true), Some("off")));

    // sh.disableBalancing(ns) / sh.enableBalancing(ns).
    let colls = config.collection::<Document>("collections");
    let r = colls.update_one(doc! { "_id": NS }, doc! { "$set": { "noBalance": true } }).await.expect("disable");
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    let (snapshot, _) = catalog.view(Parts::ALL, true).await.expect("read");
    assert!(snapshot.collection(NS).is_some_and(|c| c.no_balance));
    let c = colls.find_one(doc! { "_id": NS }).await.expect("find").expect("doc");
    assert_eq!(c.get_bool("noBalance").ok(), Some(true));
    let r =
        colls.update_one(doc! { "_id": "app.nope" }, doc! { "$set": { "noBalance": true } }).await.expect("no match");
    assert_eq!(r.matched_count, 0);

    // Everything else is IllegalOperation (20); bad values keep the catalog's own codes.
    command_error(config.collection::<Document>("chunks").insert_one(doc! { "x": 1 }).await, 20);
    command_error(settings.delete_one(doc! { "_id": "balancer" }).await, 20);
    command_error(
        config.collection::<Document>("chunks").update_one(doc! {}, doc! { "$set": { "jumbo": true } }).await,
        20,
    );
    command_error(
        settings.update_one(doc! { "_id": "balancer" }, doc! { "$set": { "_waitForDelete": true } }).await,
        20,
    );
    command_error(colls.update_one(doc! { "_id": NS }, doc! { "$inc": { "x": 1 } }).await, 20);
    command_error(settings.update_one(doc! { "_id": "chunksize" }, doc! { "$set": { "value": 5000 } }).await, 2);
    command_error(config.run_command(doc! { "find": "migrations" }).await, 238);
}
