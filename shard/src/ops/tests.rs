//! The operations registry, killOp, currentOp, top, the profiler and the slow-query log, on a
//! node in a temp dir (and through the service where the RPC's path matters).

use std::sync::Arc;
use std::time::Duration;

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;
use shoal_proto::shard::shard_server::Shard;
use shoal_proto::shard::{ClientInfo, CommandRequest};
use tonic::Request as Rpc;

use super::{Begin, CommandSource, OpKind, Outcome};
use crate::error::ExecResult;
use crate::exec::{self, Node, Request, deadline};
use crate::service::ShardService;

fn node(dir: &std::path::Path) -> Arc<Node> {
    let config = crate::ShardSettings::new("t", "127.0.0.1:0".parse().expect("addr"), dir.to_path_buf());
    crate::open_node(&config).expect("open")
}

fn req(db: &str, body: Document) -> CommandRequest {
    CommandRequest {
        request_id: "t".into(),
        db: db.into(),
        body: body.to_vec().expect("encode").into(),
        ..Default::default()
    }
}

fn run(
    node: &Node,
    f: fn(&Node, &Request<'_>) -> ExecResult<Document>,
    db: &str,
    body: Document,
) -> ExecResult<Document> {
    let r = req(db, body);
    f(node, &Request::parse(&r).expect("parse"))
}

fn client(conn: u64, lsid: Option<bson::Uuid>) -> ClientInfo {
    ClientInfo {
        address: "10.0.0.7:51234".into(),
        app_name: "reporting".into(),
        connection_id: conn,
        lsid: lsid.map(|id| doc! { "id": id }.to_vec().expect("lsid").into()).unwrap_or_default(),
        user: "ada@admin".into(),
    }
}

fn begin(node: &Node, kind: OpKind, body: Document, client: Option<ClientInfo>) -> super::Running<'_> {
    let ns = match body.iter().next() {
        Some((_, Bson::String(c))) => format!("db.{c}"),
        _ => "db.$cmd".to_owned(),
    };
    node.ops.begin(Begin {
        kind,
        writes: false,
        db: "db".into(),
        ns,
        command: CommandSource::Body(body.to_vec().expect("encode").into()),
        client,
    })
}

fn fill(node: &Node, coll: &str, n: i32) {
    let docs: Vec<Document> = (0..n).map(|i| doc! { "_id": i, "a": i % 10 }).collect();
    let r = req("db", doc! { "insert": coll, "documents": docs });
    exec::insert::run(node, &Request::parse(&r).expect("parse")).expect("insert");
}

fn find(node: &Node, db: &str, body: Document) -> ExecResult<Vec<Document>> {
    let r = req(db, body);
    let (batch, _) = exec::find::run(node, &Request::parse(&r).expect("parse"))?;
    Ok(batch.documents.iter().map(|b| Document::from_reader(&mut &b[..]).expect("doc")).collect())
}

fn code<T: std::fmt::Debug>(r: ExecResult<T>) -> ErrorCode {
    r.expect_err("an error").code
}

#[test]
fn ops_are_registered_for_their_lifetime_with_increasing_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    let first = begin(&node, OpKind::Query, doc! { "find": "c" }, None);
    let second = begin(&node, OpKind::Command, doc! { "count": "c" }, None);
    let (a, b) = (first.op().opid, second.op().opid);
    assert!(a > 0 && b > a, "{a} then {b}");
    let ids: Vec<i32> = node.ops.snapshot().iter().map(|op| op.opid).collect();
    assert_eq!(ids, vec![a, b], "oldest first");
    drop(first);
    assert_eq!(node.ops.snapshot().iter().map(|op| op.opid).collect::<Vec<_>>(), vec![b]);
    second.finish(Outcome::default());
    assert!(node.ops.snapshot().is_empty());
    assert!(!node.ops.kill(i64::from(a)), "gone");
}

