//! User and role management commands (`createUser` ... `rolesInfo`, and Shoal's
//! `_shoalRestoreUser` for `shoal restore`), in MongoDB's shapes: the
//! arguments they parse, the documents they answer, and the one way they change the catalog
//! ([`commit`]: the config service applies the change; this router re-reads users and roles before
//! answering, so the client's next command sees it).
//!
//! Files: [`users`] (users), [`roles`] (user-defined roles), this file (what both parse and show).
//!
//! Must not: keep a password past deriving its credentials, or show credentials unless asked
//! (`showCredentials`).

pub mod roles;
pub mod users;

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_auth::ActionSet;
use shoal_auth::resource::namespace;
use shoal_auth::scram::Mechanism;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{
    Command, Credentials, Privilege, Reply, Resource, RoleName, ScramCredential, SecurityCommand,
};

use crate::error::CommandError;
use crate::state::RouterState;

/// Commits a user or role change and waits until this router's cache holds it.
pub(crate) async fn commit(state: &RouterState, change: SecurityCommand) -> Result<Reply, CommandError> {
    let reply = state.catalog.write(&Command::Security(change)).await?;
    state.security.reload(&state.catalog, 0).await?;
    Ok(reply)
}

/// The documents of `admin.system.users` (credentials redacted to each mechanism's iteration
/// count and salt, never its keys) or `admin.system.roles`, from this router's copy.
pub(crate) async fn system_documents(state: &RouterState, coll: &str) -> Result<Vec<Document>, CommandError> {
    let snapshot = state.security.get(&state.catalog).await?;
    let catalog = &snapshot.catalog;
    Ok(match coll {
        "system.users" => catalog
            .users
            .values()
            .map(|u| users::user_doc(catalog, u, Shown::Redacted, false))
            .collect(),
        "system.roles" => catalog
            .roles
            .values()
            .map(|r| {
                let privileges: Vec<Bson> = r
                    .privileges
                    .iter()
                    .map(|p| Bson::Document(doc! { "resource": resource_doc(&p.resource), "actions": p.actions.clone() }))
                    .collect();
                doc! { "_id": r.name.id(), "role": &r.name.role, "db": &r.name.db, "privileges": privileges, "roles": role_docs(&r.roles) }
            })
            .collect(),
        _ => Vec::new(),
    })
}

/// `{n}` of a `dropAll...FromDatabase` reply.
pub(crate) fn count_reply(reply: &Reply) -> Result<RawDocumentBuf, CommandError> {
    let n = match reply {
        Reply::Count(n) => *n,
        _ => 0,
    };
    Ok(RawDocumentBuf::try_from(&doc! { "n": i64::try_from(n).unwrap_or(i64::MAX) })?)
}

/// The name a command's first field gives (`{createUser: "alice"}`).
pub(crate) fn first_name(body: &Document, command: &str) -> Result<String, CommandError> {
    match body.iter().next() {
        Some((_, Bson::String(s))) if !s.is_empty() => Ok(s.clone()),
        Some((_, Bson::String(_))) => Err(CommandError::bad_value(format!("{command} needs a non-empty name"))),
        _ => Err(CommandError::type_mismatch(format!("{command} needs a name (a string) as its first field"))),
    }
}

/// Role names as MongoDB accepts them: `"read"` (on `db`) or `{role: "read", db: "app"}`.
pub(crate) fn role_names(value: Option<&Bson>, db: &str, field: &str) -> Result<Vec<RoleName>, CommandError> {
    let Some(Bson::Array(items)) = value else {
        return Err(CommandError::bad_value(format!("\"{field}\" must be an array of role names")));
    };
    items
        .iter()
        .map(|item| match item {
            Bson::String(role) if !role.is_empty() => Ok(RoleName::new(role.clone(), db)),
            Bson::Document(d) => match (d.get_str("role"), d.get_str("db")) {
                (Ok(role), Ok(db)) if !role.is_empty() && !db.is_empty() => Ok(RoleName::new(role, db)),
                _ => Err(CommandError::bad_value("Role documents need non-empty \"role\" and \"db\" strings")),
            },
            _ => Err(CommandError::bad_value("Role names must be either strings or objects")),
        })
        .collect()
}

pub(crate) fn role_doc(r: &RoleName) -> Document {
    doc! { "role": &r.role, "db": &r.db }
}

pub(crate) fn role_docs(roles: &[RoleName]) -> Vec<Bson> {
    roles.iter().map(|r| Bson::Document(role_doc(r))).collect()
}

