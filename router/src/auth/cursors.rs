//! Cursor ownership: a cursor belongs to the user who opened it, and only that user may `getMore`
//! or kill it (MongoDB's rule; a cursor id is guessable, a privilege is not).
//!
//! The dispatcher records the owner of every cursor a command opens (from the reply's
//! `cursor.id`), so no handler has to; entries of cursors the registry no longer holds are dropped
//! when the map grows past twice the open cursors.
//!
//! Must not: run when authorization is disabled (every client is trusted then).

use std::collections::HashMap;
use std::sync::Mutex;

use bson::RawDocument;
use bson::raw::RawBsonRef;
use shoal_proto::ErrorCode;
use shoal_proto::catalog::UserName;

use crate::cursors::CursorRegistry;
use crate::error::CommandError;

/// Entries kept before stale ones are pruned, whatever the registry holds.
const PRUNE_FLOOR: usize = 1024;

#[derive(Default)]
pub struct CursorOwners {
    owners: Mutex<HashMap<i64, Option<UserName>>>,
}

impl CursorOwners {
    /// Records `user` as the owner of the cursor `reply` opened, if any.
    pub fn record(&self, reply: &RawDocument, user: Option<&UserName>, registry: &CursorRegistry) {
        let Some(id) = cursor_id(reply) else { return };
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.insert(id, user.cloned());
        // The registry's size (three locks) is only read once the map is big enough to matter.
        if owners.len() > PRUNE_FLOOR && owners.len() > 2 * registry.len() {
            owners.retain(|id, _| registry.contains(*id));
        }
    }

    /// Refuses unless every cursor in `ids` was opened by `user` (unknown ids pass: the handler
    /// answers CursorNotFound for them as it always does).
    pub fn check(&self, ids: &[i64], user: Option<&UserName>) -> Result<(), CommandError> {
        let owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            if let Some(owner) = owners.get(id)
                && owner.as_ref() != user
            {
                return Err(CommandError::new(
                    ErrorCode::Unauthorized,
                    format!("cursor id {id} was not created by the authenticated user"),
                ));
            }
        }
        Ok(())
    }
}

/// The cursor ids a `getMore` or `killCursors` names.
pub fn named_ids(name: &str, body: &RawDocument) -> Vec<i64> {
    match name {
        "getMore" => match body.get("getMore") {
            Ok(Some(RawBsonRef::Int64(id))) => vec![id],
            _ => Vec::new(),
        },
        "killCursors" => match body.get("cursors") {
            Ok(Some(RawBsonRef::Array(ids))) => ids
                .into_iter()
                .filter_map(|v| if let Ok(RawBsonRef::Int64(id)) = v { Some(id) } else { None })
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// `cursor.id` of a reply, when it is an open cursor.
fn cursor_id(reply: &RawDocument) -> Option<i64> {
    let RawBsonRef::Document(cursor) = reply.get("cursor").ok()?? else { return None };
    match cursor.get("id").ok()?? {
        RawBsonRef::Int64(id) if id != 0 => Some(id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn only_the_opener_may_use_a_cursor() {
        let registry = CursorRegistry::new(std::time::Duration::from_secs(60));
        let owners = CursorOwners::default();
        let alice = UserName::new("alice", "admin");
        let bob = UserName::new("bob", "admin");
        owners.record(&rawdoc! { "cursor": { "id": 42i64, "firstBatch": [] } }, Some(&alice), &registry);
        owners.record(&rawdoc! { "cursor": { "id": 0i64, "firstBatch": [] } }, Some(&bob), &registry);
        assert!(owners.check(&[42], Some(&alice)).is_ok());
        assert_eq!(owners.check(&[42], Some(&bob)).unwrap_err().code, 13);
        assert_eq!(owners.check(&[42], None).unwrap_err().code, 13);
        assert!(owners.check(&[7], Some(&bob)).is_ok());
        assert_eq!(named_ids("killCursors", &rawdoc! { "killCursors": "c", "cursors": [1i64, 2i64] }), [1, 2]);
        assert_eq!(named_ids("getMore", &rawdoc! { "getMore": 9i64, "collection": "c" }), [9]);
    }
}
