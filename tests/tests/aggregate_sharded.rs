//! `aggregate` through the router on a collection split over two shards, compared with the same
//! pipeline on an unsharded copy of the data: split `$group` (every accumulator), `$sort` with a
//! merge at the router and `$limit` pushed down, `$count`/`$sortByCount`/`$bucket` through their
//! `$group`, stages after the split, `$facet`/`$sample`/`$skip` on the router, cursors over many
//! batches, and bad input refused by the router before any shard runs it.
//!
//! Where MongoDB leaves an order unspecified (`$push` without a `$sort` before the `$group`), the
//! arrays are compared as multisets; numbers are compared by value (doubles within 1e-9).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;
use shoal_tests::expect;
use shoal_tests::sharded_cluster::ShardedCluster;

const DOCS: i64 = 200;

fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(f) => Some(*f),
        _ => None,
    }
}

/// Equal, numbers by value; arrays under a key in `unordered` as multisets.
fn same(a: &Bson, b: &Bson, unordered: &[&str], key: &str) -> bool {
    match (a, b, as_f64(a), as_f64(b)) {
        (_, _, Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        (Bson::Array(x), Bson::Array(y), _, _) => {
            let (mut x, mut y) = (x.clone(), y.clone());
            if unordered.contains(&key) {
                let by = |p: &Bson, q: &Bson| shoal_query::order::compare_values(p, q);
                x.sort_by(by);
                y.sort_by(by);
            }
            x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| same(p, q, unordered, key))
        }
        (Bson::Document(x), Bson::Document(y), _, _) => {
            x.keys().eq(y.keys()) && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w, unordered, k)))
        }
        _ => a == b,
    }
}

