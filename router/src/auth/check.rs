//! Authorization: before a command runs, the privileges its entry in the command table names
//! (`Spec::access`) are checked against the connection's user's roles, as the users and roles are
//! now; handlers that need more (a grant's roles, the collections a pipeline reads or writes)
//! call [`require`] themselves.
//!
//! With `security.authorization` disabled every client may do everything, as on MongoDB; users can
//! still be managed and authenticated. Enabled, and while no user or role exists, a client on a
//! loopback address may run `createUser` and `createRole` (MongoDB's localhost exception) and
//! nothing else that needs authentication.
//!
//! Must not: cache a decision past the command it was made for (grants and drops apply to open
//! connections at their next command), or say more in a refusal than MongoDB does.

use std::sync::Arc;

use bson::raw::RawBsonRef;
use shoal_auth::{Action, ActionSet, Privileges, Target};
use shoal_proto::ErrorCode;
use shoal_proto::catalog::{RoleName, UserName};

use crate::command::Command;
use crate::commands::{self, Access, On, Spec};
use crate::error::CommandError;
use crate::state::{ConnContext, RouterState};

/// Commands the localhost exception lets through.
const LOCALHOST_EXCEPTION: &[&str] = &["createUser", "createRole"];

/// What a connection may do right now.
#[derive(Debug, Clone)]
pub enum Authority {
    /// Authorization is disabled: everything.
    Unrestricted,
    /// The localhost exception: `createUser` and `createRole`, granting any role.
    LocalhostException,
    /// An authenticated user and its roles' privileges.
    User(UserName, Arc<Privileges>),
    /// Nobody (not authenticated, or the user was dropped).
    Nobody,
}

impl Authority {
    pub fn allows(&self, target: &Target<'_>, needed: ActionSet) -> bool {
        match self {
            Authority::Unrestricted | Authority::LocalhostException => true,
            Authority::User(_, privileges) => privileges.allows(target, needed),
            Authority::Nobody => false,
        }
    }

    pub fn user(&self) -> Option<&UserName> {
        match self {
            Authority::User(name, _) => Some(name),
            _ => None,
        }
    }
}

/// The connection's authority, from the users and roles as they are now.
pub async fn authority(state: &RouterState, conn: &ConnContext) -> Result<Authority, CommandError> {
    if !state.settings.authorization {
        return Ok(Authority::Unrestricted);
    }
    let snapshot = state.security.get(&state.catalog).await?;
    let user = conn.session().user().cloned();
    Ok(match user.and_then(|u| snapshot.privileges(&u).map(|p| (u, p))) {
        Some((user, privileges)) => Authority::User(user, privileges),
        None if snapshot.is_empty() && conn.peer.ip().is_loopback() => Authority::LocalhostException,
        None => Authority::Nobody,
    })
}

/// Checks the command's entry in the table (and, for `explain`, the explained command's); a
/// refusal is recorded in the audit log (`authCheck`).
pub async fn authorize(
    state: &RouterState,
    conn: &ConnContext,
    cmd: &Command,
    spec: &Spec,
) -> Result<(), CommandError> {
    let verdict = decide(state, conn, cmd, spec).await;
    if let Err(e) = &verdict
        && e.is(ErrorCode::Unauthorized)
        && state.audit.is_enabled()
    {
        let user = conn.session().user().cloned();
        let client = crate::audit::Client { local: conn.local, remote: conn.peer, user: user.as_ref() };
        let mut param = crate::audit::command_param(&cmd.db, &cmd.body);
        if let serde_json::Value::Object(map) = &mut param {
            map.insert("command".into(), serde_json::json!(spec.name));
        }
        state.audit.record("authCheck", &client, param, e.code);
    }
    verdict
}

