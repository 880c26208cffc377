//! The balancer on real processes: nobody calls `moveChunk`, and the cluster evens itself out.
//!
//! - 200k documents on a monotonically increasing key and 200k on a random key spread over three
//!   shards; a fourth shard added later fills; `removeShard` drains a shard (with `movePrimary` of
//!   its database) to empty and completes; every document is there exactly once.
//! - A zone's key range ends on the zone's shard.
//! - A hot range under a zipfian load is split by load and its halves spread.
//! - A router killed while it holds the balancer lease is replaced by another router's balancer.
//! - One heavy key and one hot key each become a jumbo chunk, reported in `config.actionlog` and not
//!   retried; `clearJumboFlag` and a later split clear the flag.
//!
//! Routers run the balancer every few hundred milliseconds and the chunk size is 1 MiB, so the
//! tests take seconds of balancing rather than MongoDB's minutes; every wait is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::options::UpdateOptions;
use rand::Rng;
use shoal_configsvr::catalog::BALANCER_LEASE;
use shoal_tests::balance::{catalog, chunks_per_shard, docs_on, spread_problem, wait_until};
use shoal_tests::sharded_cluster::{ClusterOptions, ShardedCluster, client_of};

/// The balancer's round interval in these tests.
const INTERVAL_MS: &str = "300";
/// Documents per collection in the spreading test (the issue's 200k).
const SPREAD_DOCS: i64 = 200_000;
/// Documents in the lease takeover test.
const LEASE_DOCS: i64 = 100_000;
/// How long a cluster may take to balance, fill or drain.
const BALANCE_MAX: Duration = Duration::from_secs(300);
/// Bytes of padding per document.
const PAD: usize = 48;
/// BSON bytes of every document these tests insert: `_id`, one 64-bit key, the padding.
const DOC_BYTES: u64 = 86;
/// The chunk size these tests set (1 MiB).
const CHUNK_BYTES: u64 = 1 << 20;
/// The most two shards' documents may differ by once balanced: the balancer's threshold of three
/// chunk sizes, plus one chunk of slack for its cached size estimates and pending range deletions.
const MAX_GAP_DOCS: u64 = 4 * CHUNK_BYTES / DOC_BYTES;

