//! The role graph: which roles a grant reaches (built-in and user-defined, through inheritance),
//! the privileges they add up to, and the checks a change to the graph must pass (every granted
//! role exists; no role comes to inherit itself).
//!
//! Must not: trust that the catalog's user-defined roles form a DAG: the walk visits each role
//! once, so a cycle that slipped in (it cannot, through [`check_grant`]) ends the walk instead of
//! looping.

use std::collections::{BTreeSet, HashMap, VecDeque};

use shoal_proto::catalog::{Privilege, Resource, RoleName, SecurityCatalog};

use crate::action::ActionSet;
use crate::builtin;
use crate::resource::Target;

/// Upper bound on the roles one grant may reach: a walk is per authenticated user and cache
/// generation, and the bound keeps a pathological graph from costing more than a moment.
pub const ROLES_REACHED_MAX: usize = 10_000;

/// The privileges of a set of roles, by resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Privileges {
    by_resource: HashMap<Resource, ActionSet>,
}

impl Privileges {
    pub fn add(&mut self, resource: Resource, actions: ActionSet) {
        let entry = self.by_resource.entry(resource).or_default();
        *entry = entry.union(actions);
    }

    /// Whether these privileges allow every action of `needed` on `target`.
    pub fn allows(&self, target: &Target<'_>, needed: ActionSet) -> bool {
        let have = target
            .covering()
            .iter()
            .filter_map(|r| self.by_resource.get(r))
            .fold(ActionSet::EMPTY, |have, a| have.union(*a));
        have.covers(needed)
    }

    /// The resources and their actions, in a stable order (for `showPrivileges`).
    pub fn sorted(&self) -> Vec<(&Resource, &ActionSet)> {
        let mut out: Vec<_> = self.by_resource.iter().collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        out
    }
}

/// Why a change to the role graph is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("Could not find role: {0}")]
    RoleNotFound(RoleName),
    #[error("Granting roles to {0} would introduce a cycle in the role graph")]
    Cycle(RoleName),
}

/// Whether `name` is a built-in role or a user-defined one in `catalog`.
pub fn exists(catalog: &SecurityCatalog, name: &RoleName) -> bool {
    builtin::is_builtin(name) || catalog.roles.contains_key(name)
}

/// The roles `name` inherits directly.
pub fn subroles(catalog: &SecurityCatalog, name: &RoleName) -> Vec<RoleName> {
    match catalog.roles.get(name) {
        Some(role) => role.roles.clone(),
        None => builtin::subroles(name),
    }
}

/// Every role reachable from `roles`, themselves included, each once, in breadth-first order.
/// Roles that do not exist (dropped since granted) are skipped.
pub fn closure(catalog: &SecurityCatalog, roles: &[RoleName]) -> Vec<RoleName> {
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<RoleName> = roles.iter().cloned().collect();
    let mut out = Vec::new();
    while let Some(role) = queue.pop_front() {
        if out.len() >= ROLES_REACHED_MAX {
            break;
        }
        if !exists(catalog, &role) || !seen.insert(role.clone()) {
            continue;
        }
        queue.extend(subroles(catalog, &role));
        out.push(role);
    }
    out
}

/// The privileges `roles` grant, inheritance included.
pub fn resolve(catalog: &SecurityCatalog, roles: &[RoleName]) -> Privileges {
    let mut privileges = Privileges::default();
    for role in closure(catalog, roles) {
        match catalog.roles.get(&role) {
            Some(defined) => {
                for p in &defined.privileges {
                    add_stored(&mut privileges, p);
                }
            }
            None => {
                for (resource, actions) in builtin::privileges(&role) {
                    privileges.add(resource, actions);
                }
            }
        }
    }
    privileges
}

/// A stored privilege's actions; names this version does not know are ignored (a newer router
/// may have stored them).
fn add_stored(privileges: &mut Privileges, p: &Privilege) {
    let actions =
        p.actions.iter().filter_map(|a| crate::action::Action::from_name(a)).fold(ActionSet::EMPTY, ActionSet::with);
    privileges.add(p.resource.clone(), actions);
}

