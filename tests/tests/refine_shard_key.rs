//! `refineCollectionShardKey` on real processes (three config servers, two shards, two routers):
//! a chunk stuck on one value of `{k: 1}` is jumbo and cannot be split; after refining the key to
//! `{k: 1, sub: 1}` the catalog shows the new key, bounds with `sub: MinKey` and no jumbo flag,
//! the formerly single-key range splits and moves, every document is still read exactly once
//! (through this router and a router that still cached the old key), and writes by the new key
//! route right; zone ranges gain the suffix too. Bad input gets MongoDB's codes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::{Client, Collection};
use shoal_cluster::config_client::ConfigClient;
use shoal_configsvr::catalog::api::RoutingAnswer;
use shoal_configsvr::catalog::{ChunkBound, Command, RoutingTable};
use shoal_proto::ErrorCode;
use shoal_query::keystring::encode_compound;
use shoal_tests::expect::command_error;
use shoal_tests::sharded_cluster::{ShardedCluster, client_of};

const DB: &str = "db";
const NS: &str = "db.c";
/// The hot value of `k`: this many documents share it, with distinct `sub`.
const HOT_K: i32 = 7;
const HOT_DOCS: i32 = 1000;
/// Documents on other values of `k` (0..COLD_K, one each), and hot ones lacking `sub`.
const COLD_K: i32 = 50;
const NO_SUB_DOCS: i32 = 5;
const TOTAL: u64 = (HOT_DOCS + COLD_K - 1 + NO_SUB_DOCS) as u64;

async fn table(catalog: &ConfigClient) -> RoutingTable {
    match catalog.routing_table(NS, None, true).await.expect("routing table").0 {
        RoutingAnswer::Full(Some(t)) => t,
        other => panic!("expected a routing table of {NS}, got {other:?}"),
    }
}

async fn all(coll: &Collection<Document>, filter: Document) -> Vec<Document> {
    coll.find(filter).await.expect("find").try_collect().await.expect("cursor")
}

async fn config_docs(client: &Client, name: &str, filter: Document) -> Vec<Document> {
    all(&client.database("config").collection(name), filter).await
}