fn router_args(extra: &[&str]) -> Vec<String> {
    let mut args = vec!["--balancer-interval-ms".to_owned(), INTERVAL_MS.to_owned()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

async fn cluster(shards: usize, spare: usize, extra: &[&str]) -> (ShardedCluster, mongodb::Client) {
    let options = ClusterOptions { shards, spare_shards: spare, router_args: router_args(extra) };
    let cluster = ShardedCluster::start_with(options).await.expect("cluster starts");
    let client = cluster.client().await.expect("client");
    // MongoDB's documented way to set the cluster's chunk size: `config.settings`, in MiB.
    let upsert = UpdateOptions::builder().upsert(true).build();
    client
        .database("config")
        .collection::<Document>("settings")
        .update_one(doc! { "_id": "chunksize" }, doc! { "$set": { "value": 1 } })
        .with_options(upsert)
        .await
        .expect("chunk size 1 MiB");
    (cluster, client)
}

async fn shard_collection(client: &mongodb::Client, db: &str, coll: &str, key: Document, primary: &str) {
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": db, "primaryShard": primary }).await.expect("enableSharding");
    admin.run_command(doc! { "shardCollection": format!("{db}.{coll}"), "key": key }).await.expect("shardCollection");
}

async fn insert_range(
    coll: &mongodb::Collection<Document>,
    ids: std::ops::Range<i64>,
    doc_of: impl Fn(i64) -> Document,
) {
    let pad = "x".repeat(PAD);
    let ids: Vec<i64> = ids.collect();
    for batch in ids.chunks(1000) {
        let docs: Vec<Document> = batch
            .iter()
            .map(|i| {
                let mut d = doc_of(*i);
                d.insert("p", &pad);
                d
            })
            .collect();
        coll.insert_many(docs).await.expect("insert batch");
    }
}

/// Every `_id` of the collection read back through the router, checked to be exactly 0..n.
async fn assert_exact_ids(coll: &mongodb::Collection<Document>, n: i64) {
    let mut cursor = coll.find(doc! {}).projection(doc! { "_id": 1 }).batch_size(10_000).await.expect("find");
    let mut ids = BTreeSet::new();
    let mut read = 0_i64;
    while let Some(d) = cursor.try_next().await.expect("cursor") {
        ids.insert(d.get_i64("_id").expect("_id"));
        read += 1;
    }
    assert_eq!(read, n, "{}: documents read back", coll.name());
    assert_eq!(ids.len() as i64, n, "{}: distinct _ids", coll.name());
    assert_eq!(ids.first().copied(), Some(0));
    assert_eq!(ids.last().copied(), Some(n - 1));
}

/// Direct document counts of `db.coll` on each of `shards` (indexes into the cluster).
async fn counts(
    cluster: &ShardedCluster,
    shards: &[usize],
    db: &str,
    coll: &str,
) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    for &i in shards {
        let n = docs_on(&cluster.shard_addr(i), db, coll).await.map_err(|e| e.to_string())?;
        out.insert(ShardedCluster::shard_name(i), n);
    }
    Ok(out)
}

/// Waits until every shard in `shards` owns a chunk of each collection and the documents are as
/// even as the balancer makes them ([`MAX_GAP_DOCS`]).
async fn wait_spread(cluster: &ShardedCluster, shards: &[usize], db: &str, colls: &[&str], what: &str) {
    let config = cluster.catalog();
    let result = wait_until(BALANCE_MAX, || async {
        let cat = catalog(&config).await.map_err(|e| e.to_string())?;
        for coll in colls {
            let ns = format!("{db}.{coll}");
            let c = cat.collection(&ns).ok_or(format!("{ns} is not sharded"))?;
            let owners = chunks_per_shard(c);
            for &i in shards {
                if !owners.contains_key(&ShardedCluster::shard_name(i)) {
                    return Err(format!("{ns}: shard{i} owns no chunk; chunks per shard {owners:?}"));
                }
            }
            if let Some(problem) = spread_problem(&counts(cluster, shards, db, coll).await?, MAX_GAP_DOCS) {
                return Err(format!("{ns}: {problem}"));
            }
        }
        Ok(())
    })
    .await;
    if let Err(why) = result {
        panic!("{what}: not spread within {BALANCE_MAX:?}: {why}\n{}", cluster.log_tails(60));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_balancer_spreads_fills_a_new_shard_and_drains_a_removed_one() {
    let (mut cluster, client) = cluster(3, 1, &[]).await;
    shard_collection(&client, "bal", "mono", doc! { "ts": 1 }, "shard0").await;
    shard_collection(&client, "bal", "rand", doc! { "r": 1 }, "shard0").await;
    let db = client.database("bal");
    let plain = db.collection::<Document>("plain");
    insert_range(&plain, 0..500, |i| doc! { "_id": i }).await;
    let mono = db.collection::<Document>("mono");
    insert_range(&mono, 0..SPREAD_DOCS, |i| doc! { "_id": i, "ts": i }).await;
    let rand_coll = db.collection::<Document>("rand");
    let mut rng = rand::rng();
    let keys: Vec<i64> = (0..SPREAD_DOCS).map(|_| rng.random_range(0..i64::MAX)).collect();
    insert_range(&rand_coll, 0..SPREAD_DOCS, |i| doc! { "_id": i, "r": keys[i as usize] }).await;

    let total = SPREAD_DOCS as u64;
    wait_spread(&cluster, &[0, 1, 2], "bal", &["mono", "rand"], "three shards").await;

    cluster.add_shard(3).await.expect("add a fourth shard");
    wait_spread(&cluster, &[0, 1, 2, 3], "bal", &["mono", "rand"], "a fourth shard").await;

    let admin = client.database("admin");
    let started = admin.run_command(doc! { "removeShard": "shard0" }).await.expect("removeShard");
    assert_eq!(started.get_str("state").ok(), Some("started"), "{started}");
    let to_move = started.get_array("dbsToMove").expect("dbsToMove");
    assert!(to_move.contains(&Bson::String("bal".into())), "{started}");
    admin.run_command(doc! { "movePrimary": "bal", "to": "shard1" }).await.expect("movePrimary");
    let drained = wait_until(BALANCE_MAX, || async {
        let reply = admin.run_command(doc! { "removeShard": "shard0" }).await.map_err(|e| e.to_string())?;
        match reply.get_str("state") {
            Ok("completed") => Ok(()),
            _ => Err(format!("removeShard: {reply}")),
        }
    })
    .await;
    if let Err(why) = drained {
        panic!("shard0 not drained within {BALANCE_MAX:?}: {why}\n{}", cluster.log_tails(60));
    }
    let shards = admin.run_command(doc! { "listShards": 1 }).await.expect("listShards");
    let names: Vec<&str> = shards
        .get_array("shards")
        .expect("shards")
        .iter()
        .filter_map(|s| s.as_document()?.get_str("_id").ok())
        .collect();
    assert_eq!(names, ["shard1", "shard2", "shard3"]);

    assert_exact_ids(&mono, SPREAD_DOCS).await;
    assert_exact_ids(&rand_coll, SPREAD_DOCS).await;
    assert_exact_ids(&plain, 500).await;
    // On the shards: once the donors' range deletions are done, exactly one copy of every
    // document on the remaining ones. (The removed shard keeps what it had not deleted yet: with
    // no catalog entry it has no primary to delete with, like a removed MongoDB shard's leftovers.)
    let settled = wait_until(BALANCE_MAX, || async {
        for coll in ["mono", "rand", "plain"] {
            let c = counts(&cluster, &[1, 2, 3], "bal", coll).await?;
            let want = if coll == "plain" { 500 } else { total };
            if c.values().sum::<u64>() != want {
                return Err(format!("bal.{coll}: {c:?} on the shards, want {want} in all"));
            }
        }
        Ok(())
    })
    .await;
    if let Err(why) = settled {
        panic!("not settled: {why}\n{}", cluster.log_tails(60));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zone_range_ends_on_its_zone_shard() {
    let (cluster, client) = cluster(3, 0, &[]).await;
    shard_collection(&client, "geo", "people", doc! { "k": 1 }, "shard0").await;
    let admin = client.database("admin");
    admin.run_command(doc! { "addShardToZone": "shard2", "zone": "eu" }).await.expect("addShardToZone");
    admin
        .run_command(doc! {
            "updateZoneKeyRange": "geo.people", "min": { "k": 1000_i64 }, "max": { "k": 3000_i64 }, "zone": "eu",
        })
        .await
        .expect("updateZoneKeyRange");
    let people = client.database("geo").collection::<Document>("people");
    insert_range(&people, 0..4000, |i| doc! { "_id": i, "k": i }).await;

    let in_zone = doc! { "k": { "$gte": 1000_i64, "$lt": 3000_i64 } };
    let placed = wait_until(BALANCE_MAX, || async {
        let mut held = BTreeMap::new();
        for i in 0..3 {
            let reply = shoal_tests::balance::shard_command(
                &cluster.shard_addr(i),
                "geo",
                doc! { "count": "people", "query": in_zone.clone() },
            )
            .await
            .map_err(|e| e.to_string())?;
            held.insert(i, reply.get_i32("n").map(i64::from).or_else(|_| reply.get_i64("n")).unwrap_or(-1));
        }
        match (held[&0], held[&1], held[&2]) {
            (0, 0, 2000) => Ok(()),
            _ => Err(format!("documents of the eu range per shard: {held:?}")),
        }
    })
    .await;
    if let Err(why) = placed {
        panic!("the eu range did not reach shard2: {why}\n{}", cluster.log_tails(60));
    }
    let cat = catalog(&cluster.catalog()).await.expect("catalog");
    let coll = cat.collection("geo.people").expect("sharded");
    let zone = &cat.zone_ranges("geo.people")[0];
    for c in coll.chunks.values().filter(|c| c.min >= zone.min && c.max <= zone.max) {
        assert_eq!(c.shard, "shard2", "chunk [{}, {}) of the eu range", c.min, c.max);
    }
    assert_exact_ids(&people, 4000).await;
}

/// Keys drawn from a zipfian distribution (s = 1) over `0..n`: rank r has weight 1/(r+1).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for r in 0..n {
            sum += 1.0 / (r as f64 + 1.0);
            cdf.push(sum);
        }
        cdf.iter_mut().for_each(|c| *c /= sum);
        Self { cdf }
    }

    fn sample(&self, rng: &mut impl Rng) -> i64 {
        let u: f64 = rng.random();
        self.cdf.partition_point(|c| *c < u) as i64
    }
}

/// `tasks` readers doing finds by `k` drawn by `draw` until `stop`.
fn read_load(
    coll: &mongodb::Collection<Document>,
    tasks: usize,
    stop: &Arc<AtomicBool>,
    draw: impl Fn(&mut rand::rngs::ThreadRng) -> i64 + Send + Sync + Clone + 'static,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..tasks)
        .map(|_| {
            let (coll, stop, draw) = (coll.clone(), stop.clone(), draw.clone());
            tokio::spawn(async move {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    let k = draw(&mut rand::rng());
                    if coll.find_one(doc! { "k": k }).await.is_ok() {
                        done += 1;
                    }
                }
                done
            })
        })
        .collect()
}

/// `config.actionlog` entries whose `what` is `what`.
async fn actions(client: &mongodb::Client, what: &str) -> Vec<Document> {
    let log = client.database("config").collection::<Document>("actionlog");
    match log.find(doc! { "what": what }).await {
        Ok(cursor) => cursor.try_collect().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_range_is_split_by_load_and_spread() {
    let extra = ["--balancer-load-split-ops", "100", "--balancer-load-split-after-ms", "2000"];
    let (cluster, client) = cluster(2, 0, &extra).await;
    shard_collection(&client, "hot", "items", doc! { "k": 1 }, "shard0").await;
    let items = client.database("hot").collection::<Document>("items");
    insert_range(&items, 0..5000, |i| doc! { "_id": i, "k": i }).await;

    let stop = Arc::new(AtomicBool::new(false));
    let zipf = Arc::new(Zipf::new(5000));
    let readers = read_load(&items, 8, &stop, move |rng| zipf.sample(rng));
    let config = cluster.catalog();
    let spread = wait_until(BALANCE_MAX, || async {
        let cat = catalog(&config).await.map_err(|e| e.to_string())?;
        let coll = cat.collection("hot.items").ok_or("not sharded")?;
        let owners = chunks_per_shard(coll);
        if coll.chunks.len() < 2 || owners.len() < 2 {
            return Err(format!("{} chunks on {owners:?}", coll.chunks.len()));
        }
        Ok(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for r in readers {
        reads += r.await.expect("reader");
    }
    if let Err(why) = spread {
        panic!("the hot range was not split and spread ({reads} reads): {why}\n{}", cluster.log_tails(60));
    }
    let splits = actions(&client, "balancer.split").await;
    assert!(
        splits.iter().any(|d| d.to_string().to_lowercase().contains("load")),
        "no load split in config.actionlog: {splits:?}"
    );
    assert_exact_ids(&items, 5000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_killed_holding_the_lease_is_replaced() {
    let (cluster, client) = cluster(2, 0, &[]).await;
    let second = cluster.start_router_with("router2", &router_args(&[])).await.expect("second router");
    let config = cluster.catalog();
    // Whoever holds the lease first is killed before there is anything to balance.
    let deadline = tokio::time::Instant::now() + BALANCE_MAX;
    let holder = loop {
        let cat = catalog(&config).await.expect("catalog");
        if let Some(l) = cat.leases().get(BALANCER_LEASE).filter(|l| l.is_live(cat.now_ms())) {
            break l.holder.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "nobody took the balancer lease\n{}", cluster.log_tails(40));
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (victim, survivor) = if holder.contains(&cluster.router.addr().port().to_string()) {
        (&cluster.router, &second)
    } else {
        assert!(holder.contains(&second.addr().port().to_string()), "lease holder {holder} is neither router");
        (&second, &cluster.router)
    };
    victim.kill9();
    let client =
        if std::ptr::eq(victim, &cluster.router) { client_of(survivor).await.expect("client") } else { client };

    shard_collection(&client, "lease", "items", doc! { "k": 1 }, "shard0").await;
    let items = client.database("lease").collection::<Document>("items");
    // ~8 MiB: enough that the balancer's rule (move while two shards differ by more than 3 chunk
    // sizes) must move about a quarter of it to the second shard.
    insert_range(&items, 0..LEASE_DOCS, |i| doc! { "_id": i, "k": i }).await;
    wait_spread(&cluster, &[0, 1], "lease", &["items"], "after the lease holder was killed").await;
    let cat = catalog(&config).await.expect("catalog");
    let lease = cat.leases().get(BALANCER_LEASE).expect("balancer lease");
    assert!(lease.holder.contains(&survivor.addr().port().to_string()), "lease now held by {}", lease.holder);
    assert_exact_ids(&items, LEASE_DOCS).await;
}

/// Chunks of `ns` marked jumbo in the catalog, by `min`.
async fn jumbo_chunks(config: &shoal_cluster::config_client::ConfigClient, ns: &str) -> Result<Vec<String>, String> {
    let cat = catalog(config).await.map_err(|e| e.to_string())?;
    let coll = cat.collection(ns).ok_or(format!("{ns} is not sharded"))?;
    Ok(coll.chunks.values().filter(|c| c.jumbo).map(|c| c.min.to_string()).collect())
}

/// `config.actionlog` entries of `what` about `ns`.
async fn actions_on(client: &mongodb::Client, what: &str, ns: &str) -> usize {
    actions(client, what).await.iter().filter(|d| d.get_str("ns").ok() == Some(ns)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_heavy_or_hot_key_becomes_jumbo_and_is_not_retried_forever() {
    let extra = ["--balancer-load-split-ops", "100", "--balancer-load-split-after-ms", "1000"];
    let (cluster, client) = cluster(2, 0, &extra).await;
    let admin = client.database("admin");
    admin.run_command(doc! { "enableSharding": "jumbo", "primaryShard": "shard0" }).await.expect("enableSharding");
    for ns in ["jumbo.heavy", "jumbo.hot"] {
        admin.run_command(doc! { "shardCollection": ns, "key": { "k": 1 } }).await.expect("shardCollection");
    }
    // Heavy: about 2.2 MiB on k = 7, over the 1 MiB chunk size, and no key to split it at.
    let heavy = client.database("jumbo").collection::<Document>("heavy");
    let blob = "b".repeat(1000);
    insert_range(&heavy, 0..2100, |i| doc! { "_id": i, "k": 7, "blob": &blob }).await;
    // Hot: small, but every request reads k = 3.
    let hot = client.database("jumbo").collection::<Document>("hot");
    insert_range(&hot, 0..1000, |i| doc! { "_id": i, "k": i % 10 }).await;
    let stop = Arc::new(AtomicBool::new(false));
    let readers = read_load(&hot, 8, &stop, |_| 3);

    let config = cluster.catalog();
    let marked = wait_until(BALANCE_MAX, || async {
        for ns in ["jumbo.heavy", "jumbo.hot"] {
            if jumbo_chunks(&config, ns).await?.is_empty() {
                return Err(format!("{ns} has no jumbo chunk"));
            }
        }
        Ok(())
    })
    .await;
    if let Err(why) = marked {
        stop.store(true, Ordering::Relaxed);
        panic!("not marked jumbo: {why}\n{}", cluster.log_tails(80));
    }
    for ns in ["jumbo.heavy", "jumbo.hot"] {
        assert!(actions_on(&client, "balancer.jumbo", ns).await >= 1, "{ns}: no balancer.jumbo in config.actionlog");
    }

    // Not retried: over twenty more rounds, with the hot key still hot, nothing new happens to them.
    let before: Vec<(usize, usize)> = futures::future::join_all(["jumbo.heavy", "jumbo.hot"].map(|ns| async {
        (actions_on(&client, "balancer.split", ns).await, actions_on(&client, "balancer.jumbo", ns).await)
    }))
    .await;
    let jumbo_before = (jumbo_chunks(&config, "jumbo.heavy").await, jumbo_chunks(&config, "jumbo.hot").await);
    tokio::time::sleep(Duration::from_millis(20 * INTERVAL_MS.parse::<u64>().expect("interval"))).await;
    let after: Vec<(usize, usize)> = futures::future::join_all(["jumbo.heavy", "jumbo.hot"].map(|ns| async {
        (actions_on(&client, "balancer.split", ns).await, actions_on(&client, "balancer.jumbo", ns).await)
    }))
    .await;
    assert_eq!(before, after, "(splits, jumbo marks) of heavy and hot changed after they were marked jumbo");
    let jumbo_after = (jumbo_chunks(&config, "jumbo.heavy").await, jumbo_chunks(&config, "jumbo.hot").await);
    assert_eq!(jumbo_before, jumbo_after);
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for r in readers {
        reads += r.await.expect("reader");
    }
    assert!(reads > 0);

    // clearJumboFlag clears the hot chunk's flag; with the load gone it stays clear.
    admin.run_command(doc! { "clearJumboFlag": "jumbo.hot", "find": { "k": 3 } }).await.expect("clearJumboFlag");
    assert_eq!(jumbo_chunks(&config, "jumbo.hot").await, Ok(vec![]));
    // A later split clears it too: keys above 7 arrive and the jumbo chunk is split at 8.
    insert_range(&heavy, 2100..2110, |i| doc! { "_id": i, "k": 8 }).await;
    admin.run_command(doc! { "split": "jumbo.heavy", "middle": { "k": 8 } }).await.expect("split of the jumbo chunk");
    let cat = catalog(&config).await.expect("catalog");
    let coll = cat.collection("jumbo.heavy").expect("sharded");
    let upper = coll.chunks.values().find(|c| c.max == shoal_configsvr::catalog::ChunkBound::Max).expect("last chunk");
    assert!(!upper.jumbo, "the part split off a jumbo chunk is not jumbo: {upper:?}");
    assert_eq!(jumbo_chunks(&config, "jumbo.hot").await, Ok(vec![]), "the cold hot chunk stays clear");

    assert_eq!(heavy.count_documents(doc! {}).await.expect("count"), 2110);
    assert_exact_ids(&hot, 1000).await;
}
