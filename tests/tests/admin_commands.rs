//! The router's handshake and informational commands as drivers and mongosh use them: `hello` and
//! legacy `isMaster` answered as a mongos, `ping`, `buildInfo`, `serverStatus`, `whatsmyuri`,
//! `connectionStatus`, `getParameter`, `getLog`, `endSessions`.

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