/// The hot range `[{k: 7}, {k: 8})` on shard1, marked jumbo through the catalog as the balancer
/// marks a chunk it failed to split.
async fn setup(cluster: &ShardedCluster, client: &Client) {
    let admin = client.database("admin");
    admin.run_command(doc! { "balancerStop": 1 }).await.expect("balancerStop");
    admin.run_command(doc! { "shardCollection": NS, "key": {"k": 1} }).await.expect("shardCollection");
    let coll = client.database(DB).collection::<Document>("c");
    let mut docs: Vec<Document> = (0..HOT_DOCS).map(|s| doc! { "k": HOT_K, "sub": s, "v": 0 }).collect();
    docs.extend((0..COLD_K).filter(|k| *k != HOT_K).map(|k| doc! { "k": k, "sub": 0, "v": 0 }));
    docs.extend((0..NO_SUB_DOCS).map(|i| doc! { "k": HOT_K, "nosub": i }));
    coll.insert_many(docs).await.expect("insert");
    for at in [HOT_K, HOT_K + 1] {
        admin.run_command(doc! { "split": NS, "middle": {"k": at} }).await.expect("split");
    }
    admin
        .run_command(doc! { "moveChunk": NS, "find": {"k": HOT_K}, "to": ShardedCluster::shard_name(1) })
        .await
        .expect("moveChunk");
    admin.run_command(doc! { "addShardToZone": ShardedCluster::shard_name(0), "zone": "Z" }).await.expect("zone");
    admin
        .run_command(doc! { "updateZoneKeyRange": NS, "min": {"k": 0}, "max": {"k": 5}, "zone": "Z" })
        .await
        .expect("updateZoneKeyRange");
    // One key value: there is nowhere inside the chunk to split.
    command_error(admin.run_command(doc! { "split": NS, "middle": {"k": HOT_K} }).await, ErrorCode::CannotSplit.code());

    let catalog = cluster.catalog();
    let t = table(&catalog).await;
    let hot = ChunkBound::Key(encode_compound(&[&Bson::Int32(HOT_K)], &[]));
    let chunk = t.chunks.iter().find(|c| c.min == hot).expect("the hot chunk");
    let command = Command::SetChunkJumbo {
        ns: NS.into(),
        epoch: t.epoch,
        min: hot,
        expected_version: chunk.version,
        jumbo: true,
        fencing: None,
    };
    catalog.write(&command).await.expect("catalog").outcome.expect("jumbo set");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refine_clears_jumbo_and_lets_the_hot_range_split() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    setup(&cluster, &client).await;
    let admin = client.database("admin");
    let coll = client.database(DB).collection::<Document>("c");
    let catalog = cluster.catalog();

    // A second router caches the old routing table before the refine.
    let other = cluster.start_router("router2").await.expect("router2");
    let other_client = client_of(&other).await.expect("router2 client");
    let other_coll = other_client.database(DB).collection::<Document>("c");
    assert_eq!(other_coll.count_documents(doc! {}).await.expect("count"), TOTAL);

    let before = table(&catalog).await;
    let jumbo = config_docs(&client, "chunks", doc! { "jumbo": true }).await;
    assert_eq!(jumbo.len(), 1, "{jumbo:?}");

    admin
        .run_command(doc! { "refineCollectionShardKey": NS, "key": {"k": 1, "sub": 1} })
        .await
        .expect("refineCollectionShardKey");

    // The catalog: new key and generation, same placement, bounds extended with MinKey.
    let after = table(&catalog).await;
    assert_ne!(after.epoch, before.epoch, "a refine starts a new generation");
    assert!(after.timestamp > before.timestamp);
    let owners = |t: &RoutingTable| t.chunks.iter().map(|c| (c.shard.clone(), c.version)).collect::<Vec<_>>();
    assert_eq!(owners(&after), owners(&before));
    let colls = config_docs(&client, "collections", doc! { "_id": NS }).await;
    assert_eq!(colls[0].get_document("key").ok(), Some(&doc! { "k": 1, "sub": 1 }), "{colls:?}");
    let uuid = colls[0].get("uuid").cloned().expect("uuid");
    let chunks = config_docs(&client, "chunks", doc! { "uuid": uuid }).await;
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    for c in &chunks {
        assert!(!c.contains_key("jumbo"), "jumbo not cleared: {c}");
        for side in ["min", "max"] {
            let b = c.get_document(side).expect("bound");
            let k = b.get("k").expect("k");
            // MaxKey only at the top end; every other bound ends in MinKey.
            let expected_sub = if *k == Bson::MaxKey { Bson::MaxKey } else { Bson::MinKey };
            assert_eq!(b.get("sub"), Some(&expected_sub), "{side} of {c}");
        }
    }
    let tags = config_docs(&client, "tags", doc! { "ns": NS }).await;
    assert_eq!(tags.len(), 1, "{tags:?}");
    assert_eq!(tags[0].get_document("min").ok(), Some(&doc! { "k": 0, "sub": Bson::MinKey }), "{tags:?}");
    assert_eq!(tags[0].get_document("max").ok(), Some(&doc! { "k": 5, "sub": Bson::MinKey }), "{tags:?}");
    let refined = config_docs(&client, "changelog", doc! { "what": "refineCollectionShardKey.end" }).await;
    assert_eq!(refined.len(), 1, "{refined:?}");
    let same = admin.run_command(doc! { "refineCollectionShardKey": NS, "key": {"k": 1, "sub": 1} }).await;
    same.expect("refining to the key in place is a no-op");
    assert_eq!(table(&catalog).await.epoch, after.epoch);

    // Every document is still read exactly once, through both routers (the other one stale).
    assert_eq!(coll.count_documents(doc! {}).await.expect("count"), TOTAL);
    assert_eq!(other_coll.count_documents(doc! {}).await.expect("count via router2"), TOTAL);

    // The formerly single-key range now splits inside itself, and the upper half moves.
    admin.run_command(doc! { "split": NS, "middle": {"k": HOT_K, "sub": HOT_DOCS / 2} }).await.expect("split");
    admin
        .run_command(doc! {
            "moveChunk": NS, "find": {"k": HOT_K, "sub": HOT_DOCS - 1}, "to": ShardedCluster::shard_name(0),
            "_waitForDelete": true,
        })
        .await
        .expect("moveChunk of the upper half");
    let t = table(&catalog).await;
    let upper = ChunkBound::Key(encode_compound(&[&Bson::Int32(HOT_K), &Bson::Int32(HOT_DOCS / 2)], &[]));
    let upper_chunk = t.chunks.iter().find(|c| c.min == upper).expect("the upper half");
    assert_eq!(upper_chunk.shard, ShardedCluster::shard_name(0));

    // Reads: exact counts, by the new key and by the old prefix, on both routers.
    for c in [&coll, &other_coll] {
        assert_eq!(c.count_documents(doc! {}).await.expect("count"), TOTAL);
        let hot = all(c, doc! { "k": HOT_K }).await;
        assert_eq!(hot.len(), (HOT_DOCS + NO_SUB_DOCS) as usize);
        let upper = c.count_documents(doc! { "k": HOT_K, "sub": {"$gte": HOT_DOCS / 2} }).await.expect("count");
        assert_eq!(upper, (HOT_DOCS / 2) as u64);
        let one = all(c, doc! { "k": HOT_K, "sub": HOT_DOCS - 3 }).await;
        assert_eq!(one.len(), 1, "{one:?}");
    }
    // Documents without `sub` have it as null: in the lower half, still readable.
    assert_eq!(coll.count_documents(doc! { "k": HOT_K, "sub": null }).await.expect("count"), NO_SUB_DOCS as u64);

    // Writes by the new key route to the owning shard.
    coll.insert_one(doc! { "k": HOT_K, "sub": HOT_DOCS + 5, "v": 0 }).await.expect("insert upper");
    other_coll.insert_one(doc! { "k": HOT_K, "sub": -5, "v": 0 }).await.expect("insert lower via router2");
    let r = coll.update_one(doc! { "k": HOT_K, "sub": HOT_DOCS + 5 }, doc! { "$set": {"v": 1} }).await.expect("update");
    assert_eq!(r.modified_count, 1);
    let r = other_coll.update_many(doc! { "k": HOT_K, "sub": {"$lt": 10} }, doc! { "$inc": {"v": 1} }).await;
    assert_eq!(r.expect("update_many via router2").modified_count, 11);
    let r = coll.delete_one(doc! { "k": HOT_K, "sub": HOT_DOCS - 1 }).await.expect("delete");
    assert_eq!(r.deleted_count, 1);
    let r = other_coll.delete_one(doc! { "k": HOT_K, "sub": 0 }).await.expect("delete via router2");
    assert_eq!(r.deleted_count, 1);
    assert_eq!(coll.count_documents(doc! {}).await.expect("count"), TOTAL);
    assert_eq!(coll.count_documents(doc! { "v": 1 }).await.expect("count"), 11);
    assert_eq!(coll.count_documents(doc! { "v": 2 }).await.expect("count"), 0);
    let new_doc = all(&other_coll, doc! { "k": HOT_K, "sub": HOT_DOCS + 5 }).await;
    assert_eq!(new_doc.first().and_then(|d| d.get_i32("v").ok()), Some(1), "{new_doc:?}");
    // Inserts must now carry the whole new key.
    let missing = coll.insert_one(doc! { "k": HOT_K }).await;
    assert_eq!(
        shoal_tests::expect::server_code(&missing.expect_err("refused")),
        Some(ErrorCode::ShardKeyNotFound.code())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refine_refusals_carry_mongodb_codes() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    let admin = client.database("admin");
    admin.run_command(doc! { "shardCollection": NS, "key": {"k": 1} }).await.expect("shardCollection");
    let refine = |ns: &str, key: Document| doc! { "refineCollectionShardKey": ns, "key": key };

    let e = command_error(
        admin.run_command(refine("db.unsharded", doc! { "k": 1, "sub": 1 })).await,
        ErrorCode::NamespaceNotSharded.code(),
    );
    assert!(e.message.contains("not sharded"), "{e:?}");
    for key in [doc! { "sub": 1, "k": 1 }, doc! { "sub": 1 }, doc! { "k": "hashed", "sub": 1 }] {
        let e = command_error(admin.run_command(refine(NS, key.clone())).await, ErrorCode::InvalidOptions.code());
        assert!(e.message.contains("current shard key"), "{key}: {e:?}");
    }
    command_error(admin.run_command(refine(NS, doc! { "k": 1, "sub": -1 })).await, ErrorCode::BadValue.code());
    command_error(admin.run_command(doc! { "refineCollectionShardKey": NS }).await, ErrorCode::Location40414.code());
    command_error(admin.run_command(refine("nodot", doc! { "k": 1 })).await, ErrorCode::InvalidNamespace.code());
    command_error(
        client.database(DB).run_command(refine(NS, doc! { "k": 1, "sub": 1 })).await,
        ErrorCode::Unauthorized.code(),
    );
    // Nothing changed.
    let colls = config_docs(&client, "collections", doc! { "_id": NS }).await;
    assert_eq!(colls[0].get_document("key").ok(), Some(&doc! { "k": 1 }));
}