#[test]
fn a_killed_op_stops_its_scan_with_interrupted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    fill(&node, "c", 1000);
    let running = begin(&node, OpKind::Query, doc! { "find": "c" }, None);
    let opid = running.op().opid;
    let reply = run(&node, super::commands::kill_op, "admin", doc! { "killOp": 1, "op": i64::from(opid) });
    assert_eq!(reply.expect("killOp"), doc! { "info": "attempting to kill op" });
    let _op = deadline::enter(running.op());
    let err = find(&node, "db", doc! { "find": "c", "filter": { "a": 99 } }).expect_err("killed");
    assert_eq!(err.code, ErrorCode::Interrupted);
    assert_eq!(
        (err.code.code(), err.code.name(), err.message.as_str()),
        (11601, "Interrupted", "operation was interrupted")
    );
}

#[test]
fn kill_op_interrupts_a_scan_running_on_another_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    fill(&node, "c", 2000);
    let scanner = {
        let node = Arc::clone(&node);
        std::thread::spawn(move || {
            let running = begin(&node, OpKind::Command, doc! { "count": "c" }, None);
            let _op = deadline::enter(running.op());
            // Loops until killed: each count scans every document, checking every 128.
            loop {
                let r = req("db", doc! { "count": "c", "query": { "a": { "$gte": 0 } } });
                if let Err(e) = exec::count::count(&node, &Request::parse(&r).expect("parse")) {
                    return e.code;
                }
            }
        })
    };
    let opid = loop {
        if let Some(op) = node.ops.snapshot().first() {
            break op.opid;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    // An unknown op is fine too (ok, as MongoDB).
    run(&node, super::commands::kill_op, "admin", doc! { "killOp": 1, "op": 987_654 }).expect("unknown op");
    run(&node, super::commands::kill_op, "admin", doc! { "killOp": 1, "op": opid }).expect("killOp");
    assert_eq!(scanner.join().expect("thread"), ErrorCode::Interrupted);
}

#[test]
fn kill_op_checks_its_argument() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    let kill = |body| run(&node, super::commands::kill_op, "admin", body);
    assert_eq!(code(kill(doc! { "killOp": 1, "op": "shard0:12" })), ErrorCode::TypeMismatch);
    assert_eq!(code(kill(doc! { "killOp": 1, "op": 1.5 })), ErrorCode::BadValue);
    assert_eq!(code(kill(doc! { "killOp": 1 })), ErrorCode::NoSuchKey);
    assert!(kill(doc! { "killOp": 1, "op": 3.0 }).is_ok());
}

#[test]
fn current_op_shows_every_other_op_in_mongodb_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    fill(&node, "c", 300);
    let session = bson::Uuid::new();
    let running =
        begin(&node, OpKind::Query, doc! { "find": "c", "filter": { "a": 3 } }, Some(client(42, Some(session))));
    {
        // Its scan publishes what it examined and its plan.
        let _op = deadline::enter(running.op());
        find(&node, "db", doc! { "find": "c", "filter": { "a": 3 } }).expect("find");
    }
    let internal = begin(&node, OpKind::Insert, doc! { "insert": "d", "documents": [] }, None);
    let me = begin(&node, OpKind::Command, doc! { "currentOp": 1 }, None);
    let reply = {
        let _op = deadline::enter(me.op());
        run(&node, super::commands::current_op, "admin", doc! { "currentOp": 1, "active": true }).expect("currentOp")
    };
    let inprog = reply.get_array("inprog").expect("inprog");
    assert_eq!(inprog.len(), 2, "all but the currentOp itself: {reply}");
    let op = inprog[0].as_document().expect("doc");
    assert_eq!(op.get_str("type").ok(), Some("op"));
    assert!(op.get_str("host").is_ok_and(|h| h.contains(':')), "{op}");
    assert_eq!(op.get_str("desc").ok(), Some("conn42"));
    assert_eq!(op.get_i64("connectionId").ok(), Some(42));
    assert_eq!(op.get_str("client").ok(), Some("10.0.0.7:51234"));
    assert_eq!(op.get_str("appName").ok(), Some("reporting"));
    assert_eq!(op.get_bool("active").ok(), Some(true));
    assert!(op.get_str("currentOpTime").is_ok_and(|t| t.ends_with("+00:00")), "{op}");
    assert_eq!(
        op.get_array("effectiveUsers").expect("users")[0],
        Bson::Document(doc! { "user": "ada", "db": "admin" })
    );
    assert_eq!(op.get_i32("opid").ok(), Some(running.op().opid));
    assert_eq!(op.get_document("lsid").expect("lsid"), &doc! { "id": session });
    assert!(op.get_i64("secs_running").is_ok() && op.get_i64("microsecs_running").is_ok(), "{op}");
    assert_eq!(op.get_str("op").ok(), Some("query"));
    assert_eq!(op.get_str("ns").ok(), Some("db.c"));
    assert_eq!(op.get_document("command").expect("command"), &doc! { "find": "c", "filter": { "a": 3 }, "$db": "db" });
    assert_eq!(op.get_str("planSummary").ok(), Some("COLLSCAN"));
    assert_eq!(op.get_i32("numYields").ok(), Some(0));
    assert_eq!(op.get_bool("waitingForLock").ok(), Some(false));
    assert_eq!(op.get_document("locks").ok(), Some(&Document::new()));
    assert_eq!((op.get_i64("keysExamined").ok(), op.get_i64("docsExamined").ok()), (Some(0), Some(300)));
    let other = inprog[1].as_document().expect("doc");
    assert_eq!((other.get_str("desc").ok(), other.get_str("op").ok()), (Some("internal"), Some("insert")));
    assert!(!other.contains_key("client") && !other.contains_key("lsid") && !other.contains_key("effectiveUsers"));
    drop(internal);
}

