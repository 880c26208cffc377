//! `createUser`, `updateUser`, `dropUser`, `dropAllUsersFromDatabase`, `grantRolesToUser`,
//! `revokeRolesFromUser`, `usersInfo`, and `_shoalRestoreUser` (a dumped user with its stored
//! credentials).
//!
//! Beyond the table's check (`createUser`/`dropUser` on the database), granting a role needs
//! `grantRole` on the role's database and revoking one `revokeRole`; a password change needs
//! `changePassword` (or `changeOwnPassword` for oneself), `customData` likewise; `usersInfo` shows
//! a user to holders of `viewUser` on its database, and always to the user itself.

use bson::{Binary, Bson, Document, RawDocumentBuf, doc};
use shoal_auth::scram::{self, Mechanism};
use shoal_auth::{Action, ActionSet, Target, graph};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Credentials, RoleName, SecurityCommand, User, UserName};

use super::{
    Shown, commit, count_reply, credential_doc, first_name, flag, privilege_docs, refuse_unsupported, role_docs,
    role_names, stored_credentials,
};
use crate::auth::check::{self, Authority};
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// Options MongoDB has that this router refuses instead of ignoring.
const UNSUPPORTED: &[&str] = &["authenticationRestrictions"];

pub async fn create_user(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    refuse_unsupported(&body, UNSUPPORTED)?;
    let name = UserName::new(first_name(&body, "createUser")?, cmd.db.clone());
    if !body.contains_key("roles") {
        return Err(CommandError::bad_value("\"createUser\" command requires a \"roles\" array"));
    }
    let roles = role_names(body.get("roles"), &cmd.db, "roles")?;
    check::authority(state, conn).await?.require_on_roles(cmd, &roles, &[Action::GrantRole])?;
    let mechanisms = mechanisms(&body, &cmd.db)?;
    let credentials = match (password(&body)?, cmd.db.as_str()) {
        (None, "$external") => Credentials::default(),
        (None, _) => {
            return Err(CommandError::bad_value(
                "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db",
            ));
        }
        (Some(_), "$external") => {
            return Err(CommandError::bad_value("Cannot set passwords for users on the $external database"));
        }
        (Some(pwd), _) => derive(&name.user, pwd, &mechanisms).await?,
    };
    let user = User { name, user_id: uuid::Uuid::new_v4(), credentials, roles, custom_data: custom_data(&body)? };
    commit(state, SecurityCommand::CreateUser(user)).await?;
    Ok(RawDocumentBuf::new())
}