/// Checks that granting `granted` to role `to` keeps the graph sound: each granted role exists
/// and none of them reaches `to`.
pub fn check_grant(catalog: &SecurityCatalog, to: &RoleName, granted: &[RoleName]) -> Result<(), GraphError> {
    if let Some(missing) = granted.iter().find(|r| !exists(catalog, r)) {
        return Err(GraphError::RoleNotFound(missing.clone()));
    }
    if closure(catalog, granted).contains(to) {
        return Err(GraphError::Cycle(to.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::resource::namespace;
    use shoal_proto::catalog::Role;

    fn role(name: &str, db: &str, privileges: Vec<Privilege>, roles: Vec<RoleName>) -> Role {
        Role { name: RoleName::new(name, db), privileges, roles }
    }

    fn catalog(roles: Vec<Role>) -> SecurityCatalog {
        SecurityCatalog { roles: roles.into_iter().map(|r| (r.name.clone(), r)).collect(), ..Default::default() }
    }

    fn ns<'a>(db: &'a str, collection: &'a str) -> Target<'a> {
        Target::Namespace { db, collection }
    }

    #[test]
    fn built_in_roles_resolve_through_inheritance() {
        let c = SecurityCatalog::default();
        let owner = resolve(&c, &[RoleName::new("dbOwner", "app")]);
        assert!(owner.allows(&ns("app", "people"), ActionSet::of(&[Action::Insert, Action::Find])));
        assert!(owner.allows(&Target::Database("app"), ActionSet::of(&[Action::CreateUser])));
        assert!(!owner.allows(&ns("other", "people"), ActionSet::of(&[Action::Find])));
        let root = resolve(&c, &[RoleName::new("root", "admin")]);
        for t in [ns("app", "x"), ns("admin", "system.users"), ns("config", "chunks")] {
            assert!(root.allows(&t, ActionSet::of(&[Action::Find])), "{t}");
        }
        assert!(root.allows(&Target::Cluster, ActionSet::of(&[Action::AddShard, Action::Shutdown])));
        let reader = resolve(&c, &[RoleName::new("read", "app")]);
        assert!(!reader.allows(&ns("app", "people"), ActionSet::of(&[Action::Insert])));
        assert!(!reader.allows(&Target::Cluster, ActionSet::of(&[Action::ListDatabases])));
    }

    #[test]
    fn user_defined_roles_add_their_privileges_and_inherited_ones() {
        let c = catalog(vec![
            role(
                "auditor",
                "app",
                vec![Privilege { resource: namespace("app", "logs"), actions: vec!["find".into()] }],
                vec![RoleName::new("clusterMonitor", "admin")],
            ),
            role("lead", "app", vec![], vec![RoleName::new("auditor", "app")]),
        ]);
        let p = resolve(&c, &[RoleName::new("lead", "app")]);
        assert!(p.allows(&ns("app", "logs"), ActionSet::of(&[Action::Find])));
        assert!(!p.allows(&ns("app", "other"), ActionSet::of(&[Action::Find])));
        assert!(p.allows(&Target::Cluster, ActionSet::of(&[Action::ServerStatus])));
    }

    #[test]
    fn grants_must_name_existing_roles_and_not_close_a_cycle() {
        let c =
            catalog(vec![role("a", "app", vec![], vec![RoleName::new("b", "app")]), role("b", "app", vec![], vec![])]);
        assert_eq!(
            check_grant(&c, &RoleName::new("b", "app"), &[RoleName::new("a", "app")]),
            Err(GraphError::Cycle(RoleName::new("b", "app")))
        );
        assert_eq!(
            check_grant(&c, &RoleName::new("b", "app"), &[RoleName::new("b", "app")]),
            Err(GraphError::Cycle(RoleName::new("b", "app")))
        );
        assert_eq!(
            check_grant(&c, &RoleName::new("a", "app"), &[RoleName::new("zzz", "app")]),
            Err(GraphError::RoleNotFound(RoleName::new("zzz", "app")))
        );
        assert_eq!(check_grant(&c, &RoleName::new("a", "app"), &[RoleName::new("read", "app")]), Ok(()));
    }

    #[test]
    fn a_cycle_already_stored_does_not_loop() {
        let c = catalog(vec![
            role("a", "x", vec![], vec![RoleName::new("b", "x")]),
            role("b", "x", vec![], vec![RoleName::new("a", "x")]),
        ]);
        assert_eq!(closure(&c, &[RoleName::new("a", "x")]).len(), 2);
    }
}
