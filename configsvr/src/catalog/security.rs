//! Users and roles (`Command::Security`): the one place they change, so every router sees the
//! same users, and a role graph change is checked (granted roles exist, no role inherits itself)
//! atomically with the change itself.
//!
//! Invariants: every role a user or role is granted existed when it was granted, and dropping a
//! role removes it from every grant; user-defined roles never inherit themselves; built-in roles
//! are never stored. The security catalog's own version grows by one per effective change (the
//! watch stream publishes it, so routers reload users and roles only when they changed).
//!
//! Must not: see a password (routers derive the credentials), or log a change in the changelog
//! (it would carry user names and credentials into a collection many roles may read).

use shoal_auth::{builtin, graph};
use shoal_proto::catalog::{Privilege, Role, RoleName, SecurityCatalog, SecurityCommand, User, UserName};

use super::{CatalogError, ClusterCatalog, Outcome, Reply};

/// Users the cluster may hold.
pub const USERS_MAX: usize = 100_000;
/// User-defined roles the cluster may hold.
pub const ROLES_MAX: usize = 100_000;
/// Roles one user or role may be granted, and privileges one role may hold.
pub const GRANTS_MAX: usize = 1_000;
/// Longest user, role or database name.
pub const NAME_BYTES_MAX: usize = 1_024;

impl ClusterCatalog {
    /// Users and roles (the router's authentication and authorization source).
    pub fn security(&self) -> &SecurityCatalog {
        &self.security
    }

    pub(super) fn security_command(&mut self, cmd: &SecurityCommand) -> Result<Outcome, CatalogError> {
        match self.apply_security(cmd)? {
            None => Ok(Outcome::unchanged(Reply::Done)),
            Some(reply) => {
                self.security.version += 1;
                Ok(Outcome::silent(reply))
            }
        }
    }

