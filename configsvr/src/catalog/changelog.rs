//! The changelog (`config.changelog`): a bounded ring of the last [`CHANGELOG_ENTRIES_MAX`]
//! changes, each stamped with the catalog version it produced, so a watcher that knows the
//! version it last saw can tell what happened since (as long as it is still in the ring).
//!
//! Invariants: `seq` and `catalog_version` strictly increase along the ring; the ring never holds
//! more than [`CHANGELOG_ENTRIES_MAX`] entries.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{ChangelogEntry, Detail};

/// Entries kept. MongoDB caps `config.changelog` by size (200 MB); a count keeps snapshots small
/// (an entry is a few hundred bytes of JSON) while covering many balancer rounds.
pub const CHANGELOG_ENTRIES_MAX: usize = 4096;

/// What a command handler wants logged; `apply` stamps it.
#[derive(Debug)]
pub(crate) struct LogDraft {
    pub what: std::borrow::Cow<'static, str>,
    pub ns: String,
    pub details: BTreeMap<String, Detail>,
}

impl LogDraft {
    pub fn new(what: &'static str, ns: impl Into<String>) -> Self {
        Self { what: std::borrow::Cow::Borrowed(what), ns: ns.into(), details: BTreeMap::new() }
    }

    pub fn with(mut self, key: &str, value: impl Into<Detail>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

/// Longest event name and most details a `LogChange` may carry (entries stay a few hundred bytes).
pub const LOG_CHANGE_WHAT_BYTES_MAX: usize = 64;
pub const LOG_CHANGE_DETAILS_MAX: usize = 32;

/// `Command::LogChange`: an event reported by a shard becomes a changelog entry as it is.
pub(crate) fn log_change(
    what: &str,
    ns: &str,
    details: &BTreeMap<String, Detail>,
) -> Result<super::Outcome, super::CatalogError> {
    if what.is_empty() || what.len() > LOG_CHANGE_WHAT_BYTES_MAX {
        return Err(super::CatalogError::bad_value("what", "an event name of 1 to 64 bytes"));
    }
    if details.len() > LOG_CHANGE_DETAILS_MAX {
        return Err(super::CatalogError::bad_value("details", "at most 32 details"));
    }
    let draft =
        LogDraft { what: std::borrow::Cow::Owned(what.to_owned()), ns: ns.to_owned(), details: details.clone() };
    Ok(super::Outcome::logged(super::Reply::Done, draft))
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Changelog {
    entries: VecDeque<ChangelogEntry>,
    next_seq: u64,
    /// The catalog version of the newest entry pushed out of the ring (0: none yet).
    evicted_through_version: u64,
}

impl Changelog {
    pub(crate) fn push(&mut self, draft: LogDraft, catalog_version: u64, time_ms: u64) {
        if self.entries.len() >= CHANGELOG_ENTRIES_MAX
            && let Some(evicted) = self.entries.pop_front()
        {
            self.evicted_through_version = evicted.catalog_version;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.entries.push_back(ChangelogEntry {
            seq,
            catalog_version,
            time_ms,
            what: draft.what.into_owned(),
            ns: draft.ns,
            details: draft.details,
        });
    }

    /// Oldest first.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &ChangelogEntry> + ExactSizeIterator {
        self.entries.iter()
    }

    /// Entries that produced a catalog version greater than `catalog_version`, oldest first; `None`
    /// if some of them already left the ring (the caller must re-read the catalog).
    pub fn since(&self, catalog_version: u64) -> Option<impl Iterator<Item = &ChangelogEntry>> {
        (self.evicted_through_version <= catalog_version)
            .then(|| self.entries.iter().filter(move |e| e.catalog_version > catalog_version))
    }
}
