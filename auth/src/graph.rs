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
use crate::resource::{INTERNAL_DATABASES, Target, namespace};

/// Upper bound on the roles one grant may reach: a walk is per authenticated user and cache
/// generation, and the bound keeps a pathological graph from costing more than a moment.
pub const ROLES_REACHED_MAX: usize = 10_000;

/// The privileges of a set of roles, kept by resource kind so a check looks up at most six
/// entries by `&str` and allocates nothing (it runs on every command of an authenticated client).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Privileges {
    any_resource: ActionSet,
    cluster: ActionSet,
    /// `{db: "", collection: ""}`.
    any_normal: ActionSet,
    /// `{db: d, collection: ""}` by `d`.
    databases: HashMap<String, ActionSet>,
    /// `{db: "", collection: c}` by `c`.
    collection_names: HashMap<String, ActionSet>,
    /// `{db: d, collection: c}` by `d`, then `c`.
    exact: HashMap<String, HashMap<String, ActionSet>>,
    /// `system.buckets.*` of every database (`""`) or of one.
    system_buckets: HashMap<String, ActionSet>,
}

fn merge_into<K: std::hash::Hash + Eq>(map: &mut HashMap<K, ActionSet>, key: K, actions: ActionSet) {
    let entry = map.entry(key).or_default();
    *entry = entry.union(actions);
}

impl Privileges {
    pub fn add(&mut self, resource: Resource, actions: ActionSet) {
        match resource {
            Resource::AnyResource => self.any_resource = self.any_resource.union(actions),
            Resource::Cluster => self.cluster = self.cluster.union(actions),
            Resource::Namespace { db, collection } => match (db.is_empty(), collection.is_empty()) {
                (true, true) => self.any_normal = self.any_normal.union(actions),
                (false, true) => merge_into(&mut self.databases, db, actions),
                (true, false) => merge_into(&mut self.collection_names, collection, actions),
                (false, false) => merge_into(self.exact.entry(db).or_default(), collection, actions),
            },
            Resource::SystemBuckets { db } => merge_into(&mut self.system_buckets, db, actions),
        }
    }

    /// Whether these privileges allow every action of `needed` on `target`.
    pub fn allows(&self, target: &Target<'_>, needed: ActionSet) -> bool {
        self.on(target).covers(needed)
    }

    /// Every action granted on `target` (MongoDB's resource search list, see [`crate::resource`]).
    pub fn on(&self, target: &Target<'_>) -> ActionSet {
        let mut have = self.any_resource;
        let get = |map: &HashMap<String, ActionSet>, key: &str| map.get(key).copied().unwrap_or_default();
        match *target {
            Target::Cluster => have = have.union(self.cluster),
            Target::Database(db) => {
                if !INTERNAL_DATABASES.contains(&db) {
                    have = have.union(self.any_normal);
                }
                have = have.union(get(&self.databases, db));
            }
            Target::Namespace { db, collection } => {
                if !collection.starts_with("system.") {
                    if !INTERNAL_DATABASES.contains(&db) {
                        have = have.union(self.any_normal);
                    }
                    have = have.union(get(&self.databases, db));
                }
                if collection.starts_with("system.buckets.") {
                    have = have.union(get(&self.system_buckets, "")).union(get(&self.system_buckets, db));
                }
                have = have.union(get(&self.collection_names, collection));
                if let Some(in_db) = self.exact.get(db) {
                    have = have.union(get(in_db, collection));
                }
            }
        }
        have
    }

    /// Whether anything at all is granted on database `db` or its collections (which databases
    /// `listDatabases` shows a user without the `listDatabases` action).
    pub fn touches_database(&self, db: &str) -> bool {
        !self.any_resource.is_empty()
            || (!self.any_normal.is_empty() && !INTERNAL_DATABASES.contains(&db))
            || self.databases.get(db).is_some_and(|a| !a.is_empty())
            || self.exact.get(db).is_some_and(|c| c.values().any(|a| !a.is_empty()))
    }

    /// Every (resource, actions) pair, in a stable order (for `showPrivileges`).
    pub fn sorted(&self) -> Vec<(Resource, ActionSet)> {
        let mut out = Vec::new();
        let mut push = |r: Resource, a: ActionSet| {
            if !a.is_empty() {
                out.push((r, a));
            }
        };
        push(Resource::AnyResource, self.any_resource);
        push(Resource::Cluster, self.cluster);
        push(namespace("", ""), self.any_normal);
        for (db, a) in &self.databases {
            push(namespace(db, ""), *a);
        }
        for (c, a) in &self.collection_names {
            push(namespace("", c), *a);
        }
        for (db, colls) in &self.exact {
            for (c, a) in colls {
                push(namespace(db, c), *a);
            }
        }
        for (db, a) in &self.system_buckets {
            push(Resource::SystemBuckets { db: db.clone() }, *a);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
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
        add_own(catalog, &role, &mut privileges);
    }
    privileges
}

/// The privileges `role` grants itself, without those of the roles it inherits (`rolesInfo`'s
/// `privileges`).
pub fn own_privileges(catalog: &SecurityCatalog, role: &RoleName) -> Privileges {
    let mut privileges = Privileges::default();
    add_own(catalog, role, &mut privileges);
    privileges
}

fn add_own(catalog: &SecurityCatalog, role: &RoleName, privileges: &mut Privileges) {
    match catalog.roles.get(role) {
        Some(defined) => {
            for p in &defined.privileges {
                add_stored(privileges, p);
            }
        }
        None => {
            for (resource, actions) in builtin::privileges(role) {
                privileges.add(resource, actions);
            }
        }
    }
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
    use crate::resource::covers;
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

    /// The fast lookup agrees with the resource search list of `resource.rs` for every pattern
    /// kind and target kind.
    #[test]
    fn lookup_agrees_with_the_search_list() {
        let patterns = [
            Resource::AnyResource,
            Resource::Cluster,
            namespace("", ""),
            namespace("app", ""),
            namespace("config", ""),
            namespace("", "people"),
            namespace("", "system.js"),
            namespace("app", "people"),
            namespace("app", "system.js"),
            Resource::SystemBuckets { db: String::new() },
            Resource::SystemBuckets { db: "app".into() },
        ];
        let targets = [
            Target::Cluster,
            Target::Database("app"),
            Target::Database("config"),
            ns("app", "people"),
            ns("app", "system.js"),
            ns("other", "people"),
            ns("config", "people"),
            ns("app", "system.buckets.w"),
            ns("other", "system.buckets.w"),
        ];
        for p in &patterns {
            let mut privileges = Privileges::default();
            privileges.add(p.clone(), ActionSet::of(&[Action::Find]));
            for t in &targets {
                assert_eq!(privileges.allows(t, ActionSet::of(&[Action::Find])), covers(p, t), "{p:?} on {t}");
            }
        }
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