async fn decide(state: &RouterState, conn: &ConnContext, cmd: &Command, spec: &Spec) -> Result<(), CommandError> {
    if !state.settings.authorization || matches!(spec.access, Access::Open) {
        return Ok(());
    }
    let authority = authority(state, conn).await?;
    match &authority {
        Authority::Unrestricted => return Ok(()),
        Authority::LocalhostException if LOCALHOST_EXCEPTION.contains(&spec.name) => return Ok(()),
        Authority::LocalhostException | Authority::Nobody => return Err(requires_authentication(spec.name)),
        Authority::User(..) => {}
    }
    let (spec, body) = match explained(cmd, spec)? {
        Some((inner, body)) => (inner, body),
        None => (spec, cmd.body.as_ref()),
    };
    let Access::Actions(on, actions) = spec.access else { return Ok(()) };
    let named = target_collection(spec, body);
    let target = match on {
        On::Cluster => Target::Cluster,
        On::Database => Target::Database(&cmd.db),
        On::Collection => match named {
            Some(collection) => Target::Namespace { db: &cmd.db, collection },
            // `aggregate: 1` and the like act on the database.
            None => Target::Database(&cmd.db),
        },
        On::Namespace => match named.and_then(|ns| ns.split_once('.')) {
            Some((db, collection)) if !db.is_empty() && !collection.is_empty() => Target::Namespace { db, collection },
            // A malformed namespace names nothing to act on: the handler refuses it with
            // MongoDB's InvalidNamespace (73) before doing anything, as mongos does for an
            // authenticated user.
            _ => return Ok(()),
        },
        On::NamedDatabase => match named {
            Some(db) => Target::Database(db),
            None => return Ok(()),
        },
        On::Exact(db, collection) => Target::Namespace { db, collection },
    };
    if !authority.allows(&target, actions) {
        return Err(not_authorized(&cmd.db, spec.name, body));
    }
    if spec.name == "aggregate" {
        for (ns, needed) in crate::auth::pipeline::namespaces(&cmd.db, body)? {
            let (db, collection) = ns.split_once('.').unwrap_or((ns.as_str(), ""));
            if !authority.allows(&Target::Namespace { db, collection }, needed) {
                return Err(not_authorized(&cmd.db, spec.name, body));
            }
        }
    }
    Ok(())
}

impl Authority {
    /// For a handler's own checks: passes if this authority may do `needed` on `target`, else
    /// answers the refusal MongoDB gives for `cmd`.
    pub fn require(&self, cmd: &Command, target: &Target<'_>, needed: &[Action]) -> Result<(), CommandError> {
        if self.allows(target, ActionSet::of(needed)) {
            return Ok(());
        }
        match self {
            Authority::Nobody => Err(requires_authentication(&cmd.name)),
            _ => Err(not_authorized(&cmd.db, &cmd.name, cmd.body.as_ref())),
        }
    }

    /// `needed` (`grantRole`, `revokeRole`) on the database of each of `roles`: what granting or
    /// revoking them takes.
    pub fn require_on_roles(&self, cmd: &Command, roles: &[RoleName], needed: &[Action]) -> Result<(), CommandError> {
        roles.iter().try_for_each(|role| self.require(cmd, &Target::Database(&role.db), needed))
    }
}

/// The command inside `explain` and its body.
fn explained<'a>(
    cmd: &'a Command,
    spec: &Spec,
) -> Result<Option<(&'static Spec, &'a bson::RawDocument)>, CommandError> {
    if spec.name != "explain" {
        return Ok(None);
    }
    let Some(RawBsonRef::Document(inner)) = cmd.body.get("explain")? else { return Ok(None) };
    let Some(Ok((name, _))) = inner.iter().next() else { return Ok(None) };
    Ok(commands::lookup(name.as_str()).map(|s| (s, inner)))
}

/// The collection a command names: its first field's string, or `collection` for `getMore`.
fn target_collection<'a>(spec: &Spec, body: &'a bson::RawDocument) -> Option<&'a str> {
    let value = if spec.name == "getMore" {
        body.get("collection").ok().flatten()
    } else {
        body.iter().next().and_then(Result::ok).map(|(_, v)| v)
    };
    match value {
        Some(RawBsonRef::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

pub fn requires_authentication(command: &str) -> CommandError {
    CommandError::new(ErrorCode::Unauthorized, format!("Command {command} requires authentication"))
}

/// MongoDB's refusal: the database and the command's name and first argument (never the rest of
/// the body, which may hold documents or passwords).
pub fn not_authorized(db: &str, name: &str, body: &bson::RawDocument) -> CommandError {
    let first = match body.iter().next().and_then(Result::ok) {
        Some((_, RawBsonRef::String(s))) => format!("{name}: \"{s}\""),
        _ => name.to_owned(),
    };
    CommandError::new(ErrorCode::Unauthorized, format!("not authorized on {db} to execute command {{ {first} }}"))
}
