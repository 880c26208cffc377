//! `shoal dump`: reads every collection (or one database's) through a router into mongodump's
//! layout, with the balancer paused and each sharded collection fenced against chunk moves.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use bson::{Bson, Document, RawDocumentBuf, doc};
use futures::TryStreamExt;

use super::bson_file::{BsonWriter, write_small};
use super::layout::{Metadata, paths};
use super::{INTERNAL_DATABASES, connect_target, pause_balancer, resume_balancer};
use crate::cli::DumpArgs;
use crate::router_client::command;

/// Reads of one collection before a dump gives up because its chunks keep moving.
const FENCED_ATTEMPTS_MAX: u32 = 3;
/// Documents per batch the router returns.
const BATCH_SIZE: u32 = 1000;
/// Bounds reading one batch (the driver's own cursor has no deadline of its own).
const BATCH_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(args: DumpArgs) -> anyhow::Result<()> {
    if args.collection.is_some() && args.db.is_none() {
        bail!("--collection needs --db");
    }
    let target = connect_target(&args.target, "shoal-dump").await?;
    let client = &target.client;
    let was = pause_balancer(client).await?;
    let outcome = dump_all(client, &args).await;
    let resumed = resume_balancer(client, was).await;
    let totals = outcome?;
    resumed?;
    println!(
        "dumped {} collection(s), {} document(s), {} byte(s) from {} to {}",
        totals.collections,
        totals.documents,
        totals.bytes,
        target.address,
        args.out.display()
    );
    Ok(())
}

#[derive(Debug, Default)]
struct Totals {
    collections: u64,
    documents: u64,
    bytes: u64,
}

async fn dump_all(client: &mongodb::Client, args: &DumpArgs) -> anyhow::Result<Totals> {
    let admin = client.database("admin");
    let databases: Vec<String> = match &args.db {
        Some(db) => vec![db.clone()],
        None => {
            let reply =
                command(&admin, doc! { "listDatabases": 1, "nameOnly": true }).await.context("listDatabases")?;
            let listed = reply.get_array("databases").map(|a| a.as_slice()).unwrap_or_default();
            listed
                .iter()
                .filter_map(|d| d.as_document().and_then(|d| d.get_str("name").ok()).map(str::to_owned))
                .filter(|name| !INTERNAL_DATABASES.contains(&name.as_str()))
                .collect()
        }
    };
    let mut totals = Totals::default();
    for db in &databases {
        let collections = match &args.collection {
            Some(c) => vec![c.clone()],
            None => collections_of(client, db).await?,
        };
        for coll in collections {
            let (documents, bytes) = dump_fenced(client, db, &coll, &args.out, args.gzip).await?;
            println!("  {db}.{coll}: {documents} document(s)");
            totals.collections += 1;
            totals.documents += documents;
            totals.bytes += bytes;
        }
    }
    if args.db.is_none() || args.db.as_deref() == Some("admin") {
        dump_security(client, &args.out, args.gzip).await?;
    }
    Ok(totals)
}

/// The database's collections, without `system.*` ones (users and roles are dumped apart).
async fn collections_of(client: &mongodb::Client, db: &str) -> anyhow::Result<Vec<String>> {
    let reply = command(&client.database(db), doc! { "listCollections": 1, "nameOnly": true })
        .await
        .with_context(|| format!("listCollections on {db}"))?;
    let batch = reply.get_document("cursor").and_then(|c| c.get_array("firstBatch")).map(|a| a.as_slice());
    let mut names: Vec<String> = batch
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.as_document())
        .filter(|c| c.get_str("type").map_or(true, |t| t == "collection"))
        .filter_map(|c| c.get_str("name").ok().map(str::to_owned))
        .filter(|name| !name.starts_with("system."))
        .collect();
    names.sort();
    Ok(names)
}

/// A sharded collection's key, whether it is unique, and where its chunks are (each chunk's min,
/// shard and version), as `config.collections` and `config.chunks` show them.
#[derive(Debug, Clone, PartialEq)]
struct Placement {
    key: Document,
    unique: bool,
    chunks: Vec<String>,
}