async fn run(c: &Collection<Document>, pipeline: &[Document], batch: Option<u32>) -> Vec<Document> {
    let mut agg = c.aggregate(pipeline.to_vec());
    if let Some(b) = batch {
        agg = agg.batch_size(b);
    }
    agg.await
        .unwrap_or_else(|e| panic!("aggregate {pipeline:?}: {e:?}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("iterating aggregate {pipeline:?}: {e:?}"))
}

/// `k` 0..200 (the shard key; 0..100 on shard0, the rest on shard1), `g` a group, `v` a mix of
/// ints, doubles, nulls and missing, `tags` arrays, `o` a small document.
fn data() -> Vec<Document> {
    (0..DOCS)
        .map(|k| {
            let mut d = doc! {
                "_id": k, "k": k, "g": k % 7, "name": format!("n{:03}", (k * 37) % DOCS),
                "tags": (0..(k % 3)).map(|t| format!("t{}", (k + t) % 5)).collect::<Vec<_>>(),
                "o": { format!("f{}", k % 4): k },
            };
            match k % 5 {
                0 => {}
                1 => {
                    d.insert("v", Bson::Null);
                }
                2 => {
                    d.insert("v", (k as f64) / 4.0);
                }
                _ => {
                    d.insert("v", k * 3 - 250);
                }
            }
            d
        })
        .collect()
}

async fn setup() -> (ShardedCluster, Collection<Document>, Collection<Document>) {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two("aggsh", "c", DOCS / 2).await.expect("aggsh.c on both shards");
    let db = cluster.client().await.expect("client").database("aggsh");
    let (sharded, plain) = (db.collection::<Document>("c"), db.collection::<Document>("plain"));
    sharded.insert_many(data()).await.expect("insert sharded");
    plain.insert_many(data()).await.expect("insert unsharded");
    (cluster, sharded, plain)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_pipelines_answer_as_on_one_shard() {
    let (_cluster, sharded, plain) = setup().await;

    let cases: Vec<(Vec<Document>, &[&str])> = vec![
        (
            vec![
                doc! {"$group": {
                    "_id": "$g",
                    "sum": {"$sum": "$v"}, "avg": {"$avg": "$v"}, "min": {"$min": "$v"}, "max": {"$max": "$v"},
                    "push": {"$push": "$k"}, "set": {"$addToSet": "$tags"}, "n": {"$count": {}},
                    "pop": {"$stdDevPop": "$v"}, "samp": {"$stdDevSamp": "$v"}, "merged": {"$mergeObjects": "$o"},
                    "ones": {"$sum": 1},
                }},
                doc! {"$sort": {"_id": 1}},
            ],
            &["push", "set"],
        ),
        // $first/$last are meaningful after a $sort: merged in order at the router.
        (
            vec![
                doc! {"$sort": {"k": -1}},
                doc! {"$group": {"_id": "$g", "first": {"$first": "$k"}, "last": {"$last": "$name"}, "ks": {"$push": "$k"}}},
                doc! {"$sort": {"_id": -1}},
            ],
            &[],
        ),
        (vec![doc! {"$sort": {"name": 1}}, doc! {"$skip": 7}, doc! {"$limit": 30}], &[]),
        (vec![doc! {"$match": {"k": {"$gte": 90, "$lt": 120}}}, doc! {"$sort": {"v": 1, "k": 1}}], &[]),
        (vec![doc! {"$match": {"g": 3}}, doc! {"$count": "n"}], &[]),
        (vec![doc! {"$match": {"g": 99}}, doc! {"$count": "n"}], &[]),
        (vec![doc! {"$sortByCount": "$g"}, doc! {"$sort": {"count": -1, "_id": 1}}], &[]),
        (
            vec![doc! {"$bucket": {
                "groupBy": "$k", "boundaries": [0, 50, 100, 150], "default": "rest",
                "output": {"n": {"$sum": 1}, "total": {"$sum": "$v"}, "ks": {"$push": "$k"}},
            }}],
            &["ks"],
        ),
        (
            vec![
                doc! {"$unwind": "$tags"},
                doc! {"$group": {"_id": "$tags", "n": {"$sum": 1}, "avg": {"$avg": "$k"}}},
                doc! {"$match": {"n": {"$gt": 10}}},
                doc! {"$project": {"n": 1, "twice": {"$multiply": ["$n", 2]}}},
                doc! {"$sort": {"_id": 1}},
            ],
            &[],
        ),
        (vec![doc! {"$limit": 5}, doc! {"$count": "five"}], &[]),
        (vec![doc! {"$project": {"k": 1}}, doc! {"$skip": 150}, doc! {"$count": "rest"}], &[]),
        (vec![doc! {"$sample": {"size": 500}}, doc! {"$count": "all"}], &[]),
        (
            vec![doc! {"$facet": {
                "count": [{"$count": "n"}],
                "top": [{"$sort": {"k": -1}}, {"$limit": 2}, {"$project": {"k": 1}}],
            }}],
            &[],
        ),
        (vec![doc! {"$group": {"_id": null, "s": {"$stdDevSamp": "$k"}, "p": {"$stdDevPop": "$k"}}}], &[]),
    ];
    for (pipeline, unordered) in &cases {
        let want = run(&plain, pipeline, None).await;
        assert!(!want.is_empty() || pipeline.iter().any(|s| s.get_document("$match").is_ok()), "{pipeline:?}");
        for batch in [None, Some(3)] {
            let got = run(&sharded, pipeline, batch).await;
            let (g, w) = (Bson::Array(got.iter().cloned().map(Bson::Document).collect()), want.clone());
            let w = Bson::Array(w.into_iter().map(Bson::Document).collect());
            assert!(same(&g, &w, unordered, ""), "{pipeline:?} (batch {batch:?}):\nsharded {g}\nunsharded {w}");
        }
    }

    // A per-document pipeline streams through the router's merge cursor: every document once.
    let mut ks: Vec<i64> = run(&sharded, &[doc! {"$project": {"k": 1}}], Some(7))
        .await
        .iter()
        .map(|d| d.get_i64("k").expect("k"))
        .collect();
    ks.sort_unstable();
    assert_eq!(ks, (0..DOCS).collect::<Vec<_>>());

    // The command's `let` reaches the shards' partial groups.
    let got = sharded
        .aggregate(vec![doc! {"$group": {"_id": null, "t": {"$sum": {"$multiply": ["$k", "$$factor"]}}}}])
        .let_vars(doc! {"factor": 2})
        .await
        .expect("aggregate with let")
        .try_collect::<Vec<_>>()
        .await
        .expect("iterate");
    assert_eq!(got[0].get("t").and_then(as_f64), Some((DOCS * (DOCS - 1)) as f64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pipelines_fail_at_the_router() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two("aggbad", "c", 10).await.expect("on both shards");
    let c = cluster.client().await.expect("client").database("aggbad").collection::<Document>("c");
    c.insert_many((0..20).map(|k| doc! {"_id": k, "k": k})).await.expect("insert");
    let err = |p: Vec<Document>| {
        let c = c.clone();
        async move { c.aggregate(p).await.expect_err("the pipeline must fail") }
    };
    assert_eq!(expect::server_code(&err(vec![doc! {"$match": {}}, doc! {"$nope": {}}]).await), Some(40324));
    assert_eq!(expect::server_code(&err(vec![doc! {"$group": {"n": {"$sum": 1}}}]).await), Some(15955));
    assert_eq!(expect::server_code(&err(vec![doc! {"$group": {"_id": 1, "n": {"$bogus": 1}}}]).await), Some(15952));
}

/// `$lookup` run at the router: from an unsharded and from a sharded foreign collection (the
/// latter targeted by its shard key), on a sharded and on an unsharded local collection, with
/// MongoDB's matching of missing/null local values and of arrays on either side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_from_unsharded_and_sharded_collections() {
    let (cluster, sharded, plain) = setup().await;
    let db = cluster.client().await.expect("client").database("aggsh");
    // `groups`: unsharded, one per `g` (and one each with a null and a missing `g`).
    let groups = db.collection::<Document>("groups");
    let mut gdocs: Vec<Document> = (0..7).map(|g| doc! {"_id": g, "g": g, "label": format!("group {g}")}).collect();
    gdocs.push(doc! {"_id": 100, "g": Bson::Null, "label": "null"});
    gdocs.push(doc! {"_id": 101, "label": "missing"});
    groups.insert_many(gdocs).await.expect("groups");
    // `tagged`: sharded on `k` over both shards; `k` is a tag index, some with array tags.
    let admin = cluster.client().await.expect("client").database("admin");
    admin.run_command(doc! {"shardCollection": "aggsh.tagged", "key": {"k": 1}}).await.expect("shard tagged");
    admin.run_command(doc! {"split": "aggsh.tagged", "middle": {"k": 3}}).await.expect("split");
    admin
        .run_command(doc! {"moveChunk": "aggsh.tagged", "find": {"k": 3}, "to": ShardedCluster::shard_name(1)})
        .await
        .expect("move");
    let tagged = db.collection::<Document>("tagged");
    tagged
        .insert_many((0..6).map(|k| doc! {"_id": k, "k": k, "tag": [format!("t{k}"), format!("t{}", (k + 1) % 5)]}))
        .await
        .expect("tagged");

    let by_g = vec![
        doc! {"$match": {"k": {"$lt": 30}}},
        doc! {"$lookup": {"from": "groups", "localField": "g", "foreignField": "g", "as": "grp"}},
        doc! {"$project": {"k": 1, "labels": "$grp.label"}},
        doc! {"$sort": {"k": 1}},
    ];
    let got = run(&sharded, &by_g, None).await;
    assert_eq!(got.len(), 30);
    for d in &got {
        let k = d.get_i64("k").expect("k");
        let labels = d.get_array("labels").expect("labels");
        assert_eq!(labels, &vec![Bson::String(format!("group {}", k % 7))], "{d}");
    }
    assert_eq!(got, run(&plain, &by_g, None).await, "unsharded local collection");

    // A missing local field matches null and missing foreign fields.
    let missing = vec![
        doc! {"$match": {"k": 0}},
        doc! {"$lookup": {"from": "groups", "localField": "nope", "foreignField": "g", "as": "grp"}},
        doc! {"$project": {"ids": "$grp._id"}},
    ];
    let got = run(&sharded, &missing, None).await;
    assert_eq!(got[0].get_array("ids").expect("ids"), &vec![Bson::Int32(100), Bson::Int32(101)]);

    // Sharded foreign collection; local arrays match element-wise, foreign arrays too.
    let by_tag = vec![
        doc! {"$match": {"k": {"$lt": 20}}},
        doc! {"$lookup": {"from": "tagged", "localField": "tags", "foreignField": "tag", "as": "t"}},
        doc! {"$group": {"_id": "$k", "n": {"$sum": {"$size": "$t"}}, "ks": {"$push": "$t.k"}}},
        doc! {"$sort": {"_id": 1}},
    ];
    let sharded_answer = run(&sharded, &by_tag, None).await;
    assert_eq!(sharded_answer.len(), 20);
    assert!(sharded_answer.iter().any(|d| d.get("n").and_then(as_f64).unwrap_or(0.0) >= 2.0), "{sharded_answer:?}");
    assert_eq!(sharded_answer, run(&plain, &by_tag, None).await);
    // Targeted by the foreign shard key.
    let by_key = vec![
        doc! {"$match": {"k": {"$lt": 10}}},
        doc! {"$lookup": {"from": "tagged", "localField": "g", "foreignField": "k", "as": "t"}},
        doc! {"$project": {"g": 1, "tk": "$t.k"}},
        doc! {"$sort": {"_id": 1}},
    ];
    for d in run(&sharded, &by_key, None).await {
        let g = d.get_i64("g").expect("g");
        let want: Vec<Bson> = if g < 6 { vec![Bson::Int32(g as i32)] } else { vec![] };
        assert_eq!(d.get_array("tk").expect("tk"), &want, "{d}");
    }
    // The pipeline form: `let` variables from the local document, with and without equality.
    let with_pipeline = vec![
        doc! {"$match": {"k": {"$in": [3, 10, 150]}}},
        doc! {"$lookup": {
            "from": "groups", "localField": "g", "foreignField": "g", "let": {"kk": "$k"},
            "pipeline": [{"$project": {"_id": 0, "label": 1, "k2": {"$add": ["$$kk", "$g"]}}}],
            "as": "grp",
        }},
        doc! {"$lookup": {
            "from": "tagged", "let": {"kk": "$k"},
            "pipeline": [{"$match": {"k": {"$gte": 4}}}, {"$project": {"_id": 0, "s": {"$add": ["$k", "$$kk"]}}}, {"$sort": {"s": 1}}],
            "as": "sums",
        }},
        doc! {"$project": {"grp": 1, "sums": 1}},
        doc! {"$sort": {"_id": 1}},
    ];
    let got = run(&sharded, &with_pipeline, None).await;
    assert_eq!(got, run(&plain, &with_pipeline, None).await);
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].get_array("grp").expect("grp"), &vec![Bson::Document(doc! {"label": "group 3", "k2": 13_i64})]);
    assert_eq!(
        got[0].get_array("sums").expect("sums"),
        &vec![Bson::Document(doc! {"s": 7_i64}), Bson::Document(doc! {"s": 8_i64})]
    );
    // A nested $lookup is refused clearly.
    let nested = doc! {"$lookup": {"from": "groups", "pipeline": [{"$lookup": {"from": "g", "localField": "a", "foreignField": "b", "as": "c"}}], "as": "x"}};
    let err = sharded.aggregate(vec![nested]).await.expect_err("nested $lookup");
    assert_eq!(expect::server_code(&err), Some(238));
}

async fn all_sorted(c: &Collection<Document>) -> Vec<Document> {
    c.find(doc! {}).sort(doc! {"_id": 1}).await.expect("find").try_collect().await.expect("iterate")
}

/// `$out` replaces an unsharded target's contents and `$merge` writes into one with each
/// whenMatched/whenNotMatched mode; both reply with an empty cursor; a sharded `$out` target and
/// a non-final `$out` are refused with MongoDB's codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_and_merge_into_unsharded_targets() {
    let (cluster, sharded, plain) = setup().await;
    let db = cluster.client().await.expect("client").database("aggsh");
    let counts = vec![doc! {"$group": {"_id": "$g", "n": {"$sum": 1}}}, doc! {"$sort": {"_id": 1}}];
    let expected = run(&sharded, &counts, None).await;
    assert_eq!(expected.len(), 7);

    let summary = db.collection::<Document>("summary");
    summary.insert_one(doc! {"_id": "old"}).await.expect("old content");
    let mut out = counts.clone();
    out.push(doc! {"$out": "summary"});
    assert!(run(&sharded, &out, None).await.is_empty(), "$out replies with an empty cursor");
    assert_eq!(all_sorted(&summary).await, expected);
    // From an unsharded source (one shard, still through the router), into another db.
    let mut out_plain = counts.clone();
    out_plain.push(doc! {"$out": {"db": "aggout", "coll": "s2"}});
    run(&plain, &out_plain, None).await;
    let other = cluster.client().await.expect("client").database("aggout").collection::<Document>("s2");
    assert_eq!(all_sorted(&other).await, expected);

    let refused = |p: Vec<Document>| {
        let c = sharded.clone();
        async move { expect::server_code(&c.aggregate(p).await.expect_err("must fail")) }
    };
    assert_eq!(refused(vec![doc! {"$out": "c"}]).await, Some(28769), "a sharded $out target");
    assert_eq!(refused(vec![doc! {"$out": "x"}, doc! {"$match": {}}]).await, Some(40601));

    // $merge: one matched document (_id 0), one untouched (_id 99), the rest new.
    let m = db.collection::<Document>("m");
    let reset = || async {
        m.delete_many(doc! {}).await.expect("clear");
        m.insert_many([doc! {"_id": 0, "keep": true, "n": -1}, doc! {"_id": 99, "other": 1}]).await.expect("seed");
    };
    let n_of = |g: i64| expected.iter().find(|d| d.get("_id").and_then(as_f64) == Some(g as f64)).cloned();
    let merge = |spec: Document| {
        let mut p = counts.clone();
        p.push(doc! {"$merge": spec});
        p
    };
    reset().await;
    run(&sharded, &merge(doc! {"into": "m"}), None).await;
    let got = all_sorted(&m).await;
    assert_eq!(got.len(), 8, "{got:?}");
    assert_eq!(got[0].get_bool("keep").ok(), Some(true), "whenMatched merge keeps fields: {}", got[0]);
    assert_eq!(got[0].get("n"), n_of(0).as_ref().and_then(|d| d.get("n")));
    assert_eq!(got[7], doc! {"_id": 99, "other": 1});

    reset().await;
    run(&sharded, &merge(doc! {"into": "m", "whenMatched": "keepExisting"}), None).await;
    assert_eq!(all_sorted(&m).await[0], doc! {"_id": 0, "keep": true, "n": -1});

    reset().await;
    run(&sharded, &merge(doc! {"into": "m", "whenMatched": "replace", "whenNotMatched": "discard"}), None).await;
    let got = all_sorted(&m).await;
    assert_eq!(got.len(), 2, "discard inserts nothing: {got:?}");
    assert_eq!(got[0].keys().collect::<Vec<_>>(), ["_id", "n"], "replaced whole: {}", got[0]);
    assert_eq!(got[0].get("n"), n_of(0).as_ref().and_then(|d| d.get("n")));

    reset().await;
    assert_eq!(refused(merge(doc! {"into": "m", "whenMatched": "fail"})).await, Some(11000));
    reset().await;
    assert_eq!(refused(merge(doc! {"into": "m", "whenNotMatched": "fail"})).await, Some(13113));
}

/// `$shardedDataDistribution`: each shard's owned documents of a sharded collection and the
/// orphans it holds (one written straight into shard1 outside its chunks), with the stages after
/// it run on the router; refused outside `admin`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_data_distribution_counts_owned_and_orphaned() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two("aggdd", "c", 50).await.expect("on both shards");
    let client = cluster.client().await.expect("client");
    let c = client.database("aggdd").collection::<Document>("c");
    c.insert_many((0..100).map(|k| doc! {"_id": k, "k": k, "pad": "x".repeat(100)})).await.expect("insert");
    // An orphan: k 5 belongs to shard0's chunk, written into shard1 directly.
    let orphan = doc! {"_id": 1000, "k": 5, "pad": "x".repeat(100)};
    let req = shoal_proto::shard::CommandRequest {
        request_id: "orphan".into(),
        db: "aggdd".into(),
        body: doc! {"insert": "c", "documents": [orphan]}.to_vec().expect("encode").into(),
        sequence_id: String::new(),
        sequence: Vec::new(),
        shard_version: None,
        database_version: None,
        secondary_ok: false,
        client: None,
        traceparent: String::new(),
    };
    let mut shard1 = shoal_tests::grpc::shard(cluster.shard_addr(1)).await.expect("connect to shard1");
    let reply = tokio::time::timeout(std::time::Duration::from_secs(30), shard1.insert(req))
        .await
        .expect("in time")
        .expect("rpc")
        .into_inner();
    assert!(reply.error.is_none() && reply.write_errors.is_empty(), "orphan insert: {reply:?}");

    let pipeline = vec![doc! {"$shardedDataDistribution": {}}, doc! {"$match": {"ns": "aggdd.c"}}];
    let got: Vec<Document> = client
        .database("admin")
        .aggregate(pipeline)
        .await
        .expect("$shardedDataDistribution")
        .try_collect()
        .await
        .expect("iterate");
    assert_eq!(got.len(), 1, "{got:?}");
    let shards = got[0].get_array("shards").expect("shards");
    let of = |name: String| -> Document {
        shards
            .iter()
            .filter_map(Bson::as_document)
            .find(|s| s.get_str("shardName").ok() == Some(name.as_str()))
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {shards:?}"))
    };
    let (s0, s1) = (of(ShardedCluster::shard_name(0)), of(ShardedCluster::shard_name(1)));
    let n = |d: &Document, k: &str| d.get(k).and_then(as_f64).unwrap_or(-1.0);
    assert_eq!((n(&s0, "numOwnedDocuments"), n(&s0, "numOrphanedDocs")), (50.0, 0.0), "{s0}");
    assert_eq!((n(&s1, "numOwnedDocuments"), n(&s1, "numOrphanedDocs")), (50.0, 1.0), "{s1}");
    assert!(n(&s1, "orphanedSizeBytes") > 100.0 && n(&s1, "ownedSizeBytes") > 50.0 * 100.0, "{s1}");
    assert_eq!(n(&s0, "orphanedSizeBytes"), 0.0);

    let err = client
        .database("aggdd")
        .aggregate(vec![doc! {"$shardedDataDistribution": {}}])
        .await
        .expect_err("only on admin");
    assert_eq!(expect::server_code(&err), Some(73));
}