/// `_shoalRestoreUser` (Shoal's own, for `shoal restore`): creates a user from a dumped
/// `admin.system.users` document — its `userId`, `roles`, `customData` and the stored
/// `credentials` `usersInfo` shows with `showCredentials` — so it logs in with its old password.
/// It takes what `createUser` takes (the action on the database, `grantRole` on each role); the
/// stored keys give no more than a password would. MongoDB's tools do this with
/// `_mergeAuthzCollections` over temporary collections instead. A user that exists is refused
/// (51003), as `createUser` refuses it, unless `replace: true` (`shoal restore --drop`): then its
/// credentials, roles and custom data become the dumped ones in one change (never dropped first,
/// so a restore authenticated as that user keeps working), which also takes `dropUser` on the
/// database and `revokeRole` on the roles it held.
pub async fn restore_user(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let name = UserName::new(first_name(&body, "_shoalRestoreUser")?, cmd.db.clone());
    let roles = role_names(body.get("roles"), &cmd.db, "roles")?;
    let authority = check::authority(state, conn).await?;
    authority.require_on_roles(cmd, &roles, &[Action::GrantRole])?;
    let credentials = match body.get("credentials") {
        Some(Bson::Document(c)) => stored_credentials(c)?,
        None => Credentials::default(),
        Some(_) => return Err(CommandError::type_mismatch("\"credentials\" must be an object")),
    };
    let secretless = credentials.scram_sha1.is_none() && credentials.scram_sha256.is_none();
    if secretless != (cmd.db == "$external") {
        return Err(CommandError::bad_value(
            "a user needs stored SCRAM credentials (usersInfo with showCredentials), except on $external, which keeps none",
        ));
    }
    let user_id = match body.get("userId") {
        None => uuid::Uuid::new_v4(),
        Some(Bson::Binary(b)) if b.subtype == bson::spec::BinarySubtype::Uuid => uuid::Uuid::from_slice(&b.bytes)
            .map_err(|e| CommandError::bad_value(format!("\"userId\" is not a UUID: {e}")))?,
        Some(_) => return Err(CommandError::type_mismatch("\"userId\" must be a UUID")),
    };
    let custom_data = custom_data(&body)?;
    if flag(&body, "replace") {
        let snapshot = state.security.get(&state.catalog).await?;
        if let Some(existing) = snapshot.user(&name) {
            authority.require(cmd, &Target::Database(&cmd.db), &[Action::DropUser])?;
            authority.require_on_roles(cmd, &existing.roles, &[Action::RevokeRole])?;
            let change = SecurityCommand::UpdateUser {
                name,
                credentials: Some(credentials),
                roles: Some(roles),
                custom_data: Some(custom_data),
            };
            commit(state, change).await?;
            return Ok(RawDocumentBuf::new());
        }
    }
    let user = User { name, user_id, credentials, roles, custom_data };
    commit(state, SecurityCommand::CreateUser(user)).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn update_user(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    refuse_unsupported(&body, UNSUPPORTED)?;
    let name = UserName::new(first_name(&body, "updateUser")?, cmd.db.clone());
    let pwd = password(&body)?;
    let custom = body.contains_key("customData").then(|| custom_data(&body)).transpose()?;
    let roles = body.contains_key("roles").then(|| role_names(body.get("roles"), &cmd.db, "roles")).transpose()?;
    let asked_mechanisms = body.contains_key("mechanisms").then(|| mechanisms(&body, &cmd.db)).transpose()?;
    if pwd.is_none() && custom.is_none() && roles.is_none() && asked_mechanisms.is_none() {
        return Err(CommandError::bad_value("Must specify at least one field to update in updateUser"));
    }
    let snapshot = state.security.get(&state.catalog).await?;
    let existing = snapshot.user(&name).ok_or_else(|| user_not_found(&name))?.clone();
    let authority = check::authority(state, conn).await?;
    let myself = authority.user() == Some(&name);
    let db = Target::Database(&cmd.db);
    // Oneself may also change one's own password or custom data with the `changeOwn*` actions.
    let require = |action: Action, own: Action| {
        if myself && authority.allows(&db, ActionSet::of(&[own])) {
            Ok(())
        } else {
            authority.require(cmd, &db, &[action])
        }
    };
    if pwd.is_some() {
        require(Action::ChangePassword, Action::ChangeOwnPassword)?;
    }
    if custom.is_some() {
        require(Action::ChangeCustomData, Action::ChangeOwnCustomData)?;
    }
    if let Some(roles) = &roles {
        let touched = [roles.as_slice(), &existing.roles].concat();
        authority.require_on_roles(cmd, &touched, &[Action::GrantRole, Action::RevokeRole])?;
    }
    let credentials = match (pwd, asked_mechanisms) {
        (Some(pwd), mechs) => {
            let mechs = mechs.unwrap_or_else(|| held_mechanisms(&existing.credentials));
            Some(derive(&name.user, pwd, &mechs).await?)
        }
        (None, Some(mechs)) => Some(narrowed(&existing.credentials, &mechs)?),
        (None, None) => None,
    };
    commit(state, SecurityCommand::UpdateUser { name, credentials, roles, custom_data: custom }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn drop_user(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let name = UserName::new(first_name(&body, "dropUser")?, cmd.db.clone());
    commit(state, SecurityCommand::DropUser(name)).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn drop_all_users_from_database(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let reply = commit(state, SecurityCommand::DropAllUsersFromDatabase(cmd.db.clone())).await?;
    count_reply(&reply)
}

pub async fn grant_roles_to_user(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let (name, roles) = name_and_roles(cmd, "grantRolesToUser")?;
    check::authority(state, conn).await?.require_on_roles(cmd, &roles, &[Action::GrantRole])?;
    commit(state, SecurityCommand::GrantRolesToUser { name, roles }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn revoke_roles_from_user(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let (name, roles) = name_and_roles(cmd, "revokeRolesFromUser")?;
    check::authority(state, conn).await?.require_on_roles(cmd, &roles, &[Action::RevokeRole])?;
    commit(state, SecurityCommand::RevokeRolesFromUser { name, roles }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn users_info(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let snapshot = state.security.get(&state.catalog).await?;
    let authority = check::authority(state, conn).await?;
    let wanted: Vec<&User> = match body.iter().next().map(|(_, v)| v) {
        Some(Bson::Document(d)) if d.get_bool("forAllDBs").is_ok_and(|b| b) => {
            if !authority.allows(&Target::Cluster, ActionSet::of(&[Action::ViewUser])) {
                return Err(check::not_authorized(&cmd.db, "usersInfo", cmd.body.as_ref()));
            }
            snapshot.catalog.users.values().collect()
        }
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(1.0)) => {
            may_view(&authority, &cmd.db, None)
                .then_some(())
                .ok_or_else(|| check::not_authorized(&cmd.db, "usersInfo", cmd.body.as_ref()))?;
            snapshot.catalog.users.values().filter(|u| u.name.db == cmd.db).collect()
        }
        Some(v) => {
            let names = user_names(v, &cmd.db)?;
            for n in &names {
                if !may_view(&authority, &n.db, Some(n)) {
                    return Err(check::not_authorized(&cmd.db, "usersInfo", cmd.body.as_ref()));
                }
            }
            names.iter().filter_map(|n| snapshot.user(n)).collect()
        }
        None => return Err(CommandError::bad_value("usersInfo needs an argument")),
    };
    let filter = match body.get("filter") {
        Some(Bson::Document(f)) => Some(shoal_query::filter::Filter::parse(f)?),
        Some(_) => return Err(CommandError::type_mismatch("usersInfo's filter must be a document")),
        None => None,
    };
    let mut docs: Vec<Document> = wanted
        .into_iter()
        .map(|u| {
            let credentials = if flag(&body, "showCredentials") { Shown::Full } else { Shown::No };
            user_doc(&snapshot.catalog, u, credentials, flag(&body, "showPrivileges"))
        })
        .filter(|d| filter.as_ref().is_none_or(|f| f.matches(d)))
        .collect();
    docs.sort_by(|a, b| a.get_str("_id").unwrap_or_default().cmp(b.get_str("_id").unwrap_or_default()));
    Ok(RawDocumentBuf::try_from(&doc! { "users": docs })?)
}

/// A user as `usersInfo` (and `admin.system.users` through this router) shows it.
pub(crate) fn user_doc(
    catalog: &shoal_proto::catalog::SecurityCatalog,
    u: &User,
    credentials: Shown,
    privileges: bool,
) -> Document {
    let mut d = doc! {
        "_id": u.name.id(),
        "userId": Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: u.user_id.as_bytes().to_vec() },
        "user": &u.name.user,
        "db": &u.name.db,
    };
    if let Some(custom) = u.custom_data.as_deref().and_then(|b| Document::from_reader(b).ok()) {
        d.insert("customData", custom);
    }
    d.insert("roles", role_docs(&u.roles));
    if credentials != Shown::No {
        let mut c = Document::new();
        if let Some(s) = &u.credentials.scram_sha1 {
            c.insert(Mechanism::ScramSha1.name(), credential_doc(s, credentials));
        }
        if let Some(s) = &u.credentials.scram_sha256 {
            c.insert(Mechanism::ScramSha256.name(), credential_doc(s, credentials));
        }
        d.insert("credentials", c);
    }
    d.insert("mechanisms", u.credentials.mechanisms());
    if privileges {
        let inherited: Vec<RoleName> = graph::closure(catalog, &u.roles);
        d.insert("inheritedRoles", role_docs(&inherited));
        d.insert("inheritedPrivileges", privilege_docs(graph::resolve(catalog, &u.roles).sorted()));
    }
    d
}

fn may_view(authority: &Authority, db: &str, user: Option<&UserName>) -> bool {
    authority.allows(&Target::Database(db), ActionSet::of(&[Action::ViewUser]))
        || (user.is_some() && authority.user() == user)
}

fn name_and_roles(cmd: &Command, command: &str) -> Result<(UserName, Vec<RoleName>), CommandError> {
    let body = Document::try_from(cmd.body.as_ref())?;
    let name = UserName::new(first_name(&body, command)?, cmd.db.clone());
    Ok((name, role_names(body.get("roles"), &cmd.db, "roles")?))
}

/// `usersInfo`'s argument: `"name"`, `{user, db}`, or an array of them.
fn user_names(value: &Bson, db: &str) -> Result<Vec<UserName>, CommandError> {
    let one = |v: &Bson| match v {
        Bson::String(u) => Ok(UserName::new(u.clone(), db)),
        Bson::Document(d) => match (d.get_str("user"), d.get_str("db")) {
            (Ok(u), Ok(d)) => Ok(UserName::new(u, d)),
            _ => Err(CommandError::bad_value("User documents need \"user\" and \"db\" strings")),
        },
        _ => Err(CommandError::bad_value("User names must be either strings or objects")),
    };
    match value {
        Bson::Array(items) => items.iter().map(one).collect(),
        v => Ok(vec![one(v)?]),
    }
}

fn password(body: &Document) -> Result<Option<&str>, CommandError> {
    match body.get("pwd") {
        None => Ok(None),
        Some(Bson::String(p)) if p.is_empty() => Err(CommandError::bad_value("User passwords must not be empty")),
        Some(Bson::String(p)) => {
            if body.get("passwordDigestor").and_then(Bson::as_str).is_some_and(|d| d != "server")
                || body.get_bool("digestPassword").is_ok_and(|b| !b)
            {
                return Err(CommandError::new(
                    ErrorCode::NotImplemented,
                    "only server-side password digesting (passwordDigestor: \"server\") is supported",
                ));
            }
            Ok(Some(p))
        }
        Some(_) => Err(CommandError::type_mismatch("\"pwd\" must be a string")),
    }
}

fn custom_data(body: &Document) -> Result<Option<Vec<u8>>, CommandError> {
    match body.get("customData") {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d.to_vec().map_err(|e| CommandError::bad_value(e.to_string()))?)),
        Some(_) => Err(CommandError::type_mismatch("\"customData\" must be an object")),
    }
}

/// `mechanisms`, default both SCRAM mechanisms.
fn mechanisms(body: &Document, db: &str) -> Result<Vec<Mechanism>, CommandError> {
    let Some(value) = body.get("mechanisms") else { return Ok(Mechanism::ALL.to_vec()) };
    let Bson::Array(items) = value else {
        return Err(CommandError::type_mismatch("\"mechanisms\" must be an array of strings"));
    };
    if items.is_empty() {
        return Err(CommandError::bad_value("mechanisms field must not be empty"));
    }
    let mut out = Vec::new();
    for item in items {
        let name = item.as_str().ok_or_else(|| CommandError::type_mismatch("mechanisms must be strings"))?;
        let m = Mechanism::from_name(name)
            .ok_or_else(|| CommandError::bad_value(format!("Unknown auth mechanism '{name}'")))?;
        if db == "$external" {
            return Err(CommandError::bad_value(format!("{name} is not supported for users on $external")));
        }
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

fn held_mechanisms(c: &Credentials) -> Vec<Mechanism> {
    let held: Vec<Mechanism> = c.mechanisms().iter().filter_map(|m| Mechanism::from_name(m)).collect();
    if held.is_empty() { Mechanism::ALL.to_vec() } else { held }
}

/// The credentials limited to `mechanisms` (which must all be held already).
fn narrowed(c: &Credentials, mechanisms: &[Mechanism]) -> Result<Credentials, CommandError> {
    let mut out = Credentials::default();
    for m in mechanisms {
        match m {
            Mechanism::ScramSha1 => out.scram_sha1 = c.scram_sha1.clone(),
            Mechanism::ScramSha256 => out.scram_sha256 = c.scram_sha256.clone(),
        }
    }
    if out.mechanisms().len() != mechanisms.len() {
        return Err(CommandError::bad_value("mechanisms field must be a subset of previously set mechanisms"));
    }
    Ok(out)
}

/// Salted credentials for each mechanism (PBKDF2 is deliberately slow: off the runtime).
async fn derive(user: &str, pwd: &str, mechanisms: &[Mechanism]) -> Result<Credentials, CommandError> {
    let (user, pwd, mechanisms) = (user.to_owned(), pwd.to_owned(), mechanisms.to_vec());
    tokio::task::spawn_blocking(move || {
        let mut out = Credentials::default();
        for m in mechanisms {
            let c = scram::derive(m, &user, &pwd, m.default_iterations())
                .map_err(|e| CommandError::bad_value(e.to_string()))?;
            match m {
                Mechanism::ScramSha1 => out.scram_sha1 = Some(c),
                Mechanism::ScramSha256 => out.scram_sha256 = Some(c),
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| CommandError::new(ErrorCode::InternalError, format!("deriving credentials: {e}")))?
}

fn user_not_found(name: &UserName) -> CommandError {
    CommandError::new(ErrorCode::UserNotFound, format!("Could not find user \"{}\" for db \"{}\"", name.user, name.db))
}
