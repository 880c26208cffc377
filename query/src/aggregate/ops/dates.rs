//! Date operators: the parts (`$hour $minute $second $millisecond $dayOfWeek $dayOfYear $week
//! $isoWeek $isoWeekYear $isoDayOfWeek`), arithmetic (`$dateAdd $dateSubtract $dateDiff
//! $dateTrunc`) and building and parsing (`$dateFromParts $dateToParts $dateFromString`).
//!
//! Time zones ([`Zone`]): UTC, fixed offsets and Olson names. Parts, truncation and calendar
//! units (day, week, month, quarter, year) work on the zone's wall clock, so `$dateAdd` of one
//! day across a daylight-saving change keeps the time of day, while hours and smaller units are
//! exact durations.
//!
//! Calendar arithmetic is proleptic Gregorian on milliseconds since the epoch (`days_from_civil`
//! below and `convert::civil`); `$dateTrunc` bins count from 2000-01-01T00:00 local, as
//! MongoDB's do.

use bson::{Bson, DateTime, Document};
use shoal_proto::ErrorCode;

use super::{Args, date_parse, integral, nullish, type_error};
use crate::aggregate::convert::{as_date, civil};
use crate::aggregate::operators::{Operator, type_of};
use crate::aggregate::zone::Zone;
use crate::error::{QueryError, Result};

pub(crate) const MS_PER_DAY: i64 = 86_400_000;

/// `$dateFromParts`' fields, in the order they are passed.
pub(crate) const FROM_PARTS_FIELDS: [&str; 11] = [
    "year",
    "month",
    "day",
    "hour",
    "minute",
    "second",
    "millisecond",
    "isoWeekYear",
    "isoWeek",
    "isoDayOfWeek",
    "timezone",
];

/// 2000-01-01T00:00:00Z, where `$dateTrunc` bins start.
const TRUNC_REFERENCE_MS: i64 = 946_684_800_000;

pub(crate) fn eval(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    use Operator::*;
    match op {
        Hour | Minute | Second | Millisecond | DayOfWeek | DayOfYear | Week | IsoWeek | IsoWeekYear | IsoDayOfWeek => {
            let Some(ms) = date_arg(op, args.get(0)?)? else { return Ok(Some(Bson::Null)) };
            let local = Zone::parse(op.name(), args.get(1)?)?.to_local(ms);
            let p = Parts::of(local);
            Ok(Some(Bson::Int32(match op {
                Hour => p.hour,
                Minute => p.minute,
                Second => p.second,
                Millisecond => p.millis,
                DayOfWeek => p.dow + 1,
                DayOfYear => p.day_of_year,
                Week => (p.day_of_year - 1 + 7 - p.dow) / 7,
                IsoWeek => p.iso_week,
                IsoWeekYear => p.iso_year as i32,
                _ => p.iso_dow,
            })))
        }
        DateAdd | DateSubtract => date_add(op, args),
        DateDiff => date_diff(args),
        DateTrunc => date_trunc(args),
        DateToParts => {
            let Some(ms) = date_arg(op, args.get(0)?)? else { return Ok(Some(Bson::Null)) };
            let local = Zone::parse(op.name(), args.get(1)?)?.to_local(ms);
            let iso = match args.get(2)? {
                None => false,
                Some(Bson::Boolean(b)) => b,
                // MongoDB: Location40521.
                v => return Err(type_error(format!("iso8601 must evaluate to a bool, found {}", type_of(&v)))),
            };
            let p = Parts::of(local);
            let mut d = Document::new();
            if iso {
                d.insert("isoWeekYear", p.iso_year as i32);
                d.insert("isoWeek", p.iso_week);
                d.insert("isoDayOfWeek", p.iso_dow);
            } else {
                d.insert("year", p.year as i32);
                d.insert("month", p.month);
                d.insert("day", p.day);
            }
            d.insert("hour", p.hour);
            d.insert("minute", p.minute);
            d.insert("second", p.second);
            d.insert("millisecond", p.millis);
            Ok(Some(Bson::Document(d)))
        }
        DateFromParts => date_from_parts(args),
        DateFromString => date_from_string(args),
        other => Err(type_error(format!("{} is not a date operator", other.name()))),
    }
}

