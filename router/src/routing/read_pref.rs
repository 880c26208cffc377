//! Read preferences: parsing a command's `$readPreference` as MongoDB does, and the pure decision
//! of which replica-group member serves a read ([`choose`]), tested without I/O.
//!
//! The decision takes what the config leader knows of each member (state, newest applied optime,
//! age of its last heartbeat) and follows the server-selection rules of MongoDB's drivers and
//! mongos: `primary` always the primary; `secondary` a random eligible secondary, none is an
//! error; `primaryPreferred` / `secondaryPreferred` fall back to the other; `nearest` any eligible
//! member (no latencies are measured, so at random). A member is eligible when it heartbeats
//! ([`Selection::silent_after`]), is PRIMARY/SECONDARY, matches a tag set (members carry no tags,
//! so only the empty set `{}` matches), and, with `maxStalenessSeconds`, is no staler than that by
//! MongoDB's estimate (`(P.lastUpdate - P.lastWrite) - (S.lastUpdate - S.lastWrite) + heartbeat`,
//! against the newest secondary when no primary is known).
//!
//! Must not: talk to members or the config service (`members` does), or choose shards.

use std::time::Duration;

use bson::raw::{RawBsonRef, RawDocument};
use shoal_proto::ErrorCode;

use crate::error::CommandError;

/// MongoDB's smallest `maxStalenessSeconds` (`kMinimalMaxStalenessValue`).
pub const MAX_STALENESS_MIN_SECS: i64 = 90;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
    Nearest,
}

impl Mode {
    /// The mode as drivers spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Primary => "primary",
            Mode::PrimaryPreferred => "primaryPreferred",
            Mode::Secondary => "secondary",
            Mode::SecondaryPreferred => "secondaryPreferred",
            Mode::Nearest => "nearest",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReadPreference {
    pub mode: Mode,
    pub max_staleness: Option<Duration>,
    /// Tag sets in order of preference; `[{}]` (the default) matches every member.
    pub tag_sets: Vec<bson::Document>,
    /// The command's `maxTimeMS`, which bounds waiting for a member that fits.
    pub max_time: Option<Duration>,
}

impl Default for ReadPreference {
    fn default() -> Self {
        Self { mode: Mode::Primary, max_staleness: None, tag_sets: vec![bson::Document::new()], max_time: None }
    }
}

fn bad(code: ErrorCode, msg: impl Into<String>) -> CommandError {
    CommandError::new(code, msg)
}

impl ReadPreference {
    /// The `$readPreference` of a command body; `primary` when absent.
    pub fn from_body(body: &RawDocument) -> Result<Self, CommandError> {
        let mut pref = match body.get("$readPreference").map_err(CommandError::from)? {
            None => Self::default(),
            Some(RawBsonRef::Document(d)) => Self::parse(d)?,
            Some(other) => {
                return Err(bad(
                    ErrorCode::TypeMismatch,
                    format!("$readPreference has incorrect type: expected object but got {:?}", other.element_type()),
                ));
            }
        };
        pref.max_time = match body.get("maxTimeMS").map_err(CommandError::from)? {
            Some(RawBsonRef::Int32(n)) if n > 0 => Some(Duration::from_millis(n.unsigned_abs().into())),
            Some(RawBsonRef::Int64(n)) if n > 0 => Some(Duration::from_millis(n.unsigned_abs())),
            Some(RawBsonRef::Double(f)) if f >= 1.0 => Some(Duration::from_millis(f as u64)),
            _ => None,
        };
        Ok(pref)
    }

