//! Property test: a collection split over two shards answers every find and aggregation exactly
//! as an unsharded copy of it in the same cluster does.
//!
//! Random documents from a small grammar (ints, halves, strings, null, missing fields, small
//! arrays, subdocuments) go into `pv.s` (sharded on `k`, split at 50, the upper chunk on shard1)
//! and into `pv.u` (unsharded, on shard0). Then random finds (filters over the operators Shoal
//! supports, with sort/skip/limit/projection) and random pipelines (`$match $project $addFields
//! $set $unset $unwind $group $sort $skip $limit $count $sortByCount $bucket $facet $replaceRoot`)
//! run against both and the answers are compared: in order when the query fixes a total order,
//! as multisets otherwise; numbers compare by value (a sum may come back as int or long) with a
//! relative tolerance for doubles that shards add up in another order; errors compare by code.
//!
//! The sharded copy has secondary indexes (when the build has them) and the unsharded one
//! none, so the comparison also checks index plans against collection scans.
//!
//! Deterministic: one seeded RNG (printed; `SHOAL_PROPERTY_SEED=<n>` replays a run).

mod property;

use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::options::{Collation, CollationStrength};
use rand::SeedableRng;
use rand::rngs::StdRng;
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

use property::{Case, Gen, Outcome, same};

const DB: &str = "pv";
const DOCS: usize = 300;
const FIND_CASES: usize = 500;
const PIPELINE_CASES: usize = 500;
const WRITE_CASES: usize = 60;
/// Divergences printed in full when the test fails.
const REPORTED_MAX: usize = 8;
const DEFAULT_SEED: u64 = 0x5eed_0008;

async fn run_find(c: &Collection<Document>, case: &Case) -> Outcome {
    let Case::Find { filter, sort, skip, limit, projection, collation } = case else { unreachable!("a find case") };
    let mut find = c.find(filter.clone());
    if let Some(s) = sort {
        find = find.sort(s.clone());
    }
    if *skip > 0 {
        find = find.skip(*skip);
    }
    if *limit > 0 {
        find = find.limit(*limit);
    }
    if let Some(p) = projection {
        find = find.projection(p.clone());
    }
    if let Some(strength) = collation {
        let strength = if *strength == 1 { CollationStrength::Primary } else { CollationStrength::Secondary };
        find = find.collation(Collation::builder().locale("en").strength(strength).build());
    }
    let result = match find.await {
        Ok(cursor) => cursor.try_collect::<Vec<Document>>().await,
        Err(e) => Err(e),
    };
    outcome(result)
}

async fn run_pipeline(c: &Collection<Document>, case: &Case) -> Outcome {
    let Case::Pipeline { stages, .. } = case else { unreachable!("a pipeline case") };
    let result = match c.aggregate(stages.clone()).await {
        Ok(cursor) => cursor.try_collect::<Vec<Document>>().await,
        Err(e) => Err(e),
    };
    outcome(result)
}

fn outcome(result: Result<Vec<Document>, mongodb::error::Error>) -> Outcome {
    match result {
        Ok(docs) => Outcome::Docs(docs),
        Err(e) => {
            let code = expect::server_code(&e).unwrap_or_else(|| panic!("not a server error: {e:?}"));
            let message = match e.kind.as_ref() {
                mongodb::error::ErrorKind::Command(c) => c.message.clone(),
                other => format!("{other:?}"),
            };
            Outcome::Error(code, message)
        }
    }
}

