//! `shoal restore`: a mongodump-layout directory into a cluster through a router — collections
//! with their options, shard keys and indexes, documents in unordered batches, then roles and
//! users (with their stored credentials, so they log in with their old passwords).

use std::path::Path;

use anyhow::{Context, bail};
use bson::{Bson, Document, RawDocumentBuf, doc};
use mongodb::options::{InsertManyOptions, WriteConcern};
use shoal_cluster::config_client::{ClientSettings, ConfigClient};
use shoal_configsvr::catalog::{Command, Credentials, RoleName, ScramCredential, SecurityCommand, User, UserName};

use super::layout::{BsonReader, Metadata, paths};
use super::{INTERNAL_DATABASES, Target, connect_target};
use crate::cli::RestoreArgs;
use crate::router_client::command;

/// Documents and bytes per insert batch (well under a message's 48 MB).
const BATCH_DOCS_MAX: usize = 1000;
const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
const DUPLICATE_KEY: i32 = 11000;
/// "already exists" answers a re-run of a restore may meet: NamespaceExists, role exists.
const EXISTS: [i32; 2] = [48, 51002];

pub async fn run(args: RestoreArgs) -> anyhow::Result<()> {
    let target = connect_target(&args.target, "shoal-restore").await?;
    let mut databases = Vec::new();
    let mut entries =
        tokio::fs::read_dir(&args.dir).await.with_context(|| format!("cannot read {}", args.dir.display()))?;
    while let Some(entry) = entries.next_entry().await? {
        if entry.file_type().await?.is_dir()
            && let Some(name) = entry.file_name().to_str()
            && !INTERNAL_DATABASES.contains(&name)
            && args.db.as_deref().is_none_or(|db| db == name)
        {
            databases.push(name.to_owned());
        }
    }
    databases.sort();
    let (mut documents, mut duplicates) = (0u64, 0u64);
    for db in &databases {
        for coll in collections_in(&args.dir.join(db)).await? {
            let (inserted, dup) = restore_collection(&target.client, &args.dir, db, &coll, args.drop).await?;
            println!("  {db}.{coll}: {inserted} document(s) restored{}", duplicate_note(dup));
            documents += inserted;
            duplicates += dup;
        }
    }
    if databases.iter().any(|d| d == "admin") {
        restore_security(&target, &args.dir).await?;
    }
    println!("restored {documents} document(s) into {}{}", target.address, duplicate_note(duplicates));
    Ok(())
}

fn duplicate_note(duplicates: u64) -> String {
    if duplicates == 0 { String::new() } else { format!(" ({duplicates} already there: duplicate _id or unique key)") }
}

/// Collections of a database directory: each `<name>.metadata.json` (or `<name>.bson`), sorted,
/// without `system.*`.
async fn collections_in(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = std::collections::BTreeSet::new();
    let mut entries = tokio::fs::read_dir(dir).await?;
    while let Some(entry) = entries.next_entry().await? {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let name = file.strip_suffix(".metadata.json").or_else(|| file.strip_suffix(".bson"));
        if let Some(name) = name
            && !name.starts_with("system.")
        {
            names.insert(name.to_owned());
        }
    }
    Ok(names.into_iter().collect())
}

