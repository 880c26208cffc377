//! `shoal restore`: a mongodump-layout directory into a cluster through a router — collections
//! with their options, shard keys and indexes, documents in unordered batches, then roles and
//! users (with their stored credentials through the router's `_shoalRestoreUser`, so they log in
//! with their old passwords).

use std::path::Path;

use anyhow::{Context, bail};
use bson::{Bson, Document, RawDocumentBuf, doc};
use mongodb::options::{InsertManyOptions, WriteConcern};

use super::bson_file::{BsonReader, existing, read_small};
use super::layout::{Metadata, paths};
use super::{INTERNAL_DATABASES, connect_target};
use crate::cli::RestoreArgs;
use crate::router_client::command;

/// Documents and bytes per insert batch (well under a message's 48 MB).
const BATCH_DOCS_MAX: usize = 1000;
const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
const DUPLICATE_KEY: i32 = 11000;
/// MongoDB's codes a re-run of a restore meets.
const NAMESPACE_EXISTS: i32 = 48;
const NAMESPACE_NOT_FOUND: i32 = 26;
const ROLE_NOT_FOUND: i32 = 31;
const ROLE_EXISTS: i32 = 51002;
const USER_EXISTS: i32 = 51003;

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
    let included = |ns: &str| args.ns_include.is_empty() || args.ns_include.iter().any(|p| ns_matches(p, ns));
    for db in &databases {
        for coll in collections_in(&args.dir.join(db)).await? {
            if !included(&format!("{db}.{coll}")) {
                continue;
            }
            let (inserted, dup) = restore_collection(&target.client, &args.dir, db, &coll, args.drop).await?;
            println!("  {db}.{coll}: {inserted} document(s) restored{}", duplicate_note(dup));
            documents += inserted;
            duplicates += dup;
        }
    }
    if databases.iter().any(|d| d == "admin") && (included("admin.system.users") || included("admin.system.roles")) {
        restore_security(&target.client, &args.dir, args.drop).await?;
    }
    println!("restored {documents} document(s) into {}{}", target.address, duplicate_note(duplicates));
    Ok(())
}