/// A date operand in milliseconds, `None` for null or missing.
fn date_arg(op: Operator, v: Option<Bson>) -> Result<Option<i64>> {
    if nullish(&v) {
        return Ok(None);
    }
    Ok(v.map(|v| as_date(&v, op.name())).transpose()?.map(|d| d.timestamp_millis()))
}

/// A local date's calendar and ISO-week parts.
struct Parts {
    year: i64,
    month: i32,
    day: i32,
    hour: i32,
    minute: i32,
    second: i32,
    millis: i32,
    day_of_year: i32,
    /// 0 = Sunday.
    dow: i32,
    iso_year: i64,
    iso_week: i32,
    /// 1 = Monday.
    iso_dow: i32,
}

impl Parts {
    fn of(local_ms: i64) -> Parts {
        let c = civil(DateTime::from_millis(local_ms));
        let days = local_ms.div_euclid(MS_PER_DAY);
        let dow = (days + 4).rem_euclid(7) as i32;
        let iso_dow = (dow + 6) % 7 + 1;
        // The ISO week belongs to the year of its Thursday.
        let thursday = days - i64::from(iso_dow - 1) + 3;
        let t = civil(DateTime::from_millis(thursday.saturating_mul(MS_PER_DAY)));
        Parts {
            year: c.year,
            month: c.month as i32,
            day: c.day as i32,
            hour: c.hour as i32,
            minute: c.minute as i32,
            second: c.second as i32,
            millis: c.millis as i32,
            day_of_year: c.day_of_year as i32,
            dow,
            iso_year: t.year,
            iso_week: (t.day_of_year as i32 - 1) / 7 + 1,
            iso_dow,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days-from-civil).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub(crate) fn days_in_month(year: i64, month: i64) -> i64 {
    let (ny, nm) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    days_from_civil(ny, nm, 1) - days_from_civil(year, month, 1)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

impl Unit {
    fn parse(op: Operator, v: Bson) -> Result<Unit> {
        Ok(match &v {
            Bson::String(s) => match s.as_str() {
                "year" => Unit::Year,
                "quarter" => Unit::Quarter,
                "month" => Unit::Month,
                "week" => Unit::Week,
                "day" => Unit::Day,
                "hour" => Unit::Hour,
                "minute" => Unit::Minute,
                "second" => Unit::Second,
                "millisecond" => Unit::Millisecond,
                // MongoDB: Location5439014 (and friends per operator).
                other => return Err(QueryError::bad_value(format!("{}: unknown time unit value: {other}", op.name()))),
            },
            other => {
                return Err(type_error(format!(
                    "{} requires 'unit' to be a string, but got {}",
                    op.name(),
                    crate::display::type_name(other)
                )));
            }
        })
    }

    /// Milliseconds in a unit of fixed length; `None` for months, quarters and years.
    fn fixed_ms(self) -> Option<i64> {
        Some(match self {
            Unit::Week => 7 * MS_PER_DAY,
            Unit::Day => MS_PER_DAY,
            Unit::Hour => 3_600_000,
            Unit::Minute => 60_000,
            Unit::Second => 1000,
            Unit::Millisecond => 1,
            Unit::Year | Unit::Quarter | Unit::Month => return None,
        })
    }

    fn months(self) -> i64 {
        match self {
            Unit::Year => 12,
            Unit::Quarter => 3,
            _ => 1,
        }
    }
}

fn overflow(op: Operator) -> QueryError {
    // MongoDB: Location5166406.
    QueryError::new(ErrorCode::Overflow, format!("{} overflowed", op.name()))
}

/// `local_ms` moved by `months` calendar months, the day clamped to the month's last.
fn add_months(op: Operator, local_ms: i64, months: i64) -> Result<i64> {
    let c = civil(DateTime::from_millis(local_ms));
    let total = c
        .year
        .checked_mul(12)
        .and_then(|t| t.checked_add(i64::from(c.month) - 1 + months))
        .ok_or_else(|| overflow(op))?;
    let (y, m) = (total.div_euclid(12), total.rem_euclid(12) + 1);
    if !(-300_000_000..=300_000_000).contains(&y) {
        return Err(overflow(op));
    }
    let day = i64::from(c.day).min(days_in_month(y, m));
    let days = days_from_civil(y, m, day);
    Ok(days * MS_PER_DAY + local_ms.rem_euclid(MS_PER_DAY))
}

fn date_add(op: Operator, args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let (start, unit, amount) = (args.get(0)?, args.get(1)?, args.get(2)?);
    if nullish(&start) || nullish(&unit) || nullish(&amount) {
        return Ok(Some(Bson::Null));
    }
    let Some(start) = date_arg(op, start)? else { return Ok(Some(Bson::Null)) };
    let unit = Unit::parse(op, unit.unwrap_or(Bson::Null))?;
    let Some(mut amount) = amount.as_ref().and_then(integral) else {
        // MongoDB: Location5166405.
        return Err(type_error(format!("{} expects integer amount of time units", op.name())));
    };
    if op == Operator::DateSubtract {
        amount = amount.checked_neg().ok_or_else(|| overflow(op))?;
    }
    let zone = Zone::parse(op.name(), args.get(3)?)?;
    let out = match unit.fixed_ms() {
        // Days and weeks are calendar units on the zone's wall clock.
        Some(ms) if matches!(unit, Unit::Day | Unit::Week) => amount
            .checked_mul(ms)
            .and_then(|d| zone.to_local(start).checked_add(d))
            .map(|local| zone.to_utc(local))
            .ok_or_else(|| overflow(op))?,
        Some(ms) => amount.checked_mul(ms).and_then(|d| start.checked_add(d)).ok_or_else(|| overflow(op))?,
        None => {
            let months = amount.checked_mul(unit.months()).ok_or_else(|| overflow(op))?;
            zone.to_utc(add_months(op, zone.to_local(start), months)?)
        }
    };
    Ok(Some(Bson::DateTime(DateTime::from_millis(out))))
}

/// Days since 1970-01-01 (a Thursday) of the first day of weeks starting on `startOfWeek`.
fn week_start(op: Operator, v: Option<Bson>) -> Result<i64> {
    let name = match v {
        None | Some(Bson::Null | Bson::Undefined) => "sunday".to_owned(),
        Some(Bson::String(s)) => s.to_ascii_lowercase(),
        // MongoDB: Location5439015.
        Some(other) => {
            return Err(type_error(format!(
                "{} requires 'startOfWeek' to be a string, but got {}",
                op.name(),
                crate::display::type_name(&other)
            )));
        }
    };
    const DAYS: [&str; 7] = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"];
    let Some(k) = DAYS.iter().position(|d| *d == name || d[..3] == name) else {
        return Err(QueryError::bad_value(format!("{}: unknown startOfWeek value: {name}", op.name())));
    };
    // 1970-01-04 was a Sunday.
    Ok(3 + k as i64)
}

fn date_diff(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let op = Operator::DateDiff;
    let (start, end, unit) = (args.get(0)?, args.get(1)?, args.get(2)?);
    if nullish(&start) || nullish(&end) || nullish(&unit) {
        return Ok(Some(Bson::Null));
    }
    let (Some(a), Some(b)) = (date_arg(op, start)?, date_arg(op, end)?) else { return Ok(Some(Bson::Null)) };
    let unit = Unit::parse(op, unit.unwrap_or(Bson::Null))?;
    let zone = Zone::parse(op.name(), args.get(3)?)?;
    let (a, b) = (zone.to_local(a), zone.to_local(b));
    let diff = match unit {
        Unit::Week => {
            let ref_day = week_start(op, args.get(4)?)?;
            let week = |ms: i64| (ms.div_euclid(MS_PER_DAY) - ref_day).div_euclid(7);
            week(b) - week(a)
        }
        Unit::Year | Unit::Quarter | Unit::Month => {
            let months = |ms: i64| {
                let c = civil(DateTime::from_millis(ms));
                (c.year * 12 + i64::from(c.month) - 1).div_euclid(unit.months())
            };
            months(b) - months(a)
        }
        fixed => {
            let unit_ms = fixed.fixed_ms().unwrap_or(1);
            b.div_euclid(unit_ms) - a.div_euclid(unit_ms)
        }
    };
    Ok(Some(Bson::Int64(diff)))
}

fn date_trunc(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let op = Operator::DateTrunc;
    let (date, unit) = (args.get(0)?, args.get(1)?);
    if nullish(&date) || nullish(&unit) {
        return Ok(Some(Bson::Null));
    }
    let Some(ms) = date_arg(op, date)? else { return Ok(Some(Bson::Null)) };
    let unit = Unit::parse(op, unit.unwrap_or(Bson::Null))?;
    let bin = match args.get(2)? {
        None => 1,
        v if nullish(&v) => return Ok(Some(Bson::Null)),
        Some(v) => match integral(&v) {
            Some(n) if n > 0 => n,
            // MongoDB: Location5439017.
            _ => {
                return Err(QueryError::bad_value(format!(
                    "$dateTrunc requires 'binSize' to be a positive 64-bit integer, found {}",
                    crate::display::value(&v)
                )));
            }
        },
    };
    let zone = Zone::parse(op.name(), args.get(3)?)?;
    let local = zone.to_local(ms);
    let truncated = match unit {
        Unit::Week => {
            let ref_day = week_start(op, args.get(4)?)?;
            // The reference week starts on the first such day on or after 2000-01-01.
            let reference = TRUNC_REFERENCE_MS / MS_PER_DAY;
            let reference = reference + (ref_day - reference).rem_euclid(7);
            let size = bin.checked_mul(7).ok_or_else(|| overflow(op))?;
            let days = local.div_euclid(MS_PER_DAY) - reference;
            (reference + days.div_euclid(size) * size).saturating_mul(MS_PER_DAY)
        }
        Unit::Year | Unit::Quarter | Unit::Month => {
            let c = civil(DateTime::from_millis(local));
            let months = (c.year - 2000) * 12 + i64::from(c.month) - 1;
            let size = bin.checked_mul(unit.months()).ok_or_else(|| overflow(op))?;
            let start = months.div_euclid(size).saturating_mul(size);
            let (y, m) = (2000 + start.div_euclid(12), start.rem_euclid(12) + 1);
            days_from_civil(y, m, 1).saturating_mul(MS_PER_DAY)
        }
        fixed => {
            let size = fixed.fixed_ms().unwrap_or(1).checked_mul(bin).ok_or_else(|| overflow(op))?;
            let since = local.saturating_sub(TRUNC_REFERENCE_MS);
            TRUNC_REFERENCE_MS.saturating_add(since.div_euclid(size).saturating_mul(size))
        }
    };
    Ok(Some(Bson::DateTime(DateTime::from_millis(zone.to_utc(truncated)))))
}

fn date_from_parts(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let op = Operator::DateFromParts;
    let present = |i: usize| !args.is_absent(i);
    let iso = present(7);
    if iso && (present(0) || present(1) || present(2)) {
        // MongoDB: Location40489.
        return Err(QueryError::failed_to_parse(
            "$dateFromParts: 'isoWeekYear' field cannot be combined with 'year', 'month' or 'day'",
        ));
    }
    if !iso && (present(8) || present(9)) {
        return Err(QueryError::failed_to_parse("$dateFromParts: 'isoWeek' and 'isoDayOfWeek' require 'isoWeekYear'"));
    }
    if !iso && !present(0) {
        // MongoDB: Location40516.
        return Err(QueryError::failed_to_parse(
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present",
        ));
    }
    let mut values = [0i64; 10];
    for (i, slot) in values.iter_mut().enumerate() {
        let field = FROM_PARTS_FIELDS[i];
        let default = if matches!(field, "month" | "day" | "isoWeek" | "isoDayOfWeek") { 1 } else { 0 };
        if !present(i) {
            *slot = default;
            continue;
        }
        let v = args.get(i)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        let Some(n) = v.as_ref().and_then(integral) else {
            // MongoDB: Location40515.
            return Err(type_error(format!("'{field}' must evaluate to an integer, found {}", type_of(&v))));
        };
        let (lo, hi) = if matches!(field, "year" | "isoWeekYear") { (1, 9999) } else { (-32768, 32767) };
        if !(lo..=hi).contains(&n) {
            // MongoDB: Location40523 / 31034.
            return Err(QueryError::bad_value(format!(
                "'{field}' must evaluate to a value in the range [{lo}, {hi}]; value {n} is not in range"
            )));
        }
        *slot = n;
    }
    let [year, month, day, hour, minute, second, millis, iso_year, iso_week, iso_dow] = values;
    let days = if iso {
        let jan4 = days_from_civil(iso_year, 1, 4);
        let jan4_iso_dow = (jan4 + 3).rem_euclid(7) + 1;
        jan4 - (jan4_iso_dow - 1) + (iso_week - 1) * 7 + (iso_dow - 1)
    } else {
        let months = year * 12 + month - 1;
        days_from_civil(months.div_euclid(12), months.rem_euclid(12) + 1, 1) + day - 1
    };
    let zone = Zone::parse(op.name(), args.get(10)?)?;
    let ms = zone.to_utc(days * MS_PER_DAY + hour * 3_600_000 + minute * 60_000 + second * 1000 + millis);
    Ok(Some(Bson::DateTime(DateTime::from_millis(ms))))
}

fn date_from_string(args: &Args<'_, '_>) -> Result<Option<Bson>> {
    let op = Operator::DateFromString;
    let input = args.get(0)?;
    if nullish(&input) {
        return if args.is_absent(4) { Ok(Some(Bson::Null)) } else { args.get(4) };
    }
    let result = (|| -> Result<Option<Bson>> {
        let Some(Bson::String(s)) = &input else {
            return Err(QueryError::new(
                ErrorCode::ConversionFailure,
                format!("$dateFromString requires that 'dateString' be a string, found: {}", type_of(&input)),
            ));
        };
        let format = match args.get(1)? {
            Some(Bson::String(f)) => Some(f),
            v if nullish(&v) && !args.is_absent(1) => return Ok(Some(Bson::Null)),
            None => None,
            // MongoDB: Location40684.
            v => {
                return Err(type_error(format!(
                    "$dateFromString requires that 'format' be a string, found: {}",
                    type_of(&v)
                )));
            }
        };
        let tz = args.get(2)?;
        let has_tz = !nullish(&tz);
        let zone = Zone::parse(op.name(), tz)?;
        let (local, own_offset) = date_parse::parse_local(s, format.as_deref())?;
        let ms = match own_offset {
            Some(_) if has_tz => {
                // MongoDB: Location40554.
                return Err(QueryError::new(
                    ErrorCode::ConversionFailure,
                    "you cannot pass in a date/time string with time zone information together with a timezone argument",
                ));
            }
            Some(o) => local - o,
            None => zone.to_utc(local),
        };
        Ok(Some(Bson::DateTime(DateTime::from_millis(ms))))
    })();
    match result {
        Err(e) if e.code == ErrorCode::ConversionFailure && !args.is_absent(3) => args.get(3),
        other => other,
    }
}