    /// The reply if something changed, `None` if the command was a repeat of what is true.
    fn apply_security(&mut self, cmd: &SecurityCommand) -> Result<Option<Reply>, CatalogError> {
        use SecurityCommand as S;
        let sec = &mut self.security;
        match cmd {
            S::CreateUser(user) => {
                check_user(user)?;
                if sec.users.contains_key(&user.name) {
                    return Err(user_exists(&user.name));
                }
                if sec.users.len() >= USERS_MAX {
                    return Err(CatalogError::limit("users", USERS_MAX));
                }
                check_roles_exist(sec, &user.roles)?;
                sec.users.insert(user.name.clone(), user.clone());
                Ok(Some(Reply::Done))
            }
            S::UpdateUser { name, credentials, roles, custom_data } => {
                let existing = sec.users.get(name).ok_or_else(|| user_not_found(name))?;
                if let Some(roles) = roles {
                    check_grants(roles.len())?;
                    check_roles_exist(sec, roles)?;
                }
                let mut next = existing.clone();
                if let Some(c) = credentials {
                    next.credentials = c.clone();
                }
                if let Some(r) = roles {
                    next.roles = dedup(r);
                }
                if let Some(d) = custom_data {
                    next.custom_data = d.clone();
                }
                Ok(replace(&mut sec.users, name, next))
            }
            S::DropUser(name) => {
                sec.users.remove(name).ok_or_else(|| user_not_found(name))?;
                Ok(Some(Reply::Done))
            }
            S::DropAllUsersFromDatabase(db) => {
                let before = sec.users.len();
                sec.users.retain(|n, _| n.db != *db);
                let n = (before - sec.users.len()) as u64;
                Ok((n > 0).then_some(Reply::Count(n)))
            }
            S::GrantRolesToUser { name, roles } => {
                let user = sec.users.get(name).ok_or_else(|| user_not_found(name))?;
                check_roles_exist(sec, roles)?;
                let mut next = user.clone();
                next.roles = dedup(&[user.roles.as_slice(), roles].concat());
                check_grants(next.roles.len())?;
                Ok(replace(&mut sec.users, name, next))
            }
            S::RevokeRolesFromUser { name, roles } => {
                let user = sec.users.get(name).ok_or_else(|| user_not_found(name))?;
                check_roles_exist(sec, roles)?;
                let mut next = user.clone();
                next.roles.retain(|r| !roles.contains(r));
                Ok(replace(&mut sec.users, name, next))
            }
            S::CreateRole(role) => {
                check_name("role", &role.name.role, &role.name.db)?;
                if builtin::is_builtin(&role.name) {
                    return Err(invalid(format!(
                        "Cannot create a role with the name of the built-in role {}",
                        role.name
                    )));
                }
                if sec.roles.contains_key(&role.name) {
                    return Err(CatalogError::RoleExists { role: role.name.role.clone(), db: role.name.db.clone() });
                }
                if sec.roles.len() >= ROLES_MAX {
                    return Err(CatalogError::limit("roles", ROLES_MAX));
                }
                check_grants(role.roles.len().max(role.privileges.len()))?;
                if role.roles.contains(&role.name) {
                    return Err(cycle(&role.name));
                }
                check_roles_exist(sec, &role.roles)?;
                let stored =
                    Role { roles: dedup(&role.roles), privileges: merged(&[], &role.privileges), ..role.clone() };
                sec.roles.insert(role.name.clone(), stored);
                Ok(Some(Reply::Done))
            }
            S::UpdateRole { name, privileges, roles } => {
                let role = user_defined(sec, name)?;
                let mut next = role.clone();
                if let Some(p) = privileges {
                    check_grants(p.len())?;
                    next.privileges = merged(&[], p);
                }
                if let Some(r) = roles {
                    check_grants(r.len())?;
                    check_grant(sec, name, r)?;
                    next.roles = dedup(r);
                }
                Ok(replace(&mut sec.roles, name, next))
            }
            S::DropRole(name) => {
                user_defined(sec, name)?;
                drop_roles(sec, |r| r == name);
                Ok(Some(Reply::Done))
            }
            S::DropAllRolesFromDatabase(db) => {
                let n = drop_roles(sec, |r| r.db == *db);
                Ok((n > 0).then_some(Reply::Count(n)))
            }
            S::GrantPrivilegesToRole { name, privileges } => {
                let role = user_defined(sec, name)?;
                let mut next = role.clone();
                next.privileges = merged(&role.privileges, privileges);
                check_grants(next.privileges.len())?;
                Ok(replace(&mut sec.roles, name, next))
            }
            S::RevokePrivilegesFromRole { name, privileges } => {
                let role = user_defined(sec, name)?;
                let mut next = role.clone();
                next.privileges = revoked(&role.privileges, privileges);
                Ok(replace(&mut sec.roles, name, next))
            }
            S::GrantRolesToRole { name, roles } => {
                let role = user_defined(sec, name)?;
                check_grant(sec, name, roles)?;
                let mut next = role.clone();
                next.roles = dedup(&[role.roles.as_slice(), roles].concat());
                check_grants(next.roles.len())?;
                Ok(replace(&mut sec.roles, name, next))
            }
            S::RevokeRolesFromRole { name, roles } => {
                let role = user_defined(sec, name)?;
                check_roles_exist(sec, roles)?;
                let mut next = role.clone();
                next.roles.retain(|r| !roles.contains(r));
                Ok(replace(&mut sec.roles, name, next))
            }
        }
    }
}

/// Stores `next` under `key` if it differs from what is there.
fn replace<K: Ord + Clone, V: PartialEq>(
    map: &mut std::collections::BTreeMap<K, V>,
    key: &K,
    next: V,
) -> Option<Reply> {
    if map.get(key) == Some(&next) {
        return None;
    }
    map.insert(key.clone(), next);
    Some(Reply::Done)
}

/// Removes the roles `drop` selects and every grant of them; answers how many were removed.
fn drop_roles(sec: &mut SecurityCatalog, drop: impl Fn(&RoleName) -> bool) -> u64 {
    let before = sec.roles.len();
    sec.roles.retain(|name, _| !drop(name));
    let removed = (before - sec.roles.len()) as u64;
    if removed > 0 {
        for user in sec.users.values_mut() {
            user.roles.retain(|r| !drop(r) || builtin::is_builtin(r));
        }
        for role in sec.roles.values_mut() {
            role.roles.retain(|r| !drop(r) || builtin::is_builtin(r));
        }
    }
    removed
}

