//! The `timezone` argument of the date operators: UTC, a fixed offset (`"+05:30"`, `"-0800"`,
//! `"+03"`) or an Olson name (`"Europe/Paris"`, `"America/New_York"`, from chrono-tz's copy of
//! the IANA database), and the two conversions every date operator is built on: a UTC instant to
//! the zone's wall-clock time, and a wall-clock time back to its instant.
//!
//! Must not: do calendar arithmetic (the operators do it on wall-clock milliseconds), or guess a
//! zone it does not know (an unknown name is MongoDB's error 40485, never UTC).

use std::str::FromStr as _;

use bson::Bson;
use chrono::{Offset as _, TimeZone as _};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};

/// Where a date operator reads and builds wall-clock times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Zone {
    /// A constant offset from UTC, in milliseconds (UTC itself is 0).
    Fixed(i64),
    Named(chrono_tz::Tz),
}

impl Zone {
    pub(crate) const UTC: Zone = Zone::Fixed(0);

    /// The zone `tz` names for `op`: absent or null is UTC.
    pub(crate) fn parse(op: &str, tz: Option<Bson>) -> Result<Zone> {
        let s = match tz {
            None | Some(Bson::Null | Bson::Undefined) => return Ok(Zone::UTC),
            Some(Bson::String(s)) => s,
            Some(other) => {
                return Err(QueryError::new(
                    ErrorCode::Location40517,
                    format!("{op}: timezone must evaluate to a string, found {}", crate::display::type_name(&other)),
                ));
            }
        };
        if matches!(s.as_str(), "UTC" | "GMT" | "Z") {
            return Ok(Zone::UTC);
        }
        if let Some(ms) = parse_offset(&s) {
            return Ok(Zone::Fixed(ms));
        }
        chrono_tz::Tz::from_str(&s).map(Zone::Named).map_err(|_| {
            QueryError::new(ErrorCode::Location40485, format!("{op}: unrecognized time zone identifier: \"{s}\""))
        })
    }

    /// The zone's offset from UTC at the instant `utc_ms`, in milliseconds.
    pub(crate) fn offset_at(self, utc_ms: i64) -> i64 {
        match self {
            Zone::Fixed(ms) => ms,
            Zone::Named(tz) => match chrono::DateTime::from_timestamp_millis(utc_ms) {
                Some(t) => i64::from(tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc()) * 1000,
                // Beyond chrono's range (±262,000 years): no rules there, so no offset.
                None => 0,
            },
        }
    }

    /// The wall-clock time (milliseconds as if UTC) at the instant `utc_ms`.
    pub(crate) fn to_local(self, utc_ms: i64) -> i64 {
        utc_ms.saturating_add(self.offset_at(utc_ms))
    }

    /// The instant of the wall-clock time `local_ms`. A time that occurs twice (clocks set back)
    /// is its first occurrence; one that does not occur (clocks set forward) is read with the
    /// offset before the change, so it lands after the gap, as MongoDB's timelib does.
    pub(crate) fn to_utc(self, local_ms: i64) -> i64 {
        let Zone::Named(tz) = self else { return local_ms.saturating_sub(self.offset_at(local_ms)) };
        let Some(naive) = chrono::DateTime::from_timestamp_millis(local_ms).map(|t| t.naive_utc()) else {
            return local_ms;
        };
        let offset = match tz.offset_from_local_datetime(&naive) {
            chrono::LocalResult::Single(o) | chrono::LocalResult::Ambiguous(o, _) => o.fix().local_minus_utc(),
            chrono::LocalResult::None => {
                let before = naive - chrono::Duration::hours(3);
                match tz.offset_from_local_datetime(&before) {
                    chrono::LocalResult::Single(o) | chrono::LocalResult::Ambiguous(o, _) => o.fix().local_minus_utc(),
                    chrono::LocalResult::None => tz.offset_from_utc_datetime(&naive).fix().local_minus_utc(),
                }
            }
        };
        local_ms.saturating_sub(i64::from(offset) * 1000)
    }
}

/// `±HH`, `±HHMM` or `±HH:MM` as milliseconds.
pub(crate) fn parse_offset(s: &str) -> Option<i64> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, s.get(1..)?),
        b'-' => (-1, s.get(1..)?),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !matches!(digits.len(), 2 | 4) {
        return None;
    }
    let hours: i64 = digits.get(..2)?.parse().ok()?;
    let minutes: i64 = if digits.len() == 4 { digits.get(2..)?.parse().ok()? } else { 0 };
    if hours > 99 || minutes > 59 {
        return None;
    }
    Some(sign * (hours * 3_600_000 + minutes * 60_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(s: &str) -> Zone {
        Zone::parse("$hour", Some(Bson::String(s.into()))).unwrap()
    }

    /// 2026-03-29T00:30:00Z, half an hour before Paris moves from +01:00 to +02:00.
    const BEFORE_SPRING: i64 = 1_774_744_200_000;
    const HOUR: i64 = 3_600_000;

    #[test]
    fn names_follow_daylight_saving_and_offsets_stay_fixed() {
        let paris = zone("Europe/Paris");
        assert_eq!(paris.offset_at(BEFORE_SPRING), HOUR);
        assert_eq!(paris.offset_at(BEFORE_SPRING + HOUR), 2 * HOUR);
        assert_eq!(zone("+05:30"), Zone::Fixed(5 * HOUR + HOUR / 2));
        assert_eq!(zone("-0800"), Zone::Fixed(-8 * HOUR));
        assert_eq!(zone("UTC"), Zone::UTC);
        // Wall clock and back, on both sides of the change.
        for t in [BEFORE_SPRING, BEFORE_SPRING + HOUR, BEFORE_SPRING + 5 * HOUR] {
            assert_eq!(paris.to_utc(paris.to_local(t)), t);
        }
        // 02:30 local does not exist that night: it is read as +01:00, landing at 03:30 +02:00.
        let gap_local = BEFORE_SPRING + 2 * HOUR; // 02:30 wall clock, as milliseconds as if UTC
        assert_eq!(paris.to_utc(gap_local), gap_local - HOUR);
    }

    #[test]
    fn unknown_names_and_non_strings_are_mongodbs_errors() {
        let e = Zone::parse("$hour", Some(Bson::String("Mars/Olympus".into()))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Location40485);
        assert!(e.message.contains("Mars/Olympus"), "{}", e.message);
        let e = Zone::parse("$hour", Some(Bson::Int32(3))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Location40517);
        assert_eq!(Zone::parse("$hour", None).unwrap(), Zone::UTC);
    }
}
