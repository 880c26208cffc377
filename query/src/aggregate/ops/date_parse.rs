//! Date strings: `$dateFromString`'s parsing, with or without a `format`, and `$toDate` of a
//! string. Without a format the ISO 8601 forms drivers and people write are taken:
//! `YYYY-MM-DD`, then optionally `T` or a space, `HH:MM[:SS[.fff…]]` and `Z` or `±HH[[:]MM]`.
//! With one, `%Y %m %d %H %M %S %L %j %z %Z %%` are understood (MongoDB's set less the ISO-week
//! and month-name ones, which are refused as invalid format characters).
//!
//! Every failure to parse is ConversionFailure, which `onError` catches.

use shoal_proto::ErrorCode;

use super::dates::{MS_PER_DAY, days_from_civil, days_in_month};
use crate::aggregate::zone::parse_offset;
use crate::error::{QueryError, Result};

/// A date string as UTC milliseconds, for `$toDate`/`$convert`.
pub(crate) fn parse_date(s: &str, format: Option<&str>) -> Result<i64> {
    let (local, off) = parse_local(s, format)?;
    Ok(local - off.unwrap_or(0))
}

fn parse_error(s: &str, why: &str) -> QueryError {
    QueryError::new(ErrorCode::ConversionFailure, format!("Error parsing date string '{s}'; {why}"))
}

/// A date string as local milliseconds and the offset it names, if any.
pub(crate) fn parse_local(s: &str, format: Option<&str>) -> Result<(i64, Option<i64>)> {
    let format = format.unwrap_or("");
    let mut f = Fields { month: 1, day: 1, ..Fields::default() };
    let mut cur = Cursor { s, at: 0 };
    if format.is_empty() {
        f.year = cur.number(4, 4).ok_or_else(|| parse_error(s, "expected a 4-digit year"))?;
        cur.expect('-').ok_or_else(|| parse_error(s, "expected '-'"))?;
        f.month = cur.number(2, 2).ok_or_else(|| parse_error(s, "expected a 2-digit month"))?;
        cur.expect('-').ok_or_else(|| parse_error(s, "expected '-'"))?;
        f.day = cur.number(2, 2).ok_or_else(|| parse_error(s, "expected a 2-digit day"))?;
        if cur.expect('T').or_else(|| cur.expect(' ')).is_some() {
            f.hour = cur.number(2, 2).ok_or_else(|| parse_error(s, "expected an hour"))?;
            cur.expect(':').ok_or_else(|| parse_error(s, "expected ':'"))?;
            f.minute = cur.number(2, 2).ok_or_else(|| parse_error(s, "expected a minute"))?;
            if cur.expect(':').is_some() {
                f.second = cur.number(2, 2).ok_or_else(|| parse_error(s, "expected a second"))?;
                if cur.expect('.').is_some() {
                    f.millis = cur.fraction_ms().ok_or_else(|| parse_error(s, "expected fractional seconds"))?;
                }
            }
            f.offset = cur.zone();
        }
    } else {
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                cur.expect(c).ok_or_else(|| parse_error(s, &format!("expected '{c}'")))?;
                continue;
            }
            let spec = chars
                .next()
                .ok_or_else(|| QueryError::new(ErrorCode::Location18535, "Unmatched '%' at end of format string"))?;
            let bad = || parse_error(s, &format!("could not match '%{spec}'"));
            match spec {
                'Y' => f.year = cur.number(4, 4).ok_or_else(bad)?,
                'm' => f.month = cur.number(1, 2).ok_or_else(bad)?,
                'd' => f.day = cur.number(1, 2).ok_or_else(bad)?,
                'H' => f.hour = cur.number(1, 2).ok_or_else(bad)?,
                'M' => f.minute = cur.number(1, 2).ok_or_else(bad)?,
                'S' => f.second = cur.number(1, 2).ok_or_else(bad)?,
                'L' => f.millis = cur.number(1, 3).ok_or_else(bad)?,
                'j' => f.day_of_year = Some(cur.number(1, 3).ok_or_else(bad)?),
                'z' => f.offset = Some(cur.zone().ok_or_else(bad)?),
                'Z' => {
                    let sign = if cur.expect('-').is_some() { -1 } else { cur.expect('+').map_or(1, |()| 1) };
                    f.offset = Some(sign * cur.number(1, 4).ok_or_else(bad)? * 60_000);
                }
                '%' => cur.expect('%').map(|_| ()).ok_or_else(bad)?,
                other => {
                    return Err(QueryError::new(
                        ErrorCode::Location18536,
                        format!("Invalid format character '%{other}' in format string"),
                    ));
                }
            }
        }
    }
    if cur.at != s.len() {
        return Err(parse_error(s, "trailing data"));
    }
    let valid = (1..=12).contains(&f.month)
        && f.day >= 1
        && f.day <= days_in_month(f.year, f.month)
        && f.hour < 24
        && f.minute < 60
        && f.second < 60;
    if !valid {
        return Err(parse_error(s, "a field is out of range"));
    }
    let days = match f.day_of_year {
        Some(doy) => days_from_civil(f.year, 1, 1) + doy - 1,
        None => days_from_civil(f.year, f.month, f.day),
    };
    let local = days * MS_PER_DAY + f.hour * 3_600_000 + f.minute * 60_000 + f.second * 1000 + f.millis;
    Ok((local, f.offset))
}

#[derive(Default)]
struct Fields {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    millis: i64,
    day_of_year: Option<i64>,
    offset: Option<i64>,
}

struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn expect(&mut self, c: char) -> Option<()> {
        let rest = self.s.get(self.at..)?;
        if rest.starts_with(c) {
            self.at += c.len_utf8();
            Some(())
        } else {
            None
        }
    }

    /// `min..=max` ASCII digits.
    fn number(&mut self, min: usize, max: usize) -> Option<i64> {
        let rest = self.s.get(self.at..)?;
        let n = rest.bytes().take(max).take_while(u8::is_ascii_digit).count();
        if n < min {
            return None;
        }
        let v = rest.get(..n)?.parse().ok()?;
        self.at += n;
        Some(v)
    }

    /// Fractional seconds (any number of digits) as milliseconds, truncated.
    fn fraction_ms(&mut self) -> Option<i64> {
        let rest = self.s.get(self.at..)?;
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let digits = rest.get(..n.min(3))?;
        let scale = 10i64.pow(3 - digits.len() as u32);
        self.at += n;
        Some(digits.parse::<i64>().ok()? * scale)
    }

    /// `Z`, `±HH`, `±HHMM` or `±HH:MM`, as milliseconds.
    fn zone(&mut self) -> Option<i64> {
        if self.expect('Z').is_some() {
            return Some(0);
        }
        let rest = self.s.get(self.at..)?;
        let len = rest.bytes().take_while(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b':')).count();
        let off = parse_offset(rest.get(..len)?)?;
        self.at += len;
        Some(off)
    }
}
