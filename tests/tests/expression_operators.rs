//! The aggregation expression operators beyond the first core set (math, strings, arrays, sets,
//! conversions, dates), through the router with the official driver, on a collection split over
//! two shards: one `$project` per document evaluates a sample of each family on the shard that
//! holds it, and the merged, sorted result must be exactly the expected documents. Also: a
//! type error in an operator reaches the client with its code.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Bson, DateTime, Document, doc};
use futures::TryStreamExt;
use shoal_tests::sharded_cluster::ShardedCluster;

const DOCS: i64 = 6;

/// 2024-02-29T23:59:59.123Z plus `k` days.
fn when(k: i64) -> DateTime {
    DateTime::from_millis(1_709_251_199_123 + k * 86_400_000)
}

fn data() -> Vec<Document> {
    (0..DOCS)
        .map(|k| {
            doc! {
                "_id": k, "k": k as i32, "x": k as f64 + 0.5, "s": format!("  item-{k}  "),
                "arr": (0..k as i32).map(|i| i * 2).collect::<Vec<_>>(), "d": when(k), "o": {"a": k as i32},
            }
        })
        .collect()
}

fn expected(k: i64) -> Document {
    let x = k as f64 + 0.5;
    // Half to even: 0.5 → 0, 1.5 → 2, 2.5 → 2, …
    let rounded = if k % 2 == 0 { k as f64 } else { k as f64 + 1.0 };
    let arr: Vec<i32> = (0..k as i32).map(|i| i * 2).collect();
    let date = when(k);
    let mut union = arr.clone();
    if !union.contains(&2) {
        union.push(2);
    }
    union.sort_unstable();
    let day_of_month = 29 + k;
    let (month, day) = if day_of_month == 29 { (2, 29) } else { (3, (day_of_month - 29) as i32) };
    doc! {
        "_id": k,
        "round": rounded,
        "trunc": (k as f64),
        "pow": (k * k) as i32,
        "abs": k as i32,
        "sqrt": x.sqrt(),
        "cos0": 1.0,
        "trim": format!("item-{k}"),
        "len": format!("item-{k}").len() as i32,
        "split": ["item", k.to_string()],
        "upper": format!("ITEM-{k}"),
        "found": {"match": k.to_string(), "idx": 5, "captures": []},
        "sum": arr.iter().sum::<i32>(),
        "rev": arr.iter().rev().copied().collect::<Vec<_>>(),
        "range": (0..k as i32).collect::<Vec<_>>(),
        "reduce": arr.iter().sum::<i32>(),
        "union": union,
        "field": k as i32,
        "long": Bson::Int64(k),
        "str": k.to_string(),
        "hour": 23,
        "month": month,
        "day": day,
        "added": DateTime::from_millis(date.timestamp_millis() + 3_600_000),
        // 23:59:59.123 back to midnight.
        "trunc_day": DateTime::from_millis(date.timestamp_millis() - 86_399_123),
        "diff": Bson::Int64(k),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_operators_answer_on_two_shards() {
    let cluster = ShardedCluster::start().await.expect("cluster starts");
    cluster.shard_in_two("exprops", "c", DOCS / 2).await.expect("exprops.c on both shards");
    let db = cluster.client().await.expect("client").database("exprops");
    let c = db.collection::<Document>("c");
    c.insert_many(data()).await.expect("insert");

    let pipeline = vec![
        doc! {"$project": {
            "round": {"$round": ["$x", 0]},
            "trunc": {"$trunc": "$x"},
            "pow": {"$pow": ["$k", 2]},
            "abs": {"$abs": {"$multiply": ["$k", -1]}},
            "sqrt": {"$sqrt": "$x"},
            "cos0": {"$cos": 0},
            "trim": {"$trim": {"input": "$s"}},
            "len": {"$strLenCP": {"$trim": {"input": "$s"}}},
            "split": {"$split": [{"$trim": {"input": "$s"}}, "-"]},
            "upper": {"$toUpper": {"$replaceAll": {"input": {"$trim": {"input": "$s"}}, "find": "i", "replacement": "I"}}},
            "found": {"$regexFind": {"input": {"$trim": {"input": "$s"}}, "regex": "\\d+"}},
            "sum": {"$sum": "$arr"},
            "rev": {"$reverseArray": "$arr"},
            "range": {"$range": [0, "$k"]},
            "reduce": {"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}},
            "union": {"$setUnion": ["$arr", [2]]},
            "field": {"$getField": {"field": "a", "input": "$o"}},
            "long": {"$toLong": "$k"},
            "str": {"$convert": {"input": "$k", "to": "string"}},
            "hour": {"$hour": "$d"},
            "month": {"$month": "$d"},
            "day": {"$dayOfMonth": "$d"},
            "added": {"$dateAdd": {"startDate": "$d", "unit": "hour", "amount": 1}},
            "trunc_day": {"$dateTrunc": {"date": "$d", "unit": "day"}},
            "diff": {"$dateDiff": {"startDate": when(0), "endDate": "$d", "unit": "day"}},
        }},
        doc! {"$sort": {"_id": 1}},
    ];
    let got: Vec<Document> = c.aggregate(pipeline).await.expect("aggregate").try_collect().await.expect("results");
    let want: Vec<Document> = (0..DOCS).map(expected).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "document {:?}", w.get("_id"));
    }

    // A type error on a shard reaches the client with MongoDB's code (TypeMismatch, 14).
    let err = c
        .aggregate(vec![doc! {"$project": {"v": {"$strLenBytes": "$k"}}}])
        .await
        .expect_err("$strLenBytes of an int fails");
    match *err.kind {
        mongodb::error::ErrorKind::Command(ce) => assert_eq!(ce.code, 14, "{ce:?}"),
        other => panic!("expected a command error, got {other:?}"),
    }
}