/// `ns`'s [`Placement`]; `None` for an unsharded collection.
async fn placement(client: &mongodb::Client, ns: &str) -> anyhow::Result<Option<Placement>> {
    let config = client.database("config");
    let Some(collection) = config.collection::<Document>("collections").find_one(doc! { "_id": ns }).await? else {
        return Ok(None);
    };
    let key = collection.get_document("key").context("config.collections without a key")?.clone();
    let unique = collection.get_bool("unique").unwrap_or(false);
    let uuid = collection.get("uuid").cloned().unwrap_or(Bson::Null);
    let found: Vec<Document> =
        config.collection::<Document>("chunks").find(doc! { "uuid": uuid }).await?.try_collect().await?;
    if found.is_empty() {
        bail!("config.chunks shows no chunk of the sharded collection {ns}: cannot fence its read");
    }
    let mut chunks: Vec<String> = found
        .iter()
        .map(|c| {
            format!(
                "{} {} {}",
                c.get("min").map(ToString::to_string).unwrap_or_default(),
                c.get_str("shard").unwrap_or(""),
                c.get("lastmod").map(ToString::to_string).unwrap_or_default()
            )
        })
        .collect();
    chunks.sort();
    Ok(Some(Placement { key, unique, chunks }))
}

/// Dumps `db.coll`, again if a chunk moved while it was read.
async fn dump_fenced(
    client: &mongodb::Client,
    db: &str,
    coll: &str,
    out: &Path,
    gzip: bool,
) -> anyhow::Result<(u64, u64)> {
    let ns = format!("{db}.{coll}");
    fenced(
        &ns,
        async || placement(client, &ns).await.with_context(|| format!("chunk placement of {ns}")),
        async |key| dump_collection(client, db, coll, out, key, gzip).await,
    )
    .await
}