async fn restore_collection(
    client: &mongodb::Client,
    dir: &Path,
    db: &str,
    coll: &str,
    drop: bool,
) -> anyhow::Result<(u64, u64)> {
    let (bson_path, metadata_path) = paths(dir, db, coll)?;
    let metadata = match tokio::fs::read_to_string(&metadata_path).await {
        Ok(text) => Metadata::from_json(&text).with_context(|| format!("{}", metadata_path.display()))?,
        Err(_) => Metadata {
            collection: coll.to_owned(),
            options: doc! {},
            indexes: Vec::new(),
            uuid: None,
            shard_key: None,
            shard_key_unique: false,
        },
    };
    let database = client.database(db);
    let ns = format!("{db}.{coll}");
    if drop {
        let dropped = database.collection::<Document>(coll).drop().await;
        if let Err(e) = dropped
            && code_of(&e) != Some(26)
        {
            return Err(e).with_context(|| format!("dropping {ns}"));
        }
    }
    let mut create = doc! { "create": coll };
    create.extend(metadata.options.clone());
    allow_exists(command(&database, create).await).with_context(|| format!("creating {ns}"))?;
    if let Some(key) = &metadata.shard_key {
        let admin = client.database("admin");
        allow_exists(command(&admin, doc! { "enableSharding": db }).await)
            .with_context(|| format!("enableSharding {db}"))?;
        let shard = doc! { "shardCollection": &ns, "key": key.clone(), "unique": metadata.shard_key_unique };
        command(&admin, shard).await.with_context(|| format!("shardCollection {ns} (key {key})"))?;
    }
    let indexes: Vec<Document> = metadata
        .indexes
        .iter()
        .filter(|i| i.get_str("name").is_ok_and(|n| n != "_id_"))
        .map(|i| {
            let mut i = i.clone();
            i.remove("v");
            i.remove("ns");
            i
        })
        .collect();
    if !indexes.is_empty() {
        command(
            &database,
            doc! { "createIndexes": coll, "indexes": indexes.into_iter().map(Bson::Document).collect::<Vec<_>>() },
        )
        .await
        .with_context(|| format!("createIndexes on {ns}"))?;
    }
    if !bson_path.exists() {
        return Ok((0, 0));
    }
    insert_all(client, db, coll, &bson_path).await
}

/// Inserts every document of `path` in unordered batches at w:majority; returns (inserted,
/// already there).
async fn insert_all(client: &mongodb::Client, db: &str, coll: &str, path: &Path) -> anyhow::Result<(u64, u64)> {
    let collection = client.database(db).collection::<RawDocumentBuf>(coll);
    let options = InsertManyOptions::builder().ordered(false).write_concern(WriteConcern::majority()).build();
    let mut reader = BsonReader::open(path).await?;
    let (mut inserted, mut duplicates) = (0u64, 0u64);
    let mut batch: Vec<RawDocumentBuf> = Vec::new();
    let mut batch_bytes = 0;
    loop {
        let next = reader.next().await?;
        let flush = match &next {
            None => !batch.is_empty(),
            Some(d) => batch.len() >= BATCH_DOCS_MAX || batch_bytes + d.as_bytes().len() > BATCH_BYTES_MAX,
        };
        if flush {
            let sent = batch.len() as u64;
            match collection.insert_many(std::mem::take(&mut batch)).with_options(options.clone()).await {
                Ok(_) => inserted += sent,
                Err(e) => {
                    let dup = duplicate_count(&e).with_context(|| format!("inserting into {db}.{coll}"))?;
                    inserted += sent - dup;
                    duplicates += dup;
                }
            }
            batch_bytes = 0;
        }
        let Some(document) = next else { break };
        batch_bytes += document.as_bytes().len();
        batch.push(document);
    }
    Ok((inserted, duplicates))
}

/// The duplicate-key failures of an unordered insert; any other failure is returned as the error.
fn duplicate_count(e: &mongodb::error::Error) -> anyhow::Result<u64> {
    use mongodb::error::ErrorKind;
    if let ErrorKind::InsertMany(failure) = e.kind.as_ref() {
        let errors = failure.write_errors.as_deref().unwrap_or_default();
        if failure.write_concern_error.is_none() && !errors.is_empty() && errors.iter().all(|w| w.code == DUPLICATE_KEY)
        {
            return Ok(errors.len() as u64);
        }
    }
    bail!("{e}")
}

fn code_of(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

/// A command result where "already exists" counts as done.
fn allow_exists(result: anyhow::Result<Document>) -> anyhow::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(e) => {
            let exists =
                e.downcast_ref::<mongodb::error::Error>().and_then(code_of).is_some_and(|c| EXISTS.contains(&c))
                    || e.to_string().contains("already");
            if exists { Ok(()) } else { Err(e) }
        }
    }
}

