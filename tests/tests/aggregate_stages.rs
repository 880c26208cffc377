//! The aggregation stages beyond the first set — `$setWindowFields`, `$bucketAuto`, `$redact`,
//! `$densify`, `$fill`, `$unionWith`, `$graphLookup`, `$documents` — through the router with the
//! official driver, each on a collection split over two shards and on an unsharded copy, with the
//! exact expected documents. Also: stages Shoal refuses (`$changeStreamSplitLargeEvent`,
//! `$documents` on a collection) and parse errors reach the client with their codes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

/// The `k` values of the main collection: 5 and 8 are gaps for `$densify`.
const KS: [i32; 8] = [0, 1, 2, 3, 4, 6, 7, 9];

/// `{_id: k, k, g: "even"|"odd", v: 10k (null for k = 3), sub: {level: k % 3}}`.
fn data() -> Vec<Document> {
    KS.iter()
        .map(|&k| {
            let v = if k == 3 { Bson::Null } else { Bson::Int32(k * 10) };
            doc! { "_id": k, "k": k, "g": if k % 2 == 0 { "even" } else { "odd" }, "v": v, "sub": { "level": k % 3 } }
        })
        .collect()
}

async fn run(c: &Collection<Document>, pipeline: &[Document]) -> Vec<Document> {
    c.aggregate(pipeline.to_vec())
        .await
        .unwrap_or_else(|e| panic!("aggregate on {} {pipeline:?}: {e:?}", c.name()))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("iterating aggregate {pipeline:?}: {e:?}"))
}

struct Setup {
    _cluster: ShardedCluster,
    db: Database,
}

async fn setup() -> Setup {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two("aggst", "c", 4).await.expect("aggst.c on both shards");
    cluster.shard_in_two("aggst", "other", 2).await.expect("aggst.other on both shards");
    cluster.shard_in_two("aggst", "emp", 3).await.expect("aggst.emp on both shards");
    let db = cluster.client().await.expect("client").database("aggst");
    for name in ["c", "plain"] {
        db.collection::<Document>(name).insert_many(data()).await.expect("insert");
    }
    let other: Vec<Document> = (0..4).map(|i| doc! { "_id": i, "k": i, "x": i }).collect();
    for name in ["other", "other_plain"] {
        db.collection::<Document>(name).insert_many(other.clone()).await.expect("insert other");
    }
    let emp = vec![
        doc! { "_id": 1, "k": 1, "name": "Dev" },
        doc! { "_id": 2, "k": 2, "name": "Eliot", "boss": "Dev" },
        doc! { "_id": 3, "k": 3, "name": "Ron", "boss": "Eliot" },
        doc! { "_id": 4, "k": 4, "name": "Andrew", "boss": "Eliot" },
        doc! { "_id": 5, "k": 5, "name": "Asya", "boss": "Ron" },
    ];
    for name in ["emp", "emp_plain"] {
        db.collection::<Document>(name).insert_many(emp.clone()).await.expect("insert emp");
    }
    Setup { _cluster: cluster, db }
}

/// Runs `pipeline` on the sharded and the unsharded collection; both must give `want`.
async fn check(db: &Database, pipeline: Vec<Document>, want: Vec<Document>) {
    for name in ["c", "plain"] {
        let got = run(&db.collection(name), &pipeline).await;
        assert_eq!(got, want, "on {name}: {pipeline:?}");
    }
}

