//! Authentication and authorization through the router with `--auth`, driven by the official
//! Rust driver: the localhost exception, SCRAM-SHA-256 and SCRAM-SHA-1, wrong passwords, built-in
//! and user-defined roles, grants and drops reaching open connections, cursor ownership, and a
//! second router seeing the first one's changes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{Document, doc};
use mongodb::Client;
use mongodb::options::{AuthMechanism, ClientOptions, Credential};
use shoal_tests::catalog_cluster::CatalogCluster;
use shoal_tests::expect::command_error;

const ROOT_PASSWORD: &str = "s3cret-r00t";

/// A client that authenticates as `user` (on `source`) with `mechanism`, over one connection so
/// "the same connection" means what it says.
async fn login(addr: std::net::SocketAddr, user: &str, pwd: &str, source: &str, mechanism: Option<&str>) -> Client {
    let uri = format!("mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=5000&maxPoolSize=1");
    let mut options = ClientOptions::parse(&uri).await.expect("uri");
    let mechanism = mechanism.map(|m| m.parse::<AuthMechanism>().expect("mechanism"));
    options.credential = Some(
        Credential::builder()
            .username(user.to_owned())
            .password(pwd.to_owned())
            .source(source.to_owned())
            .mechanism(mechanism)
            .build(),
    );
    Client::with_options(options).expect("client")
}