fn check_user(user: &User) -> Result<(), CatalogError> {
    check_name("user", &user.name.user, &user.name.db)?;
    check_grants(user.roles.len())
}

fn check_name(what: &str, name: &str, db: &str) -> Result<(), CatalogError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX || name.contains('\0') {
        return Err(CatalogError::bad_value(&format!("{what} name"), format!("must be 1..={NAME_BYTES_MAX} bytes")));
    }
    // `$external` holds the users other systems (X.509) authenticate; no other name has a `$`.
    let bad_db = db.is_empty() || db.len() > NAME_BYTES_MAX || db.contains(['\0', '.', '/', '\\', ' ', '"', '$']);
    if bad_db && db != "$external" {
        return Err(CatalogError::bad_value("database name", format!("'{db}' is not a valid database name")));
    }
    Ok(())
}

fn check_grants(n: usize) -> Result<(), CatalogError> {
    if n > GRANTS_MAX {
        return Err(CatalogError::limit("roles or privileges granted at once", GRANTS_MAX));
    }
    Ok(())
}

fn check_roles_exist(sec: &SecurityCatalog, roles: &[RoleName]) -> Result<(), CatalogError> {
    match roles.iter().find(|r| !graph::exists(sec, r)) {
        Some(r) => Err(role_not_found(r)),
        None => Ok(()),
    }
}

fn check_grant(sec: &SecurityCatalog, to: &RoleName, roles: &[RoleName]) -> Result<(), CatalogError> {
    graph::check_grant(sec, to, roles).map_err(|e| match e {
        graph::GraphError::RoleNotFound(r) => role_not_found(&r),
        graph::GraphError::Cycle(r) => cycle(&r),
    })
}

/// The user-defined role `name`; built-in roles cannot be changed.
fn user_defined<'a>(sec: &'a SecurityCatalog, name: &RoleName) -> Result<&'a Role, CatalogError> {
    if builtin::is_builtin(name) {
        return Err(invalid(format!("Cannot modify the built-in role {name}")));
    }
    sec.roles.get(name).ok_or_else(|| role_not_found(name))
}

/// `granted` added to `current`: actions on a resource already listed join its entry.
fn merged(current: &[Privilege], granted: &[Privilege]) -> Vec<Privilege> {
    let mut out: Vec<Privilege> = current.to_vec();
    for p in granted {
        match out.iter_mut().find(|q| q.resource == p.resource) {
            Some(q) => {
                for a in &p.actions {
                    if !q.actions.contains(a) {
                        q.actions.push(a.clone());
                    }
                }
            }
            None => out.push(Privilege { resource: p.resource.clone(), actions: dedup(&p.actions) }),
        }
    }
    out
}

/// `current` less the actions of `revoked` on the same resources; entries left empty go.
fn revoked(current: &[Privilege], revoked: &[Privilege]) -> Vec<Privilege> {
    let mut out: Vec<Privilege> = current.to_vec();
    for p in revoked {
        if let Some(q) = out.iter_mut().find(|q| q.resource == p.resource) {
            q.actions.retain(|a| !p.actions.contains(a));
        }
    }
    out.retain(|p| !p.actions.is_empty());
    out
}

fn dedup<T: PartialEq + Clone>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

fn user_not_found(name: &UserName) -> CatalogError {
    CatalogError::UserNotFound { user: name.user.clone(), db: name.db.clone() }
}

fn user_exists(name: &UserName) -> CatalogError {
    CatalogError::UserExists { user: name.user.clone(), db: name.db.clone() }
}

fn role_not_found(name: &RoleName) -> CatalogError {
    CatalogError::RoleNotFound { role: name.role.clone(), db: name.db.clone() }
}

fn cycle(name: &RoleName) -> CatalogError {
    invalid(format!("Granting roles to {name} would introduce a cycle in the role graph"))
}

fn invalid(reason: String) -> CatalogError {
    CatalogError::InvalidRoleModification { reason }
}