#[test]
fn large_commands_are_truncated_as_mongodb_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    let big = "x".repeat(5000);
    let running = begin(&node, OpKind::Query, doc! { "find": "c", "filter": { "s": &big }, "comment": "mine" }, None);
    let shown = super::report::command(&running.op());
    let truncated = shown.get_str("$truncated").expect("truncated");
    assert!(truncated.starts_with("{ \"find\": \"c\"") && truncated.ends_with("..."), "{truncated}");
    assert!(truncated.len() <= super::report::COMMAND_SHOWN_MAX_BYTES);
    assert_eq!(shown.get_str("comment").ok(), Some("mine"));
}

#[test]
fn kill_sessions_kills_the_ops_of_those_sessions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    let (s1, s2) = (bson::Uuid::new(), bson::Uuid::new());
    let a = begin(&node, OpKind::Query, doc! { "find": "c" }, Some(client(1, Some(s1))));
    let b = begin(&node, OpKind::Query, doc! { "find": "c" }, Some(client(2, Some(s2))));
    let c = begin(&node, OpKind::Query, doc! { "find": "c" }, Some(client(3, None)));
    let reply = run(&node, super::commands::kill_sessions, "admin", doc! { "killSessions": [{ "id": s1 }] });
    assert_eq!(reply.expect("killSessions"), Document::new());
    assert_eq!((a.op().is_killed(), b.op().is_killed(), c.op().is_killed()), (true, false, false));
    run(&node, super::commands::kill_sessions, "admin", doc! { "killSessions": [] }).expect("all");
    assert_eq!((b.op().is_killed(), c.op().is_killed()), (true, false), "only ops in a session");
    let d = begin(&node, OpKind::Query, doc! { "find": "c" }, Some(client(4, Some(s2))));
    run(&node, super::commands::kill_all_sessions, "admin", doc! { "killAllSessions": [{ "user": "bob", "db": "x" }] })
        .expect("other user");
    assert!(!d.op().is_killed());
    run(&node, super::commands::kill_all_sessions, "admin", doc! { "killAllSessions": [] }).expect("all");
    assert!(d.op().is_killed() && !c.op().is_killed());
    let bad = run(&node, super::commands::kill_sessions, "admin", doc! { "killSessions": 1 });
    assert_eq!(code(bad), ErrorCode::TypeMismatch);
    let bad = run(&node, super::commands::kill_sessions, "admin", doc! { "killSessions": [{ "id": "s" }] });
    assert_eq!(code(bad), ErrorCode::TypeMismatch);
}