/// Starts an `--auth` cluster, creates the first user through the localhost exception and
/// registers the shard as that user.
async fn secured_cluster() -> (CatalogCluster, Client) {
    let cluster = CatalogCluster::start_with(&["--auth"]).await.expect("cluster starts");
    let anonymous = cluster.client().await.expect("client");
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"] })
        .await
        .expect("the localhost exception lets the first user be created");
    let root = login(cluster.router.addr(), "root", ROOT_PASSWORD, "admin", None).await;
    let shard = format!("shard0/{}", cluster.shard.addr());
    root.database("admin").run_command(doc! { "addShard": shard }).await.expect("addShard as root");
    (cluster, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_clients_may_only_handshake_and_create_the_first_user() {
    let cluster = CatalogCluster::start_with(&["--auth"]).await.expect("cluster starts");
    let anonymous = cluster.client().await.expect("client");
    let admin = anonymous.database("admin");
    admin.run_command(doc! { "ping": 1 }).await.expect("ping needs no user");
    admin.run_command(doc! { "buildInfo": 1 }).await.expect("buildInfo needs no user");
    let e = command_error(anonymous.database("app").run_command(doc! { "find": "people" }).await, 13);
    assert_eq!(e.message, "Command find requires authentication");
    // The localhost exception allows creating users, not using them.
    command_error(admin.run_command(doc! { "listDatabases": 1 }).await, 13);
    admin
        .run_command(doc! { "createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"] })
        .await
        .expect("first user");
    // Once a user exists the exception is gone, on this connection too.
    command_error(admin.run_command(doc! { "createUser": "other", "pwd": "x", "roles": [] }).await, 13);
    let status = admin.run_command(doc! { "connectionStatus": 1 }).await.expect("connectionStatus");
    assert!(status.get_document("authInfo").unwrap().get_array("authenticatedUsers").unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_and_sha_1_authenticate_and_wrong_passwords_fail() {
    let (cluster, root) = secured_cluster().await;
    let admin = root.database("admin");
    admin
        .run_command(doc! { "createUser": "app", "pwd": "pw-Ünïcødé", "roles": [{ "role": "readWrite", "db": "app" }] })
        .await
        .expect("createUser");
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-1"] {
        let client = login(cluster.router.addr(), "app", "pw-Ünïcødé", "admin", Some(mechanism)).await;
        client.database("app").collection::<Document>("c").insert_one(doc! { "m": mechanism }).await.expect(mechanism);
        let status = client.database("admin").run_command(doc! { "connectionStatus": 1 }).await.expect("status");
        let users = status.get_document("authInfo").unwrap().get_array("authenticatedUsers").unwrap().clone();
        assert_eq!(users, vec![bson::Bson::Document(doc! { "user": "app", "db": "admin" })]);
    }
    let wrong = login(cluster.router.addr(), "app", "not-it", "admin", None).await;
    let e = wrong.database("app").collection::<Document>("c").find_one(doc! {}).await.expect_err("wrong password");
    assert!(matches!(*e.kind, mongodb::error::ErrorKind::Authentication { .. }), "{e}");
    let ghost = login(cluster.router.addr(), "ghost", "whatever", "admin", None).await;
    let e2 = ghost.database("app").collection::<Document>("c").find_one(doc! {}).await.expect_err("no such user");
    // An unknown user fails exactly as a wrong password does.
    assert_eq!(e.to_string().replace("not-it", ""), e2.to_string().replace("ghost", "app").replace("whatever", ""));
    // The driver negotiates through saslSupportedMechs.
    let hello = root
        .database("admin")
        .run_command(doc! { "hello": 1, "saslSupportedMechs": "admin.app" })
        .await
        .expect("hello");
    assert_eq!(hello.get_array("saslSupportedMechs").unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_decide_grants_reach_open_connections_and_drops_lock_out() {
    let (cluster, root) = secured_cluster().await;
    let admin = root.database("admin");
    root.database("app").collection::<Document>("people").insert_one(doc! { "_id": 1 }).await.expect("seed");
    admin
        .run_command(doc! { "createUser": "reader", "pwd": "pw", "roles": [{ "role": "read", "db": "app" }] })
        .await
        .expect("reader");
    let reader = login(cluster.router.addr(), "reader", "pw", "admin", None).await;
    let people = reader.database("app").collection::<Document>("people");
    assert!(people.find_one(doc! {}).await.expect("a reader reads").is_some());
    let e = command_error(
        reader.database("app").run_command(doc! { "insert": "people", "documents": [{ "_id": 2 }] }).await,
        13,
    );
    assert!(e.message.starts_with("not authorized on app to execute command"), "{}", e.message);
    command_error(reader.database("other").run_command(doc! { "find": "x" }).await, 13);

    admin
        .run_command(doc! { "grantRolesToUser": "reader", "roles": [{ "role": "readWrite", "db": "app" }] })
        .await
        .expect("grant");
    people.insert_one(doc! { "_id": 2 }).await.expect("the same connection may now insert");

    admin.run_command(doc! { "dropUser": "reader" }).await.expect("dropUser");
    let e = command_error(reader.database("app").run_command(doc! { "find": "people" }).await, 13);
    assert_eq!(e.message, "Command find requires authentication");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_defined_roles_users_info_and_roles_info() {
    let (cluster, root) = secured_cluster().await;
    let app = root.database("app");
    app.run_command(doc! {
        "createRole": "logWriter",
        "privileges": [{ "resource": { "db": "app", "collection": "logs" }, "actions": ["insert", "find"] }],
        "roles": [],
    })
    .await
    .expect("createRole");
    command_error(
        app.run_command(doc! { "createRole": "bad", "privileges": [{ "resource": { "cluster": true }, "actions": ["shutdown"] }], "roles": [] }).await,
        2,
    );
    command_error(app.run_command(doc! { "createRole": "logWriter", "privileges": [], "roles": [] }).await, 51002);
    app.run_command(doc! { "createUser": "svc", "pwd": "pw", "roles": ["logWriter"], "customData": { "team": "ops" } })
        .await
        .expect("createUser on app");
    command_error(app.run_command(doc! { "createUser": "svc", "pwd": "pw", "roles": [] }).await, 51003);
    command_error(app.run_command(doc! { "createUser": "x", "pwd": "pw", "roles": ["nosuchrole"] }).await, 31);

    let svc = login(cluster.router.addr(), "svc", "pw", "app", None).await;
    svc.database("app").collection::<Document>("logs").insert_one(doc! { "line": 1 }).await.expect("logs insert");
    command_error(svc.database("app").run_command(doc! { "insert": "people", "documents": [{}] }).await, 13);
    // A user sees itself, not others.
    let me = svc.database("app").run_command(doc! { "usersInfo": "svc" }).await.expect("usersInfo self");
    let users = me.get_array("users").unwrap();
    let user = users[0].as_document().unwrap();
    assert_eq!(user.get_str("_id").unwrap(), "app.svc");
    assert_eq!(user.get_document("customData").unwrap(), &doc! { "team": "ops" });
    assert!(user.get("credentials").is_none());
    command_error(svc.database("admin").run_command(doc! { "usersInfo": "root" }).await, 13);

    let info = app.run_command(doc! { "rolesInfo": "logWriter", "showPrivileges": true }).await.expect("rolesInfo");
    let role = info.get_array("roles").unwrap()[0].as_document().unwrap().clone();
    assert!(!role.get_bool("isBuiltin").unwrap());
    let privileges = role.get_array("privileges").unwrap();
    assert_eq!(
        privileges[0].as_document().unwrap(),
        &doc! { "resource": { "db": "app", "collection": "logs" }, "actions": ["find", "insert"] }
    );
    app.run_command(doc! { "revokePrivilegesFromRole": "logWriter", "privileges": [{ "resource": { "db": "app", "collection": "logs" }, "actions": ["insert"] }] })
        .await
        .expect("revoke");
    command_error(svc.database("app").run_command(doc! { "insert": "logs", "documents": [{}] }).await, 13);
    let all = root
        .database("admin")
        .run_command(doc! { "usersInfo": { "forAllDBs": true }, "showCredentials": true })
        .await
        .expect("all");
    let ids: Vec<&str> =
        all.get_array("users").unwrap().iter().map(|u| u.as_document().unwrap().get_str("_id").unwrap()).collect();
    assert_eq!(ids, ["admin.root", "app.svc"]);
    let creds = all.get_array("users").unwrap()[0].as_document().unwrap().get_document("credentials").unwrap().clone();
    assert_eq!(creds.get_document("SCRAM-SHA-256").unwrap().get_i64("iterationCount").unwrap(), 15000);
    // admin.system.users and admin.system.roles read from the catalog, keys redacted.
    let users: Vec<Document> = {
        let mut cursor = root
            .database("admin")
            .collection::<Document>("system.users")
            .find(doc! { "db": "app" })
            .await
            .expect("find");
        let mut out = Vec::new();
        while cursor.advance().await.expect("advance") {
            out.push(cursor.deserialize_current().expect("doc"));
        }
        out
    };
    assert_eq!(users.len(), 1);
    let scram = users[0].get_document("credentials").unwrap().get_document("SCRAM-SHA-256").unwrap();
    assert!(scram.contains_key("salt") && !scram.contains_key("storedKey") && !scram.contains_key("serverKey"));
    let roles =
        root.database("admin").collection::<Document>("system.roles").count_documents(doc! {}).await.expect("count");
    assert_eq!(roles, 1);
    command_error(svc.database("admin").run_command(doc! { "find": "system.users" }).await, 13);
    command_error(
        root.database("admin").run_command(doc! { "insert": "system.users", "documents": [{ "_id": "x" }] }).await,
        20,
    );
    app.run_command(doc! { "dropRole": "logWriter" }).await.expect("dropRole");
    command_error(svc.database("app").run_command(doc! { "find": "logs" }).await, 13);
    let n = app.run_command(doc! { "dropAllUsersFromDatabase": 1 }).await.expect("dropAll");
    assert_eq!(n.get_i64("n").unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_belongs_to_its_user_and_other_routers_see_changes() {
    let (cluster, root) = secured_cluster().await;
    let admin = root.database("admin");
    let people = root.database("app").collection::<Document>("people");
    people.insert_many((0..10).map(|i| doc! { "_id": i })).await.expect("seed");
    admin
        .run_command(doc! { "createUser": "a", "pwd": "pw", "roles": [{ "role": "read", "db": "app" }] })
        .await
        .expect("a");
    admin
        .run_command(doc! { "createUser": "b", "pwd": "pw", "roles": [{ "role": "read", "db": "app" }] })
        .await
        .expect("b");
    let a = login(cluster.router.addr(), "a", "pw", "admin", None).await;
    let b = login(cluster.router.addr(), "b", "pw", "admin", None).await;
    let first = a.database("app").run_command(doc! { "find": "people", "batchSize": 2 }).await.expect("find");
    let id = first.get_document("cursor").unwrap().get_i64("id").unwrap();
    assert_ne!(id, 0);
    let e = command_error(b.database("app").run_command(doc! { "getMore": id, "collection": "people" }).await, 13);
    assert!(e.message.contains("was not created by the authenticated user"), "{}", e.message);
    a.database("app").run_command(doc! { "getMore": id, "collection": "people" }).await.expect("the owner continues");

    // A second router learns users from the catalog, and later changes through the watch stream.
    let other = cluster.add_router("router2", &["--auth"]).await.expect("second router");
    let via_other = login(other.addr(), "a", "pw", "admin", None).await;
    via_other.database("app").collection::<Document>("people").find_one(doc! {}).await.expect("a on router2");
    admin
        .run_command(doc! { "revokeRolesFromUser": "a", "roles": [{ "role": "read", "db": "app" }] })
        .await
        .expect("revoke");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match via_other.database("app").run_command(doc! { "find": "people" }).await {
            Err(e) if shoal_tests::expect::server_code(&e) == Some(13) => break,
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            other => panic!("router2 never saw the revoke: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_authentication_authorization_and_user_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.json");
    let path_arg = path.display().to_string();
    let cluster = CatalogCluster::start_with(&["--auth", "--auditDestination", "file", "--auditPath", &path_arg])
        .await
        .expect("cluster starts");
    let anonymous = cluster.client().await.expect("client");
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"] })
        .await
        .expect("first user");
    let _ = anonymous.database("app").run_command(doc! { "find": "c" }).await;
    let wrong = login(cluster.router.addr(), "root", "wrong", "admin", None).await;
    let _ = wrong.database("admin").run_command(doc! { "ping": 1, "comment": "auth" }).await;
    let _ = wrong.database("app").run_command(doc! { "find": "c" }).await;
    let root = login(cluster.router.addr(), "root", ROOT_PASSWORD, "admin", None).await;
    root.database("admin").run_command(doc! { "dropUser": "root" }).await.expect("dropUser");

    let wanted = [("createUser", 0), ("authCheck", 13), ("authenticate", 18), ("authenticate", 0), ("dropUser", 0)];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let events: Vec<(String, i64)> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .map(|v| (v["atype"].as_str().unwrap_or_default().to_owned(), v["result"].as_i64().unwrap_or(-1)))
            .collect();
        let found = wanted.iter().all(|(a, r)| events.iter().any(|(ea, er)| ea == a && er == r));
        if found {
            assert!(!text.contains(ROOT_PASSWORD), "the audit log never holds a password");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "missing audit events; got {events:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
