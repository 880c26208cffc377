//! A member's state as MongoDB names it (`replSetGetStatus.members[].stateStr`), and what a
//! primary knows of each secondary.

use std::time::Instant;

use crate::store::oplog::OpTime;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// Not yet part of a group the config service knows (not registered, or unreachable).
    Startup,
    /// Takes writes in its term while its lease lasts.
    Primary,
    /// Follows the primary's oplog (or waits for a primary to be named).
    Secondary,
    /// Initial sync: copying data; neither readable nor electable.
    Startup2,
    /// Undoing entries no majority had before following the new primary.
    Rollback,
    /// Cannot follow the primary and needs an operator (e.g. a failed rollback).
    Recovering,
    /// Outside any replica group: always primary.
    Standalone,
    /// No longer listed in its group's configuration (`replSetReconfig` removed it): serves no
    /// reads and counts toward nothing until it is added again.
    Removed,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Startup => "STARTUP",
            MemberState::Primary => "PRIMARY",
            MemberState::Secondary => "SECONDARY",
            MemberState::Startup2 => "STARTUP2",
            MemberState::Rollback => "ROLLBACK",
            MemberState::Recovering => "RECOVERING",
            MemberState::Standalone => "PRIMARY",
            MemberState::Removed => "REMOVED",
        }
    }

    /// MongoDB's numeric `state`.
    pub fn code(self) -> i32 {
        match self {
            MemberState::Startup => 0,
            MemberState::Primary | MemberState::Standalone => 1,
            MemberState::Secondary => 2,
            MemberState::Recovering => 3,
            MemberState::Startup2 => 5,
            MemberState::Rollback => 9,
            MemberState::Removed => 10,
        }
    }

    /// Whether reads may be served (data is a consistent prefix of some primary's history; a
    /// member just started has not heard from the config service yet, but its data is its own
    /// last consistent state: an interrupted initial sync was wiped before it started).
    pub fn readable(self) -> bool {
        matches!(self, MemberState::Primary | MemberState::Secondary | MemberState::Standalone | MemberState::Startup)
    }
}

/// What a primary knows of one secondary, from its stream's progress messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerProgress {
    pub applied: OpTime,
    pub durable: OpTime,
    pub seen: Option<Instant>,
}