/// Privileges as MongoDB's `createRole` takes them; a role on a database other than `admin` may
/// only hold privileges on that database.
pub(crate) fn privileges(value: Option<&Bson>, role_db: &str) -> Result<Vec<Privilege>, CommandError> {
    let Some(Bson::Array(items)) = value else {
        return Err(CommandError::bad_value("\"privileges\" must be an array of privilege documents"));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Bson::Document(p) = item else {
            return Err(CommandError::bad_value("Each privilege must be a document"));
        };
        let resource = match p.get("resource") {
            Some(Bson::Document(r)) => resource(r)?,
            _ => return Err(CommandError::bad_value("A privilege needs a \"resource\" document")),
        };
        if role_db != "admin" && !matches!(&resource, Resource::Namespace { db, .. } if db == role_db) {
            return Err(CommandError::bad_value(format!(
                "Roles on the '{role_db}' database cannot be granted privileges that target other databases or the cluster"
            )));
        }
        let Some(Bson::Array(actions)) = p.get("actions") else {
            return Err(CommandError::bad_value("A privilege needs an \"actions\" array"));
        };
        let names: Vec<&str> = actions.iter().filter_map(Bson::as_str).collect();
        if names.len() != actions.len() {
            return Err(CommandError::bad_value("Privilege actions must be strings"));
        }
        let set = ActionSet::from_names(names.iter().copied())
            .map_err(|bad| CommandError::bad_value(format!("Unrecognized action privilege string: {bad}")))?;
        out.push(Privilege { resource, actions: set.names().into_iter().map(str::to_owned).collect() });
    }
    Ok(out)
}

/// A resource document: `{db, collection}`, `{cluster: true}`, `{anyResource: true}` or
/// `{db, system_buckets}`.
fn resource(r: &Document) -> Result<Resource, CommandError> {
    let bad = || CommandError::bad_value(format!("Invalid resource document: {r}"));
    if r.get_bool("cluster").is_ok_and(|b| b) && r.len() == 1 {
        return Ok(Resource::Cluster);
    }
    if r.get_bool("anyResource").is_ok_and(|b| b) && r.len() == 1 {
        return Ok(Resource::AnyResource);
    }
    let db = r.get_str("db").map_err(|_| bad())?;
    if r.len() == 2
        && let Ok(_) = r.get_str("system_buckets")
    {
        return Ok(Resource::SystemBuckets { db: db.to_owned() });
    }
    match (r.get_str("collection"), r.len()) {
        (Ok(collection), 2) => Ok(namespace(db, collection)),
        _ => Err(bad()),
    }
}

pub(crate) fn resource_doc(r: &Resource) -> Document {
    match r {
        Resource::Cluster => doc! { "cluster": true },
        Resource::AnyResource => doc! { "anyResource": true },
        Resource::Namespace { db, collection } => doc! { "db": db, "collection": collection },
        Resource::SystemBuckets { db } => doc! { "db": db, "system_buckets": "" },
    }
}

pub(crate) fn privilege_docs(privileges: impl IntoIterator<Item = (Resource, ActionSet)>) -> Vec<Bson> {
    privileges
        .into_iter()
        .map(|(r, a)| Bson::Document(doc! { "resource": resource_doc(&r), "actions": a.names() }))
        .collect()
}

/// A stored credential as `usersInfo` shows it with `showCredentials`.
/// How much of a user's credentials a document shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shown {
    /// No `credentials` field (`usersInfo` by default).
    No,
    /// Each mechanism's iteration count and salt, not its keys (`admin.system.users`).
    Redacted,
    /// Everything the server keeps (`usersInfo` with `showCredentials`).
    Full,
}

/// A stored credential as a `credentials.<mechanism>` document.
pub(crate) fn credential_doc(c: &ScramCredential, shown: Shown) -> Document {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut d = doc! { "iterationCount": i64::from(c.iteration_count), "salt": b64(&c.salt) };
    if shown == Shown::Full {
        d.insert("storedKey", b64(&c.stored_key));
        d.insert("serverKey", b64(&c.server_key));
    }
    d
}

/// Stored credentials as `usersInfo` with `showCredentials` shows them (`{SCRAM-SHA-1: {...},
/// SCRAM-SHA-256: {...}}`, the `credentials` of a dumped `admin.system.users` document): the
/// inverse of [`credential_doc`] with [`Shown::Full`]. Keys of the wrong size for their
/// mechanism, unknown mechanisms and missing fields are refused.
pub(crate) fn stored_credentials(d: &Document) -> Result<Credentials, CommandError> {
    use base64::Engine;
    let mut out = Credentials::default();
    for (name, value) in d {
        // `external: true` marks an $external user, which keeps no secret.
        if name == "external" {
            continue;
        }
        let (Some(mechanism), Bson::Document(c)) = (Mechanism::from_name(name), value) else {
            return Err(CommandError::bad_value(format!(
                "unknown credential \"{name}\" (SCRAM-SHA-1 or SCRAM-SHA-256)"
            )));
        };
        let bytes = |field: &str| -> Result<Vec<u8>, CommandError> {
            let text = c.get_str(field).map_err(|_| {
                CommandError::bad_value(format!("credentials.{name} needs a base64 \"{field}\" string"))
            })?;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| CommandError::bad_value(format!("credentials.{name}.{field} is not base64: {e}")))
        };
        let iterations = match c.get("iterationCount") {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            _ => {
                return Err(CommandError::bad_value(format!("credentials.{name} needs an integer \"iterationCount\"")));
            }
        };
        let iteration_count = u32::try_from(iterations)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| CommandError::bad_value(format!("credentials.{name}.iterationCount must be positive")))?;
        let credential = ScramCredential {
            iteration_count,
            salt: bytes("salt")?,
            stored_key: bytes("storedKey")?,
            server_key: bytes("serverKey")?,
        };
        let digest = match mechanism {
            Mechanism::ScramSha1 => 20,
            Mechanism::ScramSha256 => 32,
        };
        if credential.salt.is_empty() || credential.stored_key.len() != digest || credential.server_key.len() != digest
        {
            return Err(CommandError::bad_value(format!(
                "credentials.{name}: a salt and {digest}-byte storedKey and serverKey are needed"
            )));
        }
        match mechanism {
            Mechanism::ScramSha1 => out.scram_sha1 = Some(credential),
            Mechanism::ScramSha256 => out.scram_sha256 = Some(credential),
        }
    }
    Ok(out)
}

