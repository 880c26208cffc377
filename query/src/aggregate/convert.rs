//! Expression operators on strings, numbers, conversions and dates: `$mod`, `$substr`
//! (`$substrBytes`), `$toString`, `$toInt`, `$year`, `$month`, `$dayOfMonth`, `$dateToString`,
//! with MongoDB's null rules (a null or missing operand gives null) and error codes.
//!
//! Dates are read on the wall clock of their `timezone` ([`super::zone::Zone`]; UTC when absent).

use bson::{Bson, DateTime};
use shoal_proto::ErrorCode;

use super::operators::Num;
use super::zone::Zone;
use crate::display::type_name;
use crate::error::{QueryError, Result};

fn nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null | Bson::Undefined))
}

fn type_of(v: &Option<Bson>) -> &'static str {
    v.as_ref().map_or("missing", type_name)
}

fn conversion_failure(msg: String) -> QueryError {
    QueryError::new(ErrorCode::ConversionFailure, msg)
}

/// `$mod`: the remainder with the dividend's sign; ints stay ints, a double makes a double.
pub(crate) fn modulo(a: Option<Bson>, b: Option<Bson>) -> Result<Option<Bson>> {
    if nullish(&a) || nullish(&b) {
        return Ok(Some(Bson::Null));
    }
    let (Some(Ok(x)), Some(Ok(y))) = (a.as_ref().and_then(Num::of), b.as_ref().and_then(Num::of)) else {
        return Err(QueryError::type_mismatch(format!(
            "$mod only supports numeric types, not {} and {}",
            type_of(&a),
            type_of(&b)
        )));
    };
    if y.as_f64() == 0.0 {
        return Err(QueryError::bad_value("can't $mod by zero"));
    }
    Ok(Some(match (x, y) {
        (Num::I32(p), Num::I32(q)) => Bson::Int32(p.wrapping_rem(q)),
        (Num::I32(_) | Num::I64(_), Num::I32(_) | Num::I64(_)) => {
            let (p, q) = (as_i64(x), as_i64(y));
            Bson::Int64(p.wrapping_rem(q))
        }
        _ => Bson::Double(x.as_f64() % y.as_f64()),
    }))
}

fn as_i64(n: Num) -> i64 {
    match n {
        Num::I32(i) => i64::from(i),
        Num::I64(i) => i,
        Num::F64(f) => f as i64,
    }
}

/// `$substr` / `$substrBytes`: `length` bytes from byte `start` (a negative length: to the end).
pub(crate) fn substr(s: Option<Bson>, start: Option<Bson>, len: Option<Bson>) -> Result<Option<Bson>> {
    let s = match s {
        None | Some(Bson::Null | Bson::Undefined) => String::new(),
        Some(Bson::String(s)) => s,
        Some(other) => to_string(Some(other))?.and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
    };
    let int = |v: Option<Bson>, what: &str| -> Result<i64> {
        match v.as_ref().and_then(Num::of) {
            Some(Ok(n)) => Ok(as_i64(n)),
            _ => Err(QueryError::type_mismatch(format!("$substrBytes: {what} must be a numeric type"))),
        }
    };
    let (start, len) = (int(start, "starting index")?, int(len, "length")?);
    let bytes = s.as_bytes();
    let from = usize::try_from(start).unwrap_or(usize::MAX).min(bytes.len());
    let to = if len < 0 { bytes.len() } else { from.saturating_add(len as usize).min(bytes.len()) };
    if !s.is_char_boundary(from) || !s.is_char_boundary(to) {
        return Err(QueryError::bad_value(
            "$substrBytes: Invalid range, the range is not on UTF-8 character boundaries",
        ));
    }
    Ok(Some(Bson::String(s[from..to].to_owned())))
}

/// `$toString`.
pub(crate) fn to_string(v: Option<Bson>) -> Result<Option<Bson>> {
    Ok(Some(Bson::String(match v {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::String(s)) => s,
        Some(Bson::Int32(i)) => i.to_string(),
        Some(Bson::Int64(i)) => i.to_string(),
        Some(Bson::Double(f)) => format_double(f),
        Some(Bson::Boolean(b)) => b.to_string(),
        Some(Bson::ObjectId(o)) => o.to_hex(),
        Some(Bson::DateTime(d)) => iso(d),
        Some(Bson::Decimal128(d)) => d.to_string(),
        Some(other) => {
            return Err(conversion_failure(format!(
                "Unsupported conversion from {} to string in $convert with no onError value",
                type_name(&other)
            )));
        }
    })))
}

