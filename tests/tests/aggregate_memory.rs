//! The aggregation memory bound over two shards, lowered for the whole cluster with
//! `SHOAL_AGGREGATE_MEMORY_LIMIT_BYTES` so little data reaches it: a shard's `$group` or `$sort`
//! and the router's gathered input each refuse (292) without `allowDiskUse` and answer with it
//! (up to ten times the limit, then 146: nothing spills to disk);
//! a streamed per-document pipeline is not bounded. Its own test binary: the variable is
//! process-wide and inherited by every process the test starts.

use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

const LIMIT_BYTES: usize = 20_000;
const DOCS: i64 = 100;
const PAD_BYTES: usize = 500;

async fn run(c: &Collection<Document>, pipeline: &[Document], allow_disk_use: bool) -> mongodb::error::Result<usize> {
    let cursor = c.aggregate(pipeline.to_vec()).allow_disk_use(allow_disk_use).await?;
    Ok(cursor.try_collect::<Vec<_>>().await?.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_stages_and_router_input_are_bounded() {
    // SAFETY: this binary's only test sets it before starting any thread that reads the env.
    #[allow(unsafe_code, reason = "the cluster's processes inherit the limit from this environment")]
    unsafe {
        std::env::set_var(shoal_query::aggregate::MEMORY_LIMIT_ENV, LIMIT_BYTES.to_string())
    };
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two("aggmem", "c", DOCS / 2).await.expect("on both shards");
    let c = cluster.client().await.expect("client").database("aggmem").collection::<Document>("c");
    let pad = "x".repeat(PAD_BYTES);
    c.insert_many((0..DOCS).map(|k| doc! {"_id": k, "k": k, "pad": &pad})).await.expect("insert");

    let window = doc! {"$setWindowFields": {"sortBy": {"k": 1}, "output": {"p": {"$first": "$pad"}}}};
    let cases: [(&str, Vec<Document>, usize); 4] = [
        ("shard $group", vec![doc! {"$group": {"_id": "$k", "p": {"$push": "$pad"}}}], DOCS as usize),
        ("shard $sort", vec![doc! {"$sort": {"pad": 1, "k": 1}}], DOCS as usize),
        ("router input", vec![doc! {"$sample": {"size": 1000}}], DOCS as usize),
        ("router $setWindowFields", vec![window], DOCS as usize),
    ];
    for (what, pipeline, n) in cases {
        let err = run(&c, &pipeline, false).await.expect_err(what);
        assert_eq!(expect::server_code(&err), Some(292), "{what}: {err:?}");
        assert_eq!(run(&c, &pipeline, true).await.expect(what), n, "{what} with allowDiskUse");
    }
    // allowDiskUse raises the bound tenfold; Shoal does not spill, so past that: 146.
    let ten_pads: Vec<&str> = vec!["$pad"; 10];
    let huge = vec![doc! {"$group": {"_id": null, "p": {"$push": {"$concat": ten_pads}}}}];
    let err = run(&c, &huge, true).await.expect_err("beyond the allowDiskUse bound");
    assert_eq!(expect::server_code(&err), Some(146), "{err:?}");
    // Streamed through the router's merge cursor, never held whole: no bound.
    assert_eq!(run(&c, &[doc! {"$project": {"pad": 1}}], false).await.expect("streamed"), DOCS as usize);
}
