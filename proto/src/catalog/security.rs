//! The catalog's users and roles (MongoDB's `admin.system.users` and `admin.system.roles`), as
//! the config service stores them and routers read them: names, salted SCRAM credentials (never
//! a password), granted roles, and user-defined roles' privileges.
//!
//! Must not: judge a privilege or verify a credential (the `shoal-auth` crate does, on routers),
//! or hold a password in any form a client could replay: a credential is what RFC 5802 lets a
//! server keep (salt, iteration count, StoredKey, ServerKey).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A user's name within its authentication database (`alice@admin`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserName {
    pub user: String,
    pub db: String,
}

impl UserName {
    pub fn new(user: impl Into<String>, db: impl Into<String>) -> Self {
        Self { user: user.into(), db: db.into() }
    }

    /// `system.users._id`: `<db>.<user>`.
    pub fn id(&self) -> String {
        format!("{}.{}", self.db, self.user)
    }
}

impl fmt::Display for UserName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.user, self.db)
    }
}

/// A role's name within the database it is defined on (`read@app`, `root@admin`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoleName {
    pub role: String,
    pub db: String,
}

impl RoleName {
    pub fn new(role: impl Into<String>, db: impl Into<String>) -> Self {
        Self { role: role.into(), db: db.into() }
    }

    /// `system.roles._id`: `<db>.<role>`.
    pub fn id(&self) -> String {
        format!("{}.{}", self.db, self.role)
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.role, self.db)
    }
}

/// What RFC 5802 lets a server keep of a password for one SCRAM mechanism.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ScramCredential {
    pub iteration_count: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// A user's credentials, one per mechanism it may authenticate with (`credentials` of a
/// `system.users` document: `SCRAM-SHA-1`, `SCRAM-SHA-256`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    pub scram_sha1: Option<ScramCredential>,
    pub scram_sha256: Option<ScramCredential>,
}

impl Credentials {
    /// The mechanism names MongoDB lists in `mechanisms` and `saslSupportedMechs`.
    pub fn mechanisms(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.scram_sha1.is_some() {
            out.push(SCRAM_SHA_1);
        }
        if self.scram_sha256.is_some() {
            out.push(SCRAM_SHA_256);
        }
        out
    }
}

pub const SCRAM_SHA_1: &str = "SCRAM-SHA-1";
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// One user (`system.users` document).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: UserName,
    /// `userId`: identifies this user across a drop and re-create of the same name.
    pub user_id: Uuid,
    pub credentials: Credentials,
    pub roles: Vec<RoleName>,
    /// `customData`, as BSON bytes (the catalog never looks inside).
    pub custom_data: Option<Vec<u8>>,
}

/// What a privilege applies to: MongoDB's resource documents.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// `{cluster: true}`.
    Cluster,
    /// `{anyResource: true}`: every database and collection, system ones included.
    AnyResource,
    /// `{db, collection}`; an empty `db` means every database, an empty `collection` every
    /// non-system collection of the database(s).
    Namespace { db: String, collection: String },
    /// `{db, system_buckets}`: time-series bucket collections (`system.buckets.*`); an empty
    /// `db` means every database.
    SystemBuckets { db: String },
}

/// Actions on a resource (`{resource, actions: [..]}`); action names are MongoDB's
/// (`find`, `insert`, `createUser`, ...), checked by the router before they are stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Privilege {
    pub resource: Resource,
    pub actions: Vec<String>,
}

/// A user-defined role (`system.roles` document).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Role {
    pub name: RoleName,
    pub privileges: Vec<Privilege>,
    /// Roles this one inherits.
    pub roles: Vec<RoleName>,
}

/// Every user and user-defined role, at one catalog version: what routers authenticate and
/// authorize against (the answer to `config.proto`'s `security` query).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityCatalog {
    /// Grows by one with every change to users or roles (the watch stream publishes it).
    pub version: u64,
    pub users: BTreeMap<UserName, User>,
    pub roles: BTreeMap<RoleName, Role>,
}

/// A change to users or roles: `Command::Security` carries one. The router validates names,
/// actions and passwords and computes credentials before proposing; the config service checks
/// what only it can check atomically (existence, duplicates, role cycles).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum SecurityCommand {
    CreateUser(User),
    /// `updateUser`: `None` fields keep their value; `custom_data: Some(None)` removes it.
    UpdateUser {
        name: UserName,
        credentials: Option<Credentials>,
        roles: Option<Vec<RoleName>>,
        custom_data: Option<Option<Vec<u8>>>,
    },
    DropUser(UserName),
    DropAllUsersFromDatabase(String),
    GrantRolesToUser {
        name: UserName,
        roles: Vec<RoleName>,
    },
    RevokeRolesFromUser {
        name: UserName,
        roles: Vec<RoleName>,
    },
    CreateRole(Role),
    /// `updateRole`: `None` fields keep their value.
    UpdateRole {
        name: RoleName,
        privileges: Option<Vec<Privilege>>,
        roles: Option<Vec<RoleName>>,
    },
    /// Drops the role and removes it from every user and role that was granted it.
    DropRole(RoleName),
    DropAllRolesFromDatabase(String),
    GrantPrivilegesToRole {
        name: RoleName,
        privileges: Vec<Privilege>,
    },
    RevokePrivilegesFromRole {
        name: RoleName,
        privileges: Vec<Privilege>,
    },
    GrantRolesToRole {
        name: RoleName,
        roles: Vec<RoleName>,
    },
    RevokeRolesFromRole {
        name: RoleName,
        roles: Vec<RoleName>,
    },
}

impl fmt::Display for SecurityCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never prints credentials.
        match self {
            SecurityCommand::CreateUser(u) => write!(f, "createUser {}", u.name),
            SecurityCommand::UpdateUser { name, .. } => write!(f, "updateUser {name}"),
            SecurityCommand::DropUser(name) => write!(f, "dropUser {name}"),
            SecurityCommand::DropAllUsersFromDatabase(db) => write!(f, "dropAllUsersFromDatabase {db}"),
            SecurityCommand::GrantRolesToUser { name, roles } => {
                write!(f, "grantRolesToUser {name} ({} roles)", roles.len())
            }
            SecurityCommand::RevokeRolesFromUser { name, roles } => {
                write!(f, "revokeRolesFromUser {name} ({} roles)", roles.len())
            }
            SecurityCommand::CreateRole(r) => write!(f, "createRole {}", r.name),
            SecurityCommand::UpdateRole { name, .. } => write!(f, "updateRole {name}"),
            SecurityCommand::DropRole(name) => write!(f, "dropRole {name}"),
            SecurityCommand::DropAllRolesFromDatabase(db) => write!(f, "dropAllRolesFromDatabase {db}"),
            SecurityCommand::GrantPrivilegesToRole { name, privileges } => {
                write!(f, "grantPrivilegesToRole {name} ({} privileges)", privileges.len())
            }
            SecurityCommand::RevokePrivilegesFromRole { name, privileges } => {
                write!(f, "revokePrivilegesFromRole {name} ({} privileges)", privileges.len())
            }
            SecurityCommand::GrantRolesToRole { name, roles } => {
                write!(f, "grantRolesToRole {name} ({} roles)", roles.len())
            }
            SecurityCommand::RevokeRolesFromRole { name, roles } => {
                write!(f, "revokeRolesFromRole {name} ({} roles)", roles.len())
            }
        }
    }
}
