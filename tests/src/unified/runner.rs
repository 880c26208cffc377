//! One test of a unified test file: `initialData` (drop, then create or insert, through the
//! runner's own client), `createEntities`, the `operations` with their `expectResult` /
//! `expectError` / `saveResultAsEntity`, `testRunner` operations (`failPoint`,
//! `assertCollectionExists` / `NotExists`, `createEntities`), `expectEvents` (command monitoring
//! events, root-level matching of `command` and `reply`) and `outcome` (collection contents by
//! `_id`). Failpoints a test set are turned off afterwards.

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Client;
use mongodb::options::{CreateCollectionOptions, ReadConcern, WriteConcern};

use crate::unified::entities::{Entities, Entity, Event};
use crate::unified::errors;
use crate::unified::matching::{matches, matches_root_list};
use crate::unified::operations::{self, Shape};

pub struct Ctx<'a> {
    /// The runner's own client: initial data, outcome, failpoint clean-up.
    pub internal: &'a Client,
    pub router: String,
    pub file: &'a Document,
}

fn arr<'d>(d: &'d Document, key: &str) -> &'d [Bson] {
    d.get_array(key).map(Vec::as_slice).unwrap_or_default()
}

pub async fn run_test(ctx: &Ctx<'_>, test: &Document) -> Result<(), String> {
    initial_data(ctx.internal, arr(ctx.file, "initialData")).await?;
    let mut entities = Entities::default();
    entities.create(arr(ctx.file, "createEntities"), &ctx.router).await?;
    let mut failpoints: Vec<(String, Document)> = Vec::new();
    let result = run_operations(ctx, test, &mut entities, &mut failpoints).await;
    for (client, fp) in failpoints {
        if let Ok(c) = entities.client(&client) {
            let off = doc! { "configureFailPoint": fp.get("configureFailPoint").cloned().unwrap_or(Bson::Null), "mode": "off" };
            let _ = c.client.database("admin").run_command(off).await;
        }
    }
    result?;
    for expected in arr(test, "expectEvents") {
        check_events(expected.as_document().ok_or("expectEvents entry")?, &entities)?;
    }
    for expected in arr(test, "outcome") {
        check_outcome(ctx.internal, expected.as_document().ok_or("outcome entry")?, &entities).await?;
    }
    Ok(())
}

async fn initial_data(internal: &Client, data: &[Bson]) -> Result<(), String> {
    let majority = WriteConcern::majority();
    for d in data {
        let d = d.as_document().ok_or("initialData entry")?;
        let db = internal.database(d.get_str("databaseName").map_err(|_| "databaseName")?);
        let name = d.get_str("collectionName").map_err(|_| "collectionName")?;
        let coll = db.collection::<Document>(name);
        coll.drop().write_concern(majority.clone()).await.map_err(|e| format!("initialData drop {name}: {e}"))?;
        let docs: Vec<Document> = arr(d, "documents").iter().filter_map(|x| x.as_document().cloned()).collect();
        if let Ok(create) = d.get_document("createOptions") {
            let o: CreateCollectionOptions =
                bson::deserialize_from_document(create.clone()).map_err(|e| format!("createOptions: {e}"))?;
            db.create_collection(name).with_options(o).await.map_err(|e| format!("initialData create {name}: {e}"))?;
        } else if docs.is_empty() {
            db.create_collection(name).await.map_err(|e| format!("initialData create {name}: {e}"))?;
        }
        if !docs.is_empty() {
            coll.insert_many(docs)
                .write_concern(majority.clone())
                .await
                .map_err(|e| format!("initialData insert: {e}"))?;
        }
    }
    Ok(())
}

async fn run_operations(
    ctx: &Ctx<'_>,
    test: &Document,
    entities: &mut Entities,
    failpoints: &mut Vec<(String, Document)>,
) -> Result<(), String> {
    for (i, op) in arr(test, "operations").iter().enumerate() {
        let op = op.as_document().ok_or("operation is not a document")?;
        let name = op.get_str("name").map_err(|_| "operation without name")?;
        let object = op.get_str("object").map_err(|_| "operation without object")?;
        let args = op.get_document("arguments").cloned().unwrap_or_default();
        let at = format!("operation {i} ({object}.{name})");
        if object == "testRunner" {
            test_runner(ctx, name, args, entities, failpoints).await.map_err(|e| format!("{at}: {e}"))?;
            continue;
        }
        let result = match entities.get(object)? {
            Entity::Collection(c) => operations::collection(c, name, args).await,
            Entity::Database(d) => operations::database(d, name, args).await,
            Entity::Client(_) => Err(format!("client operation {name} not supported by the runner")),
        }
        .map_err(|e| format!("{at}: {e}"))?;
        if op.get_bool("ignoreResultAndError").unwrap_or(false) {
            continue;
        }
        match (result, op.get_document("expectError")) {
            (Ok(_), Ok(_)) => return Err(format!("{at}: expected an error, got success")),
            (Err(e), Err(_)) => return Err(format!("{at}: unexpected error {e:?}")),
            (Err(e), Ok(expected)) => errors::check(expected, &e, &entities.saved).map_err(|m| format!("{at}: {m}"))?,
            (Ok(value), Err(_)) => {
                if let Some(expected) = op.get("expectResult") {
                    let r = match (operations::shape(name), &value) {
                        (Shape::Iterable, Some(Bson::Array(list))) => {
                            matches_root_list(expected, list, &entities.saved, "result")
                        }
                        _ => matches(expected, value.as_ref(), true, &entities.saved, "result"),
                    };
                    r.map_err(|m| format!("{at}: {m}"))?;
                }
                if let (Ok(id), Some(v)) = (op.get_str("saveResultAsEntity"), value) {
                    entities.saved.insert(id.to_owned(), v);
                }
            }
        }
    }
    Ok(())
}