/// `(n, nModified, write error codes)` of a write reply.
fn write_counts(reply: &Document) -> (i64, i64, Vec<i32>) {
    let int = |k: &str| match reply.get(k) {
        Some(bson::Bson::Int32(n)) => i64::from(*n),
        Some(bson::Bson::Int64(n)) => *n,
        _ => 0,
    };
    let codes = reply
        .get_array("writeErrors")
        .map(|w| w.iter().filter_map(|e| e.as_document().and_then(|e| e.get_i32("code").ok())).collect())
        .unwrap_or_default();
    (int("n"), int("nModified"), codes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_answers_equal_unsharded_answers() {
    let seed = std::env::var("SHOAL_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    println!("sharded_vs_unsharded: seed {seed} (replay with SHOAL_PROPERTY_SEED={seed})");
    let mut g = Gen(StdRng::seed_from_u64(seed));

    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two(DB, "s", 50).await.expect("pv.s on both shards");
    let db = cluster.client().await.expect("client").database(DB);
    let (sharded, unsharded) = (db.collection::<Document>("s"), db.collection::<Document>("u"));
    let docs: Vec<Document> = (0..DOCS).map(|i| g.document(i as i32)).collect();
    sharded.insert_many(docs.clone()).await.expect("insert sharded");
    unsharded.insert_many(docs).await.expect("insert unsharded");
    // Secondary indexes on the sharded copy only, so its answers also check the planner's index
    // bounds, multikey and sort against the unsharded copy's collection scans. A build without
    // secondary indexes refuses the command and compares scans with scans.
    let indexes = doc! {"createIndexes": "s", "indexes": [
        {"key": {"a": 1}, "name": "a_1"},
        // Not {b, a}: both may be arrays in one document (CannotIndexParallelArrays).
        {"key": {"b": -1, "k": 1}, "name": "b_-1_k_1"},
        {"key": {"a.x": 1}, "name": "a.x_1"},
        {"key": {"c": 1, "k": 1}, "name": "c_1_k_1"},
    ]};
    match db.run_command(indexes).await {
        Ok(_) => println!("sharded_vs_unsharded: pv.s has secondary indexes"),
        Err(e) => println!("sharded_vs_unsharded: no secondary indexes ({e})"),
    }
    let on_shard1 = sharded.count_documents(doc! {"k": {"$gte": 50}}).await.expect("count");
    assert!(on_shard1 > 0 && on_shard1 < DOCS as u64, "documents on both shards");

    let mut divergences = Vec::new();
    let (mut errors, mut empty) = (0usize, 0usize);
    let mut cases: Vec<Case> = (0..FIND_CASES).map(|_| g.find_case()).collect();
    cases.extend((0..PIPELINE_CASES).map(|_| g.pipeline_case()));
    for (i, case) in cases.iter().enumerate() {
        let (a, b) = match case {
            Case::Find { .. } => (run_find(&sharded, case).await, run_find(&unsharded, case).await),
            Case::Pipeline { .. } => (run_pipeline(&sharded, case).await, run_pipeline(&unsharded, case).await),
        };
        match &b {
            Outcome::Error(..) => errors += 1,
            Outcome::Docs(d) if d.is_empty() => empty += 1,
            Outcome::Docs(_) => {}
        }
        if !same(&a, &b, case.ordered()) {
            divergences.push(format!("case {i}: {case}\n  sharded:   {a}\n  unsharded: {b}"));
        }
    }
    // Writes: each multi-document update or delete must report the same counts on both, and the
    // collections must hold the same documents afterwards.
    let mut written = 0;
    for i in 0..WRITE_CASES {
        let on_sharded = g.write_case("s");
        let mut on_unsharded = on_sharded.clone();
        let verb = on_sharded.keys().next().cloned().unwrap_or_default();
        on_unsharded.insert(verb, "u");
        let a = db.run_command(on_sharded.clone()).await.map(|r| write_counts(&r));
        let b = db.run_command(on_unsharded).await.map(|r| write_counts(&r));
        let (a, b) = (a.map_err(|e| expect::server_code(&e)), b.map_err(|e| expect::server_code(&e)));
        written += b.as_ref().map_or(0, |(n, _, _)| *n);
        if a != b {
            divergences.push(format!("write {i}: {on_sharded}\n  sharded:   {a:?}\n  unsharded: {b:?}"));
        }
    }
    let all = |c: &Collection<Document>| {
        let c = c.clone();
        async move { c.find(doc! {}).sort(doc! {"_id": 1}).await.expect("find").try_collect::<Vec<_>>().await }
    };
    let (a, b) = (all(&sharded).await.expect("sharded contents"), all(&unsharded).await.expect("unsharded"));
    if !same(&Outcome::Docs(a), &Outcome::Docs(b), true) {
        divergences.push("after the writes the collections hold different documents".to_owned());
    }

    let total = FIND_CASES + PIPELINE_CASES;
    println!(
        "sharded_vs_unsharded: {total} read cases, {errors} answered with an error, {empty} with no documents; \
         {WRITE_CASES} writes matched {written} documents"
    );
    assert!(written > 0, "the writes matched nothing");
    // A grammar that mostly errs or matches nothing would compare nothing.
    assert!(errors + empty < total / 2, "too few cases with documents: {errors} errors, {empty} empty");
    if !divergences.is_empty() {
        let shown: Vec<&String> = divergences.iter().take(REPORTED_MAX).collect();
        panic!(
            "{} of {} cases diverge (seed {seed}); first ones:\n{}",
            divergences.len(),
            total,
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
}