fn profile(node: &Node, db: &str, body: Document) -> ExecResult<Document> {
    run(node, super::commands::profile, db, body)
}

#[test]
fn profile_sets_levels_slowms_sample_rate_and_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    let reply = profile(&node, "db", doc! { "profile": -1 }).expect("read");
    assert_eq!(reply, doc! { "was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0 });
    let reply = profile(&node, "db", doc! { "profile": 1, "slowms": 20, "sampleRate": 0.5 }).expect("set");
    assert_eq!(reply, doc! { "was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0 }, "the settings before");
    let reply = profile(&node, "db", doc! { "profile": -1 }).expect("read");
    assert_eq!(reply, doc! { "was": 1, "slowms": 20, "sampleRate": 0.5, "ok": 1.0 });
    // Levels are per database, slowms and sampleRate process-wide.
    let reply = profile(&node, "other", doc! { "profile": 2 }).expect("other");
    assert_eq!((reply.get_i32("was").ok(), reply.get_i32("slowms").ok()), (Some(0), Some(20)));
    let reply = profile(&node, "db", doc! { "profile": 1, "filter": { "millis": { "$gt": 5 } } }).expect("filter");
    assert!(!reply.contains_key("filter"), "none was set: {reply}");
    let reply = profile(&node, "db", doc! { "profile": -1 }).expect("read");
    assert_eq!(reply.get_document("filter").ok(), Some(&doc! { "millis": { "$gt": 5 } }));
    assert!(reply.get_str("note").is_ok_and(|n| n.starts_with("When a filter expression is set")), "{reply}");
    profile(&node, "db", doc! { "profile": 0, "filter": "unset" }).expect("unset");
    let reply = profile(&node, "db", doc! { "profile": -1 }).expect("read");
    assert!(!reply.contains_key("filter") && !reply.contains_key("note"), "{reply}");

    assert_eq!(code(profile(&node, "db", doc! { "profile": 3 })), ErrorCode::BadValue);
    assert_eq!(code(profile(&node, "db", doc! { "profile": -2 })), ErrorCode::BadValue);
    assert_eq!(code(profile(&node, "db", doc! { "profile": "on" })), ErrorCode::TypeMismatch);
    assert_eq!(code(profile(&node, "db", doc! { "profile": 1, "sampleRate": 1.5 })), ErrorCode::BadValue);
    assert_eq!(code(profile(&node, "db", doc! { "profile": 1, "sampleRate": -0.1 })), ErrorCode::BadValue);
    assert_eq!(code(profile(&node, "db", doc! { "profile": 1, "filter": "all" })), ErrorCode::BadValue);
    assert_eq!(code(profile(&node, "db", doc! { "profile": 1, "filter": 7 })), ErrorCode::TypeMismatch);
    let bad_operator = profile(&node, "db", doc! { "profile": 1, "filter": { "millis": { "$bogus": 1 } } });
    let matcher = shoal_query::filter::Filter::parse(&doc! { "millis": { "$bogus": 1 } }).err().map(|e| e.code);
    assert_eq!(Some(code(bad_operator)), matcher, "the matcher's code");
    let reply = profile(&node, "db", doc! { "profile": -1 }).expect("unchanged by refused commands");
    assert_eq!((reply.get_i32("was").ok(), reply.get_f64("sampleRate").ok()), (Some(0), Some(0.5)));
}

fn finished(node: &Node, body: Document, client: Option<ClientInfo>, elapsed: Duration) {
    let running = begin(node, OpKind::Query, body, client);
    node.ops.profiler.finished(&running.op(), &Outcome { nreturned: Some(2), reslen: 300 }, elapsed);
    // The guard is dropped without an outcome: counted once, above.
    drop(running);
}

#[test]
fn levels_and_filters_choose_what_is_profiled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    finished(&node, doc! { "find": "c" }, None, Duration::from_millis(500));
    assert!(node.ops.profiler.documents("db").is_empty(), "level 0 profiles nothing");
    profile(&node, "db", doc! { "profile": 1, "slowms": 50 }).expect("level 1");
    finished(&node, doc! { "find": "fast" }, None, Duration::from_millis(10));
    finished(&node, doc! { "find": "slow" }, Some(client(9, None)), Duration::from_millis(60));
    let docs = node.ops.profiler.documents("db");
    assert_eq!(docs.len(), 1, "{docs:?}");
    let d = &docs[0];
    assert_eq!(d.get_str("op").ok(), Some("query"));
    assert_eq!(d.get_str("ns").ok(), Some("db.slow"));
    assert_eq!(d.get_document("command").ok(), Some(&doc! { "find": "slow", "$db": "db" }));
    assert_eq!(
        // int32, as MongoDB's appendNumber writes counts that fit.
        (d.get_i32("nreturned").ok(), d.get_i32("responseLength").ok(), d.get_i32("millis").ok()),
        (Some(2), Some(300), Some(60))
    );
    assert_eq!(
        (d.get_str("protocol").ok(), d.get_str("client").ok(), d.get_str("appName").ok()),
        (Some("op_msg"), Some("10.0.0.7:51234"), Some("reporting"))
    );
    assert_eq!((d.get_str("user").ok(), d.get_i32("numYield").ok()), (Some("ada@admin"), Some(0)));
    assert_eq!(d.get_array("allUsers").ok().map(Vec::len), Some(1));
    assert!(d.get_datetime("ts").is_ok() && d.contains_key("keysExamined") && d.contains_key("docsExamined"));
    profile(&node, "db", doc! { "profile": 2 }).expect("level 2");
    finished(&node, doc! { "find": "fast" }, None, Duration::from_millis(1));
    assert_eq!(node.ops.profiler.documents("db").len(), 2, "level 2 profiles everything");
    profile(&node, "db", doc! { "profile": 1, "filter": { "ns": "db.wanted" } }).expect("filter");
    finished(&node, doc! { "find": "slow" }, None, Duration::from_millis(900));
    finished(&node, doc! { "find": "wanted" }, None, Duration::from_millis(1));
    let docs = node.ops.profiler.documents("db");
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[2].get_str("ns").ok(), Some("db.wanted"), "the filter, not slowms, decides");
    // Sampled out entirely.
    profile(&node, "db", doc! { "profile": 1, "filter": "unset", "sampleRate": 0.0 }).expect("no sampling");
    finished(&node, doc! { "find": "slow" }, None, Duration::from_millis(900));
    assert_eq!(node.ops.profiler.documents("db").len(), 3);
    assert!(node.ops.profiler.documents("other").is_empty());
}

#[test]
fn system_profile_is_a_capped_ring_read_like_a_collection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    let pad = "p".repeat(1000);
    for i in 0..2000 {
        node.ops.profiler.append("db", doc! { "i": i, "op": if i % 2 == 0 { "query" } else { "insert" }, "pad": &pad });
    }
    let held = node.ops.profiler.ring_bytes("db");
    assert!(held <= super::profiler::RING_MAX_BYTES && held > super::profiler::RING_MAX_BYTES - 2000, "{held}");
    let docs = node.ops.profiler.documents("db");
    assert_eq!(docs.last().and_then(|d| d.get_i32("i").ok()), Some(1999), "newest last");
    let oldest = docs[0].get_i32("i").expect("i");
    assert!(oldest > 0, "the oldest were dropped");

    let found = find(
        &node,
        "db",
        doc! { "find": "system.profile", "filter": { "op": "query" }, "sort": { "i": -1 }, "skip": 1, "limit": 3, "projection": { "_id": 0, "i": 1 } },
    )
    .expect("find");
    assert_eq!(found, vec![doc! { "i": 1996 }, doc! { "i": 1994 }, doc! { "i": 1992 }]);
    let natural = find(&node, "db", doc! { "find": "system.profile", "limit": 1 }).expect("natural order");
    assert_eq!(natural[0].get_i32("i").ok(), Some(oldest));
    let r = req("db", doc! { "count": "system.profile", "query": { "op": "insert" } });
    let n = exec::count::count(&node, &Request::parse(&r).expect("parse")).expect("count");
    assert_eq!(
        n.get_i32("n").ok(),
        Some(docs.iter().filter(|d| d.get_str("op").ok() == Some("insert")).count() as i32)
    );
    let r = req(
        "db",
        doc! { "aggregate": "system.profile", "pipeline": [{ "$match": { "i": { "$gte": 1998 } } }, { "$count": "n" }], "cursor": {} },
    );
    let (batch, _) = exec::aggregate::run(&node, &Request::parse(&r).expect("parse")).expect("aggregate");
    assert_eq!(Document::from_reader(&mut &batch.documents[0][..]).expect("doc"), doc! { "n": 2 });
    assert!(find(&node, "other", doc! { "find": "system.profile" }).expect("empty").is_empty());

    // Dropped only while profiling is off.
    profile(&node, "db", doc! { "profile": 1 }).expect("on");
    let drop = |node: &Node| {
        let r = req("db", doc! { "drop": "system.profile" });
        exec::ddl::drop(node, &Request::parse(&r).expect("parse"))
    };
    assert_eq!(drop(&node).err().map(|e| e.code), Some(ErrorCode::IllegalOperation));
    profile(&node, "db", doc! { "profile": 0 }).expect("off");
    assert!(drop(&node).is_ok());
    assert_eq!(node.ops.profiler.ring_bytes("db"), 0);
}

