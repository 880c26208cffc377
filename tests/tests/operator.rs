//! The operator's commands through the router, as mongosh and drivers use them: `db.currentOp()`
//! shows an operation running on a shard and `db.killOp()` stops it (Interrupted, 11601);
//! `$currentOp` and `killSessions` from the Rust driver; the profiler
//! (`db.setProfilingLevel`, `db.system.profile`), the router's "Slow query" line in `getLog`,
//! `top` and the `serverStatus` sections operators read.
//!
//! The long operation is a find whose `$expr` maps over 50 000 values per document: it runs for
//! minutes unless killed, and every scan checks for a kill every 128 documents.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use std::time::Duration;

use bson::{Bson, Document, doc};
use shoal_tests::TestContext;

const DB: &str = "operator";

/// A filter that matches nothing, slowly: each document maps over 100 x 500 values.
fn slow_filter() -> Document {
    let outer: Vec<i32> = (0..100).collect();
    let inner: Vec<i32> = (0..500).collect();
    let per_value =
        doc! { "$size": { "$map": { "input": { "$literal": inner }, "in": { "$add": ["$$this", "$$x"] } } } };
    let mapped = doc! { "$map": { "input": { "$literal": outer }, "as": "x", "in": per_value } };
    doc! { "$expr": { "$lt": [{ "$size": mapped }, 0] } }
}

async fn seed(ctx: &TestContext, coll: &str) {
    let docs: Vec<Document> = (0..3000).map(|i| doc! { "_id": i, "a": i % 10 }).collect();
    ctx.coll(coll).insert_many(docs).await.expect("seed");
}

