//! Users and roles: creation, grants, the role graph's checks, and what dropping a role does.

use super::*;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{Credentials, Privilege, Resource, Role, RoleName, SecurityCommand as S, User, UserName};

fn user(name: &str, db: &str, roles: &[(&str, &str)]) -> User {
    User {
        name: UserName::new(name, db),
        user_id: Uuid::from_u128(7),
        credentials: Credentials::default(),
        roles: roles.iter().map(|(r, d)| RoleName::new(*r, *d)).collect(),
        custom_data: None,
    }
}

fn role(name: &str, db: &str, actions: &[&str], roles: &[(&str, &str)]) -> Role {
    Role {
        name: RoleName::new(name, db),
        privileges: vec![Privilege {
            resource: Resource::Namespace { db: db.into(), collection: "logs".into() },
            actions: actions.iter().map(|a| (*a).to_owned()).collect(),
        }],
        roles: roles.iter().map(|(r, d)| RoleName::new(*r, *d)).collect(),
    }
}

fn sec(cmd: S) -> Command {
    Command::Security(cmd)
}

#[test]
fn users_are_created_once_and_changes_bump_the_security_version() {
    let mut fx = Fx::new();
    fx.ok(sec(S::CreateUser(user("alice", "admin", &[("root", "admin")]))));
    assert_eq!(fx.cat.security().version, 1);
    let e = fx.err(sec(S::CreateUser(user("alice", "admin", &[]))));
    assert_eq!((e.code(), e.to_string().as_str()), (ErrorCode::Location51003, "User \"alice@admin\" already exists"));
    // The same name on another database is another user.
    fx.ok(sec(S::CreateUser(user("alice", "app", &[("read", "app")]))));
    assert_eq!(fx.cat.security().users.len(), 2);
    let e = fx.err(sec(S::CreateUser(user("bob", "app", &[("nosuch", "app")]))));
    assert_eq!((e.code(), e.to_string().as_str()), (ErrorCode::RoleNotFound, "Could not find role: nosuch@app"));
    // root exists only on admin.
    assert_eq!(fx.err(sec(S::CreateUser(user("bob", "app", &[("root", "app")])))).code(), ErrorCode::RoleNotFound);
    assert_eq!(fx.err(sec(S::CreateUser(user("", "app", &[])))).code(), ErrorCode::BadValue);
}

#[test]
fn grants_and_revokes_are_idempotent() {
    let mut fx = Fx::new();
    fx.ok(sec(S::CreateUser(user("u", "app", &[("read", "app")]))));
    let name = UserName::new("u", "app");
    fx.ok(sec(S::GrantRolesToUser { name: name.clone(), roles: vec![RoleName::new("readWrite", "app")] }));
    let version = fx.cat.security().version;
    fx.noop(sec(S::GrantRolesToUser { name: name.clone(), roles: vec![RoleName::new("readWrite", "app")] }));
    assert_eq!(fx.cat.security().version, version);
    assert_eq!(fx.cat.security().users[&name].roles.len(), 2);
    fx.ok(sec(S::RevokeRolesFromUser { name: name.clone(), roles: vec![RoleName::new("read", "app")] }));
    assert_eq!(fx.cat.security().users[&name].roles, [RoleName::new("readWrite", "app")]);
    let ghost = UserName::new("ghost", "app");
    let e = fx.err(sec(S::GrantRolesToUser { name: ghost, roles: vec![] }));
    assert_eq!(
        (e.code(), e.to_string().as_str()),
        (ErrorCode::UserNotFound, "Could not find user \"ghost\" for db \"app\"")
    );
}

#[test]
fn update_user_keeps_what_it_does_not_name() {
    let mut fx = Fx::new();
    fx.ok(sec(S::CreateUser(user("u", "app", &[("read", "app")]))));
    let name = UserName::new("u", "app");
    fx.ok(sec(S::UpdateUser { name: name.clone(), credentials: None, roles: None, custom_data: Some(Some(vec![5])) }));
    let stored = &fx.cat.security().users[&name];
    assert_eq!((stored.roles.len(), stored.custom_data.as_deref()), (1, Some(&[5u8][..])));
    fx.ok(sec(S::UpdateUser { name: name.clone(), credentials: None, roles: Some(vec![]), custom_data: Some(None) }));
    let stored = &fx.cat.security().users[&name];
    assert!(stored.roles.is_empty() && stored.custom_data.is_none());
}