/// Doubles as MongoDB prints them: integral values without a fraction.
fn format_double(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity".into() } else { "-Infinity".into() }
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// `$toInt`.
pub(crate) fn to_int(v: Option<Bson>) -> Result<Option<Bson>> {
    let out_of_range = |what: String| {
        conversion_failure(format!("Conversion would overflow target type in $convert with no onError value: {what}"))
    };
    Ok(Some(match v {
        None | Some(Bson::Null | Bson::Undefined) => Bson::Null,
        Some(Bson::Int32(i)) => Bson::Int32(i),
        Some(Bson::Int64(i)) => Bson::Int32(i32::try_from(i).map_err(|_| out_of_range(i.to_string()))?),
        Some(Bson::Double(f)) => {
            if !f.is_finite() || f.trunc() < f64::from(i32::MIN) || f.trunc() > f64::from(i32::MAX) {
                return Err(out_of_range(format_double(f)));
            }
            Bson::Int32(f.trunc() as i32)
        }
        Some(Bson::Boolean(b)) => Bson::Int32(i32::from(b)),
        Some(Bson::String(s)) => Bson::Int32(s.trim().parse::<i32>().map_err(|_| {
            conversion_failure(format!("Failed to parse number '{s}' in $convert with no onError value"))
        })?),
        Some(Bson::Decimal128(_)) => {
            return Err(QueryError::new(ErrorCode::NotImplemented, "$toInt of a Decimal128 is not supported yet"));
        }
        Some(other) => {
            return Err(conversion_failure(format!(
                "Unsupported conversion from {} to int in $convert with no onError value",
                type_name(&other)
            )));
        }
    }))
}

/// A UTC civil date and time.
pub(crate) struct Civil {
    pub(crate) year: i64,
    pub(crate) month: u32,
    pub(crate) day: u32,
    pub(crate) hour: u32,
    pub(crate) minute: u32,
    pub(crate) second: u32,
    pub(crate) millis: u32,
    pub(crate) day_of_year: u32,
}

pub(crate) fn civil(d: DateTime) -> Civil {
    let ms = d.timestamp_millis();
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000) as u32;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const BEFORE: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let day_of_year = BEFORE[(month - 1) as usize] + day + u32::from(leap && month > 2);
    Civil {
        year,
        month,
        day,
        hour: in_day / 3_600_000,
        minute: in_day / 60_000 % 60,
        second: in_day / 1000 % 60,
        millis: in_day % 1000,
        day_of_year,
    }
}

fn iso(d: DateTime) -> String {
    let c = civil(d);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", c.year, c.month, c.day, c.hour, c.minute, c.second, c.millis)
}