/// Runs `script` in mongosh against the router; its stdout.
async fn mongosh(ctx: &TestContext, script: &str) -> String {
    let uri = format!("{}/{DB}", ctx.cluster().router_uri().split("/?").next().unwrap_or_default());
    let run = tokio::process::Command::new("mongosh")
        .args([uri.as_str(), "--quiet", "--norc", "--eval", script])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("mongosh finished within 120 s")
        .expect("mongosh runs (npm install -g mongosh)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "mongosh failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The last line of mongosh's output, parsed as JSON.
fn last_json(out: &str) -> serde_json::Value {
    let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON line in {out}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn code_of(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongosh_sees_a_running_operation_and_kills_it() {
    let ctx = TestContext::owned(DB).await;
    seed(&ctx, "slow").await;
    let coll = ctx.coll("slow");
    let running =
        tokio::spawn(
            async move { coll.find(slow_filter()).comment(Bson::String("slow-op-test".into())).await.map(|_| ()) },
        );
    let script = r#"
        let ops = [];
        for (let i = 0; i < 600 && ops.length === 0; i++) {
            ops = db.currentOp({ "command.comment": "slow-op-test" }).inprog;
            if (ops.length === 0) sleep(100);
        }
        if (ops.length === 0) throw new Error("the operation never showed in currentOp: " + JSON.stringify(db.currentOp(true)));
        const op = ops[0];
        const killed = db.killOp(op.opid);
        print(JSON.stringify({ opid: op.opid, shard: op.shard, ns: op.ns, op: op.op, active: op.active,
            secs: op.secs_running, client: op.client, command: op.command, killed: killed.ok }));
    "#;
    let seen = last_json(&mongosh(&ctx, script).await);
    assert_eq!(seen["ns"], format!("{DB}.slow"), "{seen}");
    assert_eq!(seen["op"], "query", "{seen}");
    assert_eq!(seen["active"], true, "{seen}");
    assert_eq!(seen["killed"], 1, "{seen}");
    // The test cluster's router has one unnamed shard (`--shard`): its ops are ":<opid>".
    let shard = seen["shard"].as_str().expect("shard");
    assert!(seen["opid"].as_str().is_some_and(|id| id.starts_with(&format!("{shard}:"))), "{seen}");
    assert!(seen["client"].as_str().is_some_and(|c| c.starts_with("127.0.0.1:")), "{seen}");
    assert_eq!(seen["command"]["comment"], "slow-op-test", "{seen}");
    let result =
        tokio::time::timeout(Duration::from_secs(60), running).await.expect("the killed find ended").expect("task");
    let err = result.expect_err("a killed find fails");
    assert_eq!(code_of(&err), Some(11601), "Interrupted: {err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_op_stage_and_kill_sessions_from_a_driver() {
    let ctx = TestContext::owned(DB).await;
    seed(&ctx, "sessions").await;
    let client = ctx.new_client().await;
    let coll = client.database(DB).collection::<Document>("sessions");
    let mut session = client.start_session().await.expect("session");
    let lsid = session.id().clone();
    let running = tokio::spawn(async move {
        coll.find(slow_filter()).comment(Bson::String("session-op".into())).session(&mut session).await.map(|_| ())
    });
    let admin = ctx.client().database("admin");
    let pipeline = vec![
        doc! { "$currentOp": { "allUsers": true, "idleConnections": false } },
        doc! { "$match": { "command.comment": "session-op" } },
    ];
    let mut op = None;
    for _ in 0..600 {
        let mut cursor = admin.aggregate(pipeline.clone()).await.expect("$currentOp");
        if cursor.advance().await.expect("next") {
            op = Some(cursor.deserialize_current().expect("op"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let op = op.expect("the operation shows in $currentOp");
    assert_eq!(op.get_document("lsid").ok().and_then(|l| l.get("id")), lsid.get("id"), "{op}");
    assert!(op.get_i64("secs_running").is_ok(), "{op}");
    admin.run_command(doc! { "killSessions": [lsid] }).await.expect("killSessions");
    let result = tokio::time::timeout(Duration::from_secs(60), running).await.expect("ended").expect("task");
    assert_eq!(code_of(&result.expect_err("killed")), Some(11601));

    // Bad input gets MongoDB's errors.
    let err = admin.run_command(doc! { "killOp": 1, "op": "nope" }).await.expect_err("bad op id");
    assert_eq!(code_of(&err), Some(2), "{err:?}");
    let err = admin.run_command(doc! { "killOp": 1 }).await.expect_err("no op");
    assert_eq!(code_of(&err), Some(2), "{err:?}");
    let err =
        admin.aggregate(vec![doc! { "$currentOp": { "localOps": true } }]).await.expect_err("localOps is refused");
    assert_eq!(code_of(&err), Some(238), "{err:?}");
    let err = ctx.db().aggregate(vec![doc! { "$currentOp": {} }]).await.expect_err("not admin");
    assert_eq!(code_of(&err), Some(73), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profiler_top_slow_query_log_and_server_status() {
    let ctx = TestContext::owned(DB).await;
    seed(&ctx, "people").await;
    let script = r#"
        const was = db.setProfilingLevel(2);
        db.people.find({ a: 5 }).batchSize(1000).comment("profiled").toArray();
        const status = db.getProfilingStatus();
        const entries = db.system.profile.find({ "command.comment": "profiled" }).toArray();
        const e = entries[0] || {};
        db.setProfilingLevel(0, { slowms: 0 });
        db.people.find({ a: 6 }).batchSize(1000).comment("slow-logged").toArray();
        const log = db.adminCommand({ getLog: "global" }).log.filter(l => l.includes("slow-logged"));
        db.setProfilingLevel(0, { slowms: 100 });
        print(JSON.stringify({ was: was.was, level: status.was, n: entries.length, op: e.op, ns: e.ns,
            millis: typeof e.millis, docsExamined: e.docsExamined, nreturned: e.nreturned,
            plan: e.planSummary, ts: e.ts instanceof Date, shard: e.shard, slow: log }));
    "#;
    let out = last_json(&mongosh(&ctx, script).await);
    assert_eq!((out["was"].as_i64(), out["level"].as_i64()), (Some(0), Some(2)), "{out}");
    assert_eq!(out["n"], 1, "one profiled find: {out}");
    assert_eq!(out["op"], "query", "{out}");
    assert_eq!(out["ns"], format!("{DB}.people"), "{out}");
    assert_eq!(out["millis"], "number", "{out}");
    assert_eq!(out["docsExamined"], 3000, "a collection scan: {out}");
    assert_eq!(out["nreturned"], 300, "{out}");
    assert_eq!(out["plan"], "COLLSCAN", "{out}");
    assert_eq!(out["ts"], true, "{out}");
    assert!(out["shard"].is_string(), "{out}");
    let slow = out["slow"].as_array().expect("lines");
    let line: serde_json::Value =
        serde_json::from_str(slow.first().and_then(|l| l.as_str()).expect("a Slow query line"))
            .expect("MongoDB's JSON log line");
    assert_eq!(line["msg"], "Slow query", "{line}");
    assert_eq!(line["attr"]["ns"], format!("{DB}.people"), "{line}");
    assert!(line["attr"]["durationMillis"].is_number(), "{line}");

    // Writes to system.profile are refused; bad profile arguments get MongoDB's codes.
    let err = ctx.coll("system.profile").insert_one(doc! { "x": 1 }).await.expect_err("refused");
    assert!(code_of(&err).is_some(), "{err:?}");
    let err = ctx.db().run_command(doc! { "profile": 5 }).await.expect_err("level");
    assert_eq!(code_of(&err), Some(2), "{err:?}");
    let err = ctx.db().run_command(doc! { "profile": 0, "sampleRate": 2.0 }).await.expect_err("rate");
    assert_eq!(code_of(&err), Some(2), "{err:?}");

    let admin = ctx.client().database("admin");
    let top = admin.run_command(doc! { "top": 1 }).await.expect("top");
    let people = top.get_document("totals").and_then(|t| t.get_document(format!("{DB}.people"))).expect("people");
    assert!(people.get_document("queries").and_then(|q| q.get_i64("count")).is_ok_and(|n| n >= 2), "{people}");

    let status = admin.run_command(doc! { "serverStatus": 1 }).await.expect("serverStatus");
    let reads = status.get_document("opLatencies").and_then(|l| l.get_document("reads")).expect("opLatencies.reads");
    assert!(reads.get_i64("ops").is_ok_and(|n| n >= 2) && reads.get_i64("latency").is_ok_and(|l| l > 0), "{reads}");
    assert!(status.get_document("asserts").and_then(|a| a.get_i64("user")).is_ok_and(|n| n >= 2), "{status}");
    let cursor = status.get_document("metrics").and_then(|m| m.get_document("cursor")).expect("metrics.cursor");
    assert!(cursor.get_document("open").and_then(|o| o.get_i64("total")).is_ok(), "{cursor}");
}