/// A true boolean-ish option (`showPrivileges: true`, `1`).
pub(crate) fn flag(body: &Document, field: &str) -> bool {
    match body.get(field) {
        Some(Bson::Boolean(b)) => *b,
        Some(Bson::Int32(n)) => *n != 0,
        Some(Bson::Int64(n)) => *n != 0,
        Some(Bson::Double(n)) => *n != 0.0,
        _ => false,
    }
}

/// Refuses options this router does not implement rather than ignoring them.
pub(crate) fn refuse_unsupported(body: &Document, fields: &[&str]) -> Result<(), CommandError> {
    for field in fields {
        if body.contains_key(field) {
            return Err(CommandError::new(ErrorCode::NotImplemented, format!("\"{field}\" is not supported")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_take_strings_and_documents() {
        let roles = bson::bson!(["read", { "role": "clusterMonitor", "db": "admin" }]);
        assert_eq!(
            role_names(Some(&roles), "app", "roles").unwrap(),
            [RoleName::new("read", "app"), RoleName::new("clusterMonitor", "admin")]
        );
        assert!(role_names(Some(&bson::bson!([1])), "app", "roles").is_err());
        assert!(role_names(None, "app", "roles").is_err());
    }

    #[test]
    fn stored_credentials_read_back_what_show_credentials_shows() {
        let sha1 = ScramCredential {
            iteration_count: 10000,
            salt: vec![1; 16],
            stored_key: vec![2; 20],
            server_key: vec![3; 20],
        };
        let sha256 = ScramCredential {
            iteration_count: 15000,
            salt: vec![4; 28],
            stored_key: vec![5; 32],
            server_key: vec![6; 32],
        };
        let shown = doc! {
            "SCRAM-SHA-1": credential_doc(&sha1, Shown::Full),
            "SCRAM-SHA-256": credential_doc(&sha256, Shown::Full),
        };
        let read = stored_credentials(&shown).unwrap();
        assert_eq!((read.scram_sha1, read.scram_sha256), (Some(sha1.clone()), Some(sha256)));
        // What admin.system.users shows (no keys), a key of the wrong size, an unknown mechanism.
        assert!(stored_credentials(&doc! { "SCRAM-SHA-1": credential_doc(&sha1, Shown::Redacted) }).is_err());
        let mut short = credential_doc(&sha1, Shown::Full);
        short.insert("storedKey", "AAAA");
        assert!(stored_credentials(&doc! { "SCRAM-SHA-1": short }).is_err());
        assert!(stored_credentials(&doc! { "MONGODB-CR": { "iterationCount": 1 } }).is_err());
        assert_eq!(stored_credentials(&doc! { "external": true }).unwrap(), Credentials::default());
    }

    #[test]
    fn privileges_parse_and_stay_in_their_database() {
        let p = bson::bson!([{ "resource": { "db": "app", "collection": "logs" }, "actions": ["insert", "find"] }]);
        let parsed = privileges(Some(&p), "app").unwrap();
        assert_eq!(parsed[0].actions, ["find", "insert"]);
        let cluster = bson::bson!([{ "resource": { "cluster": true }, "actions": ["serverStatus"] }]);
        assert!(privileges(Some(&cluster), "app").is_err());
        assert_eq!(privileges(Some(&cluster), "admin").unwrap()[0].resource, Resource::Cluster);
        let bogus = bson::bson!([{ "resource": { "db": "app", "collection": "" }, "actions": ["fly"] }]);
        assert_eq!(privileges(Some(&bogus), "app").unwrap_err().errmsg, "Unrecognized action privilege string: fly");
        let other = bson::bson!([{ "resource": { "db": "other", "collection": "" }, "actions": ["find"] }]);
        assert!(privileges(Some(&other), "app").is_err());
    }
}