fn service(dir: &std::path::Path) -> ShardService {
    ShardService::new(node(dir)).expect("lane")
}

#[tokio::test]
async fn through_the_service_ops_are_counted_profiled_and_writes_to_system_profile_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let node = Arc::clone(svc.node());
    profile(&node, "db", doc! { "profile": 2 }).expect("level 2");
    let mut insert = req("db", doc! { "insert": "c", "documents": [{ "_id": 1, "a": 1 }, { "_id": 2, "a": 1 }] });
    insert.client = Some(client(5, None));
    assert!(svc.insert(Rpc::new(insert)).await.expect("rpc").into_inner().error.is_none());
    let reply = svc.find(Rpc::new(req("db", doc! { "find": "c", "filter": { "a": 1 } }))).await.expect("rpc");
    assert_eq!(reply.into_inner().documents.len(), 2);
    let reply = svc.command(Rpc::new(req("db", doc! { "count": "c" }))).await.expect("rpc").into_inner();
    assert!(reply.error.is_none());

    let top = run(&node, super::commands::top, "admin", doc! { "top": 1 }).expect("top");
    let totals = top.get_document("totals").expect("totals");
    assert_eq!(totals.get_str("note").ok(), Some("all times in microseconds"));
    let c = totals.get_document("db.c").expect("db.c");
    let count = |field: &str| c.get_document(field).and_then(|u| u.get_i64("count")).expect(field);
    assert_eq!(
        (count("total"), count("readLock"), count("writeLock"), count("queries"), count("insert"), count("commands")),
        (3, 2, 1, 1, 1, 1)
    );
    assert_eq!((count("getmore"), count("update"), count("remove")), (0, 0, 0));
    assert!(c.get_document("total").and_then(|u| u.get_i64("time")).is_ok());

    let profiled = node.ops.profiler.documents("db");
    let ops: Vec<&str> = profiled.iter().filter_map(|d| d.get_str("op").ok()).collect();
    assert_eq!(ops, vec!["insert", "query", "command"], "{profiled:?}");
    let query = &profiled[1];
    assert_eq!(
        (query.get_str("planSummary").ok(), query.get_i32("nreturned").ok(), query.get_i32("docsExamined").ok()),
        (Some("COLLSCAN"), Some(2), Some(2))
    );
    assert_eq!(profiled[0].get_str("client").ok(), Some("10.0.0.7:51234"));

    let reply = svc.insert(Rpc::new(req("db", doc! { "insert": "system.profile", "documents": [{ "x": 1 }] }))).await;
    let error = reply.expect("rpc").into_inner().error.expect("refused");
    assert_eq!((error.code, error.errmsg.as_str()), (73, "cannot write to 'db.system.profile'"));
    // Reads of system.profile go through the find path and are not profiled themselves.
    let before = node.ops.profiler.documents("db").len();
    let reply = svc.find(Rpc::new(req("db", doc! { "find": "system.profile" }))).await.expect("rpc").into_inner();
    assert_eq!(reply.documents.len(), before);
    assert_eq!(node.ops.profiler.documents("db").len(), before, "ops on system.profile are not profiled");

    // A dropped collection leaves top.
    profile(&node, "db", doc! { "profile": 0 }).expect("off");
    let reply = svc.command(Rpc::new(req("db", doc! { "drop": "c" }))).await.expect("rpc").into_inner();
    assert!(reply.error.is_none(), "{:?}", reply.error);
    assert!(node.ops.top.get("db.c").is_none());
    assert!(node.ops.snapshot().is_empty(), "every op ended");
}