/// Whether `ns` (`db.collection`) matches an `--nsInclude` pattern, where `*` stands for any run
/// of characters (mongorestore's wildcard).
fn ns_matches(pattern: &str, ns: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = ns.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

fn duplicate_note(duplicates: u64) -> String {
    if duplicates == 0 { String::new() } else { format!(" ({duplicates} already there: duplicate _id or unique key)") }
}

/// Collections of a database directory: each `<name>.metadata.json` (or `<name>.bson`, either
/// perhaps `.gz`), sorted, without `system.*`.
async fn collections_in(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = std::collections::BTreeSet::new();
    let mut entries = tokio::fs::read_dir(dir).await?;
    while let Some(entry) = entries.next_entry().await? {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let file = file.strip_suffix(".gz").unwrap_or(file);
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
    let metadata = match read_small(&metadata_path).await? {
        Some(text) => Metadata::from_json(&text).with_context(|| format!("{}", metadata_path.display()))?,
        None => Metadata {
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
        allow_code(command(&database, doc! { "drop": coll }).await, NAMESPACE_NOT_FOUND)
            .with_context(|| format!("dropping {ns}"))?;
    }
    let mut create = doc! { "create": coll };
    create.extend(metadata.options.clone());
    allow_code(command(&database, create).await, NAMESPACE_EXISTS).with_context(|| format!("creating {ns}"))?;
    if let Some(key) = &metadata.shard_key {
        let admin = client.database("admin");
        command(&admin, doc! { "enableSharding": db }).await.with_context(|| format!("enableSharding {db}"))?;
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
    match existing(&bson_path) {
        Some(path) => insert_all(client, db, coll, &path).await,
        None => Ok((0, 0)),
    }
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
            Some(d) => {
                !batch.is_empty()
                    && (batch.len() >= BATCH_DOCS_MAX || batch_bytes + d.as_bytes().len() > BATCH_BYTES_MAX)
            }
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

/// The server's error code of a failed command.
fn error_code(e: &anyhow::Error) -> Option<i32> {
    match e.downcast_ref::<mongodb::error::Error>()?.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

/// A command result where the error `code` counts as done.
fn allow_code(result: anyhow::Result<Document>, code: i32) -> anyhow::Result<()> {
    match result {
        Err(e) if error_code(&e) != Some(code) => Err(e),
        _ => Ok(()),
    }
}

/// Roles (`createRole`, a role before the roles that inherit it), then users with their stored
/// credentials (`_shoalRestoreUser`: they log in with their old passwords), all through the
/// router. One that exists is counted as already there; `--drop` replaces it in place
/// (`updateRole`, `_shoalRestoreUser` with `replace`), never dropping it first: the user running
/// the restore may be one of them.
async fn restore_security(client: &mongodb::Client, dir: &Path, drop: bool) -> anyhow::Result<()> {
    let (roles_path, _) = paths(dir, "admin", "system.roles")?;
    let mut pending = Vec::new();
    if let Some(found) = existing(&roles_path) {
        let mut reader = BsonReader::open(&found).await?;
        while let Some(raw) = reader.next().await? {
            pending.push(Document::try_from(raw)?);
        }
    }
    let (mut roles, mut roles_there) = (0u64, 0u64);
    // Each pass creates the roles whose inherited roles exist; a pass that creates none ends it.
    while !pending.is_empty() {
        let before = pending.len();
        let mut waiting = Vec::new();
        let mut last_error = None;
        for role in std::mem::take(&mut pending) {
            let (Ok(name), Ok(db)) = (role.get_str("role"), role.get_str("db")) else {
                bail!("{}: a role without \"role\" and \"db\": {role}", roles_path.display());
            };
            let database = client.database(db);
            let privileges = role.get_array("privileges").cloned().unwrap_or_default();
            let inherited = role.get_array("roles").cloned().unwrap_or_default();
            let create = doc! { "createRole": name, "privileges": privileges.clone(), "roles": inherited.clone() };
            match command(&database, create).await {
                Ok(_) => roles += 1,
                Err(e) if error_code(&e) == Some(ROLE_EXISTS) && drop => {
                    let update = doc! { "updateRole": name, "privileges": privileges, "roles": inherited };
                    command(&database, update).await.with_context(|| format!("updateRole {name}@{db}"))?;
                    roles += 1;
                }
                Err(e) if error_code(&e) == Some(ROLE_EXISTS) => roles_there += 1,
                Err(e) if error_code(&e) == Some(ROLE_NOT_FOUND) => {
                    last_error = Some(format!("createRole {name}@{db}: {e:#}"));
                    waiting.push(role.clone());
                }
                Err(e) => return Err(e).with_context(|| format!("createRole {name}@{db}")),
            }
        }
        if waiting.len() == before {
            bail!(
                "{} role(s) inherit roles that neither exist nor are in the dump ({})",
                before,
                last_error.unwrap_or_default()
            );
        }
        pending = waiting;
    }

    let (users_path, _) = paths(dir, "admin", "system.users")?;
    let (mut users, mut users_there) = (0u64, 0u64);
    if let Some(found) = existing(&users_path) {
        let mut reader = BsonReader::open(&found).await?;
        while let Some(raw) = reader.next().await? {
            let user = Document::try_from(raw)?;
            let (Ok(name), Ok(db)) = (user.get_str("user"), user.get_str("db")) else {
                bail!("{}: a user without \"user\" and \"db\": {user}", users_path.display());
            };
            let mut restore = doc! { "_shoalRestoreUser": name, "replace": drop };
            for field in ["userId", "credentials", "roles", "customData"] {
                if let Some(value) = user.get(field) {
                    restore.insert(field, value.clone());
                }
            }
            match command(&client.database(db), restore).await {
                Ok(_) => users += 1,
                Err(e) if error_code(&e) == Some(USER_EXISTS) => users_there += 1,
                Err(e) => return Err(e).with_context(|| format!("restoring user {name}@{db}")),
            }
        }
    }
    println!("  roles: {roles}{}, users: {users}{}", there_note(roles_there), there_note(users_there));
    Ok(())
}

fn there_note(n: u64) -> String {
    if n == 0 { String::new() } else { format!(" ({n} already there)") }
}

#[cfg(test)]
mod tests {
    use super::ns_matches;

    #[test]
    fn ns_include_patterns_match_as_mongorestore_s() {
        assert!(ns_matches("shop.orders", "shop.orders"));
        assert!(!ns_matches("shop.orders", "shop.orders2"));
        assert!(ns_matches("shop.*", "shop.orders") && !ns_matches("shop.*", "crm.leads"));
        assert!(ns_matches("*.leads", "crm.leads") && !ns_matches("*.leads", "crm.leads2"));
        assert!(ns_matches("s*p.*rd*", "shop.orders"));
        assert!(ns_matches("*", "anything.at_all"));
        assert!(!ns_matches("ab*ba", "aba"), "the two ends may not overlap");
    }
}