fn window_cases() -> Vec<(Vec<Document>, Vec<Document>)> {
    let out = |k: i32, run: i32, rank: i32, avg: f64| doc! { "_id": k, "run": run, "rank": rank, "avg": avg };
    vec![(
        vec![
            doc! { "$setWindowFields": { "partitionBy": "$g", "sortBy": { "k": 1 }, "output": {
                "run": { "$sum": "$v", "window": { "documents": ["unbounded", "current"] } },
                "rank": { "$rank": {} },
                "avg": { "$avg": "$v", "window": { "range": [-2, "current"] } },
            } } },
            doc! { "$project": { "run": 1, "rank": 1, "avg": 1 } },
        ],
        vec![
            out(0, 0, 1, 0.0),
            out(2, 20, 2, 10.0),
            out(4, 60, 3, 30.0),
            out(6, 120, 4, 50.0),
            out(1, 10, 1, 10.0),
            out(3, 10, 2, 10.0),
            out(7, 80, 3, 70.0),
            out(9, 170, 4, 80.0),
        ],
    )]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_stages_answer_alike_on_two_shards_and_one() {
    let Setup { _cluster, db } = setup().await;

    for (pipeline, want) in window_cases() {
        check(&db, pipeline, want).await;
    }

    // $setWindowFields with documents windows, $shift and $documentNumber.
    check(
        &db,
        vec![
            doc! { "$setWindowFields": { "sortBy": { "k": -1 }, "output": {
                "n": { "$documentNumber": {} },
                "next": { "$shift": { "output": "$k", "by": 1, "default": -1 } },
                "pair": { "$push": "$k", "window": { "documents": [-1, 0] } },
            } } },
            doc! { "$limit": 3 },
            doc! { "$project": { "_id": 0, "n": 1, "next": 1, "pair": 1 } },
        ],
        vec![
            doc! { "n": 1, "next": 7, "pair": [9] },
            doc! { "n": 2, "next": 6, "pair": [9, 7] },
            doc! { "n": 3, "next": 4, "pair": [7, 6] },
        ],
    )
    .await;

    check(
        &db,
        vec![doc! { "$bucketAuto": { "groupBy": "$k", "buckets": 3 } }],
        vec![
            doc! { "_id": { "min": 0, "max": 3 }, "count": 3 },
            doc! { "_id": { "min": 3, "max": 7 }, "count": 3 },
            doc! { "_id": { "min": 7, "max": 9 }, "count": 2 },
        ],
    )
    .await;
    check(
        &db,
        vec![doc! { "$bucketAuto": { "groupBy": "$k", "buckets": 2, "output": { "ks": { "$push": "$k" } } } }],
        vec![
            doc! { "_id": { "min": 0, "max": 4 }, "ks": [0, 1, 2, 3] },
            doc! { "_id": { "min": 4, "max": 9 }, "ks": [4, 6, 7, 9] },
        ],
    )
    .await;

    // $redact runs on the shards (per document); sub-documents at level 2 are pruned.
    check(
        &db,
        vec![
            doc! { "$redact": { "$cond": [ { "$gte": [ { "$ifNull": ["$level", 0] }, 2 ] }, "$$PRUNE", "$$DESCEND" ] } },
            doc! { "$redact": { "$cond": [ { "$eq": ["$k", 9] }, "$$PRUNE", "$$KEEP" ] } },
            doc! { "$sort": { "k": 1 } },
            doc! { "$project": { "_id": 0, "k": 1, "sub": 1 } },
        ],
        KS.iter()
            .filter(|&&k| k != 9)
            .map(|&k| if k % 3 == 2 { doc! { "k": k } } else { doc! { "k": k, "sub": { "level": k % 3 } } })
            .collect(),
    )
    .await;

    check(
        &db,
        vec![
            doc! { "$densify": { "field": "k", "range": { "step": 1, "bounds": "full" } } },
            doc! { "$project": { "_id": 0, "k": 1 } },
        ],
        (0..10).map(|k| doc! { "k": k }).collect(),
    )
    .await;
    check(
        &db,
        vec![
            doc! { "$densify": { "field": "k", "partitionByFields": ["g"], "range": { "step": 2, "bounds": "partition" } } },
            doc! { "$match": { "_id": { "$exists": false } } },
        ],
        vec![doc! { "g": "odd", "k": 5 }],
    )
    .await;

    check(
        &db,
        vec![
            doc! { "$fill": { "sortBy": { "k": 1 }, "output": { "v": { "method": "linear" } } } },
            doc! { "$project": { "_id": 0, "k": 1, "v": 1 } },
        ],
        KS.iter()
            .map(|&k| doc! { "k": k, "v": if k == 3 { Bson::Double(30.0) } else { Bson::Int32(k * 10) } })
            .collect(),
    )
    .await;
    check(
        &db,
        vec![
            doc! { "$fill": { "partitionBy": "$g", "sortBy": { "k": 1 }, "output": { "v": { "method": "locf" } } } },
            doc! { "$match": { "k": 3 } },
            doc! { "$project": { "_id": 0, "v": 1 } },
        ],
        vec![doc! { "v": 10 }],
    )
    .await;
    check(
        &db,
        vec![
            doc! { "$fill": { "output": { "v": { "value": -1 } } } },
            doc! { "$match": { "v": -1 } },
            doc! { "$project": { "_id": 1 } },
        ],
        vec![doc! { "_id": 3 }],
    )
    .await;

    // $unionWith of a sharded and of an unsharded collection, string and pipeline forms.
    for other in ["other", "other_plain"] {
        check(
            &db,
            vec![
                doc! { "$match": { "k": { "$lt": 2 } } },
                doc! { "$project": { "_id": 0, "k": 1 } },
                doc! { "$unionWith": { "coll": other, "pipeline": [
                { "$match": { "x": { "$gte": 2 } } }, { "$project": { "_id": 0, "x": 1 } } ] } },
                doc! { "$sort": { "k": 1, "x": 1 } },
            ],
            vec![doc! { "x": 2 }, doc! { "x": 3 }, doc! { "k": 0 }, doc! { "k": 1 }],
        )
        .await;
        check(&db, vec![doc! { "$unionWith": other }, doc! { "$count": "n" }], vec![doc! { "n": KS.len() as i32 + 4 }])
            .await;
    }
    check(
        &db,
        vec![
            doc! { "$limit": 1 },
            doc! { "$project": { "_id": 0, "k": 1 } },
            doc! { "$unionWith": { "pipeline": [ { "$documents": [ { "k": 100 } ] } ] } },
            doc! { "$sort": { "k": -1 } },
            doc! { "$limit": 1 },
        ],
        vec![doc! { "k": 100 }],
    )
    .await;

    // $graphLookup over a sharded and an unsharded `from`.
    for emp in ["emp", "emp_plain"] {
        let chain = |max_depth: Option<i32>| {
            let mut spec = doc! { "from": emp, "startWith": "Ron", "connectFromField": "boss",
            "connectToField": "name", "as": "chain", "depthField": "d" };
            if let Some(m) = max_depth {
                spec.insert("maxDepth", m);
            }
            vec![
                doc! { "$match": { "k": 0 } },
                doc! { "$graphLookup": spec },
                doc! { "$unwind": "$chain" },
                doc! { "$sort": { "chain.d": 1 } },
                doc! { "$project": { "_id": 0, "n": "$chain.name", "d": "$chain.d" } },
            ]
        };
        check(
            &db,
            chain(None),
            vec![doc! { "n": "Ron", "d": 0i64 }, doc! { "n": "Eliot", "d": 1i64 }, doc! { "n": "Dev", "d": 2i64 }],
        )
        .await;
        check(&db, chain(Some(1)), vec![doc! { "n": "Ron", "d": 0i64 }, doc! { "n": "Eliot", "d": 1i64 }]).await;
    }
    // The reports of Eliot, from the collection itself, restricted.
    let reports: Vec<Document> = run(
        &db.collection("emp"),
        &[
            doc! { "$match": { "name": "Eliot" } },
            doc! { "$graphLookup": { "from": "emp", "startWith": "$name", "connectFromField": "name",
            "connectToField": "boss", "as": "r", "restrictSearchWithMatch": { "name": { "$ne": "Andrew" } } } },
            doc! { "$unwind": "$r" },
            doc! { "$sort": { "r.name": 1 } },
            doc! { "$project": { "_id": 0, "r": "$r.name" } },
        ],
    )
    .await;
    assert_eq!(reports, vec![doc! { "r": "Asya" }, doc! { "r": "Ron" }]);

    // $documents on the database.
    let got: Vec<Document> = db
        .aggregate(vec![
            doc! { "$documents": [ { "a": 1 }, { "a": 2 }, { "a": 3 } ] },
            doc! { "$match": { "a": { "$gte": 2 } } },
        ])
        .await
        .expect("aggregate: 1 with $documents")
        .try_collect()
        .await
        .expect("iterate");
    assert_eq!(got, vec![doc! { "a": 2 }, doc! { "a": 3 }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_stages_and_bad_specs_have_their_codes() {
    let Setup { _cluster, db } = setup().await;
    for name in ["c", "plain"] {
        let c = db.collection::<Document>(name);
        let err = |pipeline: Vec<Document>| {
            let c = c.clone();
            async move { c.aggregate(pipeline).await.map(|_| ()) }
        };
        expect::command_error(err(vec![doc! { "$changeStreamSplitLargeEvent": {} }]).await, 238);
        expect::command_error(err(vec![doc! { "$documents": [ { "a": 1 } ] }]).await, 73);
        expect::command_error(
            err(vec![doc! { "$setWindowFields": { "output": { "a": { "$bogus": "$k" } } } }]).await,
            9,
        );
        expect::command_error(err(vec![doc! { "$bucketAuto": { "groupBy": "$k", "buckets": 0 } }]).await, 2);
        expect::command_error(err(vec![doc! { "$redact": "$k" }]).await, 17053);
        expect::command_error(err(vec![doc! { "$match": {} }, doc! { "$documents": [] }]).await, 40602);
        expect::command_error(err(vec![doc! { "$densify": { "field": "k" } }]).await, 40414);
        // Server-side JavaScript: refused as not built yet (docs/query-language.md, "JavaScript").
        let js = doc! { "$function": { "body": "function() { return 1 }", "args": [], "lang": "js" } };
        expect::command_error(err(vec![doc! { "$project": { "x": js } }]).await, 238);
        let map_reduce =
            doc! { "mapReduce": name, "map": "function() {}", "reduce": "function() {}", "out": { "inline": 1 } };
        expect::command_error(db.run_command(map_reduce).await, 238);
    }
}