    /// `{mode, tags, maxStalenessSeconds, hedge}` with MongoDB's errors
    /// (`ReadPreferenceSetting::fromInnerBSON`).
    pub fn parse(d: &RawDocument) -> Result<Self, CommandError> {
        let mode = match d.get("mode").map_err(CommandError::from)? {
            None => return Err(bad(ErrorCode::NoSuchKey, "Missing expected field \"mode\"")),
            Some(RawBsonRef::String(s)) => match s {
                "primary" => Mode::Primary,
                "primaryPreferred" => Mode::PrimaryPreferred,
                "secondary" => Mode::Secondary,
                "secondaryPreferred" => Mode::SecondaryPreferred,
                "nearest" => Mode::Nearest,
                other => {
                    return Err(bad(
                        ErrorCode::BadValue,
                        format!(
                            "Could not parse $readPreference mode '{other}'. Only the modes 'primary', \
                             'primaryPreferred', 'secondary', 'secondaryPreferred', and 'nearest' are supported."
                        ),
                    ));
                }
            },
            Some(_) => return Err(bad(ErrorCode::TypeMismatch, "\"mode\" had the wrong type. Expected string")),
        };
        match d.get("hedge").map_err(CommandError::from)? {
            None => {}
            Some(RawBsonRef::Document(h)) => {
                let enabled =
                    !matches!(h.get("enabled").map_err(CommandError::from)?, Some(RawBsonRef::Boolean(false)));
                if enabled && mode == Mode::Primary {
                    return Err(bad(
                        ErrorCode::InvalidOptions,
                        "cannot enable hedging for $readPreference mode \"primaryOnly\"",
                    ));
                }
            }
            Some(_) => return Err(bad(ErrorCode::TypeMismatch, "hedge field must be of type object if provided")),
        }
        let mut tag_sets = vec![bson::Document::new()];
        match d.get("tags").map_err(CommandError::from)? {
            None => {}
            Some(RawBsonRef::Array(a)) => {
                let mut sets = Vec::new();
                for t in a {
                    match t.map_err(CommandError::from)? {
                        RawBsonRef::Document(t) => sets.push(bson::Document::try_from(t).map_err(CommandError::from)?),
                        _ => return Err(bad(ErrorCode::TypeMismatch, "tags must be an array of objects")),
                    }
                }
                let wildcard = sets.is_empty() || sets.iter().all(bson::Document::is_empty);
                if !wildcard {
                    if mode == Mode::Primary {
                        return Err(bad(
                            ErrorCode::BadValue,
                            "Only empty tags are allowed with primary read preference",
                        ));
                    }
                    tag_sets = sets;
                }
            }
            Some(_) => return Err(bad(ErrorCode::TypeMismatch, "\"tags\" had the wrong type. Expected array")),
        }
        let staleness = match d.get("maxStalenessSeconds").map_err(CommandError::from)? {
            None => 0,
            Some(RawBsonRef::Int32(n)) => i64::from(n),
            Some(RawBsonRef::Int64(n)) => n,
            Some(RawBsonRef::Double(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => f as i64,
            Some(_) => {
                return Err(bad(
                    ErrorCode::TypeMismatch,
                    "\"maxStalenessSeconds\" had the wrong type. Expected number",
                ));
            }
        };
        // -1 is how drivers spell "no maximum".
        let staleness = if staleness == -1 { 0 } else { staleness };
        if staleness < 0 {
            return Err(bad(ErrorCode::BadValue, "maxStalenessSeconds must be a non-negative integer"));
        }
        if staleness != 0 && staleness < MAX_STALENESS_MIN_SECS {
            return Err(bad(
                ErrorCode::MaxStalenessOutOfRange,
                format!("maxStalenessSeconds value can not be less than {MAX_STALENESS_MIN_SECS}"),
            ));
        }
        if staleness != 0 && mode == Mode::Primary {
            return Err(bad(ErrorCode::BadValue, "maxStalenessSeconds can not be set for the primary mode"));
        }
        let max_staleness = (staleness > 0).then(|| Duration::from_secs(staleness.unsigned_abs()));
        Ok(Self { mode, max_staleness, tag_sets, max_time: None })
    }

    /// Whether a non-primary may answer (the request's `secondary_ok`).
    pub fn secondary_ok(&self) -> bool {
        self.mode != Mode::Primary
    }
}

/// A member's role as the config leader last heard it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Secondary,
    /// Starting, syncing, rolling back, recovering or unknown: serves no reads.
    Other,
}

/// What the router knows of one member.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberInfo {
    /// `host:port` as the catalog lists it.
    pub addr: String,
    pub role: Role,
    /// Seconds part of its newest applied optime (the oplog's wall-clock seconds): MongoDB's
    /// `lastWriteDate`.
    pub last_write_secs: u32,
    /// How long ago the config leader last heard from it when asked (`None`: never).
    pub heartbeat_age: Option<Duration>,
    /// The interval it says it heartbeats at.
    pub heartbeat_interval: Duration,
}

/// The bounds the decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// A member not heard from for longer is not chosen.
    pub silent_after: Duration,
    /// Members' heartbeat period (the staleness estimate's error term).
    pub heartbeat: Duration,
}

/// Heartbeats a member may miss before it counts as silent.
pub const SILENT_AFTER_HEARTBEATS: u32 = 5;

