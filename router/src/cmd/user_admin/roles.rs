//! `createRole`, `updateRole`, `dropRole`, `dropAllRolesFromDatabase`, `grantPrivilegesToRole`,
//! `revokePrivilegesFromRole`, `grantRolesToRole`, `revokeRolesFromRole` and `rolesInfo`.
//!
//! Beyond the table's check (`createRole`, `dropRole`, `grantRole`, `revokeRole` on the role's
//! database), inheriting a role needs `grantRole` on that role's database (`revokeRole` to drop
//! it); `rolesInfo` shows a role to holders of `viewRole` on its database and to users who hold
//! the role.

use bson::{Bson, Document, RawDocumentBuf, doc};
use shoal_auth::{Action, ActionSet, Target, builtin, graph};
use shoal_proto::catalog::{Role, RoleName, SecurityCatalog, SecurityCommand};

use super::{
    commit, count_reply, first_name, flag, privilege_docs, privileges, refuse_unsupported, role_docs, role_names,
};
use crate::auth::check::{self, Authority};
use crate::command::Command;
use crate::dispatch::HandlerResult;
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

const UNSUPPORTED: &[&str] = &["authenticationRestrictions"];

pub async fn create_role(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    refuse_unsupported(&body, UNSUPPORTED)?;
    let name = RoleName::new(first_name(&body, "createRole")?, cmd.db.clone());
    if !body.contains_key("privileges") {
        return Err(CommandError::bad_value("\"createRole\" command requires a \"privileges\" array"));
    }
    if !body.contains_key("roles") {
        return Err(CommandError::bad_value("\"createRole\" command requires a \"roles\" array"));
    }
    let privileges = privileges(body.get("privileges"), &cmd.db)?;
    let roles = role_names(body.get("roles"), &cmd.db, "roles")?;
    check::authority(state, conn).await?.require_on_roles(cmd, &roles, &[Action::GrantRole])?;
    commit(state, SecurityCommand::CreateRole(Role { name, privileges, roles })).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn update_role(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    refuse_unsupported(&body, UNSUPPORTED)?;
    let name = RoleName::new(first_name(&body, "updateRole")?, cmd.db.clone());
    let privileges =
        body.contains_key("privileges").then(|| privileges(body.get("privileges"), &cmd.db)).transpose()?;
    let roles = body.contains_key("roles").then(|| role_names(body.get("roles"), &cmd.db, "roles")).transpose()?;
    if privileges.is_none() && roles.is_none() {
        return Err(CommandError::bad_value("Must specify at least one field to update in updateRole"));
    }
    if let Some(roles) = &roles {
        let snapshot = state.security.get(&state.catalog).await?;
        let held = snapshot.catalog.roles.get(&name).map(|r| r.roles.clone()).unwrap_or_default();
        let authority = check::authority(state, conn).await?;
        authority.require_on_roles(cmd, &[roles.as_slice(), &held].concat(), &[Action::GrantRole])?;
        authority.require_on_roles(cmd, &held, &[Action::RevokeRole])?;
    }
    commit(state, SecurityCommand::UpdateRole { name, privileges, roles }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn drop_role(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let name = RoleName::new(first_name(&body, "dropRole")?, cmd.db.clone());
    commit(state, SecurityCommand::DropRole(name)).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn drop_all_roles_from_database(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let reply = commit(state, SecurityCommand::DropAllRolesFromDatabase(cmd.db.clone())).await?;
    count_reply(&reply)
}

pub async fn grant_privileges_to_role(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let (name, body) = named(cmd, "grantPrivilegesToRole")?;
    let privileges = privileges(body.get("privileges"), &cmd.db)?;
    commit(state, SecurityCommand::GrantPrivilegesToRole { name, privileges }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn revoke_privileges_from_role(state: &RouterState, _conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let (name, body) = named(cmd, "revokePrivilegesFromRole")?;
    let privileges = privileges(body.get("privileges"), &cmd.db)?;
    commit(state, SecurityCommand::RevokePrivilegesFromRole { name, privileges }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn grant_roles_to_role(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let (name, body) = named(cmd, "grantRolesToRole")?;
    let roles = role_names(body.get("roles"), &cmd.db, "roles")?;
    check::authority(state, conn).await?.require_on_roles(cmd, &roles, &[Action::GrantRole])?;
    commit(state, SecurityCommand::GrantRolesToRole { name, roles }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn revoke_roles_from_role(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let (name, body) = named(cmd, "revokeRolesFromRole")?;
    let roles = role_names(body.get("roles"), &cmd.db, "roles")?;
    check::authority(state, conn).await?.require_on_roles(cmd, &roles, &[Action::RevokeRole])?;
    commit(state, SecurityCommand::RevokeRolesFromRole { name, roles }).await?;
    Ok(RawDocumentBuf::new())
}

pub async fn roles_info(state: &RouterState, conn: &ConnContext, cmd: &Command) -> HandlerResult {
    let body = Document::try_from(cmd.body.as_ref())?;
    let snapshot = state.security.get(&state.catalog).await?;
    let authority = check::authority(state, conn).await?;
    let show_privileges = flag(&body, "showPrivileges");
    let refused = || check::not_authorized(&cmd.db, "rolesInfo", cmd.body.as_ref());
    let wanted: Vec<RoleName> = match body.iter().next().map(|(_, v)| v) {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(1.0)) => {
            if !may_view(&authority, &snapshot.catalog, &cmd.db, None) {
                return Err(refused());
            }
            let mut names: Vec<RoleName> = snapshot.catalog.roles.keys().filter(|r| r.db == cmd.db).cloned().collect();
            if flag(&body, "showBuiltinRoles") {
                names.extend(builtin::roles_on(&cmd.db));
            }
            names
        }
        Some(v) => {
            let names = role_names(Some(&as_array(v)), &cmd.db, "rolesInfo")?;
            for n in &names {
                if !may_view(&authority, &snapshot.catalog, &n.db, Some(n)) {
                    return Err(refused());
                }
            }
            names.into_iter().filter(|n| graph::exists(&snapshot.catalog, n)).collect()
        }
        None => return Err(CommandError::bad_value("rolesInfo needs an argument")),
    };
    let docs: Vec<Document> = wanted.iter().map(|r| role_doc(&snapshot.catalog, r, show_privileges)).collect();
    Ok(RawDocumentBuf::try_from(&doc! { "roles": docs })?)
}

/// A role as `rolesInfo` shows it.
pub fn role_doc(catalog: &SecurityCatalog, name: &RoleName, show_privileges: bool) -> Document {
    let defined = catalog.roles.get(name);
    let direct = graph::subroles(catalog, name);
    let mut d = Document::new();
    if defined.is_some() {
        d.insert("_id", name.id());
    }
    d.insert("role", &name.role);
    d.insert("db", &name.db);
    d.insert("isBuiltin", defined.is_none());
    d.insert("roles", role_docs(&direct));
    let inherited: Vec<RoleName> = graph::closure(catalog, &direct);
    d.insert("inheritedRoles", role_docs(&inherited));
    if show_privileges {
        d.insert("privileges", privilege_docs(graph::own_privileges(catalog, name).sorted()));
        d.insert("inheritedPrivileges", privilege_docs(graph::resolve(catalog, std::slice::from_ref(name)).sorted()));
    }
    d
}

/// `viewRole` on the role's database, or (for a named role) the user holds it.
fn may_view(authority: &Authority, catalog: &SecurityCatalog, db: &str, role: Option<&RoleName>) -> bool {
    if authority.allows(&Target::Database(db), ActionSet::of(&[Action::ViewRole])) {
        return true;
    }
    let (Some(role), Some(user)) = (role, authority.user()) else { return false };
    catalog.users.get(user).is_some_and(|u| graph::closure(catalog, &u.roles).contains(role))
}

fn named(cmd: &Command, command: &str) -> Result<(RoleName, Document), CommandError> {
    let body = Document::try_from(cmd.body.as_ref())?;
    Ok((RoleName::new(first_name(&body, command)?, cmd.db.clone()), body))
}

fn as_array(v: &Bson) -> Bson {
    match v {
        Bson::Array(_) => v.clone(),
        other => Bson::Array(vec![other.clone()]),
    }
}
