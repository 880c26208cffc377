//! Bad input through the driver gets MongoDB's error codes, and the connection keeps serving:
//! wrong types (`$inc` on a string → 14, `sort: 5` → 14), unknown command (59), unknown query
//! operator (2), unknown update operator (9), malformed operator arguments (2), conflicting update
//! paths (40), changing `_id` (66), paths through scalars (28), an array `_id` (53), a 17 MiB
//! document (refused by the driver, then sent by hand as an OP_MSG), unknown cursor ids (43).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "integration test: a panic is the failure report")]

use bson::{doc, spec::BinarySubtype};
use mongodb::error::ErrorKind;
use shoal_tests::TestContext;
use shoal_tests::expect;
use shoal_tests::fixtures::{get, seed};
use shoal_tests::wire::{self, Outcome, WireConn, op_msg};

const DB: &str = "errors";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inc_on_a_string_is_type_mismatch_14() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("inc_string");
    seed(&c, [doc! {"_id": 1, "s": "text", "n": 1}]).await;
    let result = c.update_one(doc! {"_id": 1}, doc! {"$inc": {"s": 1}}).await;
    expect::write_error(result, 14);
    // A non-numeric $inc argument is the same error class.
    let result = c.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": "one"}}).await;
    expect::write_error(result, 14);
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "s": "text", "n": 1}, "nothing changed");

    // update_many reports the same code.
    let result = c.update_many(doc! {}, doc! {"$inc": {"s": 1}}).await;
    expect::write_error(result, 14);
    // findAndModify reports it as a command error.
    let result = c.find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"s": 1}}).await;
    expect::command_error(result, 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_that_is_not_a_document_is_type_mismatch_14() {
    let ctx = TestContext::shared(DB).await;
    seed(&ctx.coll("c"), [doc! {"_id": 1}]).await;
    let result = ctx.db().run_command(doc! {"find": "c", "sort": 5}).await;
    expect::command_error(result, 14);
    let result = ctx.db().run_command(doc! {"find": "c", "filter": 5}).await;
    expect::command_error(result, 14);
    // Same connection pool, still serving.
    let reply = ctx.db().run_command(doc! {"find": "c"}).await.unwrap();
    let batch = reply.get_document("cursor").unwrap().get_array("firstBatch").unwrap();
    assert_eq!(batch.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_command_is_59() {
    let ctx = TestContext::shared(DB).await;
    let err = expect::command_error(ctx.db().run_command(doc! {"frobnicate": 1}).await, 59);
    assert_eq!(err.code_name, "CommandNotFound");
    let err =
        expect::command_error(ctx.client().database("admin").run_command(doc! {"noSuchAdminCommand": 1}).await, 59);
    assert_eq!(err.code_name, "CommandNotFound");
    ctx.db().run_command(doc! {"ping": 1}).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_operator_is_bad_value_2() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("unknown_query_op");
    seed(&c, [doc! {"_id": 1, "a": 1}]).await;
    let err = expect::command_error(c.find_one(doc! {"a": {"$frob": 1}}).await, 2);
    assert_eq!(err.code_name, "BadValue");
    expect::command_error(c.find_one(doc! {"$frob": [{"a": 1}]}).await, 2);
    expect::command_error(c.count_documents(doc! {"a": {"$frob": 1}}).await, 2);
    expect::server_error(c.delete_many(doc! {"a": {"$frob": 1}}).await, 2);
    expect::server_error(c.update_many(doc! {"a": {"$frob": 1}}, doc! {"$set": {"b": 1}}).await, 2);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_operator_arguments_are_bad_value_2() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("bad_args");
    seed(&c, [doc! {"_id": 1, "a": 1}]).await;
    expect::command_error(c.find_one(doc! {"a": {"$in": 5}}).await, 2);
    expect::command_error(c.find_one(doc! {"a": {"$nin": "x"}}).await, 2);
    expect::command_error(c.find_one(doc! {"$and": []}).await, 2);
    expect::command_error(c.find_one(doc! {"$or": 1}).await, 2);
    expect::command_error(c.find_one(doc! {"a": {"$mod": [0, 1]}}).await, 2);
    expect::command_error(c.find_one(doc! {"a": {"$type": "no_such_type"}}).await, 2);
    ctx.db().run_command(doc! {"ping": 1}).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_update_operator_is_failed_to_parse_9() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("unknown_update_op");
    seed(&c, [doc! {"_id": 1, "a": 1}]).await;
    let err = expect::write_error(c.update_one(doc! {"_id": 1}, doc! {"$frob": {"a": 2}}).await, 9);
    assert!(!err.message.is_empty());
    expect::write_error(c.update_many(doc! {}, doc! {"$set": {"a": 2}, "$frob": {"a": 2}}).await, 9);
    expect::write_error(c.update_one(doc! {"_id": 2}, doc! {"$frob": {"a": 2}}).upsert(true).await, 9);
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "a": 1});
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 1, "no upsert happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_updates_have_specific_codes() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("invalid_updates");
    seed(&c, [doc! {"_id": 1, "a": 1, "arr": [1], "n": 5}]).await;
    // ConflictingUpdateOperators.
    expect::write_error(c.update_one(doc! {"_id": 1}, doc! {"$set": {"a": 2}, "$inc": {"a": 1}}).await, 40);
    expect::write_error(c.update_one(doc! {"_id": 1}, doc! {"$set": {"n": 2, "n.x": 1}}).await, 40);
    // ImmutableField.
    expect::write_error(c.update_one(doc! {"_id": 1}, doc! {"$set": {"_id": 2}}).await, 66);
    expect::write_error(c.replace_one(doc! {"_id": 1}, doc! {"_id": 2, "a": 1}).await, 66);
    // PathNotViable: a field below a scalar.
    expect::write_error(c.update_one(doc! {"_id": 1}, doc! {"$set": {"a.b": 1}}).await, 28);
    // BadValue: $push to something that is not an array.
    expect::write_error(c.update_one(doc! {"_id": 1}, doc! {"$push": {"a": 1}}).await, 2);
    assert_eq!(get(&c, 1).await, doc! {"_id": 1, "a": 1, "arr": [1], "n": 5});
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_id_is_rejected() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("array_id");
    // InvalidIdField (MongoDB 5.0+; older servers said BadValue "can't use an array for _id").
    expect::write_error(c.insert_one(doc! {"_id": [1, 2]}).await, 53);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_more_of_an_unknown_cursor_is_43() {
    let ctx = TestContext::shared(DB).await;
    seed(&ctx.coll("cursor"), [doc! {"_id": 1}]).await;
    let err =
        expect::command_error(ctx.db().run_command(doc! {"getMore": 123_456_789i64, "collection": "cursor"}).await, 43);
    assert_eq!(err.code_name, "CursorNotFound");
}

/// A document of 17 MiB: over maxBsonObjectSize (16 MiB), under maxMessageSizeBytes (48 MB).
fn huge_document() -> bson::Document {
    doc! {
        "_id": 1,
        "blob": bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![7u8; 17 * 1024 * 1024] },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seventeen_mib_document_is_rejected() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("huge");
    match c.insert_one(huge_document()).await {
        Ok(r) => panic!("a 17 MiB document was accepted: {r:?}"),
        // The driver refuses it itself, from the maxBsonObjectSize the router advertised.
        Err(e) if matches!(*e.kind, ErrorKind::InvalidArgument { .. }) => {}
        Err(e) => {
            let code = expect::server_code(&e);
            assert!(matches!(code, Some(c) if c != 0), "not a server error: {e:?}");
        }
    }

    // By hand, both as a kind-1 document sequence and inline in the body.
    let huge = huge_document().to_vec().unwrap();
    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let body = doc! {"insert": "huge", "$db": DB}.to_vec().unwrap();
    let id = conn.request_id();
    conn.send_raw(&op_msg(id, 0, &body, &[("documents", std::slice::from_ref(&huge))])).await.unwrap();
    assert_rejected(&mut conn, id).await;

    let mut conn = WireConn::connect(ctx.cluster().router_addr()).await.unwrap();
    let body = doc! {"insert": "huge", "$db": DB, "documents": [huge_document()]}.to_vec().unwrap();
    let id = conn.request_id();
    conn.send_raw(&op_msg(id, 0, &body, &[])).await.unwrap();
    assert_rejected(&mut conn, id).await;

    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 0, "nothing was stored");
    ctx.assert_cluster_serving().await;
}

/// The reply to request `id` is an error (`ok: 0` with code and errmsg, or a write error), and
/// the same connection still answers a ping.
async fn assert_rejected(conn: &mut WireConn, id: i32) {
    let outcome = conn.next_outcome().await.unwrap();
    let Outcome::Reply { response_to, body } = outcome else {
        panic!("the router closed the connection instead of replying with an error");
    };
    assert_eq!(response_to, id);
    let failed = wire::is_error_reply(&body)
        || (wire::ok_value(&body) == Some(1.0)
            && body.get_array("writeErrors").map(|w| !w.is_empty()).unwrap_or(false));
    assert!(failed, "a 17 MiB document was not rejected: {body}");
    let pong = conn.command(&doc! {"ping": 1, "$db": "admin"}).await.unwrap();
    assert_eq!(wire::ok_value(&pong), Some(1.0), "{pong}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_regex_is_an_error() {
    let ctx = TestContext::shared(DB).await;
    let c = ctx.coll("bad_regex");
    seed(&c, [doc! {"_id": 1, "s": "x"}]).await;
    // 51091 in MongoDB 4.4+ ("Regular expression is invalid"); older servers used 2.
    expect::any_command_error(c.find_one(doc! {"s": {"$regex": "("}}).await);
    expect::any_command_error(c.find_one(doc! {"s": {"$regex": "a", "$options": "q"}}).await);
    assert_eq!(c.count_documents(doc! {"s": {"$regex": "^x$"}}).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_command_field_is_40415() {
    let ctx = TestContext::shared(DB).await;
    seed(&ctx.coll("unknown_field"), [doc! {"_id": 1}]).await;
    let err =
        expect::command_error(ctx.db().run_command(doc! {"find": "unknown_field", "bogusOption": 1}).await, 40415);
    assert!(err.message.contains("bogusOption"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_write_batches_are_invalid_length_16() {
    let ctx = TestContext::shared(DB).await;
    let db = ctx.db();
    expect::command_error(db.run_command(doc! {"insert": "empty_batch", "documents": []}).await, 16);
    expect::command_error(db.run_command(doc! {"update": "empty_batch", "updates": []}).await, 16);
    expect::command_error(db.run_command(doc! {"delete": "empty_batch", "deletes": []}).await, 16);
}
