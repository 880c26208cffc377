//! The router's handshake and informational commands as drivers and mongosh use them: `hello` and
//! legacy `isMaster` answered as a mongos, `ping`, `buildInfo`, `serverStatus`, `whatsmyuri`,
//! `connectionStatus`, `getParameter`, `getLog`, `endSessions`; `serverStatus.opcounters` and
//! `network`.

use bson::{Bson, Document, doc};
use shoal_tests::TestContext;

const DB: &str = "admin_commands";

async fn admin(ctx: &TestContext, cmd: Document) -> Document {
    ctx.client().database("admin").run_command(cmd.clone()).await.unwrap_or_else(|e| panic!("{cmd}: {e:?}"))
}

fn int(d: &Document, key: &str) -> i64 {
    match d.get(key) {
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        Some(Bson::Double(f)) if f.fract() == 0.0 => *f as i64,
        other => panic!("{key}: expected an integer, got {other:?} in {d}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_describes_a_mongos() {
    let ctx = TestContext::shared(DB).await;
    let hello = admin(&ctx, doc! {"hello": 1}).await;
    assert_eq!(hello.get_str("msg").unwrap(), "isdbgrid", "{hello}");
    assert!(hello.get_bool("isWritablePrimary").unwrap(), "{hello}");
    assert_eq!(int(&hello, "maxBsonObjectSize"), 16 * 1024 * 1024);
    assert_eq!(int(&hello, "maxMessageSizeBytes"), 48_000_000);
    assert_eq!(int(&hello, "maxWriteBatchSize"), 100_000);
    assert_eq!(int(&hello, "minWireVersion"), 0);
    assert!(int(&hello, "maxWireVersion") >= 9, "{hello}");
    assert!(int(&hello, "logicalSessionTimeoutMinutes") > 0, "{hello}");
    assert!(matches!(hello.get("localTime"), Some(Bson::DateTime(_))), "{hello}");
    assert!(hello.get("setName").is_none(), "a mongos has no setName: {hello}");

    let legacy = admin(&ctx, doc! {"isMaster": 1}).await;
    assert!(legacy.get_bool("ismaster").unwrap(), "{legacy}");
    assert_eq!(legacy.get_str("msg").unwrap(), "isdbgrid", "{legacy}");
    let lower = admin(&ctx, doc! {"ismaster": 1}).await;
    assert!(lower.get_bool("ismaster").unwrap(), "{lower}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informational_commands_answer() {
    let ctx = TestContext::shared(DB).await;
    admin(&ctx, doc! {"ping": 1}).await;
    ctx.db().run_command(doc! {"ping": 1}).await.unwrap();

    let build = admin(&ctx, doc! {"buildInfo": 1}).await;
    let version = build.get_str("version").unwrap();
    assert_eq!(version.split('.').count(), 3, "semver version: {build}");
    assert!(build.get_array("versionArray").unwrap().len() >= 3, "{build}");

    admin(&ctx, doc! {"serverStatus": 1}).await;
    let me = admin(&ctx, doc! {"whatsmyuri": 1}).await;
    assert!(me.get_str("you").unwrap().starts_with("127.0.0.1:"), "{me}");
    let status = admin(&ctx, doc! {"connectionStatus": 1}).await;
    assert!(status.get_document("authInfo").is_ok(), "{status}");
    admin(&ctx, doc! {"getParameter": 1, "featureCompatibilityVersion": 1}).await;
    let log = admin(&ctx, doc! {"getLog": "startupWarnings"}).await;
    assert!(log.get_array("log").is_ok(), "{log}");
    admin(
        &ctx,
        doc! {"endSessions": [{"id": bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![1; 16],
        }}]},
    )
    .await;
}

/// The outcome of one command as the alias test compares it: the reply's field names, or the
/// error code.
async fn outcome(db: &mongodb::Database, cmd: Document) -> Result<Vec<String>, i32> {
    match db.run_command(cmd.clone()).await {
        Ok(reply) => Ok(reply.keys().cloned().collect()),
        Err(e) => match e.kind.as_ref() {
            mongodb::error::ErrorKind::Command(ce) => Err(ce.code),
            other => panic!("{cmd}: {other:?}"),
        },
    }
}

/// Every alias MongoDB accepts reaches the same handler as its canonical name, through the router
/// and, for commands the router forwards (`collstats`, `dbstats`), on the shard too: the same
/// reply fields, or the same error code, and never CommandNotFound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_alias_reaches_the_same_handler() {
    let ctx = TestContext::shared(DB).await;
    let coll = ctx.coll("aliases");
    coll.insert_many(vec![doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 2}]).await.unwrap();
    let db = ctx.db();
    let admin_db = ctx.client().database("admin");
    // (database, alias form, canonical form); each pair is run alias first.
    let pairs: Vec<(&mongodb::Database, Document, Document)> = vec![
        (&admin_db, doc! {"ismaster": 1}, doc! {"isMaster": 1}),
        (&admin_db, doc! {"buildinfo": 1}, doc! {"buildInfo": 1}),
        (db, doc! {"getlasterror": 1}, doc! {"getLastError": 1}),
        (db, doc! {"collstats": "aliases"}, doc! {"collStats": "aliases"}),
        (db, doc! {"dbstats": 1}, doc! {"dbStats": 1}),
        (
            db,
            doc! {"findandmodify": "aliases", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}},
            doc! {"findAndModify": "aliases", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}},
        ),
        (
            db,
            doc! {"explain": {"findandmodify": "aliases", "query": {"_id": 2}, "remove": true}},
            doc! {"explain": {"findAndModify": "aliases", "query": {"_id": 2}, "remove": true}},
        ),
        (db, doc! {"deleteIndexes": "aliases", "index": "nope_1"}, doc! {"dropIndexes": "aliases", "index": "nope_1"}),
        (&admin_db, doc! {"flushrouterconfig": 1}, doc! {"flushRouterConfig": 1}),
        (&admin_db, doc! {"enablesharding": "nodb_x"}, doc! {"enableSharding": "nodb_x"}),
        (
            &admin_db,
            doc! {"shardcollection": "nodb_x.c", "key": {"_id": 1}},
            doc! {"shardCollection": "nodb_x.c", "key": {"_id": 1}},
        ),
        (
            &admin_db,
            doc! {"movechunk": "nodb_x.c", "find": {"_id": 1}, "to": "nosuch"},
            doc! {"moveChunk": "nodb_x.c", "find": {"_id": 1}, "to": "nosuch"},
        ),
        (&admin_db, doc! {"moveprimary": "nodb_x", "to": "nosuch"}, doc! {"movePrimary": "nodb_x", "to": "nosuch"}),
        (&admin_db, doc! {"removeshard": "nosuch"}, doc! {"removeShard": "nosuch"}),
    ];
    for (on, alias, canonical) in pairs {
        let (a, c) = (outcome(on, alias.clone()).await, outcome(on, canonical.clone()).await);
        assert_ne!(a, Err(59), "{alias}: CommandNotFound");
        assert_eq!(a, c, "{alias} and {canonical} answer differently");
    }
    // The alias was applied once through each name.
    let doc = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(doc.get_i32("n").unwrap(), 3, "{doc}");

    // listCommands is generated from the same table: canonical names, with their facts.
    let list = admin(&ctx, doc! {"listCommands": 1}).await;
    let commands = list.get_document("commands").unwrap();
    assert!(commands.get("findandmodify").is_none() && commands.get("findAndModify").is_some(), "{list}");
    let find = commands.get_document("find").unwrap();
    assert!(find.get_bool("secondaryOk").unwrap() && find.get_bool("requiresAuth").unwrap(), "{find}");
    let add_shard = commands.get_document("addShard").unwrap();
    assert!(add_shard.get_bool("adminOnly").unwrap() && !add_shard.get_bool("secondaryOk").unwrap());
    assert!(!commands.get_document("ping").unwrap().get_bool("requiresAuth").unwrap());
}