#[tokio::test]
async fn an_op_killed_before_it_runs_is_interrupted_and_commands_are_listed_through_the_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let node = Arc::clone(svc.node());
    // Held back by a critical section, then killed: it never runs.
    let section = node.sharding.gates.enter("db.c").await;
    let s = svc.clone();
    let insert = tokio::spawn(async move {
        s.insert(Rpc::new(req("db", doc! { "insert": "c", "documents": [{ "_id": 1 }] }))).await
    });
    let opid = loop {
        if let Some(op) = node.ops.snapshot().first() {
            break op.opid;
        }
        tokio::task::yield_now().await;
    };
    let listed = svc.command(Rpc::new(req("admin", doc! { "currentOp": 1 }))).await.expect("rpc").into_inner();
    let listed = Document::from_reader(&mut &listed.body[..]).expect("body");
    let inprog = listed.get_array("inprog").expect("inprog");
    assert_eq!(inprog.len(), 1, "{listed}");
    assert_eq!(inprog[0].as_document().and_then(|d| d.get_str("op").ok()), Some("insert"));
    let killed = svc.command(Rpc::new(req("admin", doc! { "killOp": 1, "op": opid }))).await.expect("rpc").into_inner();
    assert!(killed.error.is_none());
    drop(section);
    let reply = insert.await.expect("task").expect("rpc").into_inner();
    assert_eq!(reply.error.map(|e| e.code), Some(ErrorCode::Interrupted.code()));
    assert!(node.store.collection("db.c").is_none(), "nothing was written");
}