async fn test_runner(
    ctx: &Ctx<'_>,
    name: &str,
    args: Document,
    entities: &mut Entities,
    failpoints: &mut Vec<(String, Document)>,
) -> Result<(), String> {
    match name {
        "failPoint" => {
            let client = args.get_str("client").map_err(|_| "failPoint without client")?;
            let fp = args.get_document("failPoint").map_err(|_| "failPoint without failPoint")?.clone();
            let c = entities.client(client)?;
            c.client.database("admin").run_command(fp.clone()).await.map_err(|e| format!("configureFailPoint: {e}"))?;
            failpoints.push((client.to_owned(), fp));
            Ok(())
        }
        "assertCollectionExists" | "assertCollectionNotExists" => {
            let db = args.get_str("databaseName").map_err(|_| "databaseName")?;
            let coll = args.get_str("collectionName").map_err(|_| "collectionName")?;
            let names = ctx.internal.database(db).list_collection_names().await.map_err(|e| e.to_string())?;
            let exists = names.iter().any(|n| n == coll);
            match (exists, name == "assertCollectionExists") {
                (true, true) | (false, false) => Ok(()),
                _ => Err(format!("{db}.{coll} exists: {exists}")),
            }
        }
        "createEntities" => entities.create(arr(&args, "entities"), &ctx.router).await,
        other => Err(format!("testRunner operation {other} not supported by the runner")),
    }
}

fn check_events(expected: &Document, entities: &Entities) -> Result<(), String> {
    let client = expected.get_str("client").map_err(|_| "expectEvents without client")?;
    let kind = expected.get_str("eventType").unwrap_or("command");
    if kind != "command" {
        return Err(format!("expectEvents eventType {kind} not supported by the runner"));
    }
    let actual = entities.client(client)?.events.lock().expect("event sink").clone();
    let want = arr(expected, "events");
    let extra_ok = expected.get_bool("ignoreExtraEvents").unwrap_or(false);
    let names: Vec<&str> = actual.iter().map(Event::name).collect();
    if want.len() > actual.len() || (!extra_ok && want.len() != actual.len()) {
        return Err(format!("expected {} events {want:?}, observed {} {names:?}", want.len(), actual.len()));
    }
    for (i, (w, a)) in want.iter().zip(&actual).enumerate() {
        let w = w.as_document().ok_or("expected event is not a document")?;
        let (wkind, spec) = w.iter().next().ok_or("empty expected event")?;
        let spec = spec.as_document().ok_or("expected event spec")?;
        let at = format!("event {i} ({names:?})");
        let s = &entities.saved;
        match (wkind.as_str(), a) {
            ("commandStartedEvent", Event::Started { name, db, command }) => {
                if let Some(c) = spec.get("command") {
                    matches(c, Some(&Bson::Document(command.clone())), true, s, "command")
                        .map_err(|m| format!("{at}: {m}"))?;
                }
                if let Ok(n) = spec.get_str("commandName")
                    && n != name
                {
                    return Err(format!("{at}: commandName {n}, got {name}"));
                }
                if let Ok(d) = spec.get_str("databaseName")
                    && d != db
                {
                    return Err(format!("{at}: databaseName {d}, got {db}"));
                }
            }
            ("commandSucceededEvent", Event::Succeeded { name, reply }) => {
                if let Some(r) = spec.get("reply") {
                    matches(r, Some(&Bson::Document(reply.clone())), true, s, "reply")
                        .map_err(|m| format!("{at}: {m}"))?;
                }
                if let Ok(n) = spec.get_str("commandName")
                    && n != name
                {
                    return Err(format!("{at}: commandName {n}, got {name}"));
                }
            }
            ("commandFailedEvent", Event::Failed { name }) => {
                if let Ok(n) = spec.get_str("commandName")
                    && n != name
                {
                    return Err(format!("{at}: commandName {n}, got {name}"));
                }
            }
            (k, a) => return Err(format!("{at}: expected {k}, observed {a:?}")),
        }
    }
    Ok(())
}

async fn check_outcome(internal: &Client, expected: &Document, entities: &Entities) -> Result<(), String> {
    let db = expected.get_str("databaseName").map_err(|_| "outcome databaseName")?;
    let name = expected.get_str("collectionName").map_err(|_| "outcome collectionName")?;
    let coll = internal.database(db).collection::<Document>(name);
    let docs: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .read_concern(ReadConcern::local())
        .await
        .map_err(|e| format!("outcome find: {e}"))?
        .try_collect()
        .await
        .map_err(|e| format!("outcome find: {e}"))?;
    let actual = Bson::Array(docs.into_iter().map(Bson::Document).collect());
    let want = Bson::Array(arr(expected, "documents").to_vec());
    matches(&want, Some(&actual), false, &entities.saved, &format!("outcome {db}.{name}"))
}