/// The date a date operator works on: a date, a timestamp or an ObjectId's time.
pub(crate) fn as_date(v: &Bson, op: &str) -> Result<DateTime> {
    match v {
        Bson::DateTime(d) => Ok(*d),
        Bson::Timestamp(t) => Ok(DateTime::from_millis(i64::from(t.time) * 1000)),
        Bson::ObjectId(o) => Ok(DateTime::from_system_time(o.timestamp().to_system_time())),
        other => Err(QueryError::new(
            ErrorCode::Location16006,
            format!("{op}: can't convert from BSON type {} to Date", type_name(other)),
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DatePart {
    Year,
    Month,
    DayOfMonth,
}

/// `$year`, `$month`, `$dayOfMonth` on the wall clock of `tz` (UTC when absent).
pub(crate) fn date_part(part: DatePart, v: Option<Bson>, tz: Option<Bson>, op: &str) -> Result<Option<Bson>> {
    let Some(v) = v.filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) else { return Ok(Some(Bson::Null)) };
    let zone = Zone::parse(op, tz)?;
    let c = civil(DateTime::from_millis(zone.to_local(as_date(&v, op)?.timestamp_millis())));
    Ok(Some(match part {
        DatePart::Year => Bson::Int32(c.year as i32),
        DatePart::Month => Bson::Int32(c.month as i32),
        DatePart::DayOfMonth => Bson::Int32(c.day as i32),
    }))
}

/// MongoDB's default `$dateToString` format.
pub(crate) const DEFAULT_DATE_FORMAT: &str = "%Y-%m-%dT%H:%M:%S.%LZ";
/// Its default when a `timezone` is given.
pub(crate) const LOCAL_DATE_FORMAT: &str = "%Y-%m-%dT%H:%M:%S.%L";

/// `$dateToString` (UTC): `%Y %m %d %H %M %S %L %j %%`, `%z` (+0000), `%Z` (0).
pub(crate) fn date_to_string(
    date: Option<Bson>,
    format: Option<Bson>,
    on_null: Option<Bson>,
    tz: Option<Bson>,
) -> Result<Option<Bson>> {
    let Some(date) = date.filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) else {
        return Ok(Some(on_null.unwrap_or(Bson::Null)));
    };
    let format = match format {
        Some(Bson::String(f)) => f,
        None => DEFAULT_DATE_FORMAT.to_owned(),
        Some(other) => {
            return Err(QueryError::type_mismatch(format!(
                "$dateToString requires that 'format' be a string, found: {}",
                type_name(&other)
            )));
        }
    };
    let zone = Zone::parse("$dateToString", tz)?;
    let utc = as_date(&date, "$dateToString")?.timestamp_millis();
    let offset_minutes = zone.offset_at(utc) / 60_000;
    let c = civil(DateTime::from_millis(zone.to_local(utc)));
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{:04}", c.year)),
            Some('m') => out.push_str(&format!("{:02}", c.month)),
            Some('d') => out.push_str(&format!("{:02}", c.day)),
            Some('H') => out.push_str(&format!("{:02}", c.hour)),
            Some('M') => out.push_str(&format!("{:02}", c.minute)),
            Some('S') => out.push_str(&format!("{:02}", c.second)),
            Some('L') => out.push_str(&format!("{:03}", c.millis)),
            Some('j') => out.push_str(&format!("{:03}", c.day_of_year)),
            Some('z') => {
                let sign = if offset_minutes < 0 { '-' } else { '+' };
                let m = offset_minutes.abs();
                out.push_str(&format!("{sign}{:02}{:02}", m / 60, m % 60));
            }
            Some('Z') => out.push_str(&offset_minutes.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                return Err(QueryError::new(
                    ErrorCode::Location18536,
                    format!("Invalid format character '%{other}' in format string"),
                ));
            }
            None => {
                return Err(QueryError::new(ErrorCode::Location18535, "Unmatched '%' at end of format string"));
            }
        }
    }
    Ok(Some(Bson::String(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_and_formats() {
        let d = DateTime::from_millis(1_709_251_199_123); // 2024-02-29T23:59:59.123Z
        assert_eq!(iso(d), "2024-02-29T23:59:59.123Z");
        assert_eq!(civil(d).day_of_year, 60);
        assert_eq!(iso(DateTime::from_millis(-1)), "1969-12-31T23:59:59.999Z");
        let s =
            date_to_string(Some(Bson::DateTime(d)), Some(Bson::String("%Y/%m/%d %j %%".into())), None, None).unwrap();
        assert_eq!(s, Some(Bson::String("2024/02/29 060 %".into())));
        assert_eq!(date_part(DatePart::Month, Some(Bson::DateTime(d)), None, "$month").unwrap(), Some(Bson::Int32(2)));
        assert_eq!(date_part(DatePart::Year, None, None, "$year").unwrap(), Some(Bson::Null));
        assert!(date_to_string(Some(Bson::DateTime(d)), Some(Bson::String("%Q".into())), None, None).is_err());
        assert_eq!(
            date_to_string(None, None, Some(Bson::String("none".into())), None).unwrap(),
            Some(Bson::String("none".into()))
        );
        assert_eq!(
            date_part(DatePart::Year, Some(Bson::String("x".into())), None, "$year").unwrap_err().code,
            ErrorCode::Location16006
        );
    }

    #[test]
    fn conversions_and_arithmetic() {
        assert_eq!(to_string(Some(Bson::Double(2.0))).unwrap(), Some(Bson::String("2".into())));
        assert_eq!(to_string(Some(Bson::Double(2.5))).unwrap(), Some(Bson::String("2.5".into())));
        assert_eq!(to_int(Some(Bson::String(" 42 ".into()))).unwrap(), Some(Bson::Int32(42)));
        assert_eq!(to_int(Some(Bson::Double(-3.9))).unwrap(), Some(Bson::Int32(-3)));
        assert_eq!(to_int(Some(Bson::Int64(1 << 40))).unwrap_err().code, ErrorCode::ConversionFailure);
        assert_eq!(to_int(Some(Bson::String("x".into()))).unwrap_err().code, ErrorCode::ConversionFailure);
        assert_eq!(modulo(Some(Bson::Int32(-7)), Some(Bson::Int32(3))).unwrap(), Some(Bson::Int32(-1)));
        assert_eq!(modulo(Some(Bson::Double(7.5)), Some(Bson::Int32(2))).unwrap(), Some(Bson::Double(1.5)));
        assert!(modulo(Some(Bson::Int32(1)), Some(Bson::Int32(0))).is_err());
        assert_eq!(modulo(None, Some(Bson::Int32(2))).unwrap(), Some(Bson::Null));
        let s = |v: &str| Some(Bson::String(v.into()));
        assert_eq!(substr(s("hello"), Some(Bson::Int32(1)), Some(Bson::Int32(3))).unwrap(), s("ell"));
        assert_eq!(substr(s("hello"), Some(Bson::Int32(2)), Some(Bson::Int32(-1))).unwrap(), s("llo"));
        assert_eq!(substr(s("hé"), Some(Bson::Int32(0)), Some(Bson::Int32(2))).unwrap_err().code, ErrorCode::BadValue);
    }
}