#[test]
fn slow_operations_are_logged_whatever_the_level() {
    use tracing_subscriber::layer::SubscriberExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let node = node(dir.path());
    profile(&node, "db", doc! { "profile": 0, "slowms": 30 }).expect("slowms");
    let subscriber = tracing_subscriber::registry().with(shoal_telemetry::log::RingLayer);
    tracing::subscriber::with_default(subscriber, || {
        finished(&node, doc! { "find": "quick" }, None, Duration::from_millis(5));
        finished(
            &node,
            doc! { "find": "sluggish", "filter": { "a": 1 } },
            Some(client(17, None)),
            Duration::from_millis(45),
        );
    });
    let lines = shoal_telemetry::log::global().lines;
    assert!(!lines.iter().any(|l| l.contains("db.quick")), "{lines:?}");
    let line = lines.iter().rev().find(|l| l.contains("db.sluggish")).expect("logged");
    let line: serde_json::Value = serde_json::from_str(line).expect("json");
    assert_eq!(
        (line["msg"].as_str(), line["id"].as_i64(), line["ctx"].as_str()),
        (Some("Slow query"), Some(51803), Some("conn17"))
    );
    let attr = &line["attr"];
    assert_eq!(attr["type"], "command");
    assert_eq!(attr["ns"], "db.sluggish");
    assert_eq!(attr["appName"], "reporting");
    assert_eq!(attr["remote"], "10.0.0.7:51234");
    assert_eq!(attr["command"]["find"], "sluggish");
    assert_eq!(attr["durationMillis"], 45);
    assert_eq!((attr["nreturned"].as_i64(), attr["reslen"].as_i64()), (Some(2), Some(300)));
    assert!(node.ops.profiler.documents("db").is_empty(), "logged, not profiled at level 0");
}
