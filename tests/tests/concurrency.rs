//! Many clients at once: over 1,000 concurrent connections each get answers; concurrent `$inc` on
//! one document loses no update; concurrent findAndModify claims hand each job to exactly one
//! claimant; concurrent upserts of one `_id` leave one document; explicit sessions are accepted.

use std::collections::BTreeSet;

use bson::{Bson, Document, doc};
use futures::future::try_join_all;
use shoal_tests::TestContext;
use shoal_tests::wire::{self, WireConn};

const DB: &str = "concurrency";

/// Above the "well over 1,000 concurrent client connections".
const CONNECTIONS: usize = 1_200;
const TASKS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_thousand_connections_are_served_at_once() {
    let ctx = TestContext::shared(DB).await;
    ctx.coll("conns").insert_one(doc! {"_id": 1}).await.unwrap();
    let addr = ctx.cluster().router_addr();
    // Open them all first so they are concurrently connected, then use each one.
    let mut conns = try_join_all((0..CONNECTIONS).map(|_| WireConn::connect(addr))).await.expect("opening connections");
    let replies = try_join_all(conns.iter_mut().enumerate().map(|(i, c)| async move {
        let hello = c.command(&doc! {"hello": 1, "$db": "admin"}).await?;
        let found = c.command(&doc! {"find": "conns", "filter": {"_id": 1}, "$db": DB}).await?;
        anyhow::ensure!(wire::ok_value(&hello) == Some(1.0), "connection {i}: {hello}");
        anyhow::ensure!(wire::ok_value(&found) == Some(1.0), "connection {i}: {found}");
        Ok(found)
    }))
    .await
    .expect("a request on one of the connections failed");
    assert_eq!(replies.len(), CONNECTIONS);
    drop(conns);
    ctx.assert_cluster_serving().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_on_one_document_are_not_lost() {
    const INCS_PER_TASK: i32 = 25;
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("counter");
    c.insert_one(doc! {"_id": "n", "v": 0, "log": []}).await.unwrap();
    try_join_all((0..TASKS).map(|t| {
        let c = c.clone();
        tokio::spawn(async move {
            for i in 0..INCS_PER_TASK {
                c.update_one(doc! {"_id": "n"}, doc! {"$inc": {"v": 1}, "$push": {"log": format!("{t}-{i}")}})
                    .await
                    .unwrap();
            }
        })
    }))
    .await
    .unwrap();
    let d = c.find_one(doc! {"_id": "n"}).await.unwrap().unwrap();
    assert_eq!(d.get("v"), Some(&Bson::Int32(TASKS as i32 * INCS_PER_TASK)));
    let log = d.get_array("log").unwrap();
    let unique: BTreeSet<&str> = log.iter().map(|x| x.as_str().unwrap()).collect();
    assert_eq!(log.len(), TASKS * INCS_PER_TASK as usize);
    assert_eq!(unique.len(), log.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_take_each_job_once() {
    const JOBS: i32 = 200;
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("jobs");
    c.insert_many((0..JOBS).map(|i| doc! {"_id": i, "owner": Bson::Null})).await.unwrap();
    let claims: Vec<Vec<i32>> = try_join_all((0..TASKS).map(|t| {
        let c = c.clone();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(job) = c
                .find_one_and_update(doc! {"owner": Bson::Null}, doc! {"$set": {"owner": t as i32}})
                .sort(doc! {"_id": 1})
                .return_document(mongodb::options::ReturnDocument::After)
                .await
                .unwrap()
            {
                assert_eq!(job.get_i32("owner").unwrap(), t as i32);
                mine.push(job.get_i32("_id").unwrap());
            }
            mine
        })
    }))
    .await
    .unwrap();
    let all: Vec<i32> = claims.iter().flatten().copied().collect();
    let unique: BTreeSet<i32> = all.iter().copied().collect();
    assert_eq!(all.len(), JOBS as usize, "some job was claimed twice or never");
    assert_eq!(unique.len(), JOBS as usize);
    assert_eq!(c.count_documents(doc! {"owner": Bson::Null}).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_upserts_of_one_id_leave_one_document() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("upserts");
    let results = try_join_all((0..TASKS).map(|t| {
        let c = c.clone();
        tokio::spawn(async move {
            c.update_one(doc! {"_id": "only"}, doc! {"$inc": {"hits": 1}, "$addToSet": {"by": t as i32}})
                .upsert(true)
                .await
        })
    }))
    .await
    .unwrap();
    let mut ok = 0;
    for r in results {
        match r {
            Ok(_) => ok += 1,
            // A racing upsert may lose on the unique _id index; that must be reported as such.
            Err(e) => assert_eq!(shoal_tests::expect::server_code(&e), Some(11000), "{e:?}"),
        }
    }
    let docs: Vec<Document> = {
        use futures::TryStreamExt;
        c.find(doc! {}).await.unwrap().try_collect().await.unwrap()
    };
    assert_eq!(docs.len(), 1, "{docs:?}");
    let hits = docs[0].get_i32("hits").unwrap();
    assert_eq!(hits, ok, "every acknowledged upsert counted exactly once");
    assert_eq!(docs[0].get_array("by").unwrap().len() as i32, ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_sessions_are_accepted() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("sessions");
    let mut session = ctx.client().start_session().await.unwrap();
    c.insert_one(doc! {"_id": 1}).session(&mut session).await.unwrap();
    let found = c.find_one(doc! {"_id": 1}).session(&mut session).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 1}));
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"s": true}}).session(&mut session).await.unwrap();
    drop(session);
    assert_eq!(c.count_documents(doc! {"s": true}).await.unwrap(), 1);
}