/// `serverStatus.opcounters` counts what the router received as a mongos does: inserts, updates
/// and deletes per statement, finds as queries, getMores, and every other command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opcounters_count_what_the_router_received() {
    let ctx = TestContext::owned(DB).await;
    let ops = |status: &Document| status.get_document("opcounters").cloned().expect("opcounters");
    let net = |status: &Document| status.get_document("network").cloned().expect("network");
    let status_before = admin(&ctx, doc! {"serverStatus": 1}).await;
    let before = ops(&status_before);
    let coll = ctx.db().collection::<Document>("opcounters");
    coll.insert_many((0..5).map(|i| doc! {"_id": i, "n": i})).await.expect("insert");
    coll.insert_one(doc! {"_id": 9}).await.expect("insert one");
    ctx.db()
        .run_command(doc! {"update": "opcounters", "updates": [
            {"q": {"_id": 0}, "u": {"$set": {"n": 10}}},
            {"q": {"_id": 1}, "u": {"$set": {"n": 11}}},
        ]})
        .await
        .expect("update");
    coll.delete_one(doc! {"_id": 2}).await.expect("delete");
    let mut cursor = coll.find(doc! {}).batch_size(2).await.expect("find");
    let mut seen = 0;
    while cursor.advance().await.expect("getMore") {
        seen += 1;
    }
    assert_eq!(seen, 5);
    let status_after = admin(&ctx, doc! {"serverStatus": 1}).await;
    let after = ops(&status_after);
    let delta = |k: &str| int(&after, k) - int(&before, k);
    assert_eq!(delta("insert"), 6, "one per document: {before} -> {after}");
    assert_eq!(delta("update"), 2, "one per statement: {before} -> {after}");
    assert_eq!(delta("delete"), 1, "{before} -> {after}");
    assert_eq!(delta("query"), 1, "{before} -> {after}");
    assert_eq!(delta("getmore"), 2, "5 documents in batches of 2: {before} -> {after}");
    assert!(delta("command") >= 1, "the second serverStatus at least: {before} -> {after}");
    // Eight messages at least (two inserts, update, delete, find, two getMores, serverStatus),
    // six documents in; replies out.
    let (n0, n1) = (net(&status_before), net(&status_after));
    let grew = |k: &str| int(&n1, k) - int(&n0, k);
    assert!(grew("numRequests") >= 8, "{n0} -> {n1}");
    assert!(grew("bytesIn") > 6 * 20, "{n0} -> {n1}");
    assert!(grew("bytesOut") > 0, "{n0} -> {n1}");
}