impl Selection {
    /// The bounds for a group whose members report `members`' intervals: the slowest member's
    /// period is the estimate's error term, and a member is silent after missing
    /// [`SILENT_AFTER_HEARTBEATS`] of them, but never sooner than `silent_after_min`.
    pub fn for_members(members: &[MemberInfo], silent_after_min: Duration) -> Selection {
        let heartbeat =
            members.iter().map(|m| m.heartbeat_interval).max().unwrap_or(shoal_proto::heartbeat::INTERVAL_DEFAULT);
        Selection { silent_after: silent_after_min.max(heartbeat * SILENT_AFTER_HEARTBEATS), heartbeat }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The group's primary, through the shard's channels (which follow the catalog).
    Primary,
    /// This member (not the catalog's primary), with `secondary_ok`.
    Member(String),
    /// No member fits (`secondary` with no eligible secondary, `nearest` with none at all).
    NoneEligible,
}

fn tags_match(pref: &ReadPreference) -> bool {
    // Members carry no tags: the first tag set that matches anything is the empty one.
    pref.tag_sets.iter().any(bson::Document::is_empty)
}

fn staleness(m: &MemberInfo, primary: Option<&MemberInfo>, newest_secs: u32, heartbeat: Duration) -> Duration {
    let age = |x: &MemberInfo| x.heartbeat_age.unwrap_or(Duration::MAX);
    match primary {
        Some(p) => {
            // (S.lastUpdate - S.lastWrite) - (P.lastUpdate - P.lastWrite), lastUpdate = now - age.
            let writes = Duration::from_secs(u64::from(p.last_write_secs.saturating_sub(m.last_write_secs)));
            (writes + age(p)).saturating_sub(age(m)) + heartbeat
        }
        None => Duration::from_secs(u64::from(newest_secs.saturating_sub(m.last_write_secs))) + heartbeat,
    }
}

/// The member that serves a read with `pref`. `primary`: the catalog's primary of the group;
/// `pick(n)` returns an index below `n` (random in production).
pub fn choose(
    pref: &ReadPreference,
    primary: Option<&str>,
    members: &[MemberInfo],
    sel: &Selection,
    pick: &mut dyn FnMut(usize) -> usize,
) -> Choice {
    if pref.mode == Mode::Primary {
        return Choice::Primary;
    }
    let alive = |m: &MemberInfo| m.heartbeat_age.is_some_and(|a| a <= sel.silent_after);
    let primary_info = members.iter().find(|m| Some(m.addr.as_str()) == primary && m.role == Role::Primary);
    let primary_up = match primary {
        None => false,
        Some(p) => match members.iter().find(|m| m.addr == p) {
            Some(m) => alive(m) && m.role == Role::Primary,
            // Not in the status (none fetched): the catalog's word is all there is.
            None => true,
        },
    };
    let secondaries: Vec<&MemberInfo> =
        members.iter().filter(|m| m.role == Role::Secondary && Some(m.addr.as_str()) != primary && alive(m)).collect();
    let newest = secondaries.iter().map(|m| m.last_write_secs).max().unwrap_or(0);
    let fresh = |m: &&MemberInfo| match pref.max_staleness {
        None => true,
        Some(max) => staleness(m, primary_info.filter(|p| alive(p)), newest, sel.heartbeat) <= max,
    };
    let eligible: Vec<&MemberInfo> =
        if tags_match(pref) { secondaries.iter().copied().filter(fresh).collect() } else { Vec::new() };
    let mut one_of = |c: &[&MemberInfo]| Choice::Member(c[pick(c.len()).min(c.len() - 1)].addr.clone());
    match pref.mode {
        Mode::Primary => Choice::Primary,
        Mode::PrimaryPreferred if primary_up => Choice::Primary,
        Mode::PrimaryPreferred | Mode::SecondaryPreferred if !eligible.is_empty() => one_of(&eligible),
        Mode::PrimaryPreferred | Mode::SecondaryPreferred => Choice::Primary,
        Mode::Secondary if eligible.is_empty() => Choice::NoneEligible,
        Mode::Secondary => one_of(&eligible),
        Mode::Nearest => {
            let with_primary = primary_up && tags_match(pref);
            let n = eligible.len() + usize::from(with_primary);
            if n == 0 {
                return Choice::NoneEligible;
            }
            let i = pick(n).min(n - 1);
            if i < eligible.len() { Choice::Member(eligible[i].addr.clone()) } else { Choice::Primary }
        }
    }
}

#[cfg(test)]
#[path = "read_pref_tests.rs"]
mod tests;