#[test]
fn user_defined_roles_refuse_built_in_names_and_cycles() {
    let mut fx = Fx::new();
    let e = fx.err(sec(S::CreateRole(role("read", "app", &["find"], &[]))));
    assert_eq!(e.code(), ErrorCode::InvalidRoleModification);
    fx.ok(sec(S::CreateRole(role("a", "app", &["find"], &[]))));
    fx.ok(sec(S::CreateRole(role("b", "app", &["insert"], &[("a", "app")]))));
    assert_eq!(fx.err(sec(S::CreateRole(role("a", "app", &[], &[])))).code(), ErrorCode::Location51002);
    let e =
        fx.err(sec(S::GrantRolesToRole { name: RoleName::new("a", "app"), roles: vec![RoleName::new("b", "app")] }));
    assert_eq!(e.to_string(), "Granting roles to a@app would introduce a cycle in the role graph");
    let e = fx.err(sec(S::UpdateRole {
        name: RoleName::new("a", "app"),
        privileges: None,
        roles: Some(vec![RoleName::new("a", "app")]),
    }));
    assert_eq!(e.code(), ErrorCode::InvalidRoleModification);
    let e = fx.err(sec(S::GrantRolesToRole { name: RoleName::new("read", "app"), roles: vec![] }));
    assert_eq!(e.code(), ErrorCode::InvalidRoleModification);
    let e = fx.err(sec(S::DropRole(RoleName::new("zzz", "app"))));
    assert_eq!(e.code(), ErrorCode::RoleNotFound);
}

#[test]
fn privileges_merge_by_resource_and_revokes_remove_empty_entries() {
    let mut fx = Fx::new();
    fx.ok(sec(S::CreateRole(role("a", "app", &["find"], &[]))));
    let name = RoleName::new("a", "app");
    let logs = Resource::Namespace { db: "app".into(), collection: "logs".into() };
    let grant = Privilege { resource: logs.clone(), actions: vec!["insert".into(), "find".into()] };
    fx.ok(sec(S::GrantPrivilegesToRole { name: name.clone(), privileges: vec![grant] }));
    let stored = &fx.cat.security().roles[&name];
    assert_eq!(stored.privileges.len(), 1);
    assert_eq!(stored.privileges[0].actions, ["find", "insert"]);
    let revoke = Privilege { resource: logs, actions: vec!["find".into(), "insert".into()] };
    fx.ok(sec(S::RevokePrivilegesFromRole { name: name.clone(), privileges: vec![revoke] }));
    assert!(fx.cat.security().roles[&name].privileges.is_empty());
}

#[test]
fn dropping_a_role_removes_every_grant_of_it() {
    let mut fx = Fx::new();
    fx.ok(sec(S::CreateRole(role("a", "app", &["find"], &[]))));
    fx.ok(sec(S::CreateRole(role("b", "app", &[], &[("a", "app"), ("read", "app")]))));
    fx.ok(sec(S::CreateUser(user("u", "app", &[("a", "app"), ("read", "app")]))));
    fx.ok(sec(S::DropRole(RoleName::new("a", "app"))));
    let s = fx.cat.security();
    assert_eq!(s.users[&UserName::new("u", "app")].roles, [RoleName::new("read", "app")]);
    assert_eq!(s.roles[&RoleName::new("b", "app")].roles, [RoleName::new("read", "app")]);
    let Reply::Count(n) = fx.ok(sec(S::DropAllRolesFromDatabase("app".into()))) else { panic!("count") };
    assert_eq!(n, 1);
    // Built-in grants survive dropping every role of the database.
    assert_eq!(fx.cat.security().users[&UserName::new("u", "app")].roles, [RoleName::new("read", "app")]);
    fx.noop(sec(S::DropAllRolesFromDatabase("app".into())));
}

#[test]
fn drop_all_users_counts_only_that_database() {
    let mut fx = Fx::new();
    fx.ok(sec(S::CreateUser(user("a", "app", &[]))));
    fx.ok(sec(S::CreateUser(user("b", "app", &[]))));
    fx.ok(sec(S::CreateUser(user("a", "admin", &[]))));
    let Reply::Count(n) = fx.ok(sec(S::DropAllUsersFromDatabase("app".into()))) else { panic!("count") };
    assert_eq!(n, 2);
    assert_eq!(fx.cat.security().users.len(), 1);
    let e = fx.err(sec(S::DropUser(UserName::new("a", "app"))));
    assert_eq!(e.code(), ErrorCode::UserNotFound);
}