/// Runs `read` (given the shard key, if sharded) between two looks at the placement, until both
/// looks agree: a read no chunk move overlapped. Gives up after [`FENCED_ATTEMPTS_MAX`] reads.
async fn fenced<T>(
    ns: &str,
    mut placement: impl AsyncFnMut() -> anyhow::Result<Option<Placement>>,
    mut read: impl AsyncFnMut(Option<(Document, bool)>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    for attempt in 1..=FENCED_ATTEMPTS_MAX {
        let before = placement().await?;
        let value = read(before.as_ref().map(|p| (p.key.clone(), p.unique))).await?;
        if placement().await? == before {
            return Ok(value);
        }
        tracing::warn!(%ns, attempt, "chunks moved while the collection was read: reading it again");
    }
    bail!("{ns}: chunks kept moving during {FENCED_ATTEMPTS_MAX} reads (a moveChunk loop?); dump it again later")
}

async fn dump_collection(
    client: &mongodb::Client,
    db: &str,
    coll: &str,
    out: &Path,
    shard_key: Option<(Document, bool)>,
    gzip: bool,
) -> anyhow::Result<(u64, u64)> {
    let (bson_path, metadata_path) = paths(out, db, coll)?;
    let database = client.database(db);
    let indexes_reply = command(&database, doc! { "listIndexes": coll })
        .await
        .with_context(|| format!("listIndexes on {db}.{coll}"))?;
    let indexes: Vec<Document> = indexes_reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .map(|a| a.iter().filter_map(|i| i.as_document().cloned()).collect())
        .unwrap_or_default();
    let info = command(&database, doc! { "listCollections": 1, "filter": { "name": coll } }).await?;
    let described = info
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .ok()
        .and_then(|b| b.first())
        .and_then(Bson::as_document)
        .cloned()
        .unwrap_or_default();
    let options = described.get_document("options").cloned().unwrap_or_default();
    let uuid = described.get_document("info").ok().and_then(|i| match i.get("uuid") {
        Some(Bson::Binary(b)) => Some(b.bytes.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        _ => None,
    });

    let mut writer = BsonWriter::create(&bson_path, gzip).await?;
    let collection = database.collection::<RawDocumentBuf>(coll);
    let mut cursor =
        collection.find(doc! {}).batch_size(BATCH_SIZE).await.with_context(|| format!("find on {db}.{coll}"))?;
    loop {
        let next = tokio::time::timeout(BATCH_TIMEOUT, cursor.try_next())
            .await
            .map_err(|_| anyhow::anyhow!("{db}.{coll}: no batch within {} s", BATCH_TIMEOUT.as_secs()))?;
        let Some(document) = next.with_context(|| format!("reading {db}.{coll}"))? else { break };
        writer.write(document.as_bytes()).await?;
    }
    let counts = (writer.count, writer.bytes);
    writer.finish().await?;
    let (shard_key, shard_key_unique) = match shard_key {
        Some((key, unique)) => (Some(key), unique),
        None => (None, false),
    };
    let metadata = Metadata { collection: coll.to_owned(), options, indexes, uuid, shard_key, shard_key_unique };
    write_small(&metadata_path, &metadata.to_json(), gzip).await?;
    Ok(counts)
}

/// Users (with their stored credentials, as `admin.system.users` holds them) and user-defined
/// roles, as mongodump writes them.
async fn dump_security(client: &mongodb::Client, out: &Path, gzip: bool) -> anyhow::Result<()> {
    let admin = client.database("admin");
    let users = command(&admin, doc! { "usersInfo": { "forAllDBs": true }, "showCredentials": true })
        .await
        .context("usersInfo")?;
    let (users_path, _) = paths(out, "admin", "system.users")?;
    let mut writer = BsonWriter::create(&users_path, gzip).await?;
    for user in users.get_array("users").map(|a| a.as_slice()).unwrap_or_default() {
        let Some(user) = user.as_document() else { continue };
        let mut user = user.clone();
        user.remove("mechanisms");
        writer.write(RawDocumentBuf::try_from(&user)?.as_bytes()).await?;
    }
    let user_count = writer.count;
    writer.finish().await?;
    let roles: Vec<Document> = admin.collection::<Document>("system.roles").find(doc! {}).await?.try_collect().await?;
    let (roles_path, _) = paths(out, "admin", "system.roles")?;
    let mut writer = BsonWriter::create(&roles_path, gzip).await?;
    for role in &roles {
        writer.write(RawDocumentBuf::try_from(role)?.as_bytes()).await?;
    }
    writer.finish().await?;
    println!("  users: {user_count}, roles: {}", roles.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(shard: &str) -> Option<Placement> {
        Some(Placement { key: doc! { "k": 1 }, unique: false, chunks: vec![format!("MinKey {shard} 1")] })
    }

    #[tokio::test]
    async fn a_read_overlapping_a_chunk_move_is_done_again_and_a_moving_collection_gives_up() {
        // The chunk moves from s0 to s1 during the first read: a second read, with the key.
        let looks = [on("s0"), on("s1"), on("s1"), on("s1")];
        let (mut look, mut reads) = (0, Vec::new());
        let value = fenced(
            "db.c",
            async || {
                look += 1;
                Ok(looks[look - 1].clone())
            },
            async |key| {
                reads.push(key);
                Ok(reads.len())
            },
        )
        .await
        .expect("fenced");
        assert_eq!((value, look), (2, 4));
        assert_eq!(reads[1], Some((doc! { "k": 1 }, false)));

        // Unsharded: one read, without a key.
        let (mut looks, mut reads) = (0, 0);
        fenced(
            "db.u",
            async || {
                looks += 1;
                Ok(None)
            },
            async |key| {
                assert!(key.is_none());
                reads += 1;
                Ok(())
            },
        )
        .await
        .expect("fenced");
        assert_eq!((looks, reads), (2, 1));

        // Always moving: bounded, with a clear error.
        let mut n = 0;
        let error = fenced(
            "db.m",
            async || {
                n += 1;
                Ok(on(&format!("s{n}")))
            },
            async |_| Ok(()),
        )
        .await
        .expect_err("gives up");
        assert!(error.to_string().contains("db.m: chunks kept moving during 3 reads"), "{error}");
    }
}
