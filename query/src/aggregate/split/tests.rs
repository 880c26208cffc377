//! The split and the partial-merge logic: for random documents cut into random contiguous pieces
//! (one per "shard"), the shards' part on each piece then the router's part on the merged output
//! equals the whole pipeline on all documents.

use bson::{Bson, Document, bson, doc};
use proptest::prelude::*;

use super::*;
use crate::aggregate::Pipeline;
use crate::sort::{SortSpec, sort_documents};

fn stages(v: Bson) -> Vec<Bson> {
    let Bson::Array(a) = v else { panic!("test pipelines are arrays") };
    a
}

fn whole(pipeline: &[Bson], docs: &[Document]) -> Vec<Document> {
    Pipeline::parse(pipeline).unwrap().run(docs.iter().cloned()).unwrap()
}

/// What the router answers when `docs` are cut at `cuts` over that many + 1 shards.
fn sharded(pipeline: &[Bson], docs: &[Document], cuts: &[usize]) -> Vec<Document> {
    let s = split(pipeline).unwrap();
    let shard = Pipeline::parse(&s.shard).unwrap();
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (docs.len() + 1)).collect();
    bounds.sort_unstable();
    let mut merged = Vec::new();
    let mut start = 0;
    for end in bounds.into_iter().chain([docs.len()]) {
        merged.extend(shard.run(docs[start..end].iter().cloned()).unwrap());
        start = end;
    }
    // Concatenating sorted runs and sorting stably is what the router's k-way merge gives.
    if let Some(spec) = &s.merge_sort {
        sort_documents(&mut merged, &SortSpec::parse(spec).unwrap());
    }
    Pipeline::parse(&s.router).unwrap().run(merged.into_iter()).unwrap()
}

fn names(stages: &[Bson]) -> Vec<&str> {
    stages.iter().filter_map(stage_name).collect()
}

#[test]
fn group_splits_into_partial_and_merge() {
    let p = stages(bson!([{"$match": {"a": 1}}, {"$group": {"_id": "$g", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]));
    let s = split(&p).unwrap();
    assert_eq!(names(&s.shard), ["$match", PARTIAL_GROUP]);
    assert_eq!(names(&s.router), [MERGE_GROUP, "$sort"]);
    assert_eq!(s.merge_sort, None);
}

#[test]
fn sort_limit_and_skip_push_down() {
    let s = split(&stages(bson!([{"$sort": {"a": 1}}, {"$skip": 2}, {"$limit": 3}]))).unwrap();
    assert_eq!(s.shard, stages(bson!([{"$sort": {"a": 1}}, {"$limit": 5_i64}])));
    assert_eq!(s.merge_sort, Some(doc! {"a": 1}));
    assert_eq!(s.router, stages(bson!([{"$skip": 2}, {"$limit": 3}])));

    let s = split(&stages(bson!([{"$project": {"a": 1}}, {"$limit": 4}, {"$group": {"_id": 1}}]))).unwrap();
    assert_eq!(names(&s.shard), ["$project", "$limit"]);
    assert_eq!(names(&s.router), ["$limit", "$group"]);

    let s = split(&stages(bson!([{"$skip": 1}, {"$limit": 2}]))).unwrap();
    assert_eq!(s.shard, stages(bson!([{"$limit": 3_i64}])));
    assert_eq!(names(&s.router), ["$skip", "$limit"]);

    // $skip alone, $sample, $facet: on the router, with everything after them.
    for p in [bson!([{"$skip": 1}, {"$match": {}}]), bson!([{"$sample": {"size": 1}}]), bson!([{"$facet": {"a": []}}])]
    {
        let p = stages(p);
        let s = split(&p).unwrap();
        assert!(s.shard.is_empty());
        assert_eq!(s.router, p);
    }
}

#[test]
fn count_sort_by_count_and_bucket_split_as_groups() {
    let s = split(&stages(bson!([{"$count": "n"}]))).unwrap();
    assert_eq!(names(&s.shard), [PARTIAL_GROUP]);
    assert_eq!(names(&s.router), [MERGE_GROUP, "$project"]);
    let s = split(&stages(bson!([{"$sortByCount": "$g"}]))).unwrap();
    assert_eq!(names(&s.router), [MERGE_GROUP, "$sort"]);
    let s = split(&stages(bson!([{"$bucket": {"groupBy": "$n", "boundaries": [0, 5, 10]}}]))).unwrap();
    assert_eq!(names(&s.shard), [PARTIAL_GROUP]);
    // A count named `_id` cannot be a group field: it runs whole on the router.
    let s = split(&stages(bson!([{"$count": "_id"}]))).unwrap();
    assert!(s.shard.is_empty());
}

#[test]
fn per_document_pipelines_run_on_the_shards_only() {
    let p = stages(bson!([{"$match": {"a": 1}}, {"$unwind": "$x"}, {"$set": {"b": 2}}]));
    let s = split(&p).unwrap();
    assert_eq!(s.shard, p);
    assert!(s.router.is_empty());
}

#[test]
fn std_dev_merges_exactly() {
    let docs: Vec<Document> = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0].iter().map(|x| doc! {"x": *x}).collect();
    let p = stages(bson!([{"$group": {"_id": null, "pop": {"$stdDevPop": "$x"}, "samp": {"$stdDevSamp": "$x"}}}]));
    for cuts in [vec![], vec![3], vec![1, 5], vec![0, 8]] {
        let out = sharded(&p, &docs, &cuts);
        assert_eq!(out[0].get_f64("pop").unwrap(), 2.0, "{cuts:?}");
        let samp = out[0].get_f64("samp").unwrap();
        assert!((samp - (32.0f64 / 7.0).sqrt()).abs() < 1e-12, "{samp}");
    }
}

#[test]
fn malformed_partials_are_internal_errors() {
    let p = Pipeline::parse(&stages(bson!([{MERGE_GROUP: {"_id": "$g", "a": {"$avg": "$x"}}}]))).unwrap();
    let err = p.run([doc! {"_id": 1, "a": 5}].into_iter()).unwrap_err();
    assert_eq!(err.code, shoal_proto::ErrorCode::InternalError);
}

/// A value an accumulator may meet: small integers and quarter-steps (exact sums), strings,
/// nulls, missing fields and small documents.
fn value() -> impl Strategy<Value = Option<Bson>> {
    prop_oneof![
        (-50i32..50).prop_map(|n| Some(Bson::Int32(n))),
        (-40i64..40).prop_map(|n| Some(Bson::Int64(n))),
        (-20i32..20).prop_map(|n| Some(Bson::Double(f64::from(n) / 4.0))),
        "[a-c]{0,2}".prop_map(|s| Some(Bson::String(s))),
        Just(Some(Bson::Null)),
        Just(None),
    ]
}

fn documents() -> impl Strategy<Value = Vec<Document>> {
    prop::collection::vec((0i32..4, value(), (0i32..3, -5i32..5)), 0..40).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (g, v, (k, n)))| {
                let mut d = doc! {"_id": i as i32, "g": g, "o": {format!("k{k}"): n}};
                if let Some(v) = v {
                    d.insert("v", v);
                }
                d
            })
            .collect()
    })
}