/// Roles through the router (`createRole`), then users with their stored credentials straight
/// into the catalog, which only the cluster's own key may write: they need `-f SPEC`.
async fn restore_security(target: &Target, dir: &Path) -> anyhow::Result<()> {
    let (roles_path, _) = paths(dir, "admin", "system.roles")?;
    let mut restored_roles = 0;
    if roles_path.exists() {
        let mut reader = BsonReader::open(&roles_path).await?;
        while let Some(raw) = reader.next().await? {
            let role = Document::try_from(raw)?;
            let (Ok(name), Ok(db)) = (role.get_str("role"), role.get_str("db")) else { continue };
            let create = doc! {
                "createRole": name,
                "privileges": role.get_array("privileges").cloned().unwrap_or_default(),
                "roles": role.get_array("roles").cloned().unwrap_or_default(),
            };
            allow_exists(command(&target.client.database(db), create).await)
                .with_context(|| format!("createRole {name}@{db}"))?;
            restored_roles += 1;
        }
    }
    let (users_path, _) = paths(dir, "admin", "system.users")?;
    let mut users = Vec::new();
    if users_path.exists() {
        let mut reader = BsonReader::open(&users_path).await?;
        while let Some(raw) = reader.next().await? {
            users.push(user_of(&Document::try_from(raw)?)?);
        }
    }
    if users.is_empty() {
        println!("  roles: {restored_roles}, users: 0");
        return Ok(());
    }
    let Some(spec) = &target.spec else {
        bail!(
            "{} user(s) not restored: users keep their stored credentials, which only the cluster's own key may \
             write; run restore with -f SPEC.yaml --data-dir DIR (the spec and data dir of shoal up) or --db to skip admin",
            users.len()
        );
    };
    let config: Vec<String> =
        spec.config_servers.iter().map(|c| spec.endpoint(c.host.as_deref(), c.port).advertise).collect();
    if config.is_empty() {
        bail!("the spec has no config servers to write users to");
    }
    let client = ConfigClient::new(config, ClientSettings::default());
    let mut existing = 0;
    for user in &users {
        let written = client.write(&Command::Security(SecurityCommand::CreateUser(user.clone()))).await?;
        match written.outcome {
            Ok(_) => {}
            Err(e) if e.code() == shoal_proto::ErrorCode::Location51003 => existing += 1,
            Err(e) => bail!("restoring user {}@{}: {e}", user.name.user, user.name.db),
        }
    }
    println!("  roles: {restored_roles}, users: {} ({existing} already there)", users.len());
    Ok(())
}

/// A `system.users` document (as `usersInfo` with `showCredentials` gives it) as the catalog's user.
fn user_of(d: &Document) -> anyhow::Result<User> {
    use base64::Engine;
    let b64 = |c: &Document, f: &str| -> anyhow::Result<Vec<u8>> {
        Ok(base64::engine::general_purpose::STANDARD
            .decode(c.get_str(f).with_context(|| format!("credential without {f}"))?)?)
    };
    let scram = |name: &str| -> anyhow::Result<Option<ScramCredential>> {
        let Ok(c) = d.get_document("credentials").and_then(|c| c.get_document(name)) else { return Ok(None) };
        let iterations = c.get_i64("iterationCount").or_else(|_| c.get_i32("iterationCount").map(i64::from))?;
        Ok(Some(ScramCredential {
            iteration_count: u32::try_from(iterations)?,
            salt: b64(c, "salt")?,
            stored_key: b64(c, "storedKey")?,
            server_key: b64(c, "serverKey")?,
        }))
    };
    let roles = d
        .get_array("roles")
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(Bson::as_document)
        .filter_map(|r| {
            Some(RoleName { role: r.get_str("role").ok()?.to_owned(), db: r.get_str("db").ok()?.to_owned() })
        })
        .collect();
    let user_id = match d.get("userId") {
        Some(Bson::Binary(b)) => uuid::Uuid::from_slice(&b.bytes).unwrap_or_else(|_| uuid::Uuid::new_v4()),
        _ => uuid::Uuid::new_v4(),
    };
    let custom_data = match d.get_document("customData") {
        Ok(custom) => Some(RawDocumentBuf::try_from(custom)?.into_bytes()),
        Err(_) => None,
    };
    Ok(User {
        name: UserName { user: d.get_str("user")?.to_owned(), db: d.get_str("db")?.to_owned() },
        user_id,
        credentials: Credentials { scram_sha1: scram("SCRAM-SHA-1")?, scram_sha256: scram("SCRAM-SHA-256")? },
        roles,
        custom_data,
    })
}