fn close(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => a == b,
    }
}

proptest! {
    #[test]
    fn merged_partials_equal_the_whole_group(docs in documents(), cuts in prop::collection::vec(0usize..41, 0..4)) {
        let p = stages(bson!([
            {"$group": {
                "_id": "$g",
                "sum": {"$sum": "$v"}, "avg": {"$avg": "$v"}, "min": {"$min": "$v"}, "max": {"$max": "$v"},
                "first": {"$first": "$v"}, "last": {"$last": "$v"}, "push": {"$push": "$v"},
                "set": {"$addToSet": "$v"}, "count": {"$count": {}}, "pop": {"$stdDevPop": "$v"},
                "samp": {"$stdDevSamp": "$v"}, "merged": {"$mergeObjects": "$o"},
            }},
            {"$sort": {"_id": 1}},
        ]));
        let expected = whole(&p, &docs);
        let got = sharded(&p, &docs, &cuts);
        prop_assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(&expected) {
            prop_assert_eq!(g.keys().collect::<Vec<_>>(), e.keys().collect::<Vec<_>>());
            for (k, ev) in e {
                let gv = g.get(k).unwrap();
                prop_assert!(close(gv, ev), "{}: split {} whole {}", k, gv, ev);
            }
        }
    }

    #[test]
    fn split_pipelines_equal_the_whole(docs in documents(), cuts in prop::collection::vec(0usize..41, 0..4), which in 0usize..7) {
        let p = stages(match which {
            0 => bson!([{"$match": {"g": {"$lt": 3}}}, {"$sort": {"_id": -1}}, {"$skip": 2}, {"$limit": 5}]),
            1 => bson!([{"$project": {"g": 1}}, {"$count": "n"}]),
            2 => bson!([{"$sortByCount": "$g"}, {"$sort": {"count": -1, "_id": 1}}]),
            3 => bson!([{"$bucket": {"groupBy": "$g", "boundaries": [0, 2, 4], "output": {"n": {"$sum": 1}, "s": {"$push": "$_id"}}}}]),
            4 => bson!([{"$sort": {"_id": 1}}, {"$limit": 3}, {"$group": {"_id": null, "ids": {"$push": "$_id"}}}]),
            5 => bson!([{"$skip": 3}, {"$limit": 4}, {"$group": {"_id": null, "n": {"$sum": 1}}}]),
            _ => bson!([{"$set": {"h": {"$add": ["$g", 1]}}}, {"$group": {"_id": "$h", "n": {"$sum": "$g"}}}, {"$sort": {"_id": 1}}, {"$limit": 2}]),
        });
        prop_assert_eq!(sharded(&p, &docs, &cuts), whole(&p, &docs));
    }
}

#[test]
fn redact_stays_on_the_shards_and_window_stages_go_to_the_router() {
    let stages = vec![
        Bson::Document(doc! { "$redact": "$$KEEP" }),
        Bson::Document(doc! { "$setWindowFields": { "output": { "n": { "$count": {} } } } }),
        Bson::Document(doc! { "$match": { "n": 1 } }),
    ];
    let s = split(&stages).unwrap();
    assert_eq!(s.shard, stages[..1].to_vec());
    assert_eq!(s.router, stages[1..].to_vec());
    assert_eq!(s.merge_sort, None);
}
